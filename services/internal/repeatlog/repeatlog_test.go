package repeatlog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func newLog(window time.Duration) (*Log, *bytes.Buffer) {
	var buf bytes.Buffer
	h := slog.NewTextHandler(&buf, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	})
	return New(slog.New(h), window), &buf
}

func lines(buf *bytes.Buffer) []string {
	s := strings.TrimSpace(buf.String())
	buf.Reset()
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func TestRepeatsInAWindowAreCountedAndWrittenOnce(t *testing.T) {
	t.Parallel()
	r, buf := newLog(10 * time.Second)
	t0 := time.Unix(1_000_000, 0)
	for i := range 1000 {
		r.Log(t0.Add(time.Duration(i)*time.Millisecond), slog.LevelWarn, "ack not confirmed", "subject", "d.t"+string(rune('a'+i%26)))
	}
	got := lines(buf)
	if len(got) != 1 || got[0] != `level=WARN msg="ack not confirmed" subject=d.ta` {
		t.Fatalf("1,000 repeats in the window wrote %q, want only the first", got)
	}
	r.Flush(t0.Add(5*time.Second), false)
	if got := lines(buf); got != nil {
		t.Fatalf("a flush inside the window wrote %q, want nothing yet", got)
	}
	r.Flush(t0.Add(10*time.Second), false)
	got = lines(buf)
	if len(got) != 1 || got[0] != `level=WARN msg="ack not confirmed" repeated=999 window=10s` {
		t.Fatalf("the flush after the window wrote %q, want the count of the 999 repeats", got)
	}
	r.Flush(t0.Add(20*time.Second), true)
	if got := lines(buf); got != nil {
		t.Fatalf("a second flush wrote %q, want nothing: the count was written", got)
	}
}

func TestALineAfterTheWindowIsWrittenAfterTheCount(t *testing.T) {
	t.Parallel()
	r, buf := newLog(time.Second)
	t0 := time.Unix(1_000_000, 0)
	r.Log(t0, slog.LevelInfo, "m", "n", 1)
	r.Log(t0.Add(500*time.Millisecond), slog.LevelInfo, "m", "n", 2)
	r.Log(t0.Add(time.Second), slog.LevelInfo, "m", "n", 3)
	got := lines(buf)
	want := []string{`level=INFO msg=m n=1`, `level=INFO msg=m repeated=1 window=1s`, `level=INFO msg=m n=3`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("wrote\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestMessagesAreCountedApartAndFlushAllWritesEveryCount(t *testing.T) {
	t.Parallel()
	r, buf := newLog(time.Minute)
	t0 := time.Unix(1_000_000, 0)
	for range 3 {
		r.Log(t0, slog.LevelWarn, "ack not confirmed")
		r.Log(t0, slog.LevelWarn, "term not confirmed")
	}
	if got := lines(buf); len(got) != 2 {
		t.Fatalf("wrote %q, want the first of each message", got)
	}
	r.Flush(t0.Add(time.Second), true)
	got := lines(buf)
	if len(got) != 2 || !strings.Contains(strings.Join(got, "\n"), `msg="ack not confirmed" repeated=2`) || !strings.Contains(strings.Join(got, "\n"), `msg="term not confirmed" repeated=2`) {
		t.Fatalf("flush all wrote %q, want each message's count", got)
	}
}

func TestAMessageSeenOnceIsForgottenAfterItsWindow(t *testing.T) {
	t.Parallel()
	r, _ := newLog(time.Second)
	t0 := time.Unix(1_000_000, 0)
	for i := range 100 {
		r.Log(t0, slog.LevelWarn, "distinct "+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	r.Flush(t0.Add(time.Second), false)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lines) != 0 {
		t.Fatalf("%d messages kept after their windows, want none", len(r.lines))
	}
}
