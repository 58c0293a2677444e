package events

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// strictShape checks what encoding/json lets through even with
// DisallowUnknownFields: it matches keys to struct fields
// case-insensitively ("Schedule", "INTERVAL" and a trailing "ID" are taken
// as the documented fields) and lets the last of two equal keys win. It
// walks the first JSON value of data against the type of v and refuses,
// listing every one it finds in document order (up to MaxReasons),
//
//   - an object key that is not exactly the json name of a field of the
//     target struct: "schedule.INTERVAL: unknown field";
//   - a key given twice in one object: "schedule: given twice in one
//     object". (Map keys are data: "env" and "Env" are two labels.)
//   - a time that is not an RFC 3339 string (encoding/json reports it
//     without the field's path), or one outside years 1-9999 in UTC
//     (see TimeInRange);
//   - a duration that is not a duration string, or is out of range, with
//     the rules DecodeData gives for a wrong type. encoding/json would
//     report it too, but only its v1 implementation names the field of
//     an error from a type's own UnmarshalJSON: Go 1.27's, built on
//     encoding/json/v2, said "data: must be a JSON object, got number"
//     for a number given as schedule.interval (benchmark-findings.md, finding 46);
//   - any other value of the wrong JSON type, or a number that does not
//     fit its field, with encoding/json's v1 reasons ("catchUpMax: wrong
//     type: got number 1.5, want integer"), so that every problem comes
//     at once; a map value or an array element is named by its key or
//     index ("labels.team", "target.http.expectStatus[0]"), where
//     encoding/json named the map or the array.
//
// Input that is not valid JSON is left to encoding/json, and a syntax
// error anywhere comes first; so are the values of types that read their
// own JSON or text, and a []byte's base64. This runs on the command path
// (DecodeData) and on the rare fallbacks of the per-run fast paths
// (DecodeRun, DecodeDispatch), never on the fast paths themselves; they
// refuse unknown and repeated keys on their own.
func strictShape(data []byte, v any) error {
	_, err := walkShape(data, v)
	return err
}

// walkShape is strictShape, and returns data with every time written
// with a JSON escape ("2026-03-02T11:00:00\u005a") rewritten plainly, for
// encoding/json to decode: it hands time.Time.UnmarshalJSON the raw bytes,
// escapes included, which refused a valid time with a bare parse error
// naming no field (Go issue 47353). data itself is never modified; it is
// returned as is when nothing needs rewriting.
func walkShape(data []byte, v any) ([]byte, error) {
	w := shapeWalker{data: data, dec: json.NewDecoder(bytes.NewReader(data))}
	w.dec.UseNumber() // a number's literal, for its range and its error
	// One pass over valid input; only input that is not UTF-8 has its
	// strings looked at (see checkUTF8).
	w.notUTF8 = !utf8.Valid(data)
	w.value(reflect.TypeOf(v), "")
	if w.broken {
		return data, nil // encoding/json reports the syntax error
	}
	if w.notUTF8 && len(w.problems.errs) == 0 {
		// In a value the walk leaves to encoding/json.
		w.problems.add("data", "not valid UTF-8"+byteAt(data, invalidUTF8(data)))
	}
	problems := w.problems.err()
	if problems == nil {
		return w.unescaped(), nil
	}
	// Problems found before a syntax error further on: the decoder's
	// syntax error stays the answer, as before.
	if !firstValueValid(data) {
		return data, nil
	}
	return data, problems
}

// escapedTime is a time string at data[start:end] (quotes included) that
// holds an escape, and the time it spells.
type escapedTime struct {
	start, end int
	value      string
}

// plainJSON reports whether s, quoted as it is, is a JSON string that
// means s: printable ASCII without '"' or '\\'. Every time
// time.Time.UnmarshalText accepts is; this keeps the rewrite safe should
// that ever change.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// unescaped is w.data with the escaped times rewritten.
func (w *shapeWalker) unescaped() []byte {
	if len(w.escaped) == 0 {
		return w.data
	}
	out := make([]byte, 0, len(w.data))
	last := 0
	for _, e := range w.escaped {
		out = append(out, w.data[last:e.start]...)
		// plainJSON(e.value): quoted as it is, it is valid JSON.
		out = append(out, '"')
		out = append(out, e.value...)
		out = append(out, '"')
		last = e.end
	}
	return append(out, w.data[last:]...)
}

// note records the problem err (a ValidationError from malformed), if
// any; the walk goes on to the next value.
func (w *shapeWalker) note(err error) {
	for _, fe := range Reasons(err) {
		w.problems.add(fe.Field, fe.Rule)
	}
}

