package governor_test

import (
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/governor"
)

// Nudging is a hint's rule: it keeps the run planned before only when
// the rules that outrank hints (docs/governor.md, Precedence: budget >
// quiet hours > hints) still allow it.
func TestNudgingKeepsOnlyWhatQuietHoursAndTheBudgetAllow(t *testing.T) {
	night := time.Date(2026, 3, 2, 23, 30, 0, 0, time.UTC) // last run; quiet 00:00-07:00 every 2h
	quiet := mustValid(t, withQuiet(intervalSpec(time.Hour), "00:00", "07:00", "UTC", 2*time.Hour))
	// Quiet hours added by an update after the 00:30 run was planned: the
	// update re-plans, and a hint then keeps that plan.
	before := governor.Decide(night.Add(2*time.Second), intervalSpec(time.Hour), ran(night), outcome("succeeded", night)).State
	afterUpdate := governor.Decide(night.Add(15*time.Minute), quiet, before, updated).State

	budget := mustValid(t, withBudget(intervalSpec(time.Hour), 2))
	// Two runs in hour 10 (10:00 and a requeued 10:30): used up until
	// 10:00 the next day.
	st := governor.Decide(t0, budget, governor.State{}, accepted).State
	st = governor.Decide(t0.Add(2*time.Second), budget, st, outcome("succeeded", t0)).State
	st = governor.Decide(t0.Add(30*time.Minute), budget, st, requeued).State
	usedUp := governor.Decide(t0.Add(30*time.Minute+3*time.Second), budget, st, outcome("succeeded", t0.Add(30*time.Minute))).State
	free := t0.Add(24 * time.Hour)
	// The same state with a run planned before the budget was used up
	// (stored under other rules: by an older flyball, or by hand).
	stale := usedUp
	stale.NextRunAt, stale.Source = t0.Add(12*time.Hour+30*time.Minute), governor.SourceBudget

	runDecideCases(t, []decideCase{
		{
			"quiet hours added by an update, then a hint: the update's plan is kept",
			given{quiet, afterUpdate, night.Add(20 * time.Minute), hinted(governor.Hint{Interval: 3 * time.Hour})},
			want{next: night.Add(2 * time.Hour), source: governor.SourceBaselineInterval},
		},
		{
			"a run planned in quiet hours under rules that did not hold it: a hint does not keep it",
			given{quiet, stateWith(ran(night), planned(night.Add(time.Hour), governor.SourceBaselineInterval)), night.Add(20 * time.Minute), hinted(governor.Hint{Interval: 3 * time.Hour})},
			want{next: night.Add(2 * time.Hour), source: governor.SourceBaselineInterval, check: notNudged},
		},
		{
			"the breaker's retryAt in quiet hours outranks them: kept",
			given{quiet, stateWith(ran(night), planned(night.Add(time.Hour), governor.SourceBreakerOpen), breakerOpenUntil(night.Add(time.Hour))), night.Add(20 * time.Minute), hinted(governor.Hint{Interval: 3 * time.Hour})},
			want{next: night.Add(time.Hour), source: governor.SourceBreakerOpen, trail: "nudge: the hint does not delay"},
		},
		{
			"budget used up, then an interval hint: the run at the hour that frees one is kept",
			given{budget, usedUp, t0.Add(time.Hour), hinted(governor.Hint{Interval: 30 * time.Hour})},
			want{next: free, source: governor.SourceBudget},
		},
		{
			"budget used up, then run-now: it waits for the budget",
			given{budget, usedUp, t0.Add(time.Hour), hinted(governor.Hint{At: t0.Add(time.Hour)})},
			want{next: free, source: governor.SourceBudget, trail: "budget used up"},
		},
		{
			"budget used up, a run planned before it stored: a hint does not keep it",
			given{budget, stale, t0.Add(time.Hour), hinted(governor.Hint{Interval: 30 * time.Hour})},
			want{next: free, source: governor.SourceBudget, trail: "budget used up", check: notNudged},
		},
	})
}

func notNudged(t *testing.T, d governor.Decision) {
	t.Helper()
	for _, l := range d.Trail {
		if len(l) >= 6 && l[:6] == "nudge:" {
			t.Errorf("nudged: %q", l)
		}
	}
}
