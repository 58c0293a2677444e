package breaker

import (
	"testing"

	"github.com/flyballhq/flyball/pkg/events"
)

// TestSuccessIDMatchesOutcomeID: the header shortcut names a success by
// its event ID, as the executor publishes it (events.RunID), and must
// name it as the record does (outcomeID), or every success of a breaker
// that once closed is decoded, and the one whose closing failed to
// publish is acked without publishing it. Every other ID the executor
// gives a run event is no success: the body decides.
func TestSuccessIDMatchesOutcomeID(t *testing.T) {
	run := &events.Run{DispatchID: "t1:1796057183918", Attempt: 3}
	for _, suffix := range []events.RunIDSuffix{events.RunIDSucceeded, events.RunIDRecovered} {
		msgID := events.RunID(run.DispatchID, run.Attempt, suffix)
		if got, want := successID(msgID), outcomeID(run, true); got != want {
			t.Errorf("successID(%q) = %q, want %q", msgID, got, want)
		}
	}
	others := []string{"", "by-hand", ":succeeded", events.SkippedRunID(run.DispatchID)}
	for _, suffix := range []events.RunIDSuffix{events.RunIDStarted, events.RunIDFailed, events.RunIDFinal, events.RunIDExhausted} {
		others = append(others, events.RunID(run.DispatchID, run.Attempt, suffix))
	}
	for _, msgID := range others {
		if got := successID(msgID); got != "" {
			t.Errorf("successID(%q) = %q, want none", msgID, got)
		}
	}
}
