package executor

import (
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// publishDue publishes a dispatch of task id due at slot.
func publishDue(t *testing.T, srv *natstest.Server, id string, slot time.Time) {
	t.Helper()
	d := events.Dispatch{DispatchID: events.DispatchID(id, slot), TaskID: id, ScheduledAt: slot, FiredAt: time.Now().UTC(), Source: "test"}
	body, err := events.Marshal(events.TypeRunDue, "test", id, d, d.FiredAt, d.DispatchID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.JS.Publish(t.Context(), events.DispatchSubject(id), body); err != nil {
		t.Fatal(err)
	}
}

// waiters is how many dispatches s keeps alive (waitBegin).
func waiters(s *Service) int {
	s.waitMu.Lock()
	defer s.waitMu.Unlock()
	return len(s.waiting)
}

// TestDispatchWaitingForACallSlotIsHandedBackAtStop: at the call limit, a
// dispatch waiting for a call slot when the executor stops is handed
// back, not called during the shutdown grace. acquireCall let go only
// when the run context ended, after the grace: the call that freed the
// slot ended within it, the waiting dispatch took the slot and called its
// target while the executor stopped, and a call cut at the end of the
// grace was nakked and called again elsewhere.
func TestDispatchWaitingForACallSlotIsHandedBackAtStop(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	first, second := newGatedTarget(t), newGatedTarget(t)
	second.release() // answers at once, if called
	for id, url := range map[string]string{"first": first.srv.URL, "second": second.srv.URL} {
		natstest.PutJSON(t, srv.JS, streams.BucketTasks, id, events.TaskSpec{
			ID:       id,
			Target:   events.Target{HTTP: &events.HTTPTarget{URL: url, Timeout: events.Duration(20 * time.Second)}},
			Schedule: events.Schedule{Interval: events.Duration(time.Hour)},
		})
	}
	nc, _ := srv.Connect(t)
	js, err := jsutil.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{JS: js, Guard: Guard{AllowLoopback: true}, Logger: quietLog(), Concurrency: 1, ShutdownGrace: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	natstest.Eventually(t, 10*time.Second, "the executor's spec view loaded", func() bool {
		return s.specs.Lookup("first").Found && s.specs.Lookup("second").Found
	})
	// The first is held for its slot, then called by a caller; the
	// second, due at once, waits in its handler for the one call slot.
	publishDue(t, srv, "first", time.Now().Add(200*time.Millisecond).UTC())
	natstest.Eventually(t, 10*time.Second, "the first dispatch's call in flight", func() bool { return first.called() == 1 })
	publishDue(t, srv, "second", time.Now().Add(-time.Millisecond).UTC())
	natstest.Eventually(t, 10*time.Second, "the second dispatch waiting for a call slot", func() bool { return waiters(s) == 2 })
	stopped := make(chan struct{})
	go func() {
		s.Stop()
		close(stopped)
	}()
	natstest.Eventually(t, 10*time.Second, "the executor stopping", s.stopped)
	first.release() // the first call ends within the grace
	awaitClosed(t, stopped, 15*time.Second, "Stop")
	if n := second.called(); n != 0 {
		t.Fatalf("the dispatch waiting for a call slot at stop was called %d times by the stopping executor, want 0 (handed back)", n)
	}
}
