package timer

import (
	"encoding/json"
	"time"

	gov "github.com/flyballhq/flyball/pkg/governor"
)

// scheduled is the part of a stored schedule (a JSON-encoded gov.State)
// the timer needs. Paused states need nothing more: the governor stores an
// indefinite pause (and a deletion) with no nextRunAt, and a timed pause
// with nextRunAt at its end, which the timer dispatches like any slot: the
// executor runs it, since the pause ends at or before that slot
// (TestTimedPauseResumesAtItsEnd), and its outcome clears the pause. A
// slot after 2262, which Unix nanoseconds cannot hold, is not queued at all
// (slotNanos).
// CreatedAt goes into every dispatch (events.Dispatch.TaskCreatedAt).
type scheduled struct {
	NextRunAt time.Time `json:"nextRunAt"`
	Source    string    `json:"source"`
	CreatedAt time.Time `json:"createdAt"`
}

// schedule is a decoded scheduled; source aliases the stored value when
// the fast path took it.
type schedule struct {
	next, created time.Time
	source        []byte
}

// decodeSchedule reads nextRunAt, source and createdAt from a stored
// schedule.
//
// Loading a large bucket is dominated by this decode, and json.Unmarshal
// scans the whole value twice (validation, then decoding), trail and all,
// even into a three-field struct. The governor writes taskId, nextRunAt,
// source and createdAt first (gov.State.AppendJSON), so scanSchedule reads
// just that prefix and stops. Anything it does not recognise as that plain
// shape (escapes, non-ASCII, case-variant keys, null or non-string values)
// falls back to json.Unmarshal, which then decides exactly as it always
// did.
//
// The one behavioural difference: a value whose prefix, up to the three
// fields (or to the end of an object with the first two), is valid JSON
// but whose tail is not is scheduled from the prefix instead of being
// refused; what the scan skips before and between the fields is checked
// (skipValue), so invalid JSON there is refused as json.Unmarshal refuses
// it. The governor never writes such a value, and
// TestDecodeScheduleMatchesUnmarshal, TestDecodeScheduleEdges and
// FuzzDecodeSchedule check agreement with json.Unmarshal on every input
// without a repeated field (the scan returns once it has all three, so a
// later copy of one, which json.Unmarshal would take, is never read),
// invalid input included apart from that tail.
func decodeSchedule(b []byte) (schedule, error) {
	if sc, _, ok := scanSchedule(b); ok {
		return sc, nil
	}
	var sc scheduled
	if err := json.Unmarshal(b, &sc); err != nil {
		return schedule{}, err
	}
	return schedule{next: sc.NextRunAt, created: sc.CreatedAt, source: []byte(sc.Source)}, nil
}

// scanSchedule reads the top-level "nextRunAt", "source" and "createdAt"
// members of a JSON object and stops once it has all three, or at the end
// of an object that has the first two (a schedule with no createdAt,
// written by flyball before 2026-11-27 or by hand). It returns ok=false
// whenever it has not found them or json.Unmarshal could read them
// differently (see decodeSchedule), so it never has to be sure the input
// is valid. n is the length of the prefix read: up to the last field's
// value, or the object's closing brace.
func scanSchedule(b []byte) (sc schedule, n int, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return schedule{}, 0, false
	}
	i = skipSpace(b, i+1)
	var haveNext, haveSource, haveCreated bool
	for {
		key, j, ok := plainString(b, i)
		if !ok {
			return schedule{}, 0, false
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return schedule{}, 0, false
		}
		i = skipSpace(b, i+1)
		switch {
		case string(key) == "nextRunAt":
			// The raw token, quotes included, is exactly what
			// json.Unmarshal hands to time.Time.UnmarshalJSON.
			if j, ok = rawTime(b, i, &sc.next); !ok {
				return schedule{}, 0, false
			}
			haveNext = true
		case string(key) == "createdAt":
			if j, ok = rawTime(b, i, &sc.created); !ok {
				return schedule{}, 0, false
			}
			haveCreated = true
		case string(key) == "source":
			if sc.source, j, ok = plainString(b, i); !ok {
				return schedule{}, 0, false
			}
			haveSource = true
		case foldEqual(key, "nextRunAt") || foldEqual(key, "source") || foldEqual(key, "createdAt"):
			// encoding/json matches field names case-insensitively.
			return schedule{}, 0, false
		default:
			if j, ok = skipValue(b, i); !ok {
				return schedule{}, 0, false
			}
		}
		if haveNext && haveSource && haveCreated {
			return sc, j, true
		}
		i = skipSpace(b, j)
		if i < len(b) && b[i] == '}' && haveNext && haveSource {
			return sc, i + 1, true
		}
		// Anything but a comma, including the end of the object (a
		// state with no nextRunAt: deleted or paused indefinitely), is
		// left to json.Unmarshal: those states are rare, and it also
		// validates them.
		if i >= len(b) || b[i] != ',' {
			return schedule{}, 0, false
		}
		i = skipSpace(b, i+1)
	}
}

