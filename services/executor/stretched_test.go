package executor

import (
	"context"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestALateSlotOfAStretchedCadenceIsJudgedByItsInterval: catchUp "none"
// skips a slot whose next slot has passed too. The next slot was counted
// from the spec's interval whatever planned the slot, so a slot of a
// stretched cadence (a dormant task at 6× its interval, bounds.min, an
// adaptive relax) that reached an executor one interval late was skipped
// as "missed" although its next slot was still ahead, and the task then
// waited a whole stretched interval. The schedule that planned the slot
// gives the interval in force (slot − its previous slot); a slot late by
// less than that runs, one late by more is still skipped. Its gridStep,
// when stored, is that interval: a slot planned after late slots were
// skipped lies several steps past its previous slot, and judged by the
// whole distance it ran late although its next slot had passed. A slot
// the budget or quiet hours placed is judged the same way.
func TestALateSlotOfAStretchedCadenceIsJudgedByItsInterval(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	target := newPathTarget(t)
	slot := time.Now().Add(-11 * time.Second).UTC().Truncate(time.Millisecond)
	cases := []struct {
		id     string
		source governor.Source
		prev   time.Time     // the schedule's previous slot
		step   time.Duration // the schedule's gridStep (0: none stored)
		want   events.Outcome
	}{
		{id: "dormant", source: governor.SourceActivityDormant, prev: slot.Add(-time.Minute), want: events.OutcomeSucceeded},
		{id: "dormant-missed", source: governor.SourceActivityDormant, prev: slot.Add(-5 * time.Second), want: events.OutcomeSkipped},
		{id: "baseline", source: governor.SourceBaselineInterval, prev: slot.Add(-time.Minute), want: events.OutcomeSkipped},
		{id: "dormant-steps", source: governor.SourceActivityDormant, prev: slot.Add(-time.Minute), step: 5 * time.Second, want: events.OutcomeSkipped},
		// A slot the budget or quiet hours placed is judged too, by the
		// budget's spacing or the quiet interval (its gap): before, it
		// ran however late.
		{id: "budget", source: governor.SourceBudget, prev: slot.Add(-time.Minute), want: events.OutcomeSucceeded},
		{id: "budget-missed", source: governor.SourceBudget, prev: slot.Add(-5 * time.Second), want: events.OutcomeSkipped},
		{id: "quiet-missed", source: governor.SourceQuietHours, prev: slot.Add(-5 * time.Second), want: events.OutcomeSkipped},
	}
	for _, c := range cases {
		spec := target.spec(c.id)
		spec.Schedule.Interval = events.Duration(10 * time.Second)
		spec.CatchUp = events.CatchUpNone
		natstest.PutJSON(t, srv.JS, streams.BucketTasks, c.id, governor.StoredSpec{TaskSpec: &spec})
		natstest.PutJSON(t, srv.JS, streams.BucketSchedules, c.id, map[string]any{
			"taskId": c.id, "nextRunAt": slot, "lastScheduledAt": c.prev, "source": c.source, "gridStep": c.step,
		})
	}
	startExecutor(t, srv, newLogLines())
	for _, c := range cases {
		fired := time.Now().UTC()
		d := events.Dispatch{DispatchID: events.DispatchID(c.id, slot), TaskID: c.id, ScheduledAt: slot, FiredAt: fired, Source: string(c.source)}
		body, err := events.Marshal(events.TypeRunDue, "test", c.id, d, fired, d.DispatchID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := srv.JS.Publish(context.Background(), events.DispatchSubject(c.id), body); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cases {
		if got, run := outcomeOf(t, srv.JS, c.id); got != c.want {
			t.Errorf("%s (%s, previous slot %s before): run.%s (reason %q), want run.%s", c.id, c.source, slot.Sub(c.prev), got, run.Reason, c.want)
		}
	}
}

// TestAStoredSpecRunsUnderTheRulesItWasStoredWith: the executor checks a
// stored spec again before each run, and skipped it as invalid when it
// broke a rule added since for new specs only: a task stored with
// TE: gzip (which its HTTP/1.1 target took) or a bounds.max past a year
// stopped running after the upgrade. It runs as it did; task.created and
// task.updated are refused by those rules.
func TestAStoredSpecRunsUnderTheRulesItWasStoredWith(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	target := newPathTarget(t)
	for id, mutate := range map[string]func(*events.TaskSpec){
		"te-gzip":    func(s *events.TaskSpec) { s.Target.HTTP.Headers = map[string]string{"TE": "gzip"} },
		"long-bound": func(s *events.TaskSpec) { s.Bounds = &events.Bounds{Max: events.Duration(9000 * time.Hour)} },
	} {
		spec := target.spec(id)
		mutate(&spec)
		if spec.Validate() == nil {
			t.Fatalf("%s: a new spec passes Validate; the case tests nothing", id)
		}
		natstest.PutJSON(t, srv.JS, streams.BucketTasks, id, governor.StoredSpec{TaskSpec: &spec})
	}
	startExecutor(t, srv, newLogLines())
	for _, id := range []string{"te-gzip", "long-bound"} {
		dispatchOf(t, srv.JS, id, time.Time{})
		if got, run := outcomeOf(t, srv.JS, id); got != events.OutcomeSucceeded || target.of(id) != 1 {
			t.Errorf("%s: run.%s (reason %q), %d calls; want the stored task called as before", id, got, run.Reason, target.of(id))
		}
	}
}
