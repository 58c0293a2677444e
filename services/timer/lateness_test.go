package timer

import (
	"context"
	"testing"
	"time"

	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
)

// TestLatenessOfADispatchWhoseAckWasLostIsItsStoredTry: a first try is
// stored on time but its ack is lost (here: counted as timed out); the
// retry, a RetryDelay later, is answered duplicate. The try that was
// stored is the first, so flyball_dispatch_lateness_seconds records its
// lateness, not the retry's (which, after the 3 s ack timeout, was at
// least 3.25 s).
func TestLatenessOfADispatchWhoseAckWasLostIsItsStoredTry(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	s, err := New(Config{JS: srv.JS, Instance: "test", Metrics: metrics.New(), RetryDelay: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	slot := time.Now().Add(-time.Second).Truncate(time.Millisecond).UnixNano()
	s.upsert("a", slot, "x", 0)
	first, _ := s.takeDue()
	if len(first) != 1 {
		t.Fatalf("took %d runs, want 1", len(first))
	}
	s.publishAll(first)
	select {
	case <-first[0].future.Ok():
	case err := <-first[0].future.Err():
		t.Fatalf("first try not stored: %v", err)
	case <-time.After(within):
		t.Fatal("no ack for the first try")
	}
	// Stored, but its ack never reached the timer.
	if s.settle(&first[0], nil, jsutil.ErrAckTimeout) {
		t.Fatal("a try whose ack timed out settled as stored")
	}
	var retry []dueRun
	natstest.Eventually(t, within, "the retry due", func() bool {
		retry, _ = s.takeDue()
		return len(retry) == 1
	})
	s.publishAll(retry)
	s.collect(context.Background(), retry)
	if r := results(s); r[resultDuplicate] != 1 || r[resultError] != 1 {
		t.Fatalf("results %v, want the ack timeout then a duplicate", r)
	}
	want := time.Duration(first[0].sent - first[0].planned)
	n, got := lateness(t, s)
	if d := got - want; n != 1 || d < -time.Millisecond || d > time.Millisecond {
		t.Fatalf("lateness: %d observations summing to %v; want 1 of %v (the first try, which was stored), not %v (the retry)",
			n, got, want, time.Duration(retry[0].sent-retry[0].planned))
	}
	// The task's next slot starts with no try behind it.
	s.upsert("a", slot+int64(time.Minute), "x", 0)
	s.mu.Lock()
	defer s.mu.Unlock()
	if it := s.items["a"]; it.tried != 0 {
		t.Fatalf("next slot: item %+v, want no earlier try", it)
	}
}
