package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"time"
)

// Duration is a time.Duration that travels in JSON as a Go duration string
// such as "30s", "1m30s" or "250ms". Numbers are refused: a bare 30 is
// ambiguous (seconds? nanoseconds?) and is a classic source of outages.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats the duration the way time.Duration does.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON encodes the duration as a string. A duration's text is
// digits, letters, '.', '-' and 'µ', none of which JSON escapes.
func (d Duration) MarshalJSON() ([]byte, error) { return d.appendJSON(nil), nil }

// appendJSON appends the quoted duration text to b.
func (d Duration) appendJSON(b []byte) []byte {
	b = append(b, '"')
	b = append(b, time.Duration(d).String()...)
	return append(b, '"')
}

// UnmarshalJSON decodes a duration string. Errors are
// *json.UnmarshalTypeError so that encoding/json adds the field path.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil // as for every other type: null leaves the value unset
	}
	// Fast path: a plain quoted string, which is every duration flyball
	// writes. Anything with escapes goes through encoding/json.
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' && !bytes.ContainsAny(b[1:len(b)-1], "\\\"") {
		return d.parse(string(b[1 : len(b)-1]))
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return &json.UnmarshalTypeError{Value: jsonKind(b), Type: durationType}
	}
	return d.parse(s)
}

func (d *Duration) parse(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		value := fmt.Sprintf("string %q", truncate(s, 64))
		if durationSyntax.MatchString(s) {
			// Well formed, so too long: ParseDuration says only "invalid
			// duration", which read as "not a duration string".
			value += outOfRange
		}
		return &json.UnmarshalTypeError{Value: value, Type: durationType}
	}
	*d = Duration(v)
	return nil
}

// outOfRange marks, in an UnmarshalTypeError's Value, a duration string
// that is well formed but longer than a time.Duration holds.
const outOfRange = " (out of range)"

// durationSyntax is the grammar time.ParseDuration accepts.
var durationSyntax = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

func jsonKind(b []byte) string {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '{':
			return "object"
		case '[':
			return "array"
		case '"':
			return "string"
		case 't', 'f':
			return "bool"
		case 'n':
			return "null"
		default:
			return "number"
		}
	}
	return "empty"
}
