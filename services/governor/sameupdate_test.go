package governor

import (
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
)

// TestSameSpecAppliedAgainKeepsAdaptive: a task.updated whose spec is the
// one stored (a GitOps loop applying the same file every few minutes)
// keeps its revision, and must keep the adaptive cadence and change
// detection too. It restarted them: the relaxed interval went back to the
// baseline (more calls, more budget) and the first run after each
// re-apply only recorded its fingerprint, so a response that changed
// across a re-apply went unseen.
func TestSameSpecAppliedAgainKeepsAdaptive(t *testing.T) {
	s, js := startGovernor(t)
	const id = "gitops"
	spec := *minuteSpec(id)
	spec.Adaptive = &events.Adaptive{Mode: events.AdaptiveChange, UnchangedRuns: 1, Smoothing: 1}
	command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-1", spec)

	// Two identical responses: the second relaxes the cadence to its
	// ceiling (4 × 1m) at once.
	for range 2 {
		slot := storedState(t, s, id).NextRunAt
		publishRunAndWait(t, js, events.OutcomeSucceeded, events.Run{
			DispatchID: events.DispatchID(id, slot), TaskID: id, ScheduledAt: slot, Attempt: 1,
			StartedAt: slot, FinishedAt: slot.Add(100 * time.Millisecond), Status: 200, Fingerprint: "same-response",
		})
	}
	relaxed := storedState(t, s, id)
	if relaxed.AdaptiveInterval != 4*time.Minute || relaxed.LastFingerprint != "same-response" {
		t.Fatalf("setup: adaptive interval %s, last fingerprint %q; want 4m0s relaxed, same-response\ntrail: %q",
			relaxed.AdaptiveInterval, relaxed.LastFingerprint, relaxed.Trail)
	}

	command(t, js, events.VerbUpdated, events.TypeTaskUpdated, id, "update-1", events.TaskUpdate{TaskSpec: spec})
	again := storedState(t, s, id)
	if again.LastCommandID != "update-1" {
		t.Fatalf("the update was not applied: last command %q", again.LastCommandID)
	}
	if again.AdaptiveInterval != relaxed.AdaptiveInterval || again.LastFingerprint != relaxed.LastFingerprint ||
		again.UnchangedRuns != relaxed.UnchangedRuns || !again.FingerprintFrom.IsZero() {
		t.Errorf("the same spec applied again: adaptive interval %s, last fingerprint %q, unchanged runs %d, fingerprintFrom %s; want %s, %q, %d kept and no restart\ntrail: %q",
			again.AdaptiveInterval, again.LastFingerprint, again.UnchangedRuns, again.FingerprintFrom,
			relaxed.AdaptiveInterval, relaxed.LastFingerprint, relaxed.UnchangedRuns, again.Trail)
	}
}

// TestAnUpdateTriedAgainAfterItsSpecWriteRestartsAdaptive: an update
// tried again after its spec write (a crash before its schedule's) finds
// its own spec stored, but the schedule was decided with the spec before
// it, which the bucket no longer holds. Compared with its own spec, an
// update of the URL would keep the old URL's fingerprint and cadence; not
// known, the replaced spec restarts them. The schedule decided with the
// stored revision keeps them.
func TestAnUpdateTriedAgainAfterItsSpecWriteRestartsAdaptive(t *testing.T) {
	spec := minuteSpec("t")
	spec.Adaptive = &events.Adaptive{Mode: events.AdaptiveChange}
	st := ranAt(time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC))
	st.AdaptiveInterval, st.LastFingerprint, st.SpecRevision = 3*time.Minute, "seen", 4
	for _, c := range []struct {
		what     string
		stored   uint64 // the revision the update found its spec at
		restarts bool
	}{
		{"decided with the spec stored", 4, false},
		{"decided with an older spec", 5, true},
	} {
		step := Step{
			TaskID: "t", At: st.LastScheduledAt.Add(time.Second), Input: gov.Input{Kind: gov.KindUpdated}, Spec: spec,
			CommandID: "update-1", replaced: spec, replacedRevision: c.stored,
		}
		got := Apply(spec, st, step).State
		if restarted := got.AdaptiveInterval == 0 && got.LastFingerprint == ""; restarted != c.restarts {
			t.Errorf("%s: adaptive interval %s, last fingerprint %q; want restarted %v", c.what, got.AdaptiveInterval, got.LastFingerprint, c.restarts)
		}
	}
}
