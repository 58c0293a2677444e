package events

// Differential tests: the fast paths must agree with the reference codec
// (reference_test.go) on every input: the same accept/reject decision, the
// same error text, equal events, byte-identical Marshal output.

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
)

var diffAt = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

const diffSpec = `{"id":"x","target":{"http":{"url":"https://example.com/"}},"schedule":{"interval":"30s"}}`

// diffPayloads are data values of every type the catalog carries, plus the
// odd ones SetData treats specially (nil, []byte, typed nil, raw JSON) and
// strings that need escaping.
func diffPayloads() []any {
	at := diffAt
	later := at.Add(90 * time.Second)
	var spec TaskSpec
	if err := json.Unmarshal([]byte(diffSpec), &spec); err != nil {
		panic(err)
	}
	odd := "<b>&amp;</b> \u2028\u2029 \x01\x1f\t\n\r \"q\" \\ é \xff\xfe end"
	return []any{
		nil,
		[]byte(nil),
		[]byte{},
		[]byte(`{"id":"x"}`),
		[]byte("\x00\xff binary"),
		json.RawMessage(diffSpec),
		json.RawMessage(" {\n \"a\" : [1, 2, \"<>&\"] }\n"),
		json.RawMessage(`null`),
		(*Run)(nil),
		map[string]any{"html": "<script>&</script>", "ls": "\u2028", "bad": "\xff", "n": 1.5e300},
		[]string{odd},
		odd,
		42,
		true,
		spec,
		TaskRef{ID: "x", Reason: odd},
		TaskPause{ID: "x", Until: &later, Reason: "maintenance"},
		TaskHint{ID: "x", Interval: Duration(45 * time.Second), At: &later, TTL: Duration(time.Hour)},
		TaskRequeue{ID: "x", DeadLetterSeq: 7},
		TaskRequeue{ID: "x", DeadLetterSeq: 7, Reason: "fixed", TaskCreatedAt: at.Add(-time.Hour)},
		TaskAccepted{ID: "x", Command: TypeTaskCreated, CommandID: "c-1", NextRunAt: &later, Source: "adaptive", Trail: []string{"a -> b"}, SpecRevision: 3},
		TaskRejected{ID: "x", Command: TypeTaskCreated, Reasons: []FieldError{{Field: "schedule.interval", Rule: "must be >= 1s, got 200ms"}}},
		Dispatch{DispatchID: DispatchID("x", at), TaskID: "x", ScheduledAt: at, FiredAt: later, Source: "adaptive", Reason: "requeue", TaskCreatedAt: at.Add(-time.Hour)},
		Run{
			DispatchID: DispatchID("x", at), TaskID: "x", ScheduledAt: at, Attempt: 2, StartedAt: at, FinishedAt: later,
			Duration: Duration(1500 * time.Millisecond), Status: 503, Body: odd, BodyTruncated: true, Fingerprint: "sha256:00",
			Request: &RequestRecord{Method: "POST", URL: "https://e.com/?a=1&b=<2>", Headers: map[string]string{"Authorization": "[redacted]"}},
			Error:   "503 Service Unavailable", ErrorKind: ErrorTransient, RetryIn: Duration(10 * time.Second), Trail: []string{"x"},
			TaskCreatedAt: at.Add(-time.Hour),
			Dispatch:      &Dispatch{DispatchID: "x:1", TaskID: "x", ScheduledAt: at, FiredAt: at, TaskCreatedAt: at.Add(-time.Hour)},
		},
		DeadLetter{
			TaskID: "x", Reason: DeadLetterMaxAttempts, Dispatch: Dispatch{DispatchID: "x:1", TaskID: "x"}, Attempts: 5,
			Errors: []AttemptError{{Attempt: 1, At: at, Status: 500, Error: "boom"}}, FirstFailedAt: at, DeadLetteredAt: later,
		},
		BreakerTransition{Key: "host:e.com", From: BreakerClosed, To: BreakerOpen, Failures: 3, RetryAt: &later, OpenDelay: Duration(5 * time.Second), At: at},
		Heartbeat{Kind: "timer", Name: "timer-1", PID: 1, Host: "h", Version: "v1", Status: RuntimeOnline, StartedAt: at, LastBeat: later, Interval: Duration(5 * time.Second)},
		// Unencodable: both must fail the same way.
		json.RawMessage(`{nope`),
		math.Inf(1),
		func() {},
		make(chan int),
	}
}

