package executor

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestHugeRedirectErrorIsStoredAndCounted: a target answers 302 with a
// Location of about 1.1 MB (net/http takes response headers up to
// 10 MB) whose host refuses the connection. Go's url.Error quotes the
// whole URL, and that error went into run.error uncut: the event was
// larger than max_payload, never stored, the dispatch nakked uncounted,
// and the target called again as attempt 1 every second until
// MaxDeliver. The error is now capped (maxRunText), the URL in it cut
// first (maxErrorURL) so the cause is kept, and every attempt's event is
// stored, so the run retries and ends as configured.
func TestHugeRedirectErrorIsStoredAndCounted(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: the next hop fails at once.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	_ = l.Close()
	location := dead + "/" + strings.Repeat("é", 1100<<10/2) // ~1.1 MB
	target := &attemptTarget{script: []int{http.StatusFound}}
	target.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n int
		_, _ = fmt.Sscan(r.Header.Get("Flyball-Attempt"), &n)
		target.mu.Lock()
		target.calls = append(target.calls, n)
		target.mu.Unlock()
		w.Header()["Location"] = []string{location}
		w.WriteHeader(http.StatusFound)
	}))
	t.Cleanup(target.srv.Close)
	f := newAttemptsFixture(t, target, 3, 0, 0)
	f.dispatch(t)
	// Each attempt reads a 1.1 MB header and quotes it in an error,
	// seconds under -race on a loaded machine: the deadline is generous,
	// and the defect (an event never stored, the target called again as
	// attempt 1) fails at once rather than at the deadline. The time is
	// net/http's (it parses and resolves the Location) and the race
	// detector's: about 1.3 s of CPU an attempt under -race, 0.2 s without.
	const within = 120 * time.Second
	deadline := time.Now().Add(within)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		got := f.stored(t)
		if len(got) > 0 && got[len(got)-1].run.Final {
			break
		}
		if calls := target.attempts(); slices.Index(calls[min(1, len(calls)):], 1) >= 0 {
			t.Fatalf("target called as attempt 1 again (%v) with RUNS holding %v: an attempt's event was not stored", calls, got)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no final run.failed within %s: RUNS holds %v, target called with attempts %v", within, got, target.attempts())
		}
		<-tick.C
	}
	if got := target.attempts(); fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("target called with attempts %v, want [1 2 3]", got)
	}
	got := f.stored(t)
	if fmt.Sprint(got) != "[failed(attempt 1, final false) failed(attempt 2, final false) failed(attempt 3, final true)]" {
		t.Fatalf("RUNS holds %v, want run.failed for attempts 1, 2 and 3, the last final", got)
	}
	for _, r := range got {
		e := r.run.Error
		if len(e) > maxRunText || !utf8.ValidString(e) || !strings.Contains(e, runTextCut) || !strings.HasSuffix(e, "connection refused") || r.run.RetryIn == 0 && !r.run.Final {
			t.Fatalf("attempt %d: error of %d bytes (valid UTF-8 %v, ends %q), retryIn %s; want at most %d bytes, the URL cut and the cause kept, and a retry delay",
				r.run.Attempt, len(e), utf8.ValidString(e), e[max(len(e)-40, 0):], r.run.RetryIn, maxRunText)
		}
	}
}

// TestCapTextCutsOnARuneAndMarksTheCut: a long or non-UTF-8 text (a NATS
// target's Nats-Service-Error) is made valid UTF-8 and cut on a rune
// boundary, ending with the marker.
func TestCapTextCutsOnARuneAndMarksTheCut(t *testing.T) {
	t.Parallel()
	for _, in := range []string{strings.Repeat("é", maxRunText), strings.Repeat("\xff\xfea", maxRunText), "short"} {
		got := capText(in, maxRunText)
		if len(got) > maxRunText || !utf8.ValidString(got) || (len(in) > maxRunText) != strings.HasSuffix(got, runTextCut) {
			t.Errorf("capText of %d bytes: %d bytes, valid UTF-8 %v, ends %q", len(in), len(got), utf8.ValidString(got), got[max(len(got)-12, 0):])
		}
	}
}
