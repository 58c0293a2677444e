package governor_test

import (
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/pkg/governor"
)

func TestMissedUnderNone(t *testing.T) {
	none := func(s *events.TaskSpec) *events.TaskSpec { return withCatchUp(s, events.CatchUpNone, 0) }
	jittered := func(s *events.TaskSpec, j float64) *events.TaskSpec { s.Jitter = j; return s }
	slot := t0.Add(10 * time.Second)
	cases := []struct {
		name   string
		spec   *events.TaskSpec
		source governor.Source
		now    time.Time
		next   time.Time
		missed bool
		step   time.Duration // the schedule's gridStep (zero: none stored)
		last   time.Time     // the schedule's lastScheduledAt (zero: none)
	}{
		{"interval: the next slot passed", none(intervalSpec(10 * time.Second)), governor.SourceBaselineInterval, slot.Add(10 * time.Second), slot.Add(10 * time.Second), true, 0, time.Time{}},
		{"interval: late, the next slot still ahead", none(intervalSpec(10 * time.Second)), governor.SourceBaselineInterval, slot.Add(9 * time.Second), slot.Add(10 * time.Second), false, 0, time.Time{}},
		{"interval: jitter may push the next slot out", none(jittered(intervalSpec(10*time.Second), 0.2)), governor.SourceBaselineInterval, slot.Add(11 * time.Second), slot.Add(12 * time.Second), false, 0, time.Time{}},
		{"adaptive slot", none(intervalSpec(10 * time.Second)), governor.SourceAdaptiveRelax, slot.Add(time.Minute), slot.Add(10 * time.Second), true, 0, time.Time{}},
		{"cron: the next occurrence passed", none(cronSpec("*/10 * * * * *", "")), governor.SourceBaselineCron, slot.Add(45 * time.Second), slot.Add(10 * time.Second), true, 0, time.Time{}},
		{"cron: the next occurrence still ahead", none(cronSpec("*/10 * * * * *", "")), governor.SourceBaselineCron, slot.Add(9 * time.Second), slot.Add(10 * time.Second), false, 0, time.Time{}},
		{"cron, jitter: by the gap after the next occurrence", none(jittered(cronSpec("0 0 9,10 * * *", ""), 0.5)), governor.SourceBaselineCron, time.Date(2026, 3, 3, 9, 15, 0, 0, time.UTC), time.Date(2026, 3, 3, 9, 30, 0, 0, time.UTC), false, 0, time.Time{}},
		{"skip is not judged", intervalSpec(10 * time.Second), governor.SourceBaselineInterval, slot.Add(time.Hour), time.Time{}, false, 0, time.Time{}},
		{"all is not judged", withCatchUp(intervalSpec(10*time.Second), events.CatchUpAll, 0), governor.SourceBaselineInterval, slot.Add(time.Hour), time.Time{}, false, 0, time.Time{}},
		{"a one-shot hint runs late", none(intervalSpec(10 * time.Second)), governor.SourceHintOneShot, slot.Add(time.Hour), time.Time{}, false, 0, time.Time{}},
		{"a breaker probe runs late", none(intervalSpec(10 * time.Second)), governor.SourceBreakerOpen, slot.Add(time.Hour), time.Time{}, false, 0, time.Time{}},
		{"a requeue runs late", none(intervalSpec(10 * time.Second)), governor.SourceRequeue, slot.Add(time.Hour), time.Time{}, false, 0, time.Time{}},
		{"on time", none(intervalSpec(10 * time.Second)), governor.SourceBaselineInterval, slot, time.Time{}, false, 0, time.Time{}},
		{"a dormant slot: judged by the gap in force", none(intervalSpec(10 * time.Second)), governor.SourceActivityDormant, slot.Add(11 * time.Second), slot.Add(time.Minute), false, time.Minute, time.Time{}},
		{"a dormant slot: its next slot passed too", none(intervalSpec(10 * time.Second)), governor.SourceActivityDormant, slot.Add(time.Minute), slot.Add(time.Minute), true, time.Minute, time.Time{}},
		{"a tightened slot keeps the interval", none(intervalSpec(10 * time.Second)), governor.SourceAdaptiveTighten, slot.Add(6 * time.Second), slot.Add(10 * time.Second), false, 5 * time.Second, time.Time{}},
		{"a cron slot clamped to bounds.min: judged by its gap", none(cronSpec("0 */5 * * * *", "")), governor.SourceClampedMin, slot.Add(6 * time.Minute), slot.Add(time.Hour), false, time.Hour, time.Time{}},
		{"a cron slot clamped to bounds.min: its next slot passed too", none(cronSpec("0 */5 * * * *", "")), governor.SourceClampedMin, slot.Add(time.Hour), slot.Add(time.Hour), true, time.Hour, time.Time{}},
		{"a baseline cron slot keeps its next occurrence", none(cronSpec("*/10 * * * * *", "")), governor.SourceBaselineCron, slot.Add(10 * time.Second), slot.Add(10 * time.Second), true, time.Hour, time.Time{}},
		{"a baseline slot keeps the interval", none(intervalSpec(10 * time.Second)), governor.SourceBaselineInterval, slot.Add(11 * time.Second), slot.Add(10 * time.Second), true, time.Minute, time.Time{}},
		{"an older state's dormant slot: judged by its gap from lastScheduledAt", none(intervalSpec(10 * time.Second)), governor.SourceActivityDormant, slot.Add(11 * time.Second), slot.Add(time.Minute), false, 0, slot.Add(-time.Minute)},
		{"an older state's dormant slot: its next slot passed too", none(intervalSpec(10 * time.Second)), governor.SourceActivityDormant, slot.Add(time.Minute), slot.Add(time.Minute), true, 0, slot.Add(-time.Minute)},
		{"gridStep wins over the gap from lastScheduledAt", none(intervalSpec(10 * time.Second)), governor.SourceActivityDormant, slot.Add(time.Minute), slot.Add(time.Minute), true, time.Minute, slot.Add(-3 * time.Minute)},
		{"a budget slot: its next slot passed too", none(cronSpec("*/15 * * * *", "")), governor.SourceBudget, slot.Add(5 * time.Hour), slot.Add(time.Hour), true, 0, slot.Add(-time.Hour)},
		{"a budget slot: judged by its gap, late by less", none(cronSpec("*/15 * * * *", "")), governor.SourceBudget, slot.Add(30 * time.Minute), slot.Add(time.Hour), false, 0, slot.Add(-time.Hour)},
		{"a budget slot of an interval task: its next slot passed too", none(intervalSpec(time.Minute)), governor.SourceBudget, slot.Add(time.Hour), slot.Add(time.Hour), true, time.Hour, time.Time{}},
		{"a quiet-hours slot: its next slot passed too", none(intervalSpec(10 * time.Second)), governor.SourceQuietHours, slot.Add(time.Hour), slot.Add(5 * time.Minute), true, 0, slot.Add(-5 * time.Minute)},
		{"a quiet-hours slot: judged by its gap, late by less", none(intervalSpec(10 * time.Second)), governor.SourceQuietHours, slot.Add(time.Minute), slot.Add(5 * time.Minute), false, 0, slot.Add(-5 * time.Minute)},
		{"a quiet-hours cron slot: its next occurrence passed too", none(cronSpec("*/10 * * * * *", "")), governor.SourceQuietHours, slot.Add(time.Minute), slot.Add(10 * time.Second), true, 0, time.Time{}},
		{"a lastScheduledAt after the slot gives no gap", none(intervalSpec(10 * time.Second)), governor.SourceActivityDormant, slot.Add(10 * time.Second), slot.Add(10 * time.Second), true, 0, slot.Add(time.Minute)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			next, missed := governor.MissedUnderNone(c.spec, c.source, c.step, c.last, slot, c.now)
			if missed != c.missed || !next.Equal(c.next) {
				t.Fatalf("MissedUnderNone = %s, %v; want %s, %v", next.Format(time.RFC3339Nano), missed, c.next.Format(time.RFC3339Nano), c.missed)
			}
		})
	}
}

