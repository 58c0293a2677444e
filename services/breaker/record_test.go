package breaker

import (
	"strconv"
	"testing"
	"time"
)

// TestRememberKeepsRecentOutcomes: the record remembers every outcome
// applied in the last appliedFor (up to appliedMax), and at least the last
// appliedKept, however old; a record written before AppliedAt existed
// keeps its names as the oldest.
func TestRememberKeepsRecentOutcomes(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	r := record{Applied: []string{"old1", "old2"}} // no AppliedAt: applied long ago
	for i := range 20 {
		r.remember("a"+strconv.Itoa(i), now)
	}
	if len(r.Applied) != 20 || len(r.AppliedAt) != 20 || !r.applied("a0") || r.applied("old1") {
		t.Fatalf("after 20 outcomes now: %v, want the 20, not the old ones", r.Applied)
	}
	later := now.Add(appliedFor + time.Second)
	r.remember("b", later)
	if len(r.Applied) != appliedKept || r.Applied[appliedKept-1] != "b" || len(r.AppliedAt) != appliedKept {
		t.Fatalf("one outcome past the horizon: %v, want the last %d", r.Applied, appliedKept)
	}
	for i := range appliedMax + 10 {
		r.remember("c"+strconv.Itoa(i), later)
	}
	if len(r.Applied) != appliedMax || !r.applied("c"+strconv.Itoa(appliedMax+9)) || r.applied("c9") {
		t.Fatalf("%d outcomes at once: kept %d, want the newest %d", appliedMax+10, len(r.Applied), appliedMax)
	}
}
