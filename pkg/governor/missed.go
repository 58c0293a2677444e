package governor

import (
	"time"

	"github.com/flyballhq/flyball/pkg/events"
)

// MissedUnderNone reports whether a dispatch of slot, planned by source,
// that first reaches an executor at now is a slot catchUp "none" drops: the
// task's next slot on its cadence (the interval, or the cron expression's
// next occurrence) has passed too, so two or more slots were missed. It
// returns that next slot. Only cadence slots are judged (a cadence
// source, baseline-cron, or a slot the budget or quiet hours placed,
// GapJudged); a hint, a requeue, a recheck, a retry backoff or a breaker
// probe asked for its time and runs late. A slot the budget or quiet hours
// placed was judged by neither before 2026-12-02, and ran however late:
// a */15 task with a budget of 24 a day whose 11:00 slot (source budget)
// was dispatched five hours late called its target then.
//
// gridStep and lastScheduledAt are the fields of the schedule that
// planned slot (State.GridStep, State.LastScheduledAt), as stored, or zero
// when unknown. They give the gap in force when slot was planned: the
// gridStep, the step of the grid slot is on, or else, when none is stored
// (an older state, a slot off the grid such as a cron slot clamped to
// bounds.min), slot − lastScheduledAt. A cadence the governor stretched
// past the spec's interval or cron gap (an adaptive relax, an idle or
// dormant task, bounds.min) has its next slot judged that far on, not one
// interval or cron occurrence on, which skipped a slot late by a little
// more than that although the next was still far ahead. A shorter gap (an
// adaptive tighten, a bounds.max under a cron gap) keeps the baseline, so
// a late slot is never skipped sooner than before. The gap from
// lastScheduledAt alone overstates the step once late slots were skipped:
// the slot then lies several steps past it (a 4m cadence whose 10:00
// outcome was applied at 10:09 plans 10:12), and a dispatch at 10:20 was
// judged against 10:24 and ran late although 10:16 had passed.
//
// After a downtime the timer fires each overdue slot at once, and the
// governor, which decides at each input's stored time, can plan a slot that
// had passed when it applied a backlog. Under "none" such a run is the
// late run the policy forbids: the executor skips it instead, and the
// governor plans the next slot from the skip.
func MissedUnderNone(spec *events.TaskSpec, source Source, gridStep time.Duration, lastScheduledAt, slot, now time.Time) (time.Time, bool) {
	if spec == nil || spec.CatchUp != events.CatchUpNone || !now.After(slot) {
		return time.Time{}, false
	}
	if !source.Cadence() && source != SourceBaselineCron && !GapJudged(source) {
		return time.Time{}, false
	}
	var next time.Time
	switch {
	case spec.Schedule.Interval > 0:
		// Jitter spreads a gap up to (1 + jitter) × the interval.
		gap := time.Duration(spec.Schedule.Interval)
		next = slot.Add(gap + time.Duration(spec.Jitter*float64(gap)))
	case spec.Schedule.Cron != "":
		sched, loc, err := cronSchedule(spec.Schedule.Cron, spec.Schedule.Timezone)
		if err != nil {
			return time.Time{}, false
		}
		// The slot may be its occurrence delayed by jitter, and so may the
		// next one: by up to jitter × the gap after it.
		if next = sched.Next(slot, loc); next.IsZero() {
			return time.Time{}, false
		}
		if spec.Jitter > 0 {
			after := sched.Next(next, loc)
			if after.IsZero() {
				return time.Time{}, false
			}
			next = next.Add(time.Duration(spec.Jitter * float64(after.Sub(next))))
		}
	default:
		return time.Time{}, false
	}
	// A cadence stretched past the baseline (for a cron task: bounds.min
	// past the gap to the next occurrence) puts its next slot the slot's
	// own gap on; jitter is in that gap already.
	step := gridStep
	if step <= 0 && !lastScheduledAt.IsZero() {
		step = slot.Sub(lastScheduledAt)
	}
	if source != SourceBaselineInterval && source != SourceBaselineCron && step > 0 {
		if stretched := slot.Add(step); stretched.After(next) {
			next = stretched
		}
	}
	return next, !now.Before(next)
}

// GapJudged reports whether MissedUnderNone judges a slot planned by
// source by the gap in force when it was planned (its gridStep and
// lastScheduledAt), when that puts the next slot further out than the
// spec's cadence: a cadence the governor stretched (adaptive, activity
// modes, bounds), and a slot the budget or quiet hours placed, whose next
// one is as far out (the budget's spacing, the quiet interval). An
// executor reads the stored schedule for it.
func GapJudged(source Source) bool {
	switch source {
	case SourceBudget, SourceQuietHours:
		return true
	}
	return source.Cadence() && source != SourceBaselineInterval
}