// diffAttrs are attribute values with everything that needs care: spaces
// to trim, escapes, HTML characters, U+2028, invalid UTF-8, and sources the
// URL parser rewrites or refuses.
var (
	diffTypes    = []string{TypeRunSucceeded, " " + TypeRunDue + "\t", "", " ", "io.flyball.<x>&\u2028\xff\"\\\n"}
	diffSources  = []string{"flyball/timer/timer-1", "flyball/test", "/abs/path", "https://flyball.example/x?y=1#f", "a b", "%41", "%zz", ":bad", "", " ", "#", "?", "//host/p", "///p", "a:b", "x/a:b", "\u00a0", "ü/<&>", "\x7f", "./x", "*", "mailto:x@y"}
	diffSubjects = []string{"", "x", "  x  ", " ", "poll.prices", "<&>\u2029\x00"}
	diffIDs      = []string{"ev-1", " ev-2 ", " ", "\t", "x:1772366400000", "é\xff\"\\<>&\u2028"}
	diffTimes    = []time.Time{diffAt, {}, time.Date(2026, 3, 1, 13, 0, 0, 0, time.FixedZone("CET", 3600)), time.Unix(0, 0), time.Date(12000, 1, 1, 0, 0, 0, 1, time.UTC)}
)

func TestMarshalMatchesReference(t *testing.T) {
	n := 0
	for _, data := range diffPayloads() {
		for _, typ := range diffTypes {
			for _, src := range diffSources {
				for i, subject := range diffSubjects {
					id := diffIDs[(n+i)%len(diffIDs)]
					at := diffTimes[(n+i)%len(diffTimes)]
					checkMarshal(t, typ, src, subject, data, at, id)
					n++
				}
			}
		}
	}
	t.Logf("%d combinations", n)
}

func checkMarshal(t *testing.T, typ, source, subject string, data any, at time.Time, id string) {
	t.Helper()
	got, gotErr := Marshal(typ, source, subject, data, at, id)
	want, wantErr := refMarshal(typ, source, subject, data, at, id)
	if !sameMarshalError(gotErr, wantErr) {
		t.Fatalf("Marshal(%q, %q, %q, %T, %v, %q) error = %v, want %v", typ, source, subject, data, at, id, gotErr, wantErr)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Marshal(%q, %q, %q, %T, %v, %q) =\n%q\nwant\n%q", typ, source, subject, data, at, id, got, want)
	}
}

// sameMarshalError compares errors whose text may come from the sdk's
// ValidationError, a map printed in random order: compare its entries.
func sameMarshalError(got, want error) bool {
	if got == nil || want == nil {
		return got == nil && want == nil
	}
	var gv, wv event.ValidationError
	if errors.As(got, &gv) != errors.As(want, &wv) {
		return false
	}
	if gv == nil {
		return got.Error() == want.Error()
	}
	if len(gv) != len(wv) {
		return false
	}
	for k, v := range wv {
		if gv[k] == nil || gv[k].Error() != v.Error() {
			return false
		}
	}
	prefix := func(err error) string { s, _, _ := strings.Cut(err.Error(), ": "); return s }
	return prefix(got) == prefix(want)
}

func TestMarshalRandomIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 3 {
		b, err := Marshal(TypeRunDue, "flyball/timer", "x", Dispatch{TaskID: "x"}, diffAt, "")
		if err != nil {
			t.Fatal(err)
		}
		var m struct{ ID string }
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if len(m.ID) != 36 || seen[m.ID] {
			t.Fatalf("id %q: want a fresh UUID", m.ID)
		}
		seen[m.ID] = true
		// The rest of the message is what the reference renders for that id.
		checkMarshal(t, TypeRunDue, "flyball/timer", "x", Dispatch{TaskID: "x"}, diffAt, m.ID)
	}
}

