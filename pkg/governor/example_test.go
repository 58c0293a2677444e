package governor_test

import (
	"fmt"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/pkg/governor"
)

// An interval task runs at once when accepted, then every interval on the
// grid anchored at its first run, backing off after a failure.
func ExampleDecide() {
	spec := &events.TaskSpec{
		ID:       "poll-prices",
		Target:   events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/prices"}},
		Schedule: events.Schedule{Interval: events.Duration(30 * time.Second)},
	}
	spec.Normalize()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

	d := governor.Decide(now, spec, governor.State{}, governor.Input{Kind: governor.KindAccepted})
	fmt.Println(d.Source, d.NextRunAt.Format(time.RFC3339))

	for _, result := range []string{"succeeded", "failed", "failed"} {
		slot := d.NextRunAt
		now = slot.Add(2 * time.Second)
		d = governor.Decide(now, spec, d.State, governor.Input{Kind: governor.KindOutcome, Outcome: &governor.Outcome{
			DispatchID: events.DispatchID(spec.ID, slot), ScheduledAt: slot, Result: result, FinishedAt: now,
		}})
		fmt.Println(result, "->", d.Source, d.NextRunAt.Format(time.RFC3339))
	}
	// Output:
	// baseline-interval 2026-03-01T12:00:00Z
	// succeeded -> baseline-interval 2026-03-01T12:00:30Z
	// failed -> failure-backoff 2026-03-01T12:01:30Z
	// failed -> failure-backoff 2026-03-01T12:03:30Z
}
