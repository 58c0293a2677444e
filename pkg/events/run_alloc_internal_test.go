package events

import (
	"testing"
	"time"
	"unsafe"
)

// plainRuns are runs as the executor writes them, with no character that
// JSON escapes: sizeHint must bound their encoding.
func plainRuns() map[string]Run {
	t0 := time.Date(2026, 11, 28, 1, 2, 3, 123456789, time.UTC)
	created := t0.Add(-time.Hour)
	return map[string]Run{
		"succeeded": {
			DispatchID: "bench-00042:1795827373000", TaskID: "bench-00042", ScheduledAt: t0, Attempt: 1,
			StartedAt: t0.Add(time.Millisecond), FinishedAt: t0.Add(3 * time.Millisecond), Duration: Duration(2345678 * time.Nanosecond),
			Status: 200, Body: `{"ok":true,"n":12345}`, Fingerprint: "sha256:0123456789abcdef0123456789abcdef",
			Request: &RequestRecord{
				Method: "GET", URL: "http://127.0.0.1:40123/t/bench-00042",
				Headers: map[string]string{"Authorization": "[REDACTED]", "X-Tenant": "acme"},
			},
			Source: "baseline-interval", BreakerKey: "host_127.0.0.1:40123", TaskCreatedAt: created,
		},
		"final failure": {
			DispatchID: "t:1795827373000", TaskID: "t", ScheduledAt: t0.In(time.FixedZone("x", 5*3600+1800)), Attempt: 7,
			Status: 503, Error: "HTTP 503 Service Unavailable", ErrorKind: ErrorTransient, Final: true,
			RetryIn: Duration(-time.Duration(1<<63 - 1)), Trail: []string{"retry 1 in 1s", "retry 2 in 2s"},
			Dispatch: &Dispatch{
				DispatchID: "t:1795827373000", TaskID: "t", ScheduledAt: t0, FiredAt: t0.Add(-time.Second),
				Source: "retry", Reason: "zombie", TaskCreatedAt: created,
			},
		},
		"skipped": {DispatchID: "t:1", TaskID: "t", ScheduledAt: t0, Reason: "task paused", Source: "hint"},
		"zero":    {},
	}
}

// TestRunSizeHintBoundsTheEncoding: Marshal starts a run's payload at
// sizeHint, so an encoding that outgrew it would allocate again.
func TestRunSizeHintBoundsTheEncoding(t *testing.T) {
	for name, r := range plainRuns() {
		b, err := r.AppendJSON(nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if hint := r.sizeHint(); len(b) > hint {
			t.Errorf("%s: encoding is %d bytes, over its size hint %d", name, len(b), hint)
		}
	}
}

// TestRunPayloadIsOneAllocation: the run event's data is encoded into a
// single buffer (grown from nil it took six, for about twice the bytes;
// sorting a request's headers took five more).
func TestRunPayloadIsOneAllocation(t *testing.T) {
	for name, r := range plainRuns() {
		if n := testing.AllocsPerRun(50, func() { _, _, _ = marshalData(&r) }); n != 1 {
			t.Errorf("%s: encoding the payload took %v allocations, want 1", name, n)
		}
	}
}

// TestDecodeRunAllocatesOnlyWhatTheFastPathDoes: a decoded Run stays
// where its caller declared it (the governor and the breaker decode one
// per run); only the strings the fast path copies are allocated.
func TestDecodeRunAllocatesOnlyWhatTheFastPathDoes(t *testing.T) {
	for name, r := range plainRuns() {
		data, err := r.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		e, err := New("io.flyball.run.succeeded", "/test", "t", data, time.Now(), "id")
		if err != nil {
			t.Fatal(err)
		}
		var probe Run
		if !fastRun(data, &probe) {
			t.Fatalf("%s: the fast path refused the executor's encoding", name)
		}
		fast := testing.AllocsPerRun(50, func() {
			var got Run
			_ = fastRun(data, &got)
		})
		full := testing.AllocsPerRun(50, func() {
			var got Run
			_ = DecodeRun(e, &got)
		})
		if full != fast {
			t.Errorf("%s: DecodeRun took %v allocations, the fast path alone %v", name, full, fast)
		}
	}
}

// TestDecodeSharesTheBody: a structured event's data is the body's own
// bytes, as a binary one's is, not a copy (a kilobyte per run in the
// governor); the data still reads back as the run that was encoded.
func TestDecodeSharesTheBody(t *testing.T) {
	for name, r := range plainRuns() {
		body, err := Marshal("io.flyball.run.succeeded", "/executor/x", "t", &r, time.Now(), "id-1")
		if err != nil {
			t.Fatal(err)
		}
		e, err := Decode(map[string][]string{"Content-Type": {ContentTypeStructured}}, body)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		data := e.Data()
		if len(data) == 0 {
			t.Fatalf("%s: no data", name)
		}
		start := uintptr(unsafe.Pointer(unsafe.SliceData(body)))
		at := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
		if at < start || at+uintptr(len(data)) > start+uintptr(len(body)) {
			t.Errorf("%s: the event's data is a copy, not the body's bytes", name)
		}
		var got Run
		if err := DecodeRun(e, &got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want, _ := r.AppendJSON(nil)
		again, _ := got.AppendJSON(nil)
		if string(again) != string(want) {
			t.Errorf("%s: decoded run\n%s\nwant\n%s", name, again, want)
		}
	}
}