// diffBodies are structured-mode bodies that probe each rule of the fast
// path: what it takes, and what it must leave to the sdk.
func diffBodies() [][]byte {
	var bodies [][]byte
	for _, data := range diffPayloads() {
		for _, src := range diffSources[:6] {
			if b, err := refMarshal(TypeTaskCreated, src, "x", data, diffAt, "ev-1"); err == nil {
				bodies = append(bodies, b)
			}
		}
	}
	head := `"specversion":"1.0","id":"a","source":"flyball/x","type":"io.flyball.x"`
	for _, s := range []string{
		``, ` `, `{nope`, `[1]`, `"s"`, `null`, `{}`, `{} `, `{"a":1}{}`, `{"specversion":"1.0"}x`,
		`{` + head + `}`,
		` {` + head + `} `,
		`{` + head + `,"data":{"a":1}}`,
		`{` + head + `,"data": {"a" : 1} , "subject":"s"}`,
		`{"data" :	[1, 2] ,` + head + `}`,
		`{` + head + `,"data":null}`,
		`{` + head + `,"data":"text"}`,
		`{` + head + `,"data":-0.5e+10}`,
		`{` + head + `,"data":01}`,
		`{` + head + `,"data":1.}`,
		`{` + head + `,"data":[1,]}`,
		`{` + head + `,"data":{"a":1,}}`,
		`{` + head + `,"data":"\u00zz"}`,
		`{` + head + `,"data":"\ud800"}`,
		`{` + head + `,"data":"tab	in"}`,
		`{` + head + `,"data":tru}`,
		`{` + head + `,"data":1e400}`,
		`{` + head + `,"data":[-1E+999]}`,
		`{` + head + `,"data":[0.5e39, 0e99999, 0.1e-99]}`,
		`{` + head + `,"data":[0.5e38, -0.5e39, 5e39]}`,
		`{` + head + `,"data":0.5e39}`,
		`{` + head + `,"data":{"a":1e-400,"b":-1.5e3,"c":-0e0}}`,
		`{` + head + `,"data":-` + strings.Repeat("9", 400) + `}`,
		`{` + head + `,"data":` + strings.Repeat("9", 400) + `.5}`,
		`{` + head + `,"data":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`,
		`{` + head + `,"datacontenttype":"application/json","data":{"a":1}}`,
		`{"datacontenttype":"application/json",` + head + `,"data":{"a":1}}`,
		`{` + head + `,"data":{"a":1},"datacontenttype":"application/json; charset=utf-8"}`,
		`{` + head + `,"datacontenttype":"text/json","data":[]}`,
		`{` + head + `,"datacontenttype":"application/cloudevents+json","data":[]}`,
		`{` + head + `,"datacontenttype":"Application/JSON","data":[]}`,
		`{` + head + `,"datacontenttype":"Application/JSON","data":"{nope"}`,
		`{` + head + `,"datacontenttype":"TEXT/JSON","data":"[1]"}`,
		`{` + head + `,"datacontenttype":"Application/JSON","data":""}`,
		`{` + head + `,"datacontenttype":"application/vnd.x+json","data":{}}`,
		`{` + head + `,"datacontenttype":"text/plain","data":"hi"}`,
		`{` + head + `,"datacontenttype":"text/plain"}`,
		`{` + head + `,"datacontenttype":"","data":{}}`,
		`{"datacontenttype":"",` + head + `,"data":{}}`,
		`{` + head + `,"datacontenttype":"not a type"}`,
		`{` + head + `,"datacontenttype":"application/json","datacontenttype":"application/json"}`,
		`{` + head + `,"dataschema":"https://schemas.example/x"}`,
		`{` + head + `,"dataschema":"relative/x"}`,
		`{` + head + `,"dataschema":"%zz"}`,
		`{` + head + `,"dataschema":""}`,
		`{"dataschema":"https://s/x",` + head + `}`,
		`{` + head + `,"subject":""}`,
		`{` + head + `,"subject":" "}`,
		`{` + head + `,"subject":"a\"b"}`,
		`{` + head + `,"time":""}`,
		`{` + head + `,"time":"2026-03-01T12:00:00+01:00"}`,
		`{` + head + `,"time":"2026-03-01T12:00:00.123456789Z"}`,
		`{` + head + `,"time":"yesterday"}`,
		`{` + head + `,"time":5}`,
		`{` + head + `,"time":null}`,
		`{"id":"","specversion":"1.0","source":"flyball/x","type":"io.flyball.x"}`,
		`{"id":" ","specversion":"1.0","source":"flyball/x","type":"io.flyball.x"}`,
		`{"id":null,"specversion":"1.0","source":"flyball/x","type":"io.flyball.x"}`,
		`{"id":"a","specversion":"1.0","source":"","type":"io.flyball.x"}`,
		`{"id":"a","specversion":"1.0","source":" ","type":"io.flyball.x"}`,
		`{"id":"a","specversion":"1.0","source":"#","type":"io.flyball.x"}`,
		`{"id":"a","specversion":"1.0","source":":bad","type":"io.flyball.x"}`,
		`{"id":"a","specversion":"1.0","source":"a b","type":"io.flyball.x"}`,
		`{"id":"a","specversion":"1.0","source":"https://h","type":"io.flyball.x"}`,
		`{"id":"a","specversion":"1.0","source":"s","type":"com.example"}`,
		`{"id":"a","specversion":"1.0","source":"s","type":" "}`,
		`{"id":"a","specversion":"1.0","source":"s"}`,
		`{"id":"a","specversion":"1.0","type":"io.flyball.x"}`,
		`{"specversion":"1.0","specversion":"1.0","id":"a","source":"s","type":"io.flyball.x"}`,
		`{"specversion":"0.3","id":"a","source":"s","type":"io.flyball.x"}`,
		`{"specversion":1,"id":"a","source":"s","type":"io.flyball.x"}`,
		`{"specversion":"1.\u0030","id":"a","source":"s","type":"io.flyball.x"}`,
		`{"Specversion":"1.0","id":"a","source":"s","type":"io.flyball.x"}`,
		`{"specversion":"1.0","SPECVERSION":"0.3","id":"a","source":"s","type":"io.flyball.x"}`,
		`{"sp\u0065cversion":"1.0","id":"a","source":"s","type":"io.flyball.x"}`,
		`{"id":"a","id":"b","specversion":"1.0","source":"s","type":"io.flyball.x"}`,
		`{` + head + `,"":1,"id":"b"}`,
		`{` + head + `,"ext":"v"}`,
		`{` + head + `,"ext":1}`,
		`{"ext":"v",` + head + `}`,
		`{` + head + `,"Ext":"v"}`,
		`{` + head + `,"data_base64":"eyJpZCI6IngifQ=="}`,
		`{"data_base64":1,` + head + `}`,
		`{` + head + `,"schemaurl":"x"}`,
		`{` + head + `,"datacontentencoding":"base64"}`,
		`{` + head + `,"id":"\u0061"}`,
		"{" + head + `,"subject":"\xff\xfe"}`,
		"{" + head + `,"subject":"\x7f"}`,
		"{" + head + `,"subject":"a` + "\x01" + `"}`,
		"{\n\t" + head + ",\r\n\"data\":\n{}\n}\n",
	} {
		bodies = append(bodies, []byte(s))
	}
	return bodies
}

