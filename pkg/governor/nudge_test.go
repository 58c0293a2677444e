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

// The run a timed pause leads to is planned as a resume at its end would
// plan it (source paused until then). Once the pause has ended, a hint
// that would only delay that run keeps it, as it keeps the run a resume
// planned, and labels it as the resume did: the pause is over.
func TestNudgingKeepsTheRunAfterAnEndedPause(t *testing.T) {
	hourly := intervalSpec(time.Hour)
	nine := t0.Add(-time.Hour) // last run 09:00
	end := nine.Add(30 * time.Minute)
	pauseIn := governor.Input{Kind: governor.KindPaused, Pause: &governor.Pause{Until: end}}
	paused := governor.Decide(nine.Add(5*time.Minute), hourly, ran(nine), pauseIn)
	if !paused.NextRunAt.Equal(t0) || paused.Source != governor.SourcePaused {
		t.Fatalf("pause until 09:30: next %s (%s), want 10:00 (paused)", fmtT(paused.NextRunAt), paused.Source)
	}
	resumed := governor.Decide(end.Add(5*time.Minute), hourly, paused.State, governor.Input{Kind: governor.KindResumed})
	if !resumed.NextRunAt.Equal(t0) || resumed.Source != governor.SourceBaselineInterval {
		t.Fatalf("resume at 09:35: next %s (%s), want 10:00 (baseline-interval)", fmtT(resumed.NextRunAt), resumed.Source)
	}
	hint := hinted(governor.Hint{Interval: 2 * time.Hour, TTL: 3 * time.Hour})

	runDecideCases(t, []decideCase{
		{
			"resumed, then a 2h hint at 09:40: the 10:00 run is kept",
			given{hourly, resumed.State, end.Add(10 * time.Minute), hint},
			want{next: t0, source: governor.SourceBaselineInterval, trail: "nudge: the hint does not delay"},
		},
		{
			"pause ended at 09:30 (no resume), then a 2h hint at 09:40: the 10:00 run is kept, labelled as a resume labels it",
			given{hourly, paused.State, end.Add(10 * time.Minute), hint},
			want{next: t0, source: governor.SourceBaselineInterval, trail: "nudge: the hint does not delay", check: func(t *testing.T, d governor.Decision) {
				if d.State.Paused || !d.State.PausedUntil.IsZero() {
					t.Errorf("still paused after the pause ended: Paused %v, PausedUntil %s", d.State.Paused, fmtT(d.State.PausedUntil))
				}
				if d.State.IntervalHint == nil {
					t.Error("hint not stored")
				}
				// A later input sees a running schedule: a spec update
				// while the kept run is in flight keeps it, as after a
				// resume (labelled paused, with the pause gone, it was no
				// slot in flight, and the update re-planned it to 11:00).
				u := governor.Decide(t0.Add(-time.Second), hourly, d.State, updated)
				if !u.NextRunAt.Equal(t0) || u.Source != governor.SourceBaselineInterval {
					t.Errorf("update at 09:59:59, the kept run in flight: next %s (%s), want 10:00 kept\ntrail: %q", fmtT(u.NextRunAt), u.Source, u.Trail)
				}
			}},
		},
		{
			"a 2h hint during the pause (09:20): no run inside the pause (the run after it is planned as a resume at its end would)",
			given{hourly, paused.State, nine.Add(20 * time.Minute), hint},
			want{next: nine.Add(2 * time.Hour), source: governor.SourcePaused, check: func(t *testing.T, d governor.Decision) {
				if d.NextRunAt.Before(end) {
					t.Errorf("run %s inside the pause until %s", fmtT(d.NextRunAt), fmtT(end))
				}
				if !d.State.Paused || !d.State.PausedUntil.Equal(end) {
					t.Errorf("pause lost: Paused %v, PausedUntil %s", d.State.Paused, fmtT(d.State.PausedUntil))
				}
			}},
		},
		{
			"a run-now hint during the pause: at the pause's end, not inside it",
			given{hourly, paused.State, nine.Add(20 * time.Minute), hinted(governor.Hint{At: nine.Add(20 * time.Minute), TTL: time.Hour})},
			want{next: end, source: governor.SourcePaused, check: func(t *testing.T, d governor.Decision) {
				if d.NextRunAt.Before(end) {
					t.Errorf("run %s inside the pause until %s", fmtT(d.NextRunAt), fmtT(end))
				}
			}},
		},
	})
}
