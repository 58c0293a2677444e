package events

import (
	"bytes"
	"encoding/json"
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
// (benchmark-findings.md, finding 46).
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
// the kinds the walk checks (keys, types, durations, times) gets them all
// at once, in document order, so a task file is not fixed one round trip
// per mistake.
func TestStrictShapeListsEveryProblem(t *testing.T) {
	data := `{"colour":{"a":[1,{"b":2}]},"id":"x","schedule":{"interval":30},"startAt":"noon","jitter":"x",` +
		`"id":"y","target":{"http":{"timeout":"soon","url":"http://x","expectStatus":[204,"2xx"]}},"labels":{"a":"1","a":"2","b":true}}`
	want := []FieldError{
		{Field: "colour", Rule: "unknown field"},
		{Field: "schedule.interval", Rule: `wrong type: got number, want a duration string such as "30s"`},
		{Field: "startAt", Rule: `must be an RFC 3339 time such as "2026-03-02T11:00:00Z", got "noon"`},
		{Field: "jitter", Rule: "wrong type: got string, want number"},
		{Field: "id", Rule: "given twice in one object"},
		{Field: "target.http.timeout", Rule: `wrong type: got string "soon", want a duration string such as "30s"`},
		{Field: "target.http.expectStatus[0]", Rule: "wrong type: got number, want string"},
		{Field: "labels.a", Rule: "given twice in one object"},
		{Field: "labels.b", Rule: "wrong type: got bool, want string"},
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

// TestStrictShapeTypesLikeEncodingJSON: a value of the wrong JSON type
// gets the reason encoding/json's v1 decoder gave it (each want below is
// what DecodeData answered before the walk checked types, at 2c3df1e on Go
// 1.26), but for the path: a map value or an array element is named by
// its key or index, where encoding/json named the map or the array.
func TestStrictShapeTypesLikeEncodingJSON(t *testing.T) {
	for _, tc := range []struct{ data, want string }{
		{`{"catchUpMax":"3"}`, "catchUpMax: wrong type: got string, want integer"},
		{`{"catchUpMax":1.5}`, "catchUpMax: wrong type: got number 1.5, want integer"},
		{`{"catchUpMax":99999999999999999999}`, "catchUpMax: out of range: got number 99999999999999999999, want an integer from -9223372036854775808 to 9223372036854775807"}, // encoding/json: wrong type,
		{`{"retry":{"maxAttempts":-1.0}}`, "retry.maxAttempts: wrong type: got number -1.0, want integer"},
		{`{"id":true}`, "id: wrong type: got bool, want string"},
		{`{"job":5}`, "job: wrong type: got number, want string"},
		{`{"id":{}}`, "id: wrong type: got object, want string"},
		{`{"id":[1]}`, "id: wrong type: got array, want string"},
		{`{"target":[]}`, "target: wrong type: got array, want object"},
		{`{"target":"x"}`, "target: wrong type: got string, want object"},
		{`{"jitter":true}`, "jitter: wrong type: got bool, want number"},
		{`{"jitter":1e999}`, "jitter: out of range: got number 1e999, want a number of magnitude at most 1.7976931348623157e+308"}, // encoding/json: wrong type,
		{`{"labels":[]}`, "labels: wrong type: got array, want object"},
		{`{"target":{"http":{"expectStatus":"2xx"}}}`, "target.http.expectStatus: wrong type: got string, want array"},
		{`{"labels":{"a":1}}`, "labels.a: wrong type: got number, want string"},                                            // encoding/json: labels
		{`{"target":{"http":{"headers":{"a":false}}}}`, "target.http.headers.a: wrong type: got bool, want string"},        // encoding/json: target.http.headers
		{`{"target":{"http":{"expectStatus":[200]}}}`, "target.http.expectStatus[0]: wrong type: got number, want string"}, // encoding/json: target.http.expectStatus
		{`[]`, "data: must be a JSON object, got array"},
		{`5`, "data: must be a JSON object, got number"},
	} {
		var spec TaskSpec
		err := strictShape([]byte(tc.data), &spec)
		if err == nil || err.Error() != tc.want {
			t.Errorf("strictShape(%s) = %v, want %s", tc.data, err, tc.want)
		}
	}
	var spec TaskSpec
	if err := strictShape([]byte(`{"id":null,"jitter":null,"labels":null,"target":null,"catchUpMax":7,"jitter":0.25}`), &spec); err == nil ||
		err.Error() != "jitter: given twice in one object" {
		t.Errorf("nulls and numbers that fit: %v, want only the repeated key", err)
	}
}

// FuzzStrictShapeAgreesWithEncodingJSON holds the walk's type checks to
// encoding/json on arbitrary task specs: what the walk accepts, the
// decoder accepts; and a document whose only problems are values of the
// wrong type (no key the walk refuses, no duration or time) the decoder
// refuses too. So the walk lists problems earlier, never invents one.
func FuzzStrictShapeAgreesWithEncodingJSON(f *testing.F) {
	for _, s := range []string{
		`{"id":"x","target":{"http":{"url":"https://example.com/","expectStatus":["2xx"],"headers":{"a":"b"}}},"schedule":{"interval":"30s"}}`,
		`{"catchUpMax":"3"}`, `{"catchUpMax":1.5}`, `{"catchUpMax":99999999999999999999}`, `{"retry":{"maxAttempts":-1.0}}`,
		`{"id":true}`, `{"job":5}`, `{"id":{}}`, `{"target":[]}`, `{"jitter":1e999}`, `{"jitter":-0.0}`, `{"labels":{"a":1}}`,
		`{"target":{"http":{"expectStatus":[200]}}}`, `{"id":null,"jitter":null,"labels":null}`, `[]`, `5`, `{"maxResponseBytes":9223372036854775808}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 || !firstValueValid(data) {
			return
		}
		var walked TaskSpec
		shapeErr := strictShape(data, &walked)
		var decoded TaskSpec
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		decodeErr := dec.Decode(&decoded)
		if shapeErr == nil {
			var te *json.UnmarshalTypeError
			if errors.As(decodeErr, &te) {
				t.Fatalf("the walk accepts %s, encoding/json refuses a type: %v", data, decodeErr)
			}
			return
		}
		for _, fe := range Reasons(shapeErr) {
			if !strings.HasPrefix(fe.Rule, "wrong type: ") || strings.Contains(fe.Rule, "duration") || strings.Contains(fe.Rule, "RFC 3339") {
				return // a problem encoding/json does not look for, or reports its own way
			}
		}
		if decodeErr == nil {
			t.Fatalf("the walk refuses %s (%v), encoding/json accepts it", data, shapeErr)
		}
	})
}
