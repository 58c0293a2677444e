package events

import (
	"errors"
	"testing"
)

// TestStrictShapeNamesADurationsField: the shape walk, not encoding/json,
// names the field of a bad duration, with the rules DecodeData gives. Only
// encoding/json's v1 implementation adds the field's path to an error from
// Duration.UnmarshalJSON; Go 1.27's reports "data: must be a JSON object"
// (benchmarks.md, finding 46).
func TestStrictShapeNamesADurationsField(t *testing.T) {
	for _, tc := range []struct {
		name, data, field, rule string
	}{
		{"number", `{"schedule":{"interval":30}}`, "schedule.interval", `wrong type: got number, want a duration string such as "30s"`},
		{"bool", `{"schedule":{"interval":true}}`, "schedule.interval", `wrong type: got bool, want a duration string such as "30s"`},
		{"object", `{"target":{"http":{"timeout":{"s":1}}}}`, "target.http.timeout", `wrong type: got object, want a duration string such as "30s"`},
		{"array", `{"retry":{"initialDelay":[1]}}`, "retry.initialDelay", `wrong type: got array, want a duration string such as "30s"`},
		{"not a duration", `{"schedule":{"interval":"5 parsecs"}}`, "schedule.interval", `wrong type: got string "5 parsecs", want a duration string such as "30s"`},
		{"out of range", `{"schedule":{"interval":"99999999999h"}}`, "schedule.interval", `out of range: got string "99999999999h", want a duration of at most 2562047h47m16.854775807s`},
		{"escaped", `{"schedule":{"interval":"\u0035 parsecs"}}`, "schedule.interval", `wrong type: got string "5 parsecs", want a duration string such as "30s"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var spec TaskSpec
			err := strictShape([]byte(tc.data), &spec)
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Errors) != 1 {
				t.Fatalf("strictShape(%s) = %v, want one field error", tc.data, err)
			}
			if got := ve.Errors[0]; got.Field != tc.field || got.Rule != tc.rule {
				t.Fatalf("strictShape(%s) = %q: %q, want %q: %q", tc.data, got.Field, got.Rule, tc.field, tc.rule)
			}
		})
	}
	// What Duration.UnmarshalJSON accepts, the walk accepts: null leaves
	// the value unset, and escapes are read before parsing.
	for _, data := range []string{
		`{"schedule":{"interval":null}}`,
		`{"schedule":{"interval":"1m30s"}}`,
		`{"schedule":{"interval":"\u0031m"}}`,
		`{"target":{"http":{"timeout":"250ms"}}}`,
	} {
		var spec TaskSpec
		if err := strictShape([]byte(data), &spec); err != nil {
			t.Errorf("strictShape(%s) = %v, want nil", data, err)
		}
	}
}
