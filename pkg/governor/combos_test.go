package governor_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/cron"
	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/pkg/governor"
)

// TestDecidePrecedence starts with every rule active, each proposing a
// different time, and removes the winner one at a time: the source walks
// down the documented precedence
// pause > clamps > dead-letter > breaker > budget > hints > adaptive > baseline
// (the recheck, 2h out, is past the budget's 30m, which it must keep).
func TestDecidePrecedence(t *testing.T) {
	spec := withBudget(withAdaptive(intervalSpec(10*time.Minute), events.AdaptiveChange, 0, 0, 0), 48) // 30m apart
	spec.Bounds = &events.Bounds{Max: events.Duration(90 * time.Minute)}
	mustValid(t, spec)
	st := stateWith(ran(t0),
		adaptiveInterval(20*time.Minute),
		oneShotHint(t0.Add(5*time.Minute), t0.Add(24*time.Hour)),
		breakerOpenUntil(t0.Add(time.Hour)),
		deadLettered(t0, t0.Add(2*time.Hour)),
		pausedUntil(t0.Add(5*time.Hour)),
	)
	now := t0.Add(time.Second)
	steps := []struct {
		remove func(*events.TaskSpec, *governor.State)
		next   time.Time
		source governor.Source
	}{
		{func(*events.TaskSpec, *governor.State) {}, t0.Add(5 * time.Hour), governor.SourcePaused},
		{func(_ *events.TaskSpec, s *governor.State) { s.Paused, s.PausedUntil = false, time.Time{} }, t0.Add(90 * time.Minute), governor.SourceClampedMax},
		{func(sp *events.TaskSpec, _ *governor.State) { sp.Bounds = nil }, t0.Add(2 * time.Hour), governor.SourceDeadLetterRecheck},
		{func(_ *events.TaskSpec, s *governor.State) { s.DeadLetter = nil }, t0.Add(time.Hour), governor.SourceBreakerOpen},
		{func(_ *events.TaskSpec, s *governor.State) { s.BreakerOpenUntil = time.Time{} }, t0.Add(30 * time.Minute), governor.SourceBudget},
		{func(sp *events.TaskSpec, _ *governor.State) { sp.Budget = nil }, t0.Add(5 * time.Minute), governor.SourceHintOneShot},
		{func(_ *events.TaskSpec, s *governor.State) { s.OneShotHint = nil }, t0.Add(20 * time.Minute), governor.SourceAdaptiveRelax},
		{func(sp *events.TaskSpec, _ *governor.State) { sp.Adaptive = nil }, t0.Add(10 * time.Minute), governor.SourceBaselineInterval},
	}
	for _, step := range steps {
		step.remove(spec, &st)
		d := governor.Decide(now, spec, st, hinted(governor.Hint{})) // re-decide (an update restarts adaptive cadence)
		if !d.NextRunAt.Equal(step.next) || d.Source != step.source {
			t.Fatalf("got %s %s, want %s %s\ntrail: %q", d.Source, fmtT(d.NextRunAt), step.source, fmtT(step.next), d.Trail)
		}
	}
}

