package events

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// dataEvent is a structured event of type typ carrying data. The fuzzer's
// data may break the envelope; the test is then skipped.
func dataEvent(t testing.TB, typ string, data []byte) Event {
	t.Helper()
	e, err := Decode(nil, []byte(`{"specversion":"1.0","id":"x","source":"flyball/test","type":"`+typ+`","datacontenttype":"application/json","data":`+string(data)+`}`))
	if err != nil {
		t.Skip("not an event body")
	}
	return e
}

// compareFast checks a fast-path decoder against DecodeData on one input:
// both fail with the same error, or both give the same value.
func compareFast[T any](t *testing.T, data []byte, typ string, fast func(Event, *T) error) {
	e := dataEvent(t, typ, data)
	var got, want T
	gotErr := fast(e, &got)
	wantErr := DecodeData(e, &want)
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("data %s: fast path err %v, DecodeData err %v", data, gotErr, wantErr)
	}
	if gotErr != nil {
		if gotErr.Error() != wantErr.Error() || !errors.Is(gotErr, ErrMalformed) {
			t.Fatalf("data %s: errors differ: %q vs %q", data, gotErr, wantErr)
		}
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("data %s:\n fast %#v\n want %#v", data, got, want)
	}
}

func compareDispatch(t *testing.T, data []byte) { compareFast(t, data, TypeRunDue, DecodeDispatch) }

var dispatchSeeds = []string{
	`{"dispatchId":"t1:1772532900000","taskId":"t1","scheduledAt":"2026-03-03T10:15:00Z","firedAt":"2026-03-03T10:15:00.001234Z","source":"baseline-interval"}`,
	`{"dispatchId":"t1:1","taskId":"t1","scheduledAt":"2026-03-03T10:15:00+01:00","firedAt":"2026-03-03T10:15:00Z","reason":"zombie"}`,
	`{"dispatchId":"r:1","taskId":"r","scheduledAt":"9999-12-31T23:30:00-01:00"}`,
	`{"dispatchId":"t1:1","taskId":"t1","scheduledAt":"2026-03-03T10:15:00Z","firedAt":"2026-03-03T10:14:59Z","taskCreatedAt":"2026-03-01T08:00:00.123456789Z"}`,
	`{"taskId":"a","taskCreatedAt":null}`,
	`{"taskId":"a","taskCreatedAt":"yesterday"}`,
	`{"taskId":"a","taskCreatedAt":"2026-03-01T08:00:00Z","taskCreatedAt":"2026-03-02T08:00:00Z"}`,
	`{"dispatchId":"r:1","taskId":"r","firedAt":"0001-01-01T00:00:00Z"}`,
	` { "taskId" : "a" , "dispatchId":"a:1" } `,
	`{"taskId":"a","taskId":"b"}`,
	`{"TaskId":"a"}`,
	`{"taskId":"a","extra":1}`,
	`{"taskId":"\u0061"}`,
	`{"taskId":"é"}`,
	`{"scheduledAt":"2026-13-03T10:15:00Z"}`,
	`{"scheduledAt":"2026-03-03 10:15:00Z"}`,
	`{"scheduledAt":null}`,
	`{"taskId":1}`,
	`{}`,
	`[]`,
	`{"taskId":"a"}x`,
	`{"taskId":"a",}`,
}

func TestDecodeDispatchMatchesDecodeData(t *testing.T) {
	for _, s := range dispatchSeeds {
		t.Run(s, func(t *testing.T) { compareDispatch(t, []byte(s)) })
	}
	// What the timer writes takes the fast path.
	d := Dispatch{DispatchID: "t:1", TaskID: "t", ScheduledAt: time.Unix(1772532900, 0).UTC(), FiredAt: time.Now().UTC(), Source: "baseline-interval", TaskCreatedAt: time.Unix(1772500000, 5).UTC()}
	body, err := Marshal(TypeRunDue, "flyball/timer/t", "t", d, time.Now(), d.DispatchID)
	if err != nil {
		t.Fatal(err)
	}
	e, err := Decode(nil, body)
	if err != nil {
		t.Fatal(err)
	}
	var got Dispatch
	if !fastDispatch(e.Data(), &got) || !reflect.DeepEqual(got, d) {
		t.Fatalf("the timer's dispatch did not take the fast path: %#v", got)
	}
}

func FuzzDecodeDispatchMatchesDecodeData(f *testing.F) {
	for _, s := range dispatchSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { compareDispatch(t, data) })
}

func BenchmarkDecodeDispatch(b *testing.B) {
	benchFast(b, dataEvent(b, TypeRunDue, []byte(dispatchSeeds[0])), DecodeDispatch)
}

// benchFast measures a fast-path decoder against DecodeData on e.
func benchFast[T any](b *testing.B, e Event, fast func(Event, *T) error) {
	for _, c := range []struct {
		name   string
		decode func(Event, *T) error
	}{
		{"fast", fast},
		{"DecodeData", func(e Event, v *T) error { return DecodeData(e, v) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var v T
				if err := c.decode(e, &v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
