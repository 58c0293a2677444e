package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/flyballhq/flyball/pkg/events"
)

// maxFuzzInput bounds fuzz inputs: larger ones reach no new code, and the
// fuzzer's minimization of a new input is quadratic in its size.
const maxFuzzInput = 2048

// TestMain bounds the minimization of new fuzz inputs (60s by default) so
// that it cannot outlast a short -fuzztime: when the deadline lands during a
// minimization, go test can fail with "context deadline exceeded" and no
// crasher. An explicit -fuzzminimizetime still wins: m.Run parses the flags
// after this default is set.
func TestMain(m *testing.M) {
	if err := flag.Set("test.fuzzminimizetime", "2s"); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

// fuzzSpecs seed both targets: valid specs, the documented edge cases and
// specs that used to stop validating once normalized.
var fuzzSpecs = []string{
	minimal,
	`{"id":"nightly","target":{"nats":{"subject":"reports.build","timeout":"10s"}},"schedule":{"cron":"0 0 9 * * *","timezone":"Europe/Berlin"}}`,
	`{"id":"full","job":"j","labels":{"team":"core"},"target":{"http":{"method":"POST","url":"http://localhost:8080/x","headers":{"Authorization":"Bearer t"},"body":"{}","timeout":"5s","maxResponseBytes":1024,"expectStatus":["2xx","304"]}},"schedule":{"interval":"1m"},"startAt":"2026-03-01T12:00:00Z","jitter":0.1,"bounds":{"min":"30s","max":"10m"},"adaptive":{"mode":"change","unchangedRuns":3,"smoothing":0.5},"activity":{"idleAfter":"1h","dormantAfter":"24h","idleMultiplier":2,"dormantMultiplier":6},"quietHours":{"start":"22:00","end":"06:00","timezone":"Europe/Berlin","interval":"1h"},"budget":{"maxRunsPerDay":1000},"retry":{"maxAttempts":5,"initialDelay":"5s","multiplier":2,"maxDelay":"5m","jitter":0.2},"breaker":{"failureThreshold":3,"openDelay":"5s","maxOpenDelay":"5m","scope":"host"},"catchUp":"all","catchUpMax":10,"deadLetter":{"recheckAfter":"30m"}}`,
	`{"id":"x","target":{"http":{"url":"https://e.com"}},"schedule":{"interval":"30s"},"retry":{"maxDelay":"1s"}}`,
	`{"id":"x","target":{"http":{"url":"https://e.com"}},"schedule":{"interval":"30s"},"retry":{"initialDelay":"48h"}}`,
	`{"id":"x","target":{"http":{"url":"https://e.com"}},"schedule":{"interval":"30s"},"breaker":{"maxOpenDelay":"1s"}}`,
	`{"id":"x","target":{"http":{"url":"https://e.com"}},"schedule":{"interval":"30s"},"breaker":{"openDelay":"48h"}}`,
	`{"id":"x","target":{"http":{"url":"https://e.com"}},"schedule":{"interval":"30s"},"activity":{"dormantAfter":"30m"}}`,
	`{"id":"x","target":{"http":{"url":"https://e.com","timeout":null}},"schedule":{"interval":"30s"}}`,
	`{"id":"x","target":{"http":{"url":"https://e.com"}},"schedule":{"interval":"200ms"}}`,
	`{"id":"a b","target":{},"schedule":{"interval":"30s","cron":"@daily"},"jitter":2}`,
	`{"id":"x","schedule":{"interval":5}}`,
	`{"id":5}`,
	`{"foo":1}`,
	`{"id":"x"}}`,
	`[]`,
	`null`,
}

// FuzzDecode feeds arbitrary bytes through the whole consumer path: Decode,
// DecodeData into a TaskSpec, Validate. Nothing may panic, every error must
// be a named malformed-input error, and a decoded event must survive Encode.
func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSpecs {
		f.Add([]byte(s), true)
		b, err := events.Marshal(events.TypeTaskCreated, "flyball/fuzz", "x", json.RawMessage(s), at, "ev-1")
		if err == nil {
			f.Add(b, false)
		}
	}
	for _, s := range []string{
		``, `{nope`, `[1]`, `"s"`, `{}`, `{"specversion":"0.3"}`, `{"specversion":1}`,
		`{"specversion":"1.0","id":"a","source":"s","type":"com.example"}`,
		`{"specversion":"1.0","id":"a","source":"s","type":"io.flyball.x","time":"nope"}`,
		`{"specversion":"1.0","id":"a","source":"s","type":"io.flyball.x","time":"9999-12-31T23:30:00-01:00"}`,
		"{\"specversion\":\"1.0\",\"id\":\"c1\",\"source\":\"cli\",\"type\":\"io.flyball.task.created\",\"data\":{\"id\":\"u\",\"target\":{\"http\":{\"url\":\"https://e.com\",\"body\":\"\xff\xfe\"}},\"schedule\":{\"interval\":\"30s\"}}}",
		`{"data_base64":1,"specversion":"1.0","id":"a","source":"s","type":"io.flyball.x"}`,
		`{"specversion":"1.0","id":"a","source":"s","type":"io.flyball.x","data_base64":"eyJpZCI6IngifQ=="}`,
		`{"specversion":"1.0","id":"a","source":"s","type":"io.flyball.x","datacontenttype":"text/plain","data":"hi"}`,
		`{"datacontenttype":"text/plain","data":"hi","specversion":"1.0","id":"a","source":"%41 b","type":"io.flyball.x","ext":1}`,
		`{"specversion":"1.0","specversion":"1.0","id":"a","source":"s","type":"io.flyball.x"}`,
		`{"specversion":"1.0","id":"a","source":"s","type":"io.flyball.x","datacontenttype":"application/json","datacontenttype":"application/json"}`,
		`{"specversion":"1.0","id":"a","source":"s","type":"io.flyball.x","ext":1e10}`,
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, binary bool) {
		if len(body) > maxFuzzInput {
			return
		}
		var hdr map[string][]string
		if binary {
			hdr = map[string][]string{
				"ce-specversion": {"1.0"},
				"ce-id":          {"ev-1"},
				"ce-type":        {events.TypeTaskCreated},
				"ce-source":      {"flyball/fuzz"},
				"content-type":   {events.ContentTypeJSON},
			}
		}
		e, err := events.Decode(hdr, body)
		if err != nil {
			checkMalformed(t, "Decode", err)
			// A structured-mode object with specversion 1.0 fails on an
			// attribute, which its reasons name.
			var probe struct {
				SpecVersion *string `json:"specversion"`
			}
			if !binary && json.Unmarshal(body, &probe) == nil && probe.SpecVersion != nil && *probe.SpecVersion == "1.0" {
				for _, r := range events.Reasons(err) {
					if r.Field == "" && !strings.HasPrefix(r.Rule, "and ") {
						t.Fatalf("Decode: reason %q names no attribute\nbody: %q", r.Rule, body)
					}
				}
			}
			// What an answer to the broken message can still name.
			if typ, id := events.PeekAttributes(hdr, body); len(typ) > 256+len("…") || len(id) > 256+len("…") {
				t.Fatalf("PeekAttributes returned %d and %d bytes, want at most 256 each (plus …)", len(typ), len(id))
			}
			return
		}
		var spec events.TaskSpec
		if err := events.DecodeData(e, &spec); err != nil {
			checkMalformed(t, "DecodeData", err)
		} else if err := spec.Validate(); err != nil {
			checkMalformed(t, "Validate", err)
		}
		if _, err := events.DecodeTaskSpec(e); err != nil {
			checkMalformed(t, "DecodeTaskSpec", err)
		}

		b, err := events.Encode(e)
		if err != nil {
			t.Fatalf("Encode of a decoded event: %v\nbody: %q", err, body)
		}
		again, err := events.Decode(nil, b)
		if err != nil {
			t.Fatalf("re-decode: %v\nencoded: %s\nbody: %q", err, b, body)
		}
		if again.ID() != e.ID() || again.Type() != e.Type() || again.Source() != e.Source() {
			t.Fatalf("re-decoded %q/%q/%q, want %q/%q/%q", again.ID(), again.Type(), again.Source(), e.ID(), e.Type(), e.Source())
		}
	})
}

