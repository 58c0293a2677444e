package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
)

var at = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

func newEvent(t testing.TB, typ, subject string, data any) events.Event {
	t.Helper()
	e, err := events.New(typ, "flyball/test", subject, data, at, "ev-1")
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// structured is a valid structured-mode task.created message; mutate it
// through a map to build broken variants.
func structuredMap(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	b, err := events.Marshal(events.TypeTaskCreated, "flyball/test", "x", json.RawMessage(minimal), at, "ev-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func binaryHeader() map[string][]string {
	return map[string][]string{
		"ce-specversion": {"1.0"},
		"ce-id":          {"ev-1"},
		"ce-type":        {events.TypeTaskCreated},
		"ce-source":      {"flyball/test"},
		"ce-subject":     {"x"},
		"ce-time":        {at.Format(time.RFC3339Nano)},
		"content-type":   {events.ContentTypeJSON},
	}
}

func TestStructuredRoundTrip(t *testing.T) {
	spec := minimalSpec(t)
	e := newEvent(t, events.TypeTaskCreated, spec.ID, spec)
	b, err := events.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	for _, hdr := range []map[string][]string{
		nil,
		{"Content-Type": {events.ContentTypeStructured + "; charset=utf-8"}},
		{"content-type": {events.ContentTypeJSON}},
		// Media types are case-insensitive (RFC 9110 8.3.1), and may carry
		// spaces before their parameters.
		{"Content-Type": {"Application/CloudEvents+JSON"}},
		{"Content-Type": {"application/json ; charset=utf-8"}},
	} {
		got, err := events.Decode(hdr, b)
		if err != nil {
			t.Fatalf("Decode(%v) = %v", hdr, err)
		}
		checkSameEvent(t, got, e)
		decoded, err := events.DecodeTaskSpec(got)
		if err != nil {
			t.Fatal(err)
		}
		want := spec
		want.Normalize()
		if !reflect.DeepEqual(decoded, want) {
			t.Errorf("DecodeTaskSpec = %+v, want %+v", decoded, want)
		}
	}
}

func checkSameEvent(t *testing.T, got, want events.Event) {
	t.Helper()
	if got.SpecVersion() != "1.0" || got.ID() != want.ID() || got.Type() != want.Type() || got.Source() != want.Source() ||
		got.Subject() != want.Subject() || !got.Time().Equal(want.Time()) {
		t.Errorf("decoded event %s/%s/%s/%s/%s, want %s/%s/%s/%s/%s",
			got.ID(), got.Type(), got.Source(), got.Subject(), got.Time(),
			want.ID(), want.Type(), want.Source(), want.Subject(), want.Time())
	}
	if !jsonEqual(got.Data(), want.Data()) {
		t.Errorf("data = %s, want %s", got.Data(), want.Data())
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(x, y)
}

func TestBinaryMode(t *testing.T) {
	want := newEvent(t, events.TypeTaskCreated, "x", json.RawMessage(minimal))
	got, err := events.Decode(binaryHeader(), []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	checkSameEvent(t, got, want)
	if got.DataContentType() != events.ContentTypeJSON {
		t.Errorf("datacontenttype = %q", got.DataContentType())
	}
	if _, err := events.DecodeTaskSpec(got); err != nil {
		t.Errorf("DecodeTaskSpec = %v", err)
	}

	// A binary event re-encodes in structured mode and decodes the same.
	b, err := events.Encode(got)
	if err != nil {
		t.Fatal(err)
	}
	again, err := events.Decode(nil, b)
	if err != nil {
		t.Fatal(err)
	}
	checkSameEvent(t, again, want)
}

func TestBinaryModeHeaderKeysAreCaseInsensitive(t *testing.T) {
	hdr := map[string][]string{}
	for k, v := range binaryHeader() {
		// Ce-Specversion, Ce-Id, ... as net/http and nats.Header canonicalize.
		parts := strings.Split(k, "-")
		for i, p := range parts {
			parts[i] = strings.ToUpper(p[:1]) + p[1:]
		}
		hdr[strings.Join(parts, "-")] = v
	}
	hdr["CE-ID"], hdr["Ce-Id"] = hdr["Ce-Id"], nil
	got, err := events.Decode(hdr, []byte(minimal))
	if err != nil {
		t.Fatalf("Decode(%v) = %v", hdr, err)
	}
	checkSameEvent(t, got, newEvent(t, events.TypeTaskCreated, "x", json.RawMessage(minimal)))
}

func TestBinaryModeWithoutData(t *testing.T) {
	hdr := binaryHeader()
	hdr["ce-type"] = []string{events.TypeTaskResumed}
	for _, body := range [][]byte{nil, {}} {
		e, err := events.Decode(hdr, body)
		if err != nil {
			t.Fatal(err)
		}
		if len(e.Data()) != 0 {
			t.Errorf("Data() = %q, want none", e.Data())
		}
		b, err := events.Encode(e)
		if err != nil {
			t.Fatalf("Encode of a data-less binary event: %v", err)
		}
		if _, err := events.Decode(nil, b); err != nil {
			t.Errorf("re-decode: %v", err)
		}
	}
}

func TestBinaryModeDefaultsAndOtherContentTypes(t *testing.T) {
	hdr := binaryHeader()
	delete(hdr, "content-type")
	delete(hdr, "ce-subject")
	delete(hdr, "ce-time")
	e, err := events.Decode(hdr, []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if e.DataContentType() != events.ContentTypeJSON || e.Subject() != "" || !e.Time().IsZero() {
		t.Errorf("got content type %q, subject %q, time %v", e.DataContentType(), e.Subject(), e.Time())
	}

	// Non-JSON payloads travel untouched, and survive re-encoding.
	hdr["content-type"] = []string{"text/plain"}
	e, err = events.Decode(hdr, []byte("{not json"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := events.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	again, err := events.Decode(nil, b)
	if err != nil || string(again.Data()) != "{not json" {
		t.Errorf("re-decoded data %q, %v", again.Data(), err)
	}
}

func TestDecodeMalformed(t *testing.T) {
	withHeader := func(mut func(h map[string][]string)) map[string][]string {
		h := binaryHeader()
		mut(h)
		return h
	}
	structured := func(mut func(m map[string]any)) []byte {
		m := structuredMap(t)
		mut(m)
		return mustJSON(t, m)
	}
	tests := []struct {
		name   string
		header map[string][]string
		body   []byte
		want   wantErr
	}{
		{"not JSON", nil, []byte("{nope"), wantErr{"", []string{"not valid JSON"}}},
		{"empty", nil, []byte("  \n"), wantErr{"", []string{"empty message"}}},
		{"JSON array", nil, []byte(`[{"specversion":"1.0"}]`), wantErr{"", []string{"JSON object", "got array"}}},
		{"JSON string", nil, []byte(`"hello"`), wantErr{"", []string{"got string"}}},
		{"trailing JSON", nil, append(mustJSON(t, structuredMap(t)), "{}"...), wantErr{"", []string{"not valid JSON"}}},
		{"missing specversion", nil, structured(func(m map[string]any) { delete(m, "specversion") }), wantErr{"specversion", []string{"is required"}}},
		{"numeric specversion", nil, structured(func(m map[string]any) { m["specversion"] = 1 }), wantErr{"specversion", []string{"is required"}}},
		{"specversion 0.3", nil, structured(func(m map[string]any) { m["specversion"] = "0.3" }), wantErr{"specversion", []string{`must be "1.0"`, `"0.3"`}}},
		{"missing id", nil, structured(func(m map[string]any) { delete(m, "id") }), wantErr{"id", []string{"non-empty"}}},
		{"missing source", nil, structured(func(m map[string]any) { delete(m, "source") }), wantErr{"source", []string{"required"}}},
		{"missing type", nil, structured(func(m map[string]any) { delete(m, "type") }), wantErr{"type", []string{"non-empty"}}},
		{"foreign type", nil, structured(func(m map[string]any) { m["type"] = "com.example.created" }), wantErr{"type", []string{`must start with "io.flyball."`, "com.example.created"}}},
		{"bad time", nil, structured(func(m map[string]any) { m["time"] = "yesterday" }), wantErr{"time", []string{"RFC 3339", "yesterday"}}},
		{"repeated specversion", nil, []byte(`{"specversion":"1.0","specversion":"1.0","id":"a","source":"s","type":"io.flyball.x"}`), wantErr{"specversion", []string{"given twice"}}},
		{"repeated datacontenttype", nil, []byte(`{"specversion":"1.0","id":"a","source":"s","type":"io.flyball.x","datacontenttype":"application/json","datacontenttype":"application/json"}`), wantErr{"datacontenttype", []string{"given twice"}}},
		{"extension number past int32", nil, []byte(`{"specversion":"1.0","id":"a","source":"s","type":"io.flyball.x","ext":1e10}`), wantErr{"ext", []string{"-2147483648", "2147483647"}}},
		{"numeric time", nil, structured(func(m map[string]any) { m["time"] = 5 }), wantErr{"time", []string{"wrong type", "number", "string"}}},
		{"time past year 9999", nil, structured(func(m map[string]any) { m["time"] = "9999-12-31T23:30:00-01:00" }), wantErr{"time", []string{"9999-12-31T23:59:59Z", "9999-12-31T23:30:00-01:00"}}},
		{"numeric id", nil, structured(func(m map[string]any) { m["id"] = 5 }), wantErr{"id", []string{"wrong type", "number", "string"}}},
		{"numeric source", nil, structured(func(m map[string]any) { m["source"] = 5 }), wantErr{"source", []string{"wrong type", "number"}}},
		{"unparsable source", nil, structured(func(m map[string]any) { m["source"] = "::" }), wantErr{"source", []string{"URI reference", "::"}}},
		{"boolean type", nil, structured(func(m map[string]any) { m["type"] = true }), wantErr{"type", []string{"wrong type", "bool"}}},
		{"numeric subject", nil, structured(func(m map[string]any) { m["subject"] = 1 }), wantErr{"subject", []string{"wrong type"}}},
		{"numeric datacontenttype", nil, structured(func(m map[string]any) { m["datacontenttype"] = 1 }), wantErr{"datacontenttype", []string{"wrong type"}}},
		{"data_base64 not base64", nil, structured(func(m map[string]any) { m["data_base64"] = "!!" }), wantErr{"data_base64", []string{"base64"}}},
		{"extension object", nil, structured(func(m map[string]any) { m["ext"] = map[string]any{} }), wantErr{"ext", []string{"extension", "object"}}},
		{"foreign content type", map[string][]string{"Content-Type": {"text/plain"}}, mustJSON(t, structuredMap(t)), wantErr{"", []string{"content type", "text/plain", "binary mode"}}},
		{"content type with a json prefix", map[string][]string{"Content-Type": {"application/jsonx"}}, mustJSON(t, structuredMap(t)), wantErr{"", []string{"content type", "application/jsonx"}}},
		// The sdk slices a non-string data_base64 seen before specversion
		// without checking it; Decode must not panic on it.
		{"data_base64 number first", nil, []byte(`{"data_base64":1,"specversion":"1.0","id":"a","source":"s","type":"io.flyball.x"}`), wantErr{"data_base64", []string{"wrong type", "number"}}},
		{"data not a string for text/plain", nil, structured(func(m map[string]any) { m["datacontenttype"] = "text/plain" }), wantErr{"data", []string{"string", "text/plain"}}},

		{"binary specversion 0.3", withHeader(func(h map[string][]string) { h["ce-specversion"] = []string{"0.3"} }), []byte(minimal), wantErr{"specversion", []string{`must be "1.0"`, `"0.3"`}}},
		{"binary missing id", withHeader(func(h map[string][]string) { delete(h, "ce-id") }), []byte(minimal), wantErr{"id", []string{"non-empty"}}},
		{"binary missing source", withHeader(func(h map[string][]string) { delete(h, "ce-source") }), []byte(minimal), wantErr{"source", []string{"required"}}},
		{"binary missing type", withHeader(func(h map[string][]string) { delete(h, "ce-type") }), []byte(minimal), wantErr{"type", []string{"non-empty"}}},
		{"binary foreign type", withHeader(func(h map[string][]string) { h["ce-type"] = []string{"task.created"} }), []byte(minimal), wantErr{"type", []string{"io.flyball."}}},
		{"binary ce-time past year 9999", withHeader(func(h map[string][]string) { h["ce-time"] = []string{"9999-12-31T23:30:00-01:00"} }), []byte(minimal), wantErr{"time", []string{"9999-12-31T23:59:59Z", "9999-12-31T23:30:00-01:00"}}},
		{"binary bad ce-time", withHeader(func(h map[string][]string) { h["ce-time"] = []string{"2026-03-01 12:00"} }), []byte(minimal), wantErr{"time", []string{"must be RFC 3339", "2026-03-01 12:00"}}},
		{"binary JSON body not JSON", binaryHeader(), []byte("{nope"), wantErr{"data", []string{"not valid JSON", "application/json"}}},
		{"binary +json body not JSON", withHeader(func(h map[string][]string) {
			h["content-type"] = []string{"Application/Vnd.Flyball+JSON; charset=utf-8"}
		}), []byte("nope"), wantErr{"data", []string{"not valid JSON"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := events.Decode(tt.header, tt.body)
			if err == nil {
				t.Fatalf("Decode(%s) = nil error", tt.body)
			}
			assertOneMalformed(t, err, tt.want)
		})
	}
}

func TestDecodeReportsMissingAttributesInOrder(t *testing.T) {
	m := structuredMap(t)
	delete(m, "id")
	delete(m, "source")
	delete(m, "type")
	for range 20 { // the sdk's message comes from a map: check the order is stable
		_, err := events.Decode(nil, mustJSON(t, m))
		var fields []string
		for _, r := range events.Reasons(err) {
			fields = append(fields, r.Field)
		}
		if want := []string{"id", "source", "type"}; !slices.Equal(fields, want) {
			t.Fatalf("fields = %q, want %q (%v)", fields, want, err)
		}
	}
}

func dataEvent(t testing.TB, contentType, data string) events.Event {
	t.Helper()
	e := newEvent(t, events.TypeTaskCreated, "", nil)
	e.SetDataContentType(contentType)
	e.DataEncoded = []byte(data)
	return e
}

func TestDecodeData(t *testing.T) {
	tests := []struct {
		name        string
		contentType string
		data        string
		want        wantErr
	}{
		{"unknown field", events.ContentTypeJSON, `{"id":"x","foo":1}`, wantErr{"foo", []string{"unknown field"}}},
		{"interval as number", events.ContentTypeJSON, `{"schedule":{"interval":5}}`, wantErr{"schedule.interval", []string{"wrong type", "number", `duration string such as "30s"`}}},
		{"id as number", events.ContentTypeJSON, `{"id":5}`, wantErr{"id", []string{"wrong type: got number, want string"}}},
		{"bad duration string", events.ContentTypeJSON, `{"schedule":{"interval":"5 parsecs"}}`, wantErr{"schedule.interval", []string{`"5 parsecs"`, "duration string"}}},
		// A well-formed duration too long for time.Duration was called
		// "wrong type: got string \"99999999999h\", want a duration string".
		{"duration out of range", events.ContentTypeJSON, `{"schedule":{"interval":"99999999999h"}}`, wantErr{"schedule.interval", []string{`out of range: got string "99999999999h"`, "at most 2562047h"}}},
		{"timeout as object", events.ContentTypeJSON, `{"target":{"http":{"timeout":{}}}}`, wantErr{"target.http.timeout", []string{"got object", "duration"}}},
		{"label as number", events.ContentTypeJSON, `{"labels":{"a":1}}`, wantErr{"labels.a", []string{"got number, want string"}}},
		{"jitter as string", events.ContentTypeJSON, `{"jitter":"0.1"}`, wantErr{"jitter", []string{"got string, want number"}}},
		{"catchUpMax as float", events.ContentTypeJSON, `{"catchUpMax":1.5}`, wantErr{"catchUpMax", []string{"want integer"}}},
		{"target as array", events.ContentTypeJSON, `{"target":[]}`, wantErr{"target", []string{"got array, want object"}}},
		{"expectStatus as string", events.ContentTypeJSON, `{"target":{"http":{"expectStatus":"2xx"}}}`, wantErr{"target.http.expectStatus", []string{"want array"}}},
		{"trailing value", events.ContentTypeJSON, `{"id":"x"} {"id":"y"}`, wantErr{"data", []string{"trailing content"}}},
		{"trailing brace", events.ContentTypeJSON, `{"id":"x"}}`, wantErr{"data", []string{"trailing content"}}},
		{"trailing bracket", events.ContentTypeJSON, `{"id":"x"}]`, wantErr{"data", []string{"trailing content"}}},
		{"not an object", events.ContentTypeJSON, `[1]`, wantErr{"data", []string{"must be a JSON object", "array"}}},
		{"syntax error", events.ContentTypeJSON, `{"id":}`, wantErr{"data", []string{"not valid JSON"}}},
		{"truncated", events.ContentTypeJSON, `{"id":"x"`, wantErr{"data", []string{"unexpected EOF"}}},
		{"empty", events.ContentTypeJSON, ``, wantErr{"data", []string{"is required"}}},
		{"blank", events.ContentTypeJSON, " \n", wantErr{"data", []string{"is required"}}},
		{"text content type", "text/plain", `{"id":"x"}`, wantErr{"datacontenttype", []string{"must be application/json", "text/plain"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s events.TaskSpec
			err := events.DecodeData(dataEvent(t, tt.contentType, tt.data), &s)
			if err == nil {
				t.Fatalf("DecodeData(%s) = nil error", tt.data)
			}
			assertOneMalformed(t, err, tt.want)
		})
	}
}

// TestDecodeDataNamesANegativeSequence: a negative deadLetterSeq was
// called "wrong type: got number -4, want integer", though -4 is one.
func TestDecodeDataNamesANegativeSequence(t *testing.T) {
	e := dataEvent(t, events.ContentTypeJSON, `{"id":"x","deadLetterSeq":-4}`)
	var r events.TaskRequeue
	assertOneMalformed(t, events.DecodeData(e, &r), wantErr{"deadLetterSeq", []string{"got number -4, want a non-negative integer"}})
}

// TestDecodeDataReadsTheRequeuesTaskCreatedAt: task.requeued names the
// task creation it is meant for; absent or null, it is zero (any).
func TestDecodeDataReadsTheRequeuesTaskCreatedAt(t *testing.T) {
	want := time.Date(2026, 11, 29, 9, 0, 0, 500, time.UTC)
	for data, at := range map[string]time.Time{
		`{"id":"x","deadLetterSeq":4,"taskCreatedAt":"2026-11-29T09:00:00.0000005Z"}`: want,
		`{"id":"x","taskCreatedAt":"2026-11-29T10:00:00.0000005+01:00"}`:              want,
		`{"id":"x","deadLetterSeq":4}`:                                                {},
		`{"id":"x","taskCreatedAt":null}`:                                             {},
	} {
		var r events.TaskRequeue
		if err := events.DecodeData(dataEvent(t, events.ContentTypeJSON, data), &r); err != nil || !r.TaskCreatedAt.Equal(at) {
			t.Errorf("DecodeData(%s) = %v, taskCreatedAt %v; want %v", data, err, r.TaskCreatedAt, at)
		}
	}
	// Written only when set.
	b, err := json.Marshal(events.TaskRequeue{ID: "x"})
	if err != nil || string(b) != `{"id":"x"}` {
		t.Errorf("TaskRequeue without taskCreatedAt encodes as %s (%v), want {\"id\":\"x\"}", b, err)
	}
	b, err = json.Marshal(events.TaskRequeue{ID: "x", TaskCreatedAt: want})
	if err != nil || string(b) != `{"id":"x","taskCreatedAt":"2026-11-29T09:00:00.0000005Z"}` {
		t.Errorf("TaskRequeue with taskCreatedAt encodes as %s (%v)", b, err)
	}
}

// TestDecodeDataRefusesCaseVariantsAndDuplicates: docs/events.md says field
// names are camelCase and unknown fields are refused, and the CLI refuses
// a YAML key given twice. encoding/json matches keys case-insensitively
// and lets the last of two equal keys win, so "Schedule"/"INTERVAL" were
// taken as schedule.interval, a trailing "ID" changed which task was
// created, and a second "schedule" replaced the first. Each is now refused,
// naming the path.
func TestDecodeDataRefusesCaseVariantsAndDuplicates(t *testing.T) {
	const base = `"id":"orders-health","target":{"http":{"url":"https://orders.example/healthz"}}`
	tests := []struct {
		name string
		data string
		want wantErr
	}{
		{"wrong-case object", `{` + base + `,"Schedule":{"INTERVAL":"30s"}}`, wantErr{"Schedule", []string{"unknown field", `did you mean "schedule"?`}}},
		{"wrong-case nested key", `{` + base + `,"schedule":{"INTERVAL":"30s"}}`, wantErr{"schedule.INTERVAL", []string{"unknown field", `"interval"`}}},
		{"trailing ID", `{` + base + `,"schedule":{"interval":"30s"},"ID":"other"}`, wantErr{"ID", []string{"unknown field", `"id"`}}},
		{"duplicate object", `{` + base + `,"schedule":{"interval":"1h"},"schedule":{"interval":"1m"}}`, wantErr{"schedule", []string{"given twice"}}},
		{"duplicate scalar", `{"id":"a","id":"b"}`, wantErr{"id", []string{"given twice"}}},
		{"duplicate label", `{` + base + `,"labels":{"team":"a","team":"b"}}`, wantErr{"labels.team", []string{"given twice"}}},
		{"duplicate header", `{"id":"a","target":{"http":{"url":"https://e.com","headers":{"X-A":"1","X-A":"2"}}}}`, wantErr{"target.http.headers.X-A", []string{"given twice"}}},
		{"wrong case in an array element", `{"target":{"http":{"url":"https://e.com","expectStatus":["2xx"]}},"quietHours":{"Start":"22:00"}}`, wantErr{"quietHours.Start", []string{"unknown field"}}},
		{"unknown field in a later object", `{"id":"a","bounds":{"min":"1s","mAx":"2s"}}`, wantErr{"bounds.mAx", []string{"unknown field"}}},
		{"syntax error still wins", `{"Schedule":1,"id":}`, wantErr{"data", []string{"not valid JSON"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s events.TaskSpec
			err := events.DecodeData(dataEvent(t, events.ContentTypeJSON, tt.data), &s)
			if err == nil {
				t.Fatalf("DecodeData(%s) = nil error, decoded %+v", tt.data, s)
			}
			assertOneMalformed(t, err, tt.want)
		})
	}
	// Arrays of objects name the element.
	var dl events.DeadLetter
	err := events.DecodeData(dataEvent(t, events.ContentTypeJSON, `{"taskId":"a","errors":[{"attempt":1,"error":"x"},{"attempt":2,"Error":"y"}]}`), &dl)
	if rs := events.Reasons(err); len(rs) != 1 || rs[0].Field != "errors[1].Error" {
		t.Fatalf("dead letter with errors[1].Error: %v, want errors[1].Error: unknown field", err)
	}
}

// TestDecodeDataNamesTheTimeField: a malformed time used to be reported
// against "data" (time.ParseError carries no JSON path), so a pause until
// "tomorrow" or a startAt of "noon" named no field.
func TestDecodeDataNamesTheTimeField(t *testing.T) {
	tests := []struct {
		name string
		v    any
		data string
		want wantErr
	}{
		{"startAt", new(events.TaskSpec), `{"id":"x","startAt":"noon"}`, wantErr{"startAt", []string{"RFC 3339", `got "noon"`}}},
		{"startAt without zone", new(events.TaskSpec), `{"startAt":"2026-03-02T10:00:00"}`, wantErr{"startAt", []string{"RFC 3339"}}},
		{"startAt as number", new(events.TaskSpec), `{"startAt":1772445600}`, wantErr{"startAt", []string{"wrong type: got number", "RFC 3339"}}},
		{"startAt as object", new(events.TaskSpec), `{"startAt":{"t":1}}`, wantErr{"startAt", []string{"wrong type: got object"}}},
		{"until", new(events.TaskPause), `{"until":"tomorrow"}`, wantErr{"until", []string{"RFC 3339", `got "tomorrow"`}}},
		{"at", new(events.TaskHint), `{"at":"soon"}`, wantErr{"at", []string{"RFC 3339"}}},
		{"requeue taskCreatedAt", new(events.TaskRequeue), `{"id":"x","taskCreatedAt":"2026-11-29"}`, wantErr{"taskCreatedAt", []string{"RFC 3339", `got "2026-11-29"`}}},
		{"requeue taskCreatedAt as number", new(events.TaskRequeue), `{"taskCreatedAt":1764406800}`, wantErr{"taskCreatedAt", []string{"wrong type: got number"}}},
		{"nested", new(events.DeadLetter), `{"errors":[{"at":"2026-03-02 10:00"}]}`, wantErr{"errors[0].at", []string{"RFC 3339"}}},
		{"breaker retryAt", new(events.BreakerTransition), `{"retryAt":true}`, wantErr{"retryAt", []string{"wrong type: got bool"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := events.DecodeData(dataEvent(t, events.ContentTypeJSON, tt.data), tt.v)
			reasons := events.Reasons(err)
			if !errors.Is(err, events.ErrMalformed) || len(reasons) != 1 {
				t.Fatalf("DecodeData(%s) = %v, want one malformed reason", tt.data, err)
			}
			assertFieldError(t, reasons[0], tt.want)
		})
	}
}

// TestDecodeDataReadsEscapedTimes: a time written with a JSON escape is
// valid JSON and valid RFC 3339 once unescaped, but encoding/json hands
// time.Time the raw bytes (Go issue 47353), which refused it as "data"
// with a bare parse error. Each decoder now reads the time it spells.
func TestDecodeDataReadsEscapedTimes(t *testing.T) {
	want := time.Date(2026, 3, 2, 11, 0, 0, 0, time.UTC)
	const esc = `"2026-03-02T11:00:00\u005a"`
	var spec events.TaskSpec
	if err := events.DecodeData(dataEvent(t, events.ContentTypeJSON, `{"id":"x","startAt":`+esc+`,"target":{"http":{"url":"https://e.com"}},"schedule":{"interval":"30s"}}`), &spec); err != nil || spec.StartAt == nil || !spec.StartAt.Equal(want) {
		t.Errorf("DecodeData(startAt %s) = %v, startAt %v, want %s", esc, err, spec.StartAt, want)
	}
	var p events.TaskPause
	if err := events.DecodeData(dataEvent(t, events.ContentTypeJSON, `{"until":"\u0032026-03-02T11:00:00Z"}`), &p); err != nil || p.Until == nil || !p.Until.Equal(want) {
		t.Errorf("DecodeData(until with an escape) = %v, until %v, want %s", err, p.Until, want)
	}
	var h events.TaskHint
	if err := events.DecodeData(dataEvent(t, events.ContentTypeJSON, `{"at":  `+esc+` }`), &h); err != nil || h.At == nil || !h.At.Equal(want) {
		t.Errorf("DecodeData(at %s) = %v, at %v, want %s", esc, err, h.At, want)
	}
	var dl events.DeadLetter
	if err := events.DecodeData(dataEvent(t, events.ContentTypeJSON, `{"errors":[{"at":`+esc+`}]}`), &dl); err != nil || len(dl.Errors) != 1 || !dl.Errors[0].At.Equal(want) {
		t.Errorf("DecodeData(errors[0].at %s) = %v, decoded %+v", esc, err, dl)
	}
	run := `{"dispatchId":"r:1","taskId":"r","scheduledAt":` + esc + `,"attempt":1}`
	var r events.Run
	if err := events.DecodeRun(dataEvent(t, events.ContentTypeJSON, run), &r); err != nil || !r.ScheduledAt.Equal(want) {
		t.Errorf("DecodeRun(%s) = %v, scheduledAt %v", run, err, r.ScheduledAt)
	}
	// An escaped time that is not one is still refused, naming the field.
	var bad events.TaskPause
	err := events.DecodeData(dataEvent(t, events.ContentTypeJSON, `{"until":"2026-03-02T11:00:00\u0078"}`), &bad)
	if rs := events.Reasons(err); len(rs) != 1 || rs[0].Field != "until" {
		t.Errorf("DecodeData(until ending in an escaped x) = %v, want until refused", err)
	}
}

// TestDecodersRefuseTimesOutsideYears1To9999: "9999-12-31T23:30:00-01:00"
// is valid RFC 3339 but 10000-01-01T00:30:00Z in UTC, which json.Marshal
// cannot write. Such times were accepted, and every decision holding one
// failed to encode; each decoder now refuses them, naming the field.
func TestDecodersRefuseTimesOutsideYears1To9999(t *testing.T) {
	const late, early = `"9999-12-31T23:30:00-01:00"`, `"0001-01-01T00:30:00+01:00"`
	for _, c := range []struct {
		v     any
		data  string
		field string
	}{
		{new(events.TaskSpec), `{"startAt":` + late + `}`, "startAt"},
		{new(events.TaskSpec), `{"startAt":` + early + `}`, "startAt"},
		{new(events.TaskPause), `{"until":` + late + `}`, "until"},
		{new(events.TaskHint), `{"at":` + late + `}`, "at"},
		{new(events.TaskRequeue), `{"taskCreatedAt":` + late + `}`, "taskCreatedAt"},
		{new(events.BreakerTransition), `{"retryAt":` + late + `}`, "retryAt"},
		{new(events.DeadLetter), `{"deadLetteredAt":` + late + `}`, "deadLetteredAt"},
	} {
		err := events.DecodeData(dataEvent(t, events.ContentTypeJSON, c.data), c.v)
		if rs := events.Reasons(err); !errors.Is(err, events.ErrMalformed) || len(rs) != 1 || rs[0].Field != c.field || !strings.Contains(rs[0].Rule, "9999-12-31T23:59:59Z") {
			t.Errorf("DecodeData(%s) into %T = %v, want one reason naming %s", c.data, c.v, err, c.field)
		}
	}
	// The per-run decoders (fast paths included) refuse them too.
	run := `{"dispatchId":"r:1","taskId":"r","scheduledAt":` + late + `,"attempt":1}`
	var r events.Run
	if err := events.DecodeRun(dataEvent(t, events.ContentTypeJSON, run), &r); !errors.Is(err, events.ErrMalformed) || events.Reasons(err)[0].Field != "scheduledAt" {
		t.Errorf("DecodeRun(%s) = %v, want scheduledAt refused", run, err)
	}
	dispatch := `{"dispatchId":"r:1","taskId":"r","scheduledAt":"2026-03-02T10:00:00Z","firedAt":` + early + `}`
	var d events.Dispatch
	if err := events.DecodeDispatch(dataEvent(t, events.ContentTypeJSON, dispatch), &d); !errors.Is(err, events.ErrMalformed) || events.Reasons(err)[0].Field != "firedAt" {
		t.Errorf("DecodeDispatch(%s) = %v, want firedAt refused", dispatch, err)
	}
	// The bounds themselves, and the zero time, are in range.
	for _, ok := range []string{`"0001-01-01T00:00:00Z"`, `"9999-12-31T23:59:59.999999999Z"`, `"9999-12-31T23:59:59-00:00"`} {
		var p events.TaskPause
		if err := events.DecodeData(dataEvent(t, events.ContentTypeJSON, `{"until":`+ok+`}`), &p); err != nil {
			t.Errorf("until %s: %v, want accepted", ok, err)
		}
	}
	// Validate holds a spec built in Go to the same range.
	start := time.Date(9999, 12, 31, 23, 30, 0, 0, time.FixedZone("", -3600))
	spec := events.TaskSpec{ID: "x", Target: events.Target{HTTP: &events.HTTPTarget{URL: "https://e.com"}}, Schedule: events.Schedule{Interval: events.Duration(time.Minute)}, StartAt: &start}
	if rs := events.Reasons(spec.Validate()); len(rs) != 1 || rs[0].Field != "startAt" {
		t.Errorf("Validate with startAt %s = %+v, want startAt refused", start.Format(time.RFC3339), rs)
	}
}

// TestDecodeDataRefusesInvalidUTF8: encoding/json replaces bytes that are
// not UTF-8 with U+FFFD, so a spec sent over NATS was stored altered
// (control.DecodeJSON refused it on the HTTP API and the CLI only).
func TestDecodeDataRefusesInvalidUTF8(t *testing.T) {
	const spec = "{\"specversion\":\"1.0\",\"id\":\"c1\",\"source\":\"cli\",\"type\":\"io.flyball.task.created\",\"data\":{\"id\":\"u\",\"target\":{\"http\":{\"method\":\"POST\",\"url\":\"https://e.com\",\"headers\":{\"X-Sig\":\"\xe9\"},\"body\":\"\xff\xfe\"}},\"schedule\":{\"interval\":\"30s\"}}}"
	e, err := events.Decode(nil, []byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	got, err := events.DecodeTaskSpec(e)
	rs := events.Reasons(err)
	if !errors.Is(err, events.ErrMalformed) || len(rs) != 2 {
		t.Fatalf("DecodeTaskSpec = %v (body %q), want two reasons", err, got.Target.HTTP.Body)
	}
	assertFieldError(t, rs[0], wantErr{"target.http.headers.X-Sig", []string{"not valid UTF-8", "0xE9"}})
	assertFieldError(t, rs[1], wantErr{"target.http.body", []string{"not valid UTF-8", "0xFF"}})

	for _, c := range []struct {
		data  string
		field string
	}{
		{"{\"labels\":{\"\xff\":\"a\"}}", "labels"},                                                          // a map key
		{"{\"target\":{\"http\":{\"expectStatus\":[\"2xx\",\"\\\"\xc3\"]}}}", "target.http.expectStatus[1]"}, // after an escaped quote
		{"{\"schedule\":{\"interval\":\"3\xffs\"}}", "schedule.interval"},
		{"{\"startAt\":\"\xff\"}", "startAt"},
	} {
		var s events.TaskSpec
		err := events.DecodeData(dataEvent(t, events.ContentTypeJSON, c.data), &s)
		if rs := events.Reasons(err); !errors.Is(err, events.ErrMalformed) || len(rs) != 1 || rs[0].Field != c.field || !strings.Contains(rs[0].Rule, "UTF-8") {
			t.Errorf("DecodeData(%q) = %v, want one reason naming %s", c.data, err, c.field)
		}
	}
	// U+FFFD itself, written or escaped, is valid.
	var s events.TaskSpec
	if err := events.DecodeData(dataEvent(t, events.ContentTypeJSON, `{"id":"x","labels":{"a":"\ufffd","b":"\uFFFD\"","c":"�"}}`), &s); err != nil || s.Labels["c"] != "\uFFFD" {
		t.Errorf("DecodeData with U+FFFD = %v, %+v", err, s.Labels)
	}
	// The per-run decoders (fast paths included) refuse it too.
	var d events.Dispatch
	if err := events.DecodeDispatch(dataEvent(t, events.ContentTypeJSON, "{\"dispatchId\":\"r:1\",\"taskId\":\"r\xff\"}"), &d); !errors.Is(err, events.ErrMalformed) || events.Reasons(err)[0].Field != "taskId" {
		t.Errorf("DecodeDispatch with invalid UTF-8 = %v, want taskId refused", err)
	}
	var r events.Run
	if err := events.DecodeRun(dataEvent(t, events.ContentTypeJSON, "{\"taskId\":\"r\",\"request\":{\"headers\":{\"a\":\"\\n\xff\"}}}"), &r); !errors.Is(err, events.ErrMalformed) || events.Reasons(err)[0].Field != "request.headers.a" {
		t.Errorf("DecodeRun with invalid UTF-8 = %v, want request.headers.a refused", err)
	}
}

func TestDecodeDataAccepts(t *testing.T) {
	for _, ct := range []string{"", events.ContentTypeJSON, events.ContentTypeJSON + "; charset=utf-8", "application/vnd.flyball.task+json"} {
		var s events.TaskSpec
		if err := events.DecodeData(dataEvent(t, ct, minimal+"\n"), &s); err != nil {
			t.Errorf("DecodeData with content type %q = %v", ct, err)
		}
		if s.ID != "x" || s.Schedule.Interval.D() != 30*time.Second {
			t.Errorf("decoded %+v", s)
		}
	}
	// Map keys are data: keys differing in case are distinct; an escaped
	// key is the key it spells.
	var l events.TaskSpec
	if err := events.DecodeData(dataEvent(t, events.ContentTypeJSON, `{"\u0069d":"x","labels":{"env":"a","Env":"b"},"target":{"http":{"url":"https://e.com"}},"schedule":{"interval":"30s"}}`), &l); err != nil || l.ID != "x" || len(l.Labels) != 2 {
		t.Errorf("DecodeData with labels env/Env = %v, decoded %+v", err, l)
	}
	// null leaves optional values unset, durations included.
	var s events.TaskSpec
	if err := events.DecodeData(dataEvent(t, events.ContentTypeJSON, `{"id":"x","job":null,"startAt":null,"target":{"http":{"url":"https://e.com","timeout":null}},"schedule":{"interval":"30s"}}`), &s); err != nil {
		t.Errorf("DecodeData with nulls = %v", err)
	}
}

func TestDecodeTaskSpec(t *testing.T) {
	t.Run("subject must name the task", func(t *testing.T) {
		e := newEvent(t, events.TypeTaskCreated, "other", json.RawMessage(minimal))
		_, err := events.DecodeTaskSpec(e)
		if !errors.Is(err, events.ErrMalformed) {
			t.Fatalf("DecodeTaskSpec = %v, want ErrMalformed", err)
		}
		r := events.Reasons(err)
		if len(r) != 1 {
			t.Fatalf("Reasons = %+v", r)
		}
		assertFieldError(t, r[0], wantErr{"subject", []string{`must equal data.id "x"`, `"other"`}})
	})
	t.Run("no subject is fine", func(t *testing.T) {
		s, err := events.DecodeTaskSpec(newEvent(t, events.TypeTaskCreated, "", json.RawMessage(minimal)))
		if err != nil {
			t.Fatal(err)
		}
		if s.Retry == nil || s.Target.HTTP.Method != http.MethodGet {
			t.Errorf("spec not normalized: %+v", s)
		}
	})
	t.Run("invalid spec reports every error", func(t *testing.T) {
		e := newEvent(t, events.TypeTaskCreated, "x", json.RawMessage(`{"id":"x","target":{},"schedule":{"interval":"200ms"}}`))
		_, err := events.DecodeTaskSpec(e)
		var fields []string
		for _, r := range events.Reasons(err) {
			fields = append(fields, r.Field)
		}
		if want := []string{"target", "schedule.interval"}; !slices.Equal(fields, want) {
			t.Errorf("fields = %q, want %q", fields, want)
		}
	})
	t.Run("undecodable data", func(t *testing.T) {
		_, err := events.DecodeTaskSpec(newEvent(t, events.TypeTaskCreated, "x", json.RawMessage(`{"id":"x","nope":1}`)))
		if r := events.Reasons(err); len(r) != 1 || r[0].Field != "nope" {
			t.Errorf("Reasons = %+v", r)
		}
	})
}

func TestNewAndMarshal(t *testing.T) {
	a, err := events.New(events.TypeTaskDeleted, "src", "x", events.TaskRef{ID: "x"}, at, "")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := events.New(events.TypeTaskDeleted, "src", "x", events.TaskRef{ID: "x"}, at, "")
	if a.ID() == "" || a.ID() == b.ID() {
		t.Errorf("empty ids must become distinct random ids, got %q and %q", a.ID(), b.ID())
	}

	e := newEvent(t, events.TypeRunSucceeded, "x", events.Run{DispatchID: events.DispatchID("x", at), TaskID: "x"})
	want, _ := events.Encode(e)
	got, err := events.Marshal(events.TypeRunSucceeded, "flyball/test", "x", events.Run{DispatchID: events.DispatchID("x", at), TaskID: "x"}, at, "ev-1")
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("Marshal = %s, %v; want %s", got, err, want)
	}

	if _, err := events.New("", "src", "", nil, at, "id"); err == nil {
		t.Error("New with an empty type: want an error")
	}
	if _, err := events.New(events.TypeTaskCreated, "src", "", func() {}, at, "id"); err == nil {
		t.Error("New with unencodable data: want an error")
	}
	if _, err := events.Marshal("", "src", "", nil, at, "id"); err == nil {
		t.Error("Marshal with an empty type: want an error")
	}
}

func TestDispatchID(t *testing.T) {
	if got := events.DispatchID("poll", time.UnixMilli(1767225600123)); got != "poll:1767225600123" {
		t.Errorf("DispatchID = %q", got)
	}
}

func TestReasons(t *testing.T) {
	if events.Reasons(nil) != nil {
		t.Error("Reasons(nil) != nil")
	}
	fe := &events.FieldError{Field: "id", Rule: "is required"}
	if got := events.Reasons(fe); len(got) != 1 || got[0] != *fe {
		t.Errorf("Reasons(FieldError) = %+v", got)
	}
	wrapped := errors.Join(errors.New("context"), fe)
	if got := events.Reasons(wrapped); len(got) != 1 || got[0] != *fe {
		t.Errorf("Reasons(wrapped FieldError) = %+v", got)
	}
	if got := events.Reasons(errors.New("boom")); len(got) != 1 || got[0] != (events.FieldError{Rule: "boom"}) {
		t.Errorf("Reasons(plain) = %+v", got)
	}
	ve := &events.ValidationError{Errors: []events.FieldError{{Field: "a", Rule: "x"}, {Rule: "whole"}}}
	got := events.Reasons(ve)
	got[0].Rule = "changed"
	if ve.Errors[0].Rule != "x" {
		t.Error("Reasons must return a copy")
	}
	if ve.Error() != "a: x; whole" {
		t.Errorf("Error() = %q", ve.Error())
	}
	if !errors.Is(ve, events.ErrMalformed) {
		t.Error("ValidationError must match ErrMalformed")
	}
	b, _ := json.Marshal(events.FieldError{Field: "id", Rule: "r"})
	if string(b) != `{"field":"id","reason":"r"}` {
		t.Errorf("FieldError JSON = %s", b)
	}
}

func TestPeekAttributes(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 300)
	cases := []struct {
		name    string
		header  map[string][]string
		body    string
		typ, id string
	}{
		{"structured, old specversion", nil, `{"specversion":"0.3","type":"io.flyball.task.created","id":"c-1"}`, "io.flyball.task.created", "c-1"},
		{"binary, no source", map[string][]string{"Ce-Specversion": {"1.0"}, "Ce-Type": {"io.flyball.task.paused"}, "Ce-Id": {"c-2"}}, `{}`, "io.flyball.task.paused", "c-2"},
		{"id not a string", nil, `{"type":"t","id":42}`, "t", ""},
		{"not JSON", nil, `{nope`, "", ""},
		{"long id", nil, `{"id":"` + long + `"}`, "", long[:256] + "…"},
		// What the envelope holds ambiguously is not read: the answer's
		// Nats-Msg-Id is rejected:<id>, and another command's id must
		// not be taken for it.
		{"id and ID", nil, `{"type":"t","id":"c-4","ID":"c"}`, "t", "c-4"},
		{"only ID", nil, `{"TYPE":"t","ID":"c"}`, "", ""},
		{"id given twice", nil, `{"id":"a","id":"b"}`, "", ""},
		{"id not UTF-8", nil, "{\"id\":\"c\xff\"}", "", ""},
		{"escaped key", nil, `{"\u0069d":"c-5"}`, "", "c-5"},
		{"binary, ce-id twice", map[string][]string{"ce-specversion": {"1.0"}, "ce-id": {"a", "b"}}, ``, "", ""},
		{"binary, ce-id in two cases", map[string][]string{"ce-specversion": {"1.0"}, "ce-id": {"a"}, "Ce-Id": {"b"}}, ``, "", ""},
		{"binary, ce-id not UTF-8", map[string][]string{"ce-specversion": {"1.0"}, "ce-id": {"c\xff"}}, ``, "", ""},
	}
	for _, c := range cases {
		typ, id := events.PeekAttributes(c.header, []byte(c.body))
		if typ != c.typ || id != c.id {
			t.Errorf("%s: got (%q, %q), want (%q, %q)", c.name, typ, id, c.typ, c.id)
		}
	}
}
