package events

import (
	"encoding/json"
	"fmt"
	"reflect"
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

// MarshalJSON encodes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON decodes a duration string. Errors are
// *json.UnmarshalTypeError so that encoding/json adds the field path.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil // as for every other type: null leaves the value unset
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return &json.UnmarshalTypeError{Value: jsonKind(b), Type: reflect.TypeFor[Duration]()}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return &json.UnmarshalTypeError{Value: fmt.Sprintf("string %q", truncate(s, 64)), Type: reflect.TypeFor[Duration]()}
	}
	*d = Duration(v)
	return nil
}

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