func checkMalformed(t *testing.T, op string, err error) {
	t.Helper()
	if !errors.Is(err, events.ErrMalformed) {
		t.Fatalf("%s: %v does not wrap ErrMalformed", op, err)
	}
	rs := events.Reasons(err)
	if len(rs) == 0 {
		t.Fatalf("%s: %v has no reasons", op, err)
	}
	for _, r := range rs {
		if r.Rule == "" {
			t.Fatalf("%s: reason for field %q has no rule", op, r.Field)
		}
	}
}

// FuzzValidateSpec checks Validate and Normalize on any strictly decodable
// spec: no panics, every failure names a rule, and normalizing a valid spec
// keeps it valid (and is idempotent).
func FuzzValidateSpec(f *testing.F) {
	for _, s := range fuzzSpecs {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > maxFuzzInput {
			return
		}
		var spec events.TaskSpec
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&spec); err != nil {
			return
		}
		err := spec.Validate()
		if err != nil {
			var ve *events.ValidationError
			if !errors.As(err, &ve) || len(ve.Errors) == 0 {
				t.Fatalf("Validate() = %#v, want a non-empty *ValidationError", err)
			}
			for _, fe := range ve.Errors {
				if fe.Rule == "" {
					t.Fatalf("field %q failed with an empty rule", fe.Field)
				}
			}
			return
		}
		spec.Normalize()
		if err := spec.Validate(); err != nil {
			t.Fatalf("valid spec no longer validates after Normalize: %v\nspec: %s", err, data)
		}
		once, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		again := spec
		var reloaded events.TaskSpec
		if err := json.Unmarshal(once, &reloaded); err != nil {
			t.Fatalf("normalized spec does not decode: %v\n%s", err, once)
		}
		reloaded.Normalize()
		again.Normalize()
		if !reflect.DeepEqual(reloaded, again) {
			t.Fatalf("Normalize is not idempotent across a JSON round trip:\n%+v\n%+v", reloaded, again)
		}
	})
}