func TestDecideCombinations(t *testing.T) {
	night := func(h, m int) time.Time { return time.Date(2026, 1, 15, h, m, 0, 0, time.UTC) }
	quiet := func(every, q time.Duration) *events.TaskSpec {
		return withQuiet(intervalSpec(every), "00:00", "07:00", "UTC", q)
	}
	runDecideCases(t, []decideCase{
		// hints and clamps
		{
			"interval hint above bounds.max",
			given{withBounds(intervalSpec(time.Minute), 0, 10*time.Minute), ran(t0), t0.Add(time.Second), hinted(governor.Hint{Interval: time.Hour})},
			want{next: t0.Add(10 * time.Minute), source: governor.SourceClampedMax},
		},
		{
			"one-shot and interval hint below bounds.min",
			given{withBounds(intervalSpec(time.Hour), 5*time.Minute, 0), ran(t0), t0.Add(time.Second), hinted(governor.Hint{Interval: time.Minute, At: t0.Add(time.Second)})},
			want{next: t0.Add(5 * time.Minute), source: governor.SourceClampedMin},
		},
		// pause over everything
		{
			"pause over breaker: the run after the pause waits for retryAt",
			given{intervalSpec(time.Minute), stateWith(ran(t0), breakerOpenUntil(t0.Add(2*time.Hour))), t0.Add(time.Second), governor.Input{Kind: governor.KindPaused, Pause: &governor.Pause{Until: t0.Add(time.Hour)}}},
			want{next: t0.Add(2 * time.Hour), source: governor.SourcePaused},
		},
		{
			"indefinite pause over requeue (kept for the resume)",
			given{intervalSpec(time.Minute), stateWith(ran(t0), func(s *governor.State) { s.Paused = true }), t0.Add(time.Minute), requeued},
			want{source: governor.SourcePaused, check: func(t *testing.T, d governor.Decision) {
				r := governor.Decide(t0.Add(2*time.Minute), intervalSpec(time.Minute), d.State, governor.Input{Kind: governor.KindResumed})
				if r.Source != governor.SourceRequeue || !r.NextRunAt.Equal(t0.Add(2*time.Minute)) {
					t.Errorf("after resume: %s %s", r.Source, fmtT(r.NextRunAt))
				}
			}},
		},
		{
			"pause over dead-letter recheck",
			given{intervalSpec(time.Minute), stateWith(ran(t0), deadLettered(t0, t0.Add(30*time.Minute)), pausedUntil(t0.Add(time.Hour))), t0.Add(time.Second), updated},
			want{next: t0.Add(time.Hour), source: governor.SourcePaused},
		},
		// breaker
		{
			"breaker over a one-shot hint",
			given{intervalSpec(time.Minute), stateWith(ran(t0), breakerOpenUntil(t0.Add(5*time.Minute))), t0.Add(time.Second), hinted(governor.Hint{At: t0.Add(time.Second)})},
			want{next: t0.Add(5 * time.Minute), source: governor.SourceBreakerOpen},
		},
		{
			"breaker over an interval hint",
			given{intervalSpec(time.Hour), stateWith(ran(t0), breakerOpenUntil(t0.Add(5*time.Minute))), t0.Add(time.Second), hinted(governor.Hint{Interval: time.Minute})},
			want{next: t0.Add(5 * time.Minute), source: governor.SourceBreakerOpen},
		},
		{
			"clamps over breaker: bounds.max dispatches before retryAt",
			given{withBounds(intervalSpec(time.Minute), 0, 10*time.Minute), stateWith(ran(t0), breakerOpenUntil(t0.Add(time.Hour))), t0.Add(time.Second), updated},
			want{next: t0.Add(10 * time.Minute), source: governor.SourceClampedMax},
		},
		{
			"breaker over budget when later",
			given{withBudget(intervalSpec(time.Second), 1440), stateWith(ran(t0), breakerOpenUntil(t0.Add(5*time.Minute))), t0.Add(time.Second), updated},
			want{next: t0.Add(5 * time.Minute), source: governor.SourceBreakerOpen},
		},
		{
			"budget stays when later than retryAt",
			given{withBudget(intervalSpec(time.Second), 24), stateWith(ran(t0), breakerOpenUntil(t0.Add(5*time.Minute))), t0.Add(time.Second), updated},
			want{next: t0.Add(time.Hour), source: governor.SourceBudget, trail: "already later"},
		},
		// dead-letter and requeue
		{
			"dead-letter recheck over breaker",
			given{intervalSpec(time.Minute), stateWith(ran(t0), breakerOpenUntil(t0.Add(2*time.Hour)), deadLettered(t0, t0.Add(30*time.Minute))), t0.Add(time.Second), updated},
			want{next: t0.Add(30 * time.Minute), source: governor.SourceDeadLetterRecheck},
		},
		{
			"requeue over breaker (the executor defers the delivery)",
			given{intervalSpec(time.Minute), stateWith(ran(t0), breakerOpenUntil(t0.Add(2*time.Hour))), t0.Add(time.Minute), requeued},
			want{next: t0.Add(time.Minute), source: governor.SourceRequeue},
		},
		{
			"requeue over budget",
			given{withBudget(intervalSpec(time.Minute), 1), ran(t0), t0.Add(time.Minute), requeued},
			want{next: t0.Add(time.Minute), source: governor.SourceRequeue},
		},
		{
			"clamps over dead-letter recheck",
			given{withBounds(intervalSpec(time.Minute), 0, 10*time.Minute), stateWith(ran(t0), deadLettered(t0, t0.Add(30*time.Minute))), t0.Add(time.Second), updated},
			want{next: t0.Add(10 * time.Minute), source: governor.SourceClampedMax},
		},
		{
			"bounds.min over requeue",
			given{withBounds(intervalSpec(time.Hour), 5*time.Minute, 0), ran(t0), t0.Add(time.Minute), requeued},
			want{next: t0.Add(5 * time.Minute), source: governor.SourceClampedMin},
		},
		// budget and quiet hours
		{
			"budget over a one-shot hint",
			given{withBudget(intervalSpec(24*time.Hour), 24), ran(t0), t0.Add(time.Second), hinted(governor.Hint{At: t0.Add(time.Second)})},
			want{next: t0.Add(time.Hour), source: governor.SourceBudget},
		},
		{
			"budget over catch-up",
			given{withBudget(intervalSpec(time.Minute), 24), ran(t0), t0.Add(10 * time.Minute), updated},
			want{next: t0.Add(time.Hour), source: governor.SourceBudget, trail: "catch-up"},
		},
		{
			"quiet hours then budget: the budget stretches the quiet interval",
			given{withBudget(quiet(time.Hour, 5*time.Minute), 96), ran(night(3, 0)), night(3, 0).Add(time.Second), updated},
			want{next: night(3, 15), source: governor.SourceBudget, trail: "quiet hours"},
		},
		{
			"quiet hours then budget: a longer quiet interval stays",
			given{withBudget(quiet(time.Minute, 30*time.Minute), 96), ran(night(3, 0)), night(3, 0).Add(time.Second), updated},
			want{next: night(3, 30), source: governor.SourceQuietHours},
		},
		{
			"quiet hours over an interval hint",
			given{quiet(time.Hour, 30*time.Minute), ran(night(3, 0)), night(3, 0).Add(time.Second), hinted(governor.Hint{Interval: time.Minute})},
			want{next: night(3, 30), source: governor.SourceQuietHours},
		},
		{
			"quiet hours space a catch-up run",
			given{quiet(time.Minute, 30*time.Minute), ran(night(1, 0)), night(1, 5), updated},
			want{next: night(1, 30), source: governor.SourceQuietHours, trail: "catch-up"},
		},
		{
			"breaker over quiet hours",
			given{quiet(time.Minute, 30*time.Minute), stateWith(ran(night(3, 0)), breakerOpenUntil(night(4, 0))), night(3, 0).Add(time.Second), updated},
			want{next: night(4, 0), source: governor.SourceBreakerOpen},
		},
		// adaptive and activity under clamps
		{
			"adaptive + activity stretched past bounds.max",
			given{withBounds(withActivity(changeSpec()), 0, 5*time.Minute), stateWith(ran(t0), adaptiveInterval(4*time.Minute), lastActivity(t0.Add(-48*time.Hour))), t0.Add(time.Second), updated},
			want{next: t0.Add(5 * time.Minute), source: governor.SourceClampedMax, trail: "activity-dormant"},
		},
		{
			"adaptive tightening stops at bounds.min",
			given{withBounds(withAdaptive(intervalSpec(time.Minute), events.AdaptiveChange, 0, 1, 0), 20*time.Second, 0), stateWith(ran(t0.Add(-time.Minute)), fingerprint("a")), t0.Add(time.Second), outcomeFP("succeeded", t0, "b")},
			want{next: t0.Add(20 * time.Second), source: governor.SourceAdaptiveTighten},
		},
		{
			"an interval hint below bounds.min over adaptive",
			given{withBounds(changeSpec(), 20*time.Second, 0), stateWith(ran(t0), adaptiveInterval(30*time.Second)), t0.Add(time.Second), hinted(governor.Hint{Interval: time.Second})},
			want{next: t0.Add(20 * time.Second), source: governor.SourceClampedMin},
		},
		{
			"hint over activity",
			given{withActivity(intervalSpec(time.Minute)), stateWith(ran(t0), lastActivity(t0.Add(-48*time.Hour)), intervalHint(2*time.Minute, t0.Add(time.Hour))), t0.Add(time.Second), updated},
			want{next: t0.Add(2 * time.Minute), source: governor.SourceHintInterval},
		},
	})
}

