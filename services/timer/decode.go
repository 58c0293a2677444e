package timer

import (
	"encoding/json"
	"time"
)

// scheduled is the part of a stored schedule (a JSON-encoded gov.State)
// the timer needs. Paused states need nothing more: the governor stores an
// indefinite pause (and a deletion) with no nextRunAt, and a timed pause
// with nextRunAt at its end, which the timer dispatches like any slot: the
// executor runs it, since the pause ends at or before that slot
// (TestTimedPauseResumesAtItsEnd), and its outcome clears the pause.
type scheduled struct {
	NextRunAt time.Time `json:"nextRunAt"`
	Source    string    `json:"source"`
}

// decodeSchedule reads nextRunAt and source from a stored schedule.
//
// Loading a large bucket is dominated by this decode, and json.Unmarshal
// scans the whole value twice (validation, then decoding), trail and all,
// even into a two-field struct. json.Marshal(gov.State) writes taskId,
// nextRunAt and source first, so scanSchedule reads just that prefix and
// stops. Anything it does not recognise as that plain shape (escapes,
// non-ASCII, case-variant keys, null or non-string values) falls back to
// json.Unmarshal, which then decides exactly as it always did.
//
// The one behavioural difference: a value whose prefix holds both fields
// but whose tail is not valid JSON is scheduled from the prefix instead of
// being refused. The governor never writes such a value, and
// TestDecodeScheduleMatchesUnmarshal and FuzzDecodeSchedule check agreement
// with json.Unmarshal on every valid input.
//
// The returned source aliases b when the fast path took it.
func decodeSchedule(b []byte) (next time.Time, source []byte, err error) {
	if next, source, ok := scanSchedule(b); ok {
		return next, source, nil
	}
	var sc scheduled
	if err := json.Unmarshal(b, &sc); err != nil {
		return time.Time{}, nil, err
	}
	return sc.NextRunAt, []byte(sc.Source), nil
}

// scanSchedule reads the top-level "nextRunAt" and "source" members of a
// JSON object and stops once it has both. It returns ok=false whenever it
// has not found both or json.Unmarshal could read them differently (see
// decodeSchedule), so it never has to be sure the input is valid.
func scanSchedule(b []byte) (next time.Time, source []byte, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return time.Time{}, nil, false
	}
	i = skipSpace(b, i+1)
	var haveNext, haveSource bool
	for {
		key, j, ok := plainString(b, i)
		if !ok {
			return time.Time{}, nil, false
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return time.Time{}, nil, false
		}
		i = skipSpace(b, i+1)
		switch {
		case string(key) == "nextRunAt":
			_, j, ok = plainString(b, i)
			// The raw token, quotes included, is exactly what
			// json.Unmarshal hands to time.Time.UnmarshalJSON.
			if !ok || next.UnmarshalJSON(b[i:j]) != nil {
				return time.Time{}, nil, false
			}
			haveNext = true
		case string(key) == "source":
			if source, j, ok = plainString(b, i); !ok {
				return time.Time{}, nil, false
			}
			haveSource = true
		case foldEqual(key, "nextRunAt") || foldEqual(key, "source"):
			// encoding/json matches field names case-insensitively.
			return time.Time{}, nil, false
		default:
			if j, ok = skipValue(b, i); !ok {
				return time.Time{}, nil, false
			}
		}
		if haveNext && haveSource {
			return next, source, true
		}
		// Anything but a comma, including the end of the object (a
		// state with no nextRunAt: deleted or paused indefinitely), is
		// left to json.Unmarshal: those states are rare, and it also
		// validates them.
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ',' {
			return time.Time{}, nil, false
		}
		i = skipSpace(b, i+1)
	}
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

// skipValue returns the index after the JSON value starting at b[i]. It
// does not validate: on valid JSON it is exact, on invalid JSON it may
// return anything, and the caller then either fails or stops early.
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
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
					return i + 1, true
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
				return j, j > i
			}
			j++
		}
		return 0, false
	}
}

// skipString returns the index after the JSON string starting at b[i].
func skipString(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++ // whatever is escaped, it does not end the string
		case '"':
			return j + 1, true
		}
	}
	return 0, false
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
