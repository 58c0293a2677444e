package events

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
	"unicode/utf8"
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

// FuzzJSONStringPrefix checks JSONStringPrefix against AppendJSONString
// for every n: the prefix's encoding is the start of s's, at most n bytes,
// its length is the width returned, and the next character would not fit.
func FuzzJSONStringPrefix(f *testing.F) {
	f.Add("plain")
	f.Add("a\"b\\c\b\f\n\r\t\x00\x1f\x7f<>&\u2028\u2029é\xff\xe2\x80😀")
	f.Fuzz(func(t *testing.T, s string) {
		all := AppendJSONString(nil, s)
		all = all[1 : len(all)-1]
		if s == "" {
			return
		}
		if p, w := JSONStringPrefix(s, len(all)); p != s || w != len(all) {
			t.Fatalf("JSONStringPrefix(%q, %d) = %q, %d; want all of it, %d", s, len(all), p, w, len(all))
		}
		for n := -1; n < len(all); n++ {
			p, w := JSONStringPrefix(s, n)
			enc := AppendJSONString(nil, p)
			enc = enc[1 : len(enc)-1]
			if len(p) >= len(s) || s[:len(p)] != p || w != len(enc) || w > max(n, 0) || !bytes.HasPrefix(all, enc) {
				t.Fatalf("JSONStringPrefix(%q, %d) = %q, %d: encoded %q, of %q", s, n, p, w, enc, all)
			}
			_, size := utf8.DecodeRuneInString(s[len(p):])
			if _, nw := JSONStringPrefix(s[:len(p)+size], len(all)); nw <= n {
				t.Fatalf("JSONStringPrefix(%q, %d) = %q: the next character fits too (%d bytes)", s, n, p, nw)
			}
		}
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
