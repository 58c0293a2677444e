package events

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// compareRunJSON checks Run.AppendJSON against json.Marshal.
func compareRunJSON(t *testing.T, r Run) {
	t.Helper()
	want, wantErr := json.Marshal(r)
	got, gotErr := r.AppendJSON(nil)
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("AppendJSON err %v, json.Marshal err %v for %#v", gotErr, wantErr, r)
	}
	if gotErr == nil && !bytes.Equal(got, want) {
		t.Fatalf("AppendJSON differs from json.Marshal:\n got %s\nwant %s", got, want)
	}
}

func TestRunAppendJSONMatchesMarshal(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 123456789, time.UTC)
	odd := "a\"b\\c\b\f\n\r\t\x00\x1f\x7f<>&\u2028\u2029é\xff\xe2\x80"
	for name, r := range map[string]Run{
		"zero": {},
		"success": {
			DispatchID: "t:1", TaskID: "t", ScheduledAt: t0, Attempt: 1, StartedAt: t0, FinishedAt: t0.Add(time.Millisecond),
			Duration: Duration(812 * time.Microsecond), Status: 200, Body: `{"ok":true}`, Fingerprint: "f",
			Request: &RequestRecord{Method: "GET", URL: "http://h/x?a=1&b=<2>", Headers: map[string]string{"b": "2", "a": "1", "Authorization": "[REDACTED]"}},
			Source:  "baseline-interval", BreakerKey: "t", TaskCreatedAt: t0.Add(-time.Hour),
		},
		"final failure": {
			DispatchID: "t:1", TaskID: "t", ScheduledAt: t0.In(time.FixedZone("x", 5*3600+1800)), Attempt: -3, Error: odd, ErrorKind: ErrorTransient,
			Final: true, RetryIn: Duration(-time.Second), Reason: odd, Trail: []string{odd, ""}, BodyTruncated: true,
			Dispatch: &Dispatch{DispatchID: "t:1", TaskID: "t", Source: "s", Reason: "zombie", TaskCreatedAt: t0.In(time.FixedZone("y", -3600))},
		},
		"request empty":     {Request: &RequestRecord{}},
		"request subject":   {Request: &RequestRecord{Subject: "s", Headers: map[string]string{}}},
		"request headers":   {Request: &RequestRecord{Headers: map[string]string{odd: odd}}},
		"empty trail":       {Trail: []string{}},
		"year 10000":        {ScheduledAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		"dispatch year -1":  {Dispatch: &Dispatch{FiredAt: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)}},
		"created year -1":   {TaskCreatedAt: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)},
		"zone out of range": {FinishedAt: t0.In(time.FixedZone("z", 30*3600))},
	} {
		t.Run(name, func(t *testing.T) { compareRunJSON(t, r) })
	}
}

func FuzzAppendJSONString(f *testing.F) {
	f.Add("plain")
	f.Add("a\"b\\c\b\f\n\r\t\x00\x1f\x7f<>&\u2028\u2029é\xff\xe2\x80")
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("AppendJSONString(%q) = %s, json.Marshal %s", s, got, want)
		}
		r := Run{TaskID: s, Body: s, Request: &RequestRecord{Headers: map[string]string{s: s, "x": s}}, Trail: []string{s}}
		compareRunJSON(t, r)
	})
}

func BenchmarkRunJSON(b *testing.B) {
	e := dataEvent(b, TypeRunSucceeded, []byte(runSeeds[0]))
	var r Run
	if err := DecodeRun(e, &r); err != nil {
		b.Fatal(err)
	}
	b.Run("AppendJSON", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			var err error
			if buf, err = r.AppendJSON(buf[:0]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