func TestDecodeMatchesReference(t *testing.T) {
	for _, body := range diffBodies() {
		checkDecode(t, nil, body)
	}
}

func TestBinaryDecodeMatchesReference(t *testing.T) {
	for _, src := range diffSources {
		for _, ct := range []string{"", ContentTypeJSON, "text/plain", "application/vnd.x+json", "bad type", " "} {
			for _, id := range diffIDs {
				hdr := map[string][]string{
					"ce-specversion": {"1.0"}, "ce-id": {id}, "ce-type": {TypeRunDue},
					"ce-source": {src}, "ce-subject": {" "}, "content-type": {ct},
				}
				checkDecode(t, hdr, []byte(diffSpec))
			}
		}
	}
}

func checkDecode(t *testing.T, hdr map[string][]string, body []byte) {
	t.Helper()
	got, gotErr := Decode(hdr, body)
	want, wantErr := refDecode(hdr, body)
	if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
		t.Fatalf("Decode(%q) error = %v, want %v", body, gotErr, wantErr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Decode(%q):\n%s", body, eventDiff(got, want))
	}
	if gotErr == nil {
		checkDecodeData(t, got, want)
	}
}

// eventDiff names the attributes that differ, for a readable failure.
func eventDiff(got, want Event) string {
	var b strings.Builder
	field := func(name string, g, w any) {
		if !reflect.DeepEqual(g, w) {
			b.WriteString(name + ": got " + strings.TrimSpace(jsonString(g)) + ", want " + strings.TrimSpace(jsonString(w)) + "\n")
		}
	}
	if got.Context == nil || want.Context == nil {
		return "context: got " + jsonString(got.Context != nil) + ", want " + jsonString(want.Context != nil)
	}
	field("id", got.ID(), want.ID())
	field("type", got.Type(), want.Type())
	field("source", got.Source(), want.Source())
	field("subject", got.Subject(), want.Subject())
	field("time", got.Time(), want.Time())
	field("datacontenttype", got.DataContentType(), want.DataContentType())
	field("dataschema", got.DataSchema(), want.DataSchema())
	field("extensions", got.Extensions(), want.Extensions())
	field("data", string(got.Data()), string(want.Data()))
	field("database64", got.DataBase64, want.DataBase64)
	field("context", got.Context, want.Context)
	return b.String()
}

