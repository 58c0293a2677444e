package governor

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
)

// TestBudgetPacesABurstOfRunsHalfTheSpacingApart: docs/events.md
// (Budget) and docs/governor.md (Budget): pacing measures from the run's
// slot, or from its start when that is more than half the spacing
// (24h / maxRunsPerDay) after the slot, "so consecutive calls start at
// least half the spacing apart". FuzzDecide checks it on the planner;
// this checks it through the service, on a real server: outcomes
// published to RUNS, the decision read back from flyball-schedules.
//
// A 1m task with a budget of 288 a day (spacing 5m, half 2m30s) comes
// back from an outage: the timer fired its overdue slots and the executor
// worked through them in a burst, the last few seconds ago. Each
// decision's next run must start at least half the spacing after the
// run just made, and at the time the rule gives: start + spacing for a
// run started late, slot + spacing for one started within half the
// spacing of its slot. Two tasks of their own sit at the boundary: a run
// 149s after its slot is paced from the slot, one 151s after from its
// start.
func TestBudgetPacesABurstOfRunsHalfTheSpacingApart(t *testing.T) {
	s, js := startGovernor(t)
	const (
		id      = "paced"
		perDay  = 288
		spacing = 24 * time.Hour / perDay // 5m
	)
	// create stores task id, budgeted, due at slot.
	create := func(id string, slot time.Time) {
		t.Helper()
		spec := minuteSpec(id)
		spec.Budget = &events.Budget{MaxRunsPerDay: perDay}
		raw, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.tasks.Put(t.Context(), id, raw); err != nil {
			t.Fatal(err)
		}
		body, err := json.Marshal(gov.State{TaskID: id, NextRunAt: slot, Source: gov.SourceBaselineInterval})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.schedules.Create(t.Context(), id, body); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC().Truncate(time.Second)
	overdue := now.Add(-20 * time.Minute)
	create(id, overdue)
	// At the boundary, each its own task: a run 149s after its slot
	// (under half the spacing, 150s) is paced from the slot, one 151s
	// after from its start.
	edge := now.Add(-3 * time.Minute)
	create("under-half", edge)
	create("over-half", edge)

	for _, run := range []struct {
		name, id      string
		slot, started time.Time
		want          time.Time
	}{
		{"overdue slot started 19m late: paced from its start", id, overdue, now.Add(-60 * time.Second), now.Add(-60*time.Second + spacing)},
		{"next overdue slot started 18m late: paced from its start", id, overdue.Add(time.Minute), now.Add(-50 * time.Second), now.Add(-50*time.Second + spacing)},
		{"slot started 80s late (under half the spacing): paced from its slot", id, now.Add(-2 * time.Minute), now.Add(-40 * time.Second), now.Add(-2*time.Minute + spacing)},
		{"slot started 149s late (just under half the spacing): paced from its slot", "under-half", edge, edge.Add(149 * time.Second), edge.Add(spacing)},
		{"slot started 151s late (just over half the spacing): paced from its start", "over-half", edge, edge.Add(151 * time.Second), edge.Add(151*time.Second + spacing)},
	} {
		id := run.id
		publishRunAndWait(t, js, events.OutcomeSucceeded, events.Run{
			DispatchID: events.DispatchID(id, run.slot), TaskID: id, ScheduledAt: run.slot, Attempt: 1,
			StartedAt: run.started, FinishedAt: run.started.Add(time.Second), Status: 200,
		})
		st := storedState(t, s, id)
		if gap := st.NextRunAt.Sub(run.started); gap < spacing/2 {
			t.Errorf("%s: slot %s started %s: next run %s (%s), %s after the start, under half the budget's spacing (%s)\ntrail: %q",
				run.name, run.slot.Format(time.TimeOnly), run.started.Format(time.TimeOnly), st.NextRunAt.Format(time.TimeOnly), st.Source, gap, spacing/2, st.Trail)
			continue
		}
		if !st.NextRunAt.Equal(run.want) || st.Source != gov.SourceBudget {
			t.Errorf("%s: slot %s started %s: next run %s (%s), want %s (budget)\ntrail: %q",
				run.name, run.slot.Format(time.TimeOnly), run.started.Format(time.TimeOnly), st.NextRunAt.Format(time.TimeOnly), st.Source, run.want.Format(time.TimeOnly), st.Trail)
		}
	}
}
