package events

import "strconv"

// jsonScanner walks JSON text for the fast paths of the codec. It is strict
// in one direction only: whatever it accepts, encoding/json's json.Valid
// accepts too (same grammar: RFC 8259, any byte >= 0x20 inside strings,
// including invalid UTF-8). It may give up on valid input it does not need
// to handle (nesting deeper than maxScanDepth); callers then take the
// reference path, which also produces the exact error for invalid input.
type jsonScanner struct {
	b []byte
	i int
	// floatOverflow records a number with an exponent beyond the range
	// jsoniter parses it in ("1e400", or "0.5e39" as a float32; see
	// checkFloat). It is valid JSON, but the sdk's decoder fails on it: the
	// fast path must leave the message to the sdk.
	floatOverflow bool
}

// maxScanDepth bounds the recursion of the scanner. encoding/json allows
// 10000 levels; events nest a handful, so deeper input goes to the
// reference path instead of growing the stack here.
const maxScanDepth = 512

// ws skips JSON whitespace.
func (s *jsonScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// consume moves past c if it is the next byte.
func (s *jsonScanner) consume(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// value checks the value starting at s.i (after optional whitespace) and
// moves past it. depth is the nesting level of the enclosing container.
func (s *jsonScanner) value(depth int) bool {
	s.ws()
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		_, ok := s.str()
		return ok
	case c == '{':
		return s.object(depth + 1)
	case c == '[':
		return s.array(depth + 1)
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || isDigit(c):
		return s.number()
	}
	return false
}

// str checks the string starting at s.i (the opening quote) and moves past
// it. escaped reports a backslash: its content then differs from its bytes.
func (s *jsonScanner) str() (escaped, ok bool) {
	s.i++
	for s.i < len(s.b) {
		for s.i < len(s.b) && strPlain[s.b[s.i]] {
			s.i++ // the common bytes, one table lookup each
		}
		if s.i == len(s.b) {
			break
		}
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return escaped, true
		case c == '\\':
			if !s.escape() {
				return false, false
			}
			escaped = true
		case c < 0x20:
			return false, false
		default:
			s.i++
		}
	}
	return false, false
}

// strPlain marks the bytes a JSON string holds as they stand: everything
// but control characters, the quote and the backslash.
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// escape checks the escape sequence at s.i (the backslash).
func (s *jsonScanner) escape() bool {
	if s.i+1 >= len(s.b) {
		return false
	}
	switch s.b[s.i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.i += 2
		return true
	case 'u':
		if s.i+6 > len(s.b) {
			return false
		}
		for _, h := range s.b[s.i+2 : s.i+6] {
			if !isHex(h) {
				return false
			}
		}
		s.i += 6
		return true
	}
	return false
}

// number checks -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at s.i. What
// follows is the caller's business: "01" stops after "0" and the caller
// then refuses the stray "1".
func (s *jsonScanner) number() bool {
	neg := s.consume('-')
	start := s.i
	if !s.consume('0') && !s.digits() {
		return false
	}
	if s.consume('.') && !s.digits() {
		return false
	}
	if s.consume('e') || s.consume('E') {
		if !s.consume('+') {
			s.consume('-')
		}
		if !s.digits() {
			return false
		}
		s.checkFloat(!neg && s.b[start] == '0', s.b[start:s.i])
	}
	return true
}

// checkFloat mirrors how jsoniter's Skip (iter_skip_strict.go) treats a
// number with an exponent: it parses it, sign excluded, as a float32 when
// it starts with 0 (ReadFloat32) and as a float64 otherwise (ReadFloat64),
// and fails when strconv.ParseFloat does, on overflow. Numbers without an
// exponent it skips without parsing, or parses in range.
func (s *jsonScanner) checkFloat(asFloat32 bool, abs []byte) {
	bits := 64
	if asFloat32 {
		bits = 32
	}
	if _, err := strconv.ParseFloat(string(abs), bits); err != nil {
		s.floatOverflow = true
	}
}

// digits moves past [0-9]+ and reports whether there was one.
func (s *jsonScanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && isDigit(s.b[s.i]) {
		s.i++
	}
	return s.i > start
}

func (s *jsonScanner) literal(lit string) bool {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return false
	}
	s.i += len(lit)
	return true
}

// object checks the object starting at s.i (the opening brace).
func (s *jsonScanner) object(depth int) bool {
	if depth > maxScanDepth {
		return false
	}
	s.i++
	s.ws()
	if s.consume('}') {
		return true
	}
	for {
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return false
		}
		if _, ok := s.str(); !ok {
			return false
		}
		s.ws()
		if !s.consume(':') || !s.value(depth) {
			return false
		}
		s.ws()
		if s.consume('}') {
			return true
		}
		if !s.consume(',') {
			return false
		}
	}
}

// array checks the array starting at s.i (the opening bracket).
func (s *jsonScanner) array(depth int) bool {
	if depth > maxScanDepth {
		return false
	}
	s.i++
	s.ws()
	if s.consume(']') {
		return true
	}
	for {
		if !s.value(depth) {
			return false
		}
		s.ws()
		if s.consume(']') {
			return true
		}
		if !s.consume(',') {
			return false
		}
	}
}

// members iterates over the members of the JSON object that is all of b,
// whose keys must be plain strings (printable ASCII, no escapes):
//
//	m := members{s: jsonScanner{b: b}}
//	for m.next() {
//		use(m.key, m.raw) // raw: the value's JSON text, already checked
//	}
//	if !m.complete() { ... } // malformed, or a key that is not plain
//
// It takes no callback, so what the loop fills stays on the stack.
type members struct {
	s        jsonScanner
	key, raw []byte
	state    uint8
}

const (
	membersStart uint8 = iota
	membersIn
	membersDone
	membersBad
)

// next moves to the next member and reports whether there is one.
func (m *members) next() bool {
	s := &m.s
	switch m.state {
	case membersStart:
		s.ws()
		if !s.consume('{') {
			m.state = membersBad
			return false
		}
		s.ws()
		if s.consume('}') {
			m.finish()
			return false
		}
	case membersIn:
		s.ws()
		if !s.consume(',') {
			if s.consume('}') {
				m.finish()
			} else {
				m.state = membersBad
			}
			return false
		}
	default:
		return false
	}
	s.ws()
	key, ok := s.plainString()
	if !ok {
		m.state = membersBad
		return false
	}
	s.ws()
	if !s.consume(':') {
		m.state = membersBad
		return false
	}
	s.ws()
	start := s.i
	if !s.value(0) {
		m.state = membersBad
		return false
	}
	m.key, m.raw, m.state = key, s.b[start:s.i], membersIn
	return true
}

// finish checks that nothing but whitespace follows the closing brace.
func (m *members) finish() {
	m.s.ws()
	if m.s.i == len(m.s.b) {
		m.state = membersDone
	} else {
		m.state = membersBad
	}
}

// complete reports, once next has returned false, that the whole input
// was one well-formed object with plain keys.
func (m *members) complete() bool { return m.state == membersDone }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHex(c byte) bool {
	return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