func jsonString(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// checkDecodeData decodes the data of two equal events into each payload
// type with the new and the reference DecodeData.
func checkDecodeData(t *testing.T, got, want Event) {
	t.Helper()
	for _, newV := range []func() any{
		func() any { return new(TaskSpec) },
		func() any { return new(Run) },
		func() any { return new(Dispatch) },
		func() any { return new(TaskRef) },
		func() any { return new(map[string]any) },
	} {
		g, w := newV(), newV()
		gotErr, wantErr := DecodeData(got, g), refDecodeData(want, w)
		if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
			t.Fatalf("DecodeData(%q) into %T = %v, want %v", got.Data(), g, gotErr, wantErr)
		}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("DecodeData(%q) into %T = %+v, want %+v", got.Data(), g, g, w)
		}
	}
}

func TestDecodeDataMatchesReference(t *testing.T) {
	for _, ct := range []string{"", ContentTypeJSON, ContentTypeJSON + ";charset=utf-8", "application/vnd.x+json", "application/vnd.x+json; a=b", "text/plain", "a;b+json", "application/jsonx"} {
		for _, data := range []string{"", " ", diffSpec, diffSpec + " \n", diffSpec + "}", `{"id":5}`, `{"nope":1}`, `[1]`, `{"id":`, `null`} {
			e := Event{Context: &event.EventContextV1{ID: "a", Type: TypeTaskCreated}}
			if ct != "" {
				e.SetDataContentType(ct)
			}
			e.DataEncoded = []byte(data)
			checkDecodeData(t, e, e)
		}
	}
}

// TestPlainPathRendersUnchanged backs isPlainPath's promise: the sources
// it lets through render as they are written.
func TestPlainPathRendersUnchanged(t *testing.T) {
	for _, s := range []string{"flyball/timer/timer-1", "a", "/", "/a/b/", ".", "..", "./x", "../x", "a/../b", "a//b", "/a//b", "-", "_", "~", "a.b.c", "1", "1/2", "x~y_z-w"} {
		if !isPlainPath(s) {
			t.Fatalf("isPlainPath(%q) = false", s)
		}
		checkPlainPath(t, s)
	}
	for _, s := range []string{"", "//h", "//", "a b", "a:b", "a?b", "a#b", "a%41", "ü", "*"} {
		if isPlainPath(s) {
			t.Fatalf("isPlainPath(%q) = true", s)
		}
	}
}

