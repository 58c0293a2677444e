package deadletter_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/flyballhq/flyball/streams"
)

// TestAttemptLookupsLeaveNoConsumers: each dead letter reads its
// attempts back from RUNS through an ordered consumer. Its last consumer
// was left to nats.go's default inactive threshold, 5 minutes, so a burst
// of dead letters left one idle consumer on RUNS per dead letter for
// those 5 minutes (thousands in a large burst). Each lookup now deletes
// its consumer when done (and sets a 30 s threshold, should that delete
// fail).
func TestAttemptLookupsLeaveNoConsumers(t *testing.T) {
	h := newHarness(t)
	consumers := func() int {
		st, err := h.js.Stream(t.Context(), streams.StreamRuns)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Consumers
	}
	base := consumers()
	const n = 20
	for i := range n {
		h.failed("t1", fmt.Sprintf(`{"dispatchId":"t1:%d","taskId":"t1","scheduledAt":"2026-03-02T09:00:00Z","attempt":1,"final":true,"error":"status 500",`+
			`"dispatch":{"dispatchId":"t1:%[1]d","taskId":"t1","scheduledAt":"2026-03-02T09:00:00Z"}}`, i))
	}
	if got := h.entries("t1"); got != n {
		t.Fatalf("%d dead letters stored, want %d", got, n)
	}
	last := 0
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if last = consumers(); last <= base {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %d consumers on RUNS after %d dead letters, want the %d there were before", last, n, base)
		}
		<-tick.C
	}
}