// Decide is safe for concurrent use: the only shared state is the cache of
// parsed schedules, filled here (with expressions no other test uses) while
// other goroutines read it.
func TestDecideConcurrent(t *testing.T) {
	exprs := []string{"7 3 */2 * *", "11 */3 * * 1-5", "13 13 13 * *", "17 */7 * * *", "19 4 * * SUN", "23 1 1 */2 *"}
	zones := []string{"UTC", "Europe/Berlin", "America/New_York", "Asia/Kathmandu"}
	want := map[string]time.Time{}
	for _, e := range exprs {
		for _, z := range zones {
			s, err := cron.Parse(e)
			if err != nil {
				t.Fatal(err)
			}
			loc, err := time.LoadLocation(z)
			if err != nil {
				t.Fatal(err)
			}
			want[e+z] = s.Next(t0, loc)
		}
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				k := (g + i) % len(exprs)
				e, z := exprs[k], zones[(g*i+i/3)%len(zones)]
				// A 1s quiet interval never thins these schedules, but
				// makes Decide look up (and cache) the window's edges too.
				minute := strconv.Itoa(41 + k)
				spec := withQuiet(cronSpec(e, z), "01:"+minute, "05:"+minute, z, time.Second)
				if spec.Validate() != nil {
					t.Error("invalid quiet hours")
					return
				}
				d := governor.Decide(t0, spec, ran(t0), updated)
				if !d.NextRunAt.Equal(want[e+z]) {
					t.Errorf("%s %s: %s, want %s", e, z, fmtT(d.NextRunAt), fmtT(want[e+z]))
					return
				}
			}
		})
	}
	wg.Wait()
}
