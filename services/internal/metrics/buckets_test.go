package metrics

import (
	"math"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/flyballhq/flyball/pkg/events"
)

// TestRunDurationBucketsReachTheLongestTimeout: a target call may last up
// to events.MaxTargetTimeout (30 min), but flyball_run_duration_seconds
// stopped at 300 s: every longer call fell in +Inf, and its quantiles
// read 300 s whether calls took 6 or 29 minutes. Each call up to the
// longest timeout falls in a finite bucket at most twice its duration.
func TestRunDurationBucketsReachTheLongestTimeout(t *testing.T) {
	for _, d := range []time.Duration{301 * time.Second, 11 * time.Minute, 25 * time.Minute, events.MaxTargetTimeout} {
		m := New()
		m.RunDuration.Observe(d.Seconds())
		var out dto.Metric
		if err := m.RunDuration.Write(&out); err != nil {
			t.Fatal(err)
		}
		bound := math.Inf(1)
		for _, b := range out.GetHistogram().GetBucket() {
			if b.GetCumulativeCount() == 1 {
				bound = b.GetUpperBound()
				break
			}
		}
		if bound > 2*d.Seconds() {
			t.Errorf("a call of %v: first bucket holding it le=%v, want a finite one of at most %v s", d, bound, 2*d.Seconds())
		}
	}
}
