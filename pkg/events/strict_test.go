package events

import (
	"errors"
	"fmt"
	"slices"
	"strings"
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

// TestStrictShapeListsEveryProblem: a document with several mistakes of
// the kinds the walk checks gets them all at once, in document order, so
// a task file is not fixed one round trip per mistake.
func TestStrictShapeListsEveryProblem(t *testing.T) {
	data := `{"colour":{"a":[1,{"b":2}]},"id":"x","schedule":{"interval":30},"startAt":"noon",` +
		`"id":"y","target":{"http":{"timeout":"soon","url":"http://x"}},"labels":{"a":"1","a":"2"}}`
	want := []FieldError{
		{Field: "colour", Rule: "unknown field"},
		{Field: "schedule.interval", Rule: `wrong type: got number, want a duration string such as "30s"`},
		{Field: "startAt", Rule: `must be an RFC 3339 time such as "2026-03-02T11:00:00Z", got "noon"`},
		{Field: "id", Rule: "given twice in one object"},
		{Field: "target.http.timeout", Rule: `wrong type: got string "soon", want a duration string such as "30s"`},
		{Field: "labels.a", Rule: "given twice in one object"},
	}
	var spec TaskSpec
	err := strictShape([]byte(data), &spec)
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("strictShape = %v, want a ValidationError", err)
	}
	if !slices.Equal(ve.Errors, want) {
		t.Fatalf("strictShape listed\n%q\nwant\n%q", ve.Errors, want)
	}

	// Past MaxReasons the rest are counted, as Validate counts them.
	var b strings.Builder
	b.WriteString("{")
	for i := range MaxReasons + 5 {
		fmt.Fprintf(&b, `"x%d":1,`, i)
	}
	b.WriteString(`"id":"x"}`)
	err = strictShape([]byte(b.String()), &spec)
	if !errors.As(err, &ve) || len(ve.Errors) != MaxReasons+1 {
		t.Fatalf("strictShape of %d unknown keys = %v, want %d reasons", MaxReasons+5, err, MaxReasons+1)
	}
	if last := ve.Errors[MaxReasons]; last != (FieldError{Rule: "and 5 more problems"}) {
		t.Fatalf("last reason %q", last)
	}
	// A syntax error further on is still the answer: nothing is listed.
	if err := strictShape([]byte(`{"colour":1,"id":}`), &spec); err != nil {
		t.Fatalf("strictShape before a syntax error = %v, want nil (the decoder reports the syntax)", err)
	}
}