// firstValueValid reports whether data starts with one valid JSON value.
func firstValueValid(data []byte) bool {
	var raw json.RawMessage
	return json.NewDecoder(bytes.NewReader(data)).Decode(&raw) == nil
}

// token reads the next token; false (with broken set) for invalid JSON.
func (w *shapeWalker) token() (json.Token, bool) {
	tok, err := w.dec.Token()
	if err != nil {
		w.broken = true
		return nil, false
	}
	return tok, true
}

type shapeWalker struct {
	data []byte
	dec  *json.Decoder
	// escaped are the valid times written with an escape, in document
	// order.
	escaped []escapedTime
	// broken is set when the input is not valid JSON: the walk stops and
	// reports nothing.
	broken bool
	// notUTF8 is set when data holds bytes that are not UTF-8: the
	// strings are then checked one by one, to name the field.
	notUTF8 bool
	// problems are those found so far, in document order (up to
	// MaxReasons, then counted).
	problems collector
}

// value walks the next value, destined for a value of type t (nil: any),
// and notes its problems.
func (w *shapeWalker) value(t reflect.Type, path string) {
	tok, ok := w.token()
	if !ok {
		return
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	d, isDelim := tok.(json.Delim)
	typed := t != nil && t.Kind() != reflect.Interface
	switch {
	case w.notUTF8 && w.checkUTF8(tok, path):
		// refused: encoding/json would replace the bytes
	case t == timeType:
		w.note(w.time(tok, path))
	case t == durationType:
		w.note(w.duration(tok, path))
	case typed && readsItself(t):
		if isDelim {
			w.skip() // encoding/json checks what the type reads
		}
	case !isDelim:
		w.note(scalar(tok, t, path))
		w.note(explicitZero(tok, path))
	case !typed && d == '{':
		w.object(nil, nil, path)
	case !typed: // '['
		w.array(nil, path)
	case d == '{' && t.Kind() == reflect.Struct:
		w.object(structFields(t), nil, path)
	case d == '{' && t.Kind() == reflect.Map:
		w.object(nil, t.Elem(), path)
	case d == '[' && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
		w.array(t.Elem(), path)
	default: // the wrong JSON type for t
		w.note(typeError(path, &json.UnmarshalTypeError{Value: w.kindOf(tok), Type: t}))
	}
}

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// explicitZero refuses a 0 given for target.http.maxResponseBytes, which
// Validate cannot tell from the field left out (the default, 102400):
// a 0 meant to keep bodies out of RUNS had 100 KiB of each stored. The
// field of a spec already stored is never an explicit 0 (omitempty), and
// the executor reads stored specs without this walk.
func explicitZero(tok json.Token, path string) error {
	if n, ok := tok.(json.Number); ok && path == "target.http.maxResponseBytes" {
		if f, err := n.Float64(); err == nil && f == 0 {
			return malformed(path, fmt.Sprintf("must be in [1, %d], got 0 (leave it out for the default %d, or set a small value such as 1 to keep almost no body)", MaxMaxResponseBytes, DefaultMaxResponseBytes))
		}
	}
	return nil
}

// readsItself reports a type that reads its own JSON or text; the walk
// leaves its value to encoding/json.
func readsItself(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	return pt.Implements(unmarshalerType) || pt.Implements(textUnmarshalerType)
}

// kindOf names the JSON type of the value starting at tok as
// encoding/json's errors do, and moves past it if it is an object or an
// array.
func (w *shapeWalker) kindOf(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		w.skip()
		if v == '[' {
			return "array"
		}
		return "object"
	case bool:
		return "bool"
	case string:
		return "string"
	case nil:
		return "null"
	}
	return "number"
}

// scalar checks a string, number, bool or null destined for t, with the
// rules of encoding/json's v1 decoder and the values it puts in its
// *json.UnmarshalTypeError ("number 1.5" for a number that does not fit,
// "number" for one where a string is wanted). A []byte's base64 is left
// to encoding/json.
func scalar(tok json.Token, t reflect.Type, path string) error {
	if tok == nil || t == nil || t.Kind() == reflect.Interface {
		return nil // null leaves any value alone; an interface takes anything
	}
	var value string
	switch v := tok.(type) {
	case bool:
		if t.Kind() == reflect.Bool {
			return nil
		}
		value = "bool"
	case string:
		if t.Kind() == reflect.String || t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			return nil
		}
		value = "string"
	case json.Number:
		if value = numberProblem(string(v), t); value == "" {
			return nil
		}
	default:
		return nil
	}
	return typeError(path, &json.UnmarshalTypeError{Value: value, Type: t})
}

