package executor

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
)

// largeBodies are response bodies over the 1 MiB max_payload of a test
// server, by how much their JSON encoding grows: HTML (<, > and & take 6
// bytes each, a newline 2), text with newlines, binary (each invalid
// UTF-8 byte is \ufffd, 6 bytes), plain ASCII, and multi-byte text with
// U+2028 (3 bytes written as 6), which a cut must not split.
func largeBodies() []struct{ name, body string } {
	bin := make([]byte, 10<<20)
	r := rand.New(rand.NewChaCha8([32]byte{1}))
	for i := range bin {
		bin[i] = byte(r.Uint32())
	}
	return []struct{ name, body string }{
		{"html", strings.Repeat("<p>x</p>\n", 200_000)},
		{"json array", strings.Repeat(`{"name":"a&b","tags":["<x>"]},`, 300_000)},
		{"text with newlines", strings.Repeat("hello world\n", 2<<20/12)},
		{"binary", string(bin)},
		{"ascii", strings.Repeat("a", 2<<20)},
		{"line separators", strings.Repeat("é\u2028", 1<<20)},
	}
}

// TestRunBodyGrowingInJSONKeepsWhatFits: a response body whose JSON
// encoding is larger than the body itself is cut to as much as fits in
// max_payload (less runEventHeadroom), and the event is stored. The cut
// took one byte of body per byte of event over the limit, as if each
// body byte took one byte of JSON: once the body's growth passed the
// limit the first cut went below zero, and 1.8 MB of HTML, a 10 MiB
// binary body or a 9 MB JSON array were stored as body "" (after about
// 450 MiB of allocation for the binary one).
func TestRunBodyGrowingInJSONKeepsWhatFits(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	s, err := New(Config{JS: srv.JS})
	if err != nil {
		t.Fatal(err)
	}
	limit := int(srv.NC.MaxPayload() - runEventHeadroom)
	// A cut falls before a character that does not fit: one of up to 6
	// bytes of JSON.
	const margin = 6
	at := time.Now().UTC()
	for i, c := range largeBodies() {
		id := "big" + string(rune('a'+i))
		run := &events.Run{DispatchID: id + ":1", TaskID: id, ScheduledAt: at, Attempt: 1, StartedAt: at, FinishedAt: at, Status: 200, Body: c.body, Fingerprint: "0123456789abcdef0123456789abcdef"}
		msg, err := s.runMsg(events.OutcomeSucceeded, run, run.DispatchID)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if n := len(msg.Data); n > limit || n <= limit-margin || !run.BodyTruncated || !strings.HasPrefix(c.body, run.Body) {
			t.Errorf("%s (%d bytes): an event of %d bytes keeping %d bytes of body (truncated %v, a prefix %v); want at most %d bytes and within %d of it, the body's prefix, truncated",
				c.name, len(c.body), n, len(run.Body), run.BodyTruncated, strings.HasPrefix(c.body, run.Body), limit, margin)
			continue
		}
		if _, err := srv.JS.PublishMsg(t.Context(), msg); err != nil {
			t.Fatalf("%s: publish: %v", c.name, err)
		}
		// Each byte of invalid UTF-8 is stored as U+FFFD, as []rune makes it.
		if got, ok := lastRun(t, srv.JS, events.OutcomeSucceeded, id); !ok || got.Body != string([]rune(run.Body)) || !got.BodyTruncated {
			t.Errorf("%s: stored %d bytes of body (truncated %v), want the %d bytes cut", c.name, len(got.Body), got.BodyTruncated, len(run.Body))
		}
	}
}

// BenchmarkRunMsgLargeBody measures the encoding of a run event whose
// body is over max_payload: what fitRunBody allocates to cut it.
func BenchmarkRunMsgLargeBody(b *testing.B) {
	srv := natstest.Start(b)
	s, err := New(Config{JS: srv.JS})
	if err != nil {
		b.Fatal(err)
	}
	at := time.Now().UTC()
	for _, c := range largeBodies() {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				run := events.Run{DispatchID: "big:1", TaskID: "big", ScheduledAt: at, Attempt: 1, Status: 200, Body: c.body}
				if _, err := s.runMsg(events.OutcomeSucceeded, &run, run.DispatchID); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