func checkPlainPath(t *testing.T, s string) {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil || u.String() != s {
		t.Fatalf("url.Parse(%q) = %v, %v: a plain path must render unchanged", s, u, err)
	}
}

// FuzzDecodeFastPathMatchesSDK compares Decode with the reference (sdk)
// path on arbitrary bodies, structured mode and binary mode: the same
// decision, the same error text, equal events, equal decoded data.
func FuzzDecodeFastPathMatchesSDK(f *testing.F) {
	for _, b := range diffBodies() {
		f.Add(b, false, "flyball/x", ContentTypeJSON)
	}
	f.Add([]byte(diffSpec), true, "a b", "text/plain")
	f.Add([]byte(diffSpec), true, "#", "")
	f.Fuzz(func(t *testing.T, body []byte, binary bool, source, contentType string) {
		if len(body) > 4096 {
			return
		}
		var hdr map[string][]string
		if binary {
			hdr = map[string][]string{
				"ce-specversion": {"1.0"}, "ce-id": {"ev-1"}, "ce-type": {TypeRunDue},
				"ce-source": {source}, "content-type": {contentType},
			}
		}
		checkDecode(t, hdr, body)
	})
}

// FuzzDecodeWellFormedMatchesSDK builds structured-mode bodies from
// attribute values, data and a member order, so that most inputs are
// events the fast path takes, and compares Decode with the reference.
// Values go in verbatim between quotes: the fuzzer can still add escapes,
// control bytes or quotes that break the JSON.
func FuzzDecodeWellFormedMatchesSDK(f *testing.F) {
	f.Add("ev-1", "flyball/x", TypeRunSucceeded, "poll", "", "2026-03-01T12:00:00.185Z", []byte(diffSpec), uint64(0), uint8(0))
	f.Add("a", "https://h/p?q#f", "io.flyball.x", "", ContentTypeJSON, "", []byte(` [1, -2.5e3, 0.5e39] `), uint64(7), uint8(3))
	f.Add("a", "s", "io.flyball.x", "s", "text/json; x=y", "2026-03-01T12:00:00+01:00", []byte(`"x"`), uint64(12345), uint8(255))
	f.Fuzz(func(t *testing.T, id, source, typ, subject, dct, tm string, data []byte, order uint64, shape uint8) {
		if len(data) > 4096 {
			return
		}
		members := []string{`"specversion":"1.0"`, `"id":"` + id + `"`, `"source":"` + source + `"`, `"type":"` + typ + `"`}
		if subject != "" || shape&1 != 0 {
			members = append(members, `"subject":"`+subject+`"`)
		}
		if dct != "" || shape&2 != 0 {
			members = append(members, `"datacontenttype":"`+dct+`"`)
		}
		if tm != "" || shape&4 != 0 {
			members = append(members, `"time":"`+tm+`"`)
		}
		if len(data) > 0 || shape&8 != 0 {
			members = append(members, `"data":`+string(data))
		}
		// A permutation of the members chosen by order.
		for i := len(members) - 1; i > 0; i-- {
			j := int(order % uint64(i+1))
			order /= uint64(i + 1)
			members[i], members[j] = members[j], members[i]
		}
		sep := ","
		if shape&16 != 0 {
			sep = " ,\n\t"
		}
		checkDecode(t, nil, []byte("{"+strings.Join(members, sep)+"}"))
	})
}