// numberProblem is "" if the number literal lit can be stored in a t, and
// otherwise what encoding/json's v1 decoder names it in its error:
// "number <lit>" where a number is wanted, "number" where it is not.
func numberProblem(lit string, t reflect.Type) string {
	var err error
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		_, err = strconv.ParseInt(lit, 10, t.Bits())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		_, err = strconv.ParseUint(lit, 10, t.Bits())
	case reflect.Float32, reflect.Float64:
		_, err = strconv.ParseFloat(lit, t.Bits())
	default:
		return "number"
	}
	if errors.Is(err, strconv.ErrRange) {
		// Well formed, so too large: "wrong type: got number 1e400, want
		// number" read as a type error.
		return "number " + lit + outOfRange
	}
	if err != nil {
		return "number " + lit
	}
	return ""
}

var (
	timeType     = reflect.TypeFor[time.Time]()
	durationType = reflect.TypeFor[Duration]()
)

// duration checks a duration value as Duration.UnmarshalJSON reads it,
// and names the field in its error (see strictShape).
func (w *shapeWalker) duration(tok json.Token, path string) error {
	switch v := tok.(type) {
	case nil:
		return nil // null: absent
	case string:
		var d Duration
		var te *json.UnmarshalTypeError // parse's only error
		if errors.As(d.parse(v), &te) {
			return typeError(path, te)
		}
		return nil
	}
	return typeError(path, &json.UnmarshalTypeError{Value: w.kindOf(tok), Type: durationType})
}

// time checks a time value, whose errors encoding/json reports without
// the field's path (time.ParseError is no *json.UnmarshalTypeError): a
// malformed pause until, hint at or startAt named no field.
func (w *shapeWalker) time(tok json.Token, path string) error {
	const want = `an RFC 3339 time such as "2026-03-02T11:00:00Z"`
	switch v := tok.(type) {
	case nil:
		return nil // null: absent
	case string:
		var t time.Time
		if t.UnmarshalText([]byte(v)) != nil { // what UnmarshalJSON parses
			return malformed(path, "must be "+want+", got "+strconv.Quote(truncate(v, 40)))
		}
		if !TimeInRange(t) {
			return malformed(path, timeRangeRule(v))
		}
		// The token ends at the input offset; a valid time holds no '"',
		// so the opening quote is the last one before its closing one.
		end := int(w.dec.InputOffset())
		start := bytes.LastIndexByte(w.data[:end-1], '"')
		if bytes.IndexByte(w.data[start:end], '\\') >= 0 && plainJSON(v) {
			w.escaped = append(w.escaped, escapedTime{start, end, v})
		}
		return nil
	}
	return malformed(path, "wrong type: got "+w.kindOf(tok)+", want "+want)
}

// object walks the members of an object whose '{' was read: fields names
// the members of a struct, elem is the value type of a map, and both nil
// stand for an untyped object.
func (w *shapeWalker) object(fields map[string]reflect.Type, elem reflect.Type, path string) {
	var seen []string
	for w.dec.More() {
		tok, ok := w.token()
		if !ok {
			return
		}
		key, _ := tok.(string)
		if w.notUTF8 && w.checkUTF8(tok, path) {
			// A key that is not UTF-8: its object is named.
			w.skipValue()
			continue
		}
		sub := key
		if path != "" {
			sub = path + "." + key
		}
		t := elem
		if fields != nil {
			var ok bool
			if t, ok = fields[key]; !ok {
				w.note(malformed(sub, unknownField(fields, key)))
				w.skipValue()
				continue
			}
		}
		if slices.Contains(seen, key) {
			w.note(malformed(sub, "given twice in one object"))
			w.skipValue()
			continue
		}
		seen = append(seen, key)
		w.value(t, sub)
		if w.broken {
			return
		}
	}
	w.token() // the closing '}'
}

// checkUTF8 notes, and reports, a string token tok (a value at path, or
// a key of the object at path) whose bytes in the input are not UTF-8.
// encoding/json hands it over with each such byte replaced by U+FFFD, so
// only a token holding U+FFFD has its bytes looked at: they end at the
// input offset, and start after the last quote before them that no
// backslash escapes.
func (w *shapeWalker) checkUTF8(tok json.Token, path string) bool {
	s, ok := tok.(string)
	if !ok || !strings.ContainsRune(s, utf8.RuneError) {
		return false
	}
	end := int(w.dec.InputOffset()) - 1 // the closing quote
	start := end - 1
	for ; start >= 0; start-- {
		if w.data[start] != '"' {
			continue
		}
		n := 0
		for n < start && w.data[start-1-n] == '\\' {
			n++
		}
		if n%2 == 0 {
			break
		}
	}
	raw := w.data[start+1 : end]
	i := invalidUTF8(raw)
	if i < 0 {
		return false
	}
	field := path
	if field == "" {
		field = "data"
	}
	w.note(malformed(field, "not valid UTF-8"+byteAt(raw, i)+": JSON text must be UTF-8, and the bytes would be replaced by U+FFFD"))
	return true
}

