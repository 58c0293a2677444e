package natstest

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestSettleRetriesUntilTheCallSucceeds checks that Settle tries again
// after a failure, each try with its own deadline, and returns the value
// of the first success.
func TestSettleRetriesUntilTheCallSucceeds(t *testing.T) {
	t.Parallel()
	tries := 0
	got := Settle(t, time.Minute, "flaky call", func(ctx context.Context) (int, error) {
		tries++
		if _, ok := ctx.Deadline(); !ok {
			t.Error("a try without a deadline of its own")
		}
		if tries < 3 {
			return 0, errors.New("context deadline exceeded")
		}
		return 42, nil
	})
	if got != 42 || tries != 3 {
		t.Fatalf("Settle = %d after %d tries, want 42 after 3", got, tries)
	}
}