// undecided reports whether raw, a stored schedule that decoded with no
// nextRunAt and no source, names no decision (gov.Undecided): it is not
// paused either. The governor writes no such value, so only a value
// written by hand (JSON null, {}) pays for this second decode; one whose
// paused does not decode is unreadable to the governor too.
func undecided(raw []byte) bool {
	var p struct {
		Paused bool `json:"paused"`
	}
	return json.Unmarshal(raw, &p) != nil || gov.Undecided(time.Time{}, "", p.Paused)
}

// rawTime reads the plain JSON string at b[i] into *t as json.Unmarshal
// would, and returns the index after it.
func rawTime(b []byte, i int, t *time.Time) (int, bool) {
	_, j, ok := plainString(b, i)
	if !ok || t.UnmarshalJSON(b[i:j]) != nil {
		return 0, false
	}
	return j, true
}

// plainString reads the JSON string starting at b[i] when it is printable
// ASCII with no escapes and no characters json.Unmarshal would change. It
// returns the contents and the index after the closing quote.
func plainString(b []byte, i int) (s []byte, end int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// skipValue returns the index after the JSON value starting at b[i], and
// ok=false when that value is not valid JSON: a literal other than true,
// false, null or a number, a string with a control byte or a bad escape,
// or a malformed object or array. The caller then falls back to
// json.Unmarshal, which refuses the value as it always did.
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		start, depth := i, 0
		for i < len(b) {
			switch b[i] {
			case '"':
				j, ok := skipString(b, i)
				if !ok {
					return 0, false
				}
				i = j
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					// The brackets balance; the rest of the grammar
					// (separators, literals, matching pairs) is checked
					// here. The governor writes no object or array
					// before the fields read, so this is off the hot
					// path.
					return i + 1, json.Valid(b[start : i+1])
				}
			}
			i++
		}
		return 0, false
	default:
		// A number, true, false or null: up to the next delimiter.
		j := i
		for j < len(b) {
			switch b[j] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return j, validLiteral(b[i:j])
			}
			j++
		}
		return 0, false
	}
}

// validLiteral reports whether lit is true, false, null or a JSON number.
func validLiteral(lit []byte) bool {
	switch string(lit) {
	case "true", "false", "null":
		return true
	}
	// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
	i := 0
	if i < len(lit) && lit[i] == '-' {
		i++
	}
	switch {
	case i < len(lit) && lit[i] == '0':
		i++
	case i < len(lit) && '1' <= lit[i] && lit[i] <= '9':
		i = digits(lit, i)
	default:
		return false
	}
	if i < len(lit) && lit[i] == '.' {
		if j := digits(lit, i+1); j > i+1 {
			i = j
		} else {
			return false
		}
	}
	if i < len(lit) && (lit[i] == 'e' || lit[i] == 'E') {
		i++
		if i < len(lit) && (lit[i] == '+' || lit[i] == '-') {
			i++
		}
		if j := digits(lit, i); j > i {
			i = j
		} else {
			return false
		}
	}
	return i == len(lit)
}

// digits returns the index after the decimal digits at b[i].
func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// skipString returns the index after the JSON string starting at b[i], and
// ok=false when it is not a valid JSON string: unterminated, or holding a
// control byte or an escape json.Unmarshal refuses. Other bytes, invalid
// UTF-8 included, json.Unmarshal accepts too.
func skipString(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return j + 1, true
		case c < 0x20:
			return 0, false
		case c == '\\':
			if j++; j >= len(b) {
				return 0, false
			}
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(b) || !hex4(b[j+1:j+5]) {
					return 0, false
				}
				j += 4
			default:
				return 0, false
			}
		}
	}
	return 0, false
}

// hex4 reports whether h is four hexadecimal digits.
func hex4(h []byte) bool {
	for _, c := range h {
		switch {
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f', 'A' <= c && c <= 'F':
		default:
			return false
		}
	}
	return true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// foldEqual reports whether key equals name ignoring ASCII case; plainString
// already refused any key with non-ASCII bytes, so ASCII folding is all
// encoding/json could apply.
func foldEqual(key []byte, name string) bool {
	if len(key) != len(name) {
		return false
	}
	for i := range len(key) {
		a, b := key[i], name[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}