// A stretched cadence whose late slots were skipped plans its slot several
// steps past lastScheduledAt: the gap in force is one step, not the whole
// distance. A 1m task relaxed to 4m, its 10:00 outcome applied at 10:09,
// plans 10:12 (10:04 and 10:08 passed); dispatched at 10:20, the next
// slot 10:16 has passed too, and catchUp "none" skips it.
func TestALateSlotAfterSkippedSlotsIsJudgedByOneStep(t *testing.T) {
	spec := withCatchUp(withAdaptive(intervalSpec(time.Minute), events.AdaptiveChange, 0, 0, 0), events.CatchUpNone, 0)
	st := stateWith(ran(t0.Add(-4*time.Minute)), fingerprint("a"), unchangedRuns(7), adaptiveInterval(4*time.Minute))
	d := governor.Decide(t0.Add(9*time.Minute), spec, st, outcomeFP("succeeded", t0, "a"))
	slot := t0.Add(12 * time.Minute)
	if !d.NextRunAt.Equal(slot) || d.Source != governor.SourceAdaptiveRelax {
		t.Fatalf("planned %s (%s), want %s (adaptive-relax)", d.NextRunAt.Format(time.RFC3339), d.Source, slot.Format(time.RFC3339))
	}
	next, missed := governor.MissedUnderNone(spec, d.Source, d.State.GridStep, d.State.LastScheduledAt, slot, t0.Add(20*time.Minute))
	if want := t0.Add(16 * time.Minute); !missed || !next.Equal(want) {
		t.Fatalf("MissedUnderNone = %s, %v; want %s, true", next.Format(time.RFC3339), missed, want.Format(time.RFC3339))
	}
}
