package executor

import (
	"testing"
	"time"
)

// TestProgressDueOnlyForCallsThatCouldOutlastTheAckWait: InProgress is
// armed only for a call that could end with less than settleMargin of its
// delivery's AckWait left, and the first is due half an AckWait after the
// delivery.
func TestProgressDueOnlyForCallsThatCouldOutlastTheAckWait(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name    string
		waited  time.Duration // from the delivery to the call
		timeout time.Duration
		ackWait time.Duration
		armed   bool
		first   time.Duration
	}{
		{"default timeout, held for its lead", time.Second, 30 * time.Second, time.Minute, false, 0},
		{"default timeout, 10s in the queue", 10 * time.Second, 30 * time.Second, time.Minute, true, 20 * time.Second},
		{"default timeout, a minute in the queue", time.Minute, 30 * time.Second, time.Minute, true, 0},
		{"long timeout", 0, 45 * time.Second, time.Minute, true, 30 * time.Second},
		{"NATS target", 0, 5 * time.Second, time.Minute, false, 0},
		{"short AckWait", 0, 5 * time.Second, time.Second, true, 500 * time.Millisecond},
		{"short AckWait, short call", 0, 100 * time.Millisecond, time.Second, false, 0},
	} {
		first, armed := progressDue(t0.Add(c.waited), t0, c.timeout, c.ackWait)
		if armed != c.armed || first != c.first {
			t.Errorf("%s: progressDue = %v, %v; want %v, %v", c.name, first, armed, c.first, c.armed)
		}
	}
}