// FuzzMarshalMatchesSDK compares Marshal with the reference (sdk) path on
// arbitrary attributes and data: the same bytes, or the same error.
func FuzzMarshalMatchesSDK(f *testing.F) {
	f.Add(TypeRunDue, "flyball/timer/timer-1", "poll", "ev-1", []byte(diffSpec), uint8(0), int64(1772366400123456789))
	f.Add(" io.flyball.x ", "a b", " s ", " ", []byte("<&>\u2028\xff"), uint8(1), int64(0))
	f.Add("", "", "", "", []byte(nil), uint8(2), int64(-1))
	f.Add("t", ":x", "", "i", []byte("{nope"), uint8(3), int64(math.MaxInt64))
	f.Add("t", "//h/p", "s", "i", []byte("x"), uint8(4), int64(1))
	f.Fuzz(func(t *testing.T, typ, source, subject, id string, payload []byte, kind uint8, unixNano int64) {
		if id == "" {
			id = "ev" // an empty id is random: TestMarshalRandomIDs covers it
		}
		at := time.Unix(0, unixNano)
		if kind&0x80 != 0 {
			at = time.Time{}
		}
		var data any
		switch kind % 8 {
		case 0:
			data = json.RawMessage(payload)
		case 1:
			data = string(payload)
		case 2:
			data = payload
		case 3:
			data = nil
		case 4:
			data = Run{TaskID: string(payload), Body: string(payload), Trail: []string{source}}
		case 5:
			data = map[string]string{string(payload): subject}
		case 6:
			data = TaskRef{ID: id, Reason: string(payload)}
		case 7:
			data = []any{typ, source, subject, payload}
		}
		checkMarshal(t, typ, source, subject, data, at, id)
		if isPlainPath(source) {
			checkPlainPath(t, source)
		}
	})
}

// FuzzDecodeDataMatchesReference compares DecodeData with the reference on
// arbitrary data and content types.
func FuzzDecodeDataMatchesReference(f *testing.F) {
	for _, s := range []string{
		diffSpec, `{"id":5}`, `{"nope":1}`, `[1]`, `{"id":"x"}}`, ` `, `{"schedule":{"interval":5}}`,
		`{"Schedule":{"INTERVAL":"30s"}}`, `{"id":"a","ID":"b"}`, `{"schedule":{},"schedule":{}}`, `{"labels":{"a":"1","a":"2"}}`, `{"x":[{"a":1,"a":2}]}`,
		`{"startAt":"noon"}`, `{"startAt":"9999-12-31T23:30:00-01:00"}`, `{"startAt":5}`,
		`{"startAt":"2026-03-02T11:00:00\u005a"}`, `{"startAt":"\u0032026-03-02T11:00:00Z","id":"x"} `, `{"startAt":"2026-03-02T11:00:00\u0078"}`,
	} {
		f.Add([]byte(s), ContentTypeJSON)
	}
	f.Add([]byte(diffSpec), "application/vnd.x+json;a=b")
	f.Add([]byte(diffSpec), "text/plain")
	f.Fuzz(func(t *testing.T, data []byte, contentType string) {
		if len(data) > 4096 {
			return
		}
		e := Event{Context: &event.EventContextV1{ID: "a", Type: TypeTaskCreated}}
		e.SetDataContentType(contentType)
		e.DataEncoded = data
		checkDecodeData(t, e, e)
	})
}

// TestScannerMatchesJSONValid checks the fast path's scanner against
// json.Valid on the bodies above and their prefixes: it may give up on
// valid input, never accept invalid input.
func TestScannerMatchesJSONValid(t *testing.T) {
	for _, body := range diffBodies() {
		for i := range len(body) + 1 {
			checkScanner(t, body[:i])
		}
	}
}

func checkScanner(t *testing.T, b []byte) {
	t.Helper()
	s := jsonScanner{b: b}
	ok := s.value(0)
	s.ws()
	ok = ok && s.i == len(b)
	if valid := json.Valid(b); ok && !valid {
		t.Fatalf("scanner accepts %q, json.Valid refuses it", b)
	} else if !ok && valid && !deep(b) {
		t.Fatalf("scanner refuses %q, json.Valid accepts it", b)
	}
}

// deep reports nesting beyond what the scanner takes on.
func deep(b []byte) bool {
	return bytes.Count(b, []byte("[")) > maxScanDepth || bytes.Count(b, []byte("{")) > maxScanDepth
}

// FuzzScannerMatchesJSONValid compares the scanner with json.Valid.
func FuzzScannerMatchesJSONValid(f *testing.F) {
	for _, b := range diffBodies() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkScanner(t, b)
	})
}
