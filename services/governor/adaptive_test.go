package governor

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
)

// TestAdaptiveIntervalOffTheMillisecondReachesItsTarget: docs/governor.md
// (Adaptive cadence): the adaptive interval "moves at least 1 ms a step",
// so it reaches the end of its range or its target. A staleness target is
// a fraction of the range, so the interval can stop off the whole
// millisecond (59.9991s); from there a step toward the baseline (60s)
// rounded back behind it (59.999s), and kept in [59.9991s, 60s] it did
// not move at all: the task ran every 59.9991s for good, as
// adaptive-tighten. FuzzDecideSequence found it; this drives it through
// the service, on a real server: the run's outcome published to RUNS, the
// decision read back from flyball-schedules.
func TestAdaptiveIntervalOffTheMillisecondReachesItsTarget(t *testing.T) {
	s, js := startGovernor(t)
	const id = "stale"
	spec := minuteSpec(id)
	spec.Adaptive = &events.Adaptive{Mode: events.AdaptiveStaleness, Smoothing: 0.1}
	spec.Normalize()
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.tasks.Put(t.Context(), id, raw); err != nil {
		t.Fatal(err)
	}
	const off = 59_999_100 * time.Microsecond // 59.9991s
	slot := time.Now().UTC().Truncate(time.Second).Add(-time.Second)
	last := slot.Add(-off)
	body, err := json.Marshal(gov.State{
		TaskID: id, NextRunAt: slot, Source: gov.SourceAdaptiveTighten, Runs: 7,
		LastScheduledAt: last, LastSuccessAt: last, AdaptiveInterval: off,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.schedules.Create(t.Context(), id, body); err != nil {
		t.Fatal(err)
	}

	// The slot runs on time: its last success is fresh, and the target is
	// the baseline.
	publishRunAndWait(t, js, events.OutcomeSucceeded, events.Run{
		DispatchID: events.DispatchID(id, slot), TaskID: id, ScheduledAt: slot, Attempt: 1,
		StartedAt: slot, FinishedAt: slot.Add(100 * time.Millisecond), Status: 200,
	})
	st := storedState(t, s, id)
	if st.AdaptiveInterval != time.Minute || !st.NextRunAt.Equal(slot.Add(time.Minute)) || st.Source != gov.SourceBaselineInterval {
		t.Errorf("adaptive interval %s after a run on time, next run %s after the slot (%s); want 1m0s, 1m0s (baseline-interval)\ntrail: %q",
			st.AdaptiveInterval, st.NextRunAt.Sub(slot), st.Source, st.Trail)
	}
}
