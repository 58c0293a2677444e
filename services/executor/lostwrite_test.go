package executor

import (
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestALostWriteRedispatchCoveredByALaterSlotIsSkipped: the sweeper's
// lost-write repair judges a slot S with slotdone.SlotOrLater, so it also
// repairs when the outcome it finds applied is a later slot's (a
// schedule set back to S by hand, or restored, while S+1 had run). Its
// dispatch of S was then checked here with SlotOnly, found no outcome of
// S itself, and called the target for S again, though the repair
// promises a skip. A lost-write dispatch is now checked as the sweeper
// judged it: a later slot's outcome covers it, and it is skipped. A
// zombie re-nudge of the same kind is still called (a later slot can
// have run first: a run-now planned ahead of a held slot).
func TestALostWriteRedispatchCoveredByALaterSlotIsSkipped(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	target := newPathTarget(t)
	slot := time.Now().Add(-70 * time.Minute).UTC().Truncate(time.Millisecond)
	created := slot.Add(-time.Hour)
	cases := []struct {
		id, reason string
		called     bool
	}{
		{"set-back", "lost-write", false},
		{"renudged", "zombie", true},
	}
	for _, c := range cases {
		natstest.PutJSON(t, srv.JS, streams.BucketTasks, c.id, target.spec(c.id))
		later := slot.Add(time.Hour)
		d := events.Dispatch{DispatchID: events.DispatchID(c.id, later), TaskID: c.id, ScheduledAt: later, TaskCreatedAt: created}
		r := d.Run()
		r.Attempt, r.StartedAt, r.FinishedAt, r.Final = 1, later, later.Add(time.Second), true
		publishEvent(t, srv.JS, events.RunSubject(events.OutcomeSucceeded, c.id), events.TypeRunSucceeded, c.id, r)
	}
	startExecutor(t, srv, newLogLines())
	for _, c := range cases {
		d := events.Dispatch{
			DispatchID: events.DispatchID(c.id, slot), TaskID: c.id, ScheduledAt: slot, FiredAt: time.Now().UTC(),
			Source: "baseline-interval", Reason: c.reason, TaskCreatedAt: created,
		}
		publishEvent(t, srv.JS, events.DispatchSubject(c.id), events.TypeRunDue, c.id, d)
	}
	skipped := func(id string) bool {
		r, ok := lastRun(t, srv.JS, events.OutcomeSkipped, id)
		return ok && r.ScheduledAt.Equal(slot) && strings.HasPrefix(r.Reason, "already ran")
	}
	for _, c := range cases {
		natstest.Eventually(t, 20*time.Second, c.id+": a call or a skip", func() bool {
			return target.of(c.id) > 0 || skipped(c.id)
		})
		if n := target.of(c.id); c.called != (n > 0) || c.called == skipped(c.id) {
			t.Errorf("%s dispatch of a slot a later slot's applied outcome covers: %d calls, skipped %v; want called %v", c.reason, n, skipped(c.id), c.called)
		}
	}
}
