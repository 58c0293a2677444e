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

// With adaptive cadence in mode "change", a changed response tightens the
// interval toward its floor and unchanged responses relax it again, through
// an exponential moving average so the cadence does not flap.
func ExampleDecide_adaptive() {
	spec := &events.TaskSpec{
		ID:       "orders-feed",
		Target:   events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/orders"}},
		Schedule: events.Schedule{Interval: events.Duration(time.Minute)},
		Adaptive: &events.Adaptive{Mode: events.AdaptiveChange, UnchangedRuns: 2},
	}
	spec.Normalize()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	d := governor.Decide(now, spec, governor.State{}, governor.Input{Kind: governor.KindAccepted})
	for _, body := range []string{"v1", "v2", "v3", "v3", "v3", "v3"} {
		slot := d.NextRunAt
		now = slot.Add(time.Second)
		d = governor.Decide(now, spec, d.State, governor.Input{Kind: governor.KindOutcome, Outcome: &governor.Outcome{
			DispatchID: events.DispatchID(spec.ID, slot), ScheduledAt: slot, Result: "succeeded", FinishedAt: now, Fingerprint: body,
		}})
		fmt.Printf("%s -> %-16s every %s\n", body, d.Source, d.NextRunAt.Sub(slot))
	}
	// Output:
	// v1 -> baseline-interval every 1m0s
	// v2 -> adaptive-tighten every 37.5s
	// v3 -> adaptive-tighten every 26.25s
	// v3 -> adaptive-tighten every 26.25s
	// v3 -> adaptive-relax   every 2m13.125s
	// v3 -> adaptive-relax   every 3m6.563s
}

// A run that fails for good holds the task for a recheck 30 minutes
// out, whatever its breaker says meanwhile; the dead-letter entry written
// from that failure changes nothing more, an operator's requeue runs the
// task at once, and the entry arriving only after the requeue (the
// dead-letter service was down) does not undo it.
func ExampleDecide_breakerAndDeadLetter() {
	spec := &events.TaskSpec{
		ID:       "billing-sync",
		Target:   events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/sync"}},
		Schedule: events.Schedule{Interval: events.Duration(10 * time.Second)},
	}
	spec.Normalize()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	d := governor.Decide(now, spec, governor.State{}, governor.Input{Kind: governor.KindAccepted})
	show := func(what string) { fmt.Printf("%-13s %-18s %s\n", what, d.Source, d.NextRunAt.Format("15:04:05")) }

	// The first run fails for good (its last attempt); then its breaker opens.
	d = governor.Decide(now.Add(time.Second), spec, d.State, governor.Input{
		Kind:    governor.KindOutcome,
		Outcome: &governor.Outcome{DispatchID: "billing-sync:1", ScheduledAt: now, Result: "failed", DeadLetterReason: "max-attempts"},
	})
	show("failed")
	now = now.Add(2 * time.Second)
	d = governor.Decide(now, spec, d.State, governor.Input{
		Kind:    governor.KindBreaker,
		Breaker: &governor.BreakerSignal{State: "open", RetryAt: now.Add(time.Minute)},
	})
	show("breaker open")
	entry := governor.Input{
		Kind:       governor.KindDeadLettered,
		DeadLetter: &governor.DeadLetterSignal{DispatchID: "billing-sync:1", Reason: "max-attempts", At: now, ScheduledAt: now.Add(-2 * time.Second)},
	}
	d = governor.Decide(now, spec, d.State, entry)
	show("dead-letter")
	now = now.Add(5 * time.Minute)
	d = governor.Decide(now, spec, d.State, governor.Input{Kind: governor.KindRequeued})
	show("requeued")
	late := *entry.DeadLetter
	late.At = now.Add(time.Second)
	d = governor.Decide(now.Add(time.Second), spec, d.State, governor.Input{Kind: governor.KindDeadLettered, DeadLetter: &late})
	show("late entry")
	// Output:
	// failed        deadletter-recheck 12:30:01
	// breaker open  deadletter-recheck 12:30:01
	// dead-letter   deadletter-recheck 12:30:01
	// requeued      requeue            12:05:02
	// late entry    requeue            12:05:02
}

// Every decision explains itself: the trail lists the rules that applied,
// here quiet hours and the daily budget of an interval task.
func ExampleDecide_trail() {
	spec := &events.TaskSpec{
		ID:         "inventory",
		Target:     events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/inventory"}},
		Schedule:   events.Schedule{Interval: events.Duration(time.Minute)},
		QuietHours: &events.QuietHours{Start: "00:00", End: "07:00", Timezone: "Europe/London", Interval: events.Duration(5 * time.Minute)},
		Budget:     &events.Budget{MaxRunsPerDay: 144},
	}
	spec.Normalize()
	slot := time.Date(2026, 1, 15, 2, 0, 0, 0, time.UTC)
	st := governor.State{TaskID: spec.ID, LastScheduledAt: slot.Add(-10 * time.Minute), Runs: 1}
	d := governor.Decide(slot.Add(time.Second), spec, st, governor.Input{Kind: governor.KindOutcome, Outcome: &governor.Outcome{
		DispatchID: events.DispatchID(spec.ID, slot), ScheduledAt: slot, Result: "succeeded", FinishedAt: slot.Add(time.Second),
	}})
	fmt.Println(d.NextRunAt.Format(time.RFC3339), d.Source)
	for _, line := range d.Trail {
		fmt.Println(" ", line)
	}
	// Output:
	// 2026-01-15T02:10:00Z budget
	//   baseline-interval: 1m0s after the slot of 2026-01-15T02:00:00.000Z
	//   quiet-hours: quiet hours 00:00-07:00 Europe/London: interval 5m0s after the slot of 2026-01-15T02:00:00.000Z
	//   budget: budget of 144 runs a day: runs at least 10m0s apart
}
