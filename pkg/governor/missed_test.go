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
		prev   time.Time // the schedule's previous slot (zero: unknown)
	}{
		{"interval: the next slot passed", none(intervalSpec(10 * time.Second)), governor.SourceBaselineInterval, slot.Add(10 * time.Second), slot.Add(10 * time.Second), true, time.Time{}},
		{"interval: late, the next slot still ahead", none(intervalSpec(10 * time.Second)), governor.SourceBaselineInterval, slot.Add(9 * time.Second), slot.Add(10 * time.Second), false, time.Time{}},
		{"interval: jitter may push the next slot out", none(jittered(intervalSpec(10*time.Second), 0.2)), governor.SourceBaselineInterval, slot.Add(11 * time.Second), slot.Add(12 * time.Second), false, time.Time{}},
		{"adaptive slot", none(intervalSpec(10 * time.Second)), governor.SourceAdaptiveRelax, slot.Add(time.Minute), slot.Add(10 * time.Second), true, time.Time{}},
		{"cron: the next occurrence passed", none(cronSpec("*/10 * * * * *", "")), governor.SourceBaselineCron, slot.Add(45 * time.Second), slot.Add(10 * time.Second), true, time.Time{}},
		{"cron: the next occurrence still ahead", none(cronSpec("*/10 * * * * *", "")), governor.SourceBaselineCron, slot.Add(9 * time.Second), slot.Add(10 * time.Second), false, time.Time{}},
		{"cron, jitter: by the gap after the next occurrence", none(jittered(cronSpec("0 0 9,10 * * *", ""), 0.5)), governor.SourceBaselineCron, time.Date(2026, 3, 3, 9, 15, 0, 0, time.UTC), time.Date(2026, 3, 3, 9, 30, 0, 0, time.UTC), false, time.Time{}},
		{"skip is not judged", intervalSpec(10 * time.Second), governor.SourceBaselineInterval, slot.Add(time.Hour), time.Time{}, false, time.Time{}},
		{"all is not judged", withCatchUp(intervalSpec(10*time.Second), events.CatchUpAll, 0), governor.SourceBaselineInterval, slot.Add(time.Hour), time.Time{}, false, time.Time{}},
		{"a one-shot hint runs late", none(intervalSpec(10 * time.Second)), governor.SourceHintOneShot, slot.Add(time.Hour), time.Time{}, false, time.Time{}},
		{"a breaker probe runs late", none(intervalSpec(10 * time.Second)), governor.SourceBreakerOpen, slot.Add(time.Hour), time.Time{}, false, time.Time{}},
		{"a requeue runs late", none(intervalSpec(10 * time.Second)), governor.SourceRequeue, slot.Add(time.Hour), time.Time{}, false, time.Time{}},
		{"on time", none(intervalSpec(10 * time.Second)), governor.SourceBaselineInterval, slot, time.Time{}, false, time.Time{}},
		{"a dormant slot: judged by the gap in force", none(intervalSpec(10 * time.Second)), governor.SourceActivityDormant, slot.Add(11 * time.Second), slot.Add(time.Minute), false, slot.Add(-time.Minute)},
		{"a dormant slot: its next slot passed too", none(intervalSpec(10 * time.Second)), governor.SourceActivityDormant, slot.Add(time.Minute), slot.Add(time.Minute), true, slot.Add(-time.Minute)},
		{"a tightened slot keeps the interval", none(intervalSpec(10 * time.Second)), governor.SourceAdaptiveTighten, slot.Add(6 * time.Second), slot.Add(10 * time.Second), false, slot.Add(-5 * time.Second)},
		{"a cron slot clamped to bounds.min: judged by its gap", none(cronSpec("0 */5 * * * *", "")), governor.SourceClampedMin, slot.Add(6 * time.Minute), slot.Add(time.Hour), false, slot.Add(-time.Hour)},
		{"a cron slot clamped to bounds.min: its next slot passed too", none(cronSpec("0 */5 * * * *", "")), governor.SourceClampedMin, slot.Add(time.Hour), slot.Add(time.Hour), true, slot.Add(-time.Hour)},
		{"a baseline cron slot keeps its next occurrence", none(cronSpec("*/10 * * * * *", "")), governor.SourceBaselineCron, slot.Add(10 * time.Second), slot.Add(10 * time.Second), true, slot.Add(-time.Hour)},
		{"a baseline slot keeps the interval", none(intervalSpec(10 * time.Second)), governor.SourceBaselineInterval, slot.Add(11 * time.Second), slot.Add(10 * time.Second), true, slot.Add(-time.Minute)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			next, missed := governor.MissedUnderNone(c.spec, c.source, c.prev, slot, c.now)
			if missed != c.missed || !next.Equal(c.next) {
				t.Fatalf("MissedUnderNone = %s, %v; want %s, %v", next.Format(time.RFC3339Nano), missed, c.next.Format(time.RFC3339Nano), c.missed)
			}
		})
	}
}
