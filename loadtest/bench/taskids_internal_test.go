package bench

import (
	"testing"

	"github.com/flyballhq/flyball/loadtest/stats"
)

// TestTaskIDsDifferPerSystem: every system of a tier names its tasks
// apart, so calls that one system still makes after its measurement (an
// external stack's executor finishing flyball's last slots) never count
// for another system: not in its runs/s, its duplicates (same
// Idempotency-Key task:ms) nor its lateness.
func TestTaskIDsDifferPerSystem(t *testing.T) {
	t.Parallel()
	tier := Tier{Name: TierW1a, Tasks: 3}
	for _, stack := range []string{StackInProcess, StackProcess, StackExternal} {
		r := &runner{cfg: Config{Stack: stack}, tag: "abc"}
		owner := map[string]string{}
		for _, sys := range []string{SystemFlyball, SystemFloor, SystemNATS, SystemPipeline} {
			for _, id := range r.taskIDs(tier, sys, tier.Tasks) {
				if other, ok := owner[id]; ok {
					t.Errorf("stack %s: %s and %s share task ID %s", stack, other, sys, id)
				}
				owner[id] = sys
			}
		}
	}
}

// TestWindowCallsCountOnlyTheSystemsTasks: runs/s counts the calls that
// arrived in the window for the measured system's tasks, whatever their
// slot; a call for another system's task (flyball's executor finishing on
// an external stack while the floor is measured) is not one of its runs.
func TestWindowCallsCountOnlyTheSystemsTasks(t *testing.T) {
	t.Parallel()
	w := stats.Window{From: 1000, To: 2000}
	g := stats.Grid{Interval: 100, Anchors: map[string]int64{"w1af-0000000": 0}}
	arrivals := []stats.Arrival{
		{At: 999, Task: "w1af-0000000"},                  // before the window
		{At: 1000, Task: "w1af-0000000"},                 // at its start
		{At: 1500, Task: "w1af-0000000", Scheduled: 100}, // an old slot, served late
		{At: 1500, Task: "w1a-0000000"},                  // flyball's, late
		{At: 2000, Task: "w1af-0000000"},                 // at its end
	}
	if got := windowCalls(arrivals, g, w); got != 2 {
		t.Errorf("windowCalls = %d, want 2: the system's own calls in [From, To)", got)
	}
}