// invalidUTF8 is the offset of the first byte of b that is not UTF-8, or
// -1.
func invalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// byteAt describes the byte of b at i.
func byteAt(b []byte, i int) string {
	if i < 0 || i >= len(b) {
		return ""
	}
	return fmt.Sprintf(" (byte 0x%02X at offset %d)", b[i], i)
}

// unknownField is the rule for an unknown key, naming the field it
// differs from only in case.
func unknownField(fields map[string]reflect.Type, key string) string {
	for name := range fields {
		if strings.EqualFold(name, key) {
			return "unknown field (field names are case-sensitive: did you mean " + strconv.Quote(name) + "?)"
		}
	}
	return "unknown field"
}

// array walks the elements of an array whose '[' was read.
func (w *shapeWalker) array(elem reflect.Type, path string) {
	for i := 0; w.dec.More(); i++ {
		w.value(elem, path+"["+strconv.Itoa(i)+"]")
		if w.broken {
			return
		}
	}
	w.token() // the closing ']'
}

// skipValue moves past the next value.
func (w *shapeWalker) skipValue() {
	tok, ok := w.token()
	if d, isDelim := tok.(json.Delim); ok && isDelim && (d == '{' || d == '[') {
		w.skip()
	}
}

// skip moves past the rest of a value whose opening delimiter was read.
func (w *shapeWalker) skip() {
	for depth := 1; depth > 0; {
		tok, ok := w.token()
		if !ok {
			return
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
	}
}

// fieldCache maps a struct type to its fields by json name.
var fieldCache sync.Map // reflect.Type → map[string]reflect.Type

// structFields returns the fields encoding/json decodes into a value of
// struct type t, by their exact json names (embedded structs promoted).
func structFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	addFields(m, t, 0)
	fieldCache.Store(t, m)
	return m
}

// FieldPaths returns the dotted json path of every field of the structs
// vs, and of the structs in them (through pointers, slices and arrays),
// embedded structs promoted: "schedule.interval", "target.http.url".
func FieldPaths(vs ...any) map[string]bool {
	m := map[string]bool{}
	for _, v := range vs {
		addPaths(m, reflect.TypeOf(v), "", 0)
	}
	return m
}

func addPaths(m map[string]bool, t reflect.Type, prefix string, depth int) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || depth > 8 {
		return
	}
	for name, ft := range structFields(t) {
		m[prefix+name] = true
		addPaths(m, ft, prefix+name+".", depth+1)
	}
}

func addFields(m map[string]reflect.Type, t reflect.Type, depth int) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct && depth < 8 {
				addFields(m, ft, depth+1)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, ok := m[name]; !ok || depth == 0 {
			m[name] = f.Type
		}
	}
}

// MinTime and MaxTime bound the times flyball accepts: years 1 to 9999 in
// UTC. MinTime is the zero time, which Go writes for an unset time.Time.
var (
	MinTime = time.Time{}
	MaxTime = time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC)
)

// TimeInRange reports whether t lies in [MinTime, MaxTime]. A valid RFC
// 3339 time with an offset can fall outside ("9999-12-31T23:30:00-01:00"
// is 10000-01-01T00:30:00Z): a decision holding it could not be encoded
// (json.Marshal fails past year 9999), so decoders refuse it.
func TimeInRange(t time.Time) bool {
	return !t.Before(MinTime) && !t.After(MaxTime)
}

// UnixNanos returns t in Unix nanoseconds, and false where they cannot
// hold it (after 2262-04-11T23:47:16Z, before 1677-09-21: UnixNano
// wraps). A JetStream start time and the timer's slots are in them.
func UnixNanos(t time.Time) (int64, bool) {
	n := t.UnixNano()
	return n, time.Unix(0, n).Equal(t)
}

// TimeRangeRule is the rule a time outside TimeInRange breaks, for a
// FieldError.
func TimeRangeRule(t time.Time) string { return timeRangeRule(t.Format(time.RFC3339)) }

func timeRangeRule(v string) string {
	return "must be between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z, got " + strconv.Quote(truncate(v, 40))
}
