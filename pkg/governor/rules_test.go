package governor_test

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/pkg/governor"
)

func changeSpec() *events.TaskSpec {
	return withAdaptive(intervalSpec(time.Minute), events.AdaptiveChange, 0, 0, 0)
}

func TestDecideAdaptiveChange(t *testing.T) {
	slot := t0.Add(time.Minute)
	now := slot.Add(2 * time.Second)
	interval := func(want time.Duration) func(*testing.T, governor.Decision) {
		return func(t *testing.T, d governor.Decision) {
			t.Helper()
			if d.State.AdaptiveInterval != want {
				t.Errorf("AdaptiveInterval = %s, want %s", d.State.AdaptiveInterval, want)
			}
		}
	}
	runDecideCases(t, []decideCase{
		{
			"first fingerprint is recorded, cadence held",
			given{changeSpec(), ran(t0), now, outcomeFP("succeeded", slot, "a")},
			want{
				next: slot.Add(time.Minute), source: governor.SourceBaselineInterval, trail: "first fingerprint recorded",
				check: func(t *testing.T, d governor.Decision) {
					if d.State.LastFingerprint != "a" || d.State.AdaptiveInterval != 0 {
						t.Errorf("state %+v", d.State)
					}
				},
			},
		},
		{
			"a changed response tightens halfway to the floor (baseline/4)",
			given{changeSpec(), stateWith(ran(t0), fingerprint("a")), now, outcomeFP("succeeded", slot, "b")},
			want{
				next: slot.Add(37500 * time.Millisecond), source: governor.SourceAdaptiveTighten, trail: "response changed: interval 1m0s → 37.5s (toward 15s",
				check: func(t *testing.T, d governor.Decision) {
					if d.State.AdaptiveInterval != 37500*time.Millisecond || d.State.LastFingerprint != "b" || !d.State.LastActivityAt.Equal(now) {
						t.Errorf("state %+v", d.State)
					}
				},
			},
		},
		{
			"a failed run tightens too, and backoff still applies",
			given{changeSpec(), stateWith(ran(t0), fingerprint("a")), now, outcome("failed", slot)},
			want{next: slot.Add(75 * time.Second), source: governor.SourceBackoff, trail: "run failed: interval 1m0s → 37.5s", check: interval(37500 * time.Millisecond)},
		},
		{
			"unchanged runs below unchangedRuns hold the cadence",
			given{changeSpec(), stateWith(ran(t0), fingerprint("a"), adaptiveInterval(30*time.Second)), now, outcomeFP("succeeded", slot, "a")},
			want{next: slot.Add(30 * time.Second), source: governor.SourceAdaptiveTighten, trail: "unchanged (1 of 3 runs): cadence held", check: func(t *testing.T, d governor.Decision) {
				if d.State.UnchangedRuns != 1 || d.State.AdaptiveInterval != 30*time.Second {
					t.Errorf("state %+v", d.State)
				}
			}},
		},
		{
			"unchangedRuns unchanged runs relax halfway to the ceiling (baseline×4)",
			given{changeSpec(), stateWith(ran(t0), fingerprint("a"), unchangedRuns(2)), now, outcomeFP("succeeded", slot, "a")},
			want{next: slot.Add(150 * time.Second), source: governor.SourceAdaptiveRelax, trail: "unchanged 3 runs in a row: interval 1m0s → 2m30s (toward 4m0s", check: interval(150 * time.Second)},
		},
		{
			"a change resets the unchanged count",
			given{changeSpec(), stateWith(ran(t0), fingerprint("a"), unchangedRuns(7), adaptiveInterval(4*time.Minute)), now, outcomeFP("succeeded", slot, "b")},
			want{next: slot.Add(2*time.Minute + 7500*time.Millisecond), source: governor.SourceAdaptiveRelax, check: func(t *testing.T, d governor.Decision) {
				if d.State.UnchangedRuns != 0 || d.State.AdaptiveInterval != 2*time.Minute+7500*time.Millisecond {
					t.Errorf("state %+v", d.State)
				}
			}},
		},
		{
			"bounds set the range",
			given{withBounds(changeSpec(), 40*time.Second, 2*time.Minute), stateWith(ran(t0), fingerprint("a")), now, outcomeFP("succeeded", slot, "b")},
			want{next: slot.Add(50 * time.Second), source: governor.SourceAdaptiveTighten, check: interval(50 * time.Second)},
		},
		{
			"bounds.max is the ceiling",
			given{withBounds(changeSpec(), 0, 2*time.Minute), stateWith(ran(t0), fingerprint("a"), unchangedRuns(5)), now, outcomeFP("succeeded", slot, "a")},
			want{next: slot.Add(90 * time.Second), source: governor.SourceAdaptiveRelax, check: interval(90 * time.Second)},
		},
		{
			"smoothing 1 jumps to the target",
			given{withAdaptive(intervalSpec(time.Minute), events.AdaptiveChange, 0, 1, 0), stateWith(ran(t0), fingerprint("a")), now, outcomeFP("succeeded", slot, "b")},
			want{next: slot.Add(15 * time.Second), source: governor.SourceAdaptiveTighten, check: interval(15 * time.Second)},
		},
		{
			"floor of a 2s baseline is 1s, not 500ms",
			given{withAdaptive(intervalSpec(2*time.Second), events.AdaptiveChange, 0, 1, 0), stateWith(ran(t0), fingerprint("a")), t0.Add(2*time.Second + 100*time.Millisecond), outcomeFP("succeeded", t0.Add(2*time.Second), "b")},
			want{next: t0.Add(3 * time.Second), source: governor.SourceAdaptiveTighten, check: interval(time.Second)},
		},
		{
			"no fingerprint holds the cadence",
			given{changeSpec(), stateWith(ran(t0), fingerprint("a"), adaptiveInterval(30*time.Second)), now, outcome("succeeded", slot)},
			want{next: slot.Add(30 * time.Second), source: governor.SourceAdaptiveTighten, trail: "no fingerprint", check: interval(30 * time.Second)},
		},
		{
			"a skipped run is no observation",
			given{changeSpec(), stateWith(ran(t0), fingerprint("a"), adaptiveInterval(30*time.Second)), now, outcomeFP("skipped", slot, "b")},
			want{next: slot.Add(30 * time.Second), source: governor.SourceAdaptiveTighten, check: interval(30 * time.Second)},
		},
		{
			"re-deciding (an empty hint) does not move the average",
			given{changeSpec(), stateWith(ran(t0), adaptiveInterval(30*time.Second)), t0.Add(time.Second), hinted(governor.Hint{})},
			want{next: t0.Add(30 * time.Second), source: governor.SourceAdaptiveTighten, trail: "interval 30s instead of the baseline 1m0s", check: interval(30 * time.Second)},
		},
		{
			"a stored interval outside the bounds is clamped into them",
			given{withBounds(changeSpec(), 45*time.Second, 0), stateWith(ran(t0), adaptiveInterval(20*time.Second)), t0.Add(time.Second), hinted(governor.Hint{})},
			want{next: t0.Add(45 * time.Second), source: governor.SourceAdaptiveTighten},
		},
		{
			"an interval hint replaces the adaptive interval",
			given{changeSpec(), stateWith(ran(t0), adaptiveInterval(30*time.Second)), t0.Add(time.Second), hinted(governor.Hint{Interval: 5 * time.Minute})},
			want{next: t0.Add(5 * time.Minute), source: governor.SourceHintInterval, trail: "replaces the adaptive cadence"},
		},
		{
			"cron schedules are not adapted",
			given{withAdaptive(cronSpec("@hourly", ""), events.AdaptiveChange, 0, 0, 0), stateWith(ran(t0), fingerprint("a")), t0.Add(time.Second), outcomeFP("succeeded", t0, "b")},
			want{next: t0.Add(time.Hour), source: governor.SourceBaselineCron, trail: "apply to interval schedules only", check: interval(0)},
		},
	})
}

// The adaptive interval is an absolute duration smoothed for one baseline.
// A spec update may change the baseline, and clamping the old value into
// the new range turned its meaning around: a task relaxed to the ceiling
// of a 1m baseline (4m, responses unchanged) ran every 15m as
// "adaptive-tighten" once the baseline became 1h. An update restarts the
// adaptive cadence from the new baseline.
func TestDecideAdaptiveRestartsOnUpdate(t *testing.T) {
	hourly := withAdaptive(intervalSpec(time.Hour), events.AdaptiveChange, 0, 0, 0)
	restarted := func(t *testing.T, d governor.Decision) {
		if d.State.AdaptiveInterval != 0 {
			t.Errorf("AdaptiveInterval = %s, want 0 (the baseline)", d.State.AdaptiveInterval)
		}
	}
	runDecideCases(t, []decideCase{
		{
			"relaxed at the ceiling of 1m, baseline now 1h: the new baseline, not its floor",
			given{hourly, stateWith(ran(t0), fingerprint("a"), unchangedRuns(9), adaptiveInterval(4*time.Minute)), t0.Add(time.Second), updated},
			want{next: t0.Add(time.Hour), source: governor.SourceBaselineInterval, trail: "spec updated: adaptive interval 4m0s restarts from the baseline 1h0m0s", check: restarted},
		},
		{
			"tightened to the floor of 1h, baseline now 1m: the new baseline, not its ceiling",
			given{changeSpec(), stateWith(ran(t0), fingerprint("a"), adaptiveInterval(15*time.Minute)), t0.Add(time.Second), updated},
			want{next: t0.Add(time.Minute), source: governor.SourceBaselineInterval, check: restarted},
		},
		{
			"other inputs keep it",
			given{hourly, stateWith(ran(t0), adaptiveInterval(30*time.Minute)), t0.Add(time.Second), hinted(governor.Hint{})},
			want{next: t0.Add(30 * time.Minute), source: governor.SourceAdaptiveTighten, check: func(t *testing.T, d governor.Decision) {
				if d.State.AdaptiveInterval != 30*time.Minute {
					t.Errorf("AdaptiveInterval = %s, want 30m", d.State.AdaptiveInterval)
				}
			}},
		},
	})
}

func TestDecideAdaptiveStaleness(t *testing.T) {
	spec := func() *events.TaskSpec {
		return withAdaptive(intervalSpec(time.Minute), events.AdaptiveStaleness, 0, 0, 0)
	}
	slot := t0.Add(time.Minute)
	now := slot.Add(2 * time.Second)
	fresh := stateWith(ran(t0), func(s *governor.State) { s.LastSuccessAt = t0 })
	stale := func(age time.Duration) governor.State {
		return stateWith(ran(t0), func(s *governor.State) { s.LastSuccessAt = now.Add(-age) })
	}
	runDecideCases(t, []decideCase{
		{
			"a fresh success keeps the baseline",
			given{spec(), fresh, now, outcome("succeeded", slot)},
			want{next: slot.Add(time.Minute), source: governor.SourceBaselineInterval, check: func(t *testing.T, d governor.Decision) {
				if d.State.AdaptiveInterval != time.Minute {
					t.Errorf("AdaptiveInterval = %s", d.State.AdaptiveInterval)
				}
			}},
		},
		{
			"halfway between one interval and the target: target interval halfway to the floor",
			given{spec(), stale(2 * time.Minute), now, outcome("failed", slot)},
			// staleness (2m-1m)/(3m-1m) = 0.5: target 60s - 45s×0.5 = 37.5s;
			// EMA 0.5 from 60s: 48.75s; one failure doubles it.
			want{next: slot.Add(97500 * time.Millisecond), source: governor.SourceBackoff, trail: "last success 2m0s ago, target 3m0s: interval 1m0s → 48.75s (toward 37.5s", check: func(t *testing.T, d governor.Decision) {
				if d.State.AdaptiveInterval != 48750*time.Millisecond {
					t.Errorf("AdaptiveInterval = %s", d.State.AdaptiveInterval)
				}
			}},
		},
		{
			"at the target: toward the floor",
			given{withAdaptive(intervalSpec(time.Minute), events.AdaptiveStaleness, 0, 1, 10*time.Minute), stale(10 * time.Minute), now, outcome("skipped", slot)},
			// a skip is no observation: the stored average applies.
			want{next: slot.Add(time.Minute), source: governor.SourceBaselineInterval},
		},
		{
			"custom target",
			given{withAdaptive(intervalSpec(time.Minute), events.AdaptiveStaleness, 0, 1, 10*time.Minute), stale(10 * time.Minute), now, outcome("failed", slot)},
			want{next: slot.Add(30 * time.Second), source: governor.SourceBackoff, trail: "toward 15s"},
		},
		{
			"after a success the interval relaxes back toward the baseline",
			given{spec(), stateWith(fresh, adaptiveInterval(30*time.Second)), now, outcome("succeeded", slot)},
			want{next: slot.Add(45 * time.Second), source: governor.SourceAdaptiveTighten, trail: "interval 30s → 45s (toward 1m0s"},
		},
		{
			"a task that never succeeded is measured from its creation",
			given{spec(), stateWith(ran(t0), func(s *governor.State) { s.CreatedAt = now.Add(-3 * time.Minute) }), now, outcome("failed", slot)},
			want{next: slot.Add(75 * time.Second), source: governor.SourceBackoff, trail: "toward 15s"},
		},
	})
}

func TestDecideActivity(t *testing.T) {
	spec := func() *events.TaskSpec { return withActivity(intervalSpec(time.Minute)) }
	now := t0.Add(time.Second)
	runDecideCases(t, []decideCase{
		{
			"active: baseline",
			given{spec(), stateWith(ran(t0), lastActivity(now.Add(-30*time.Minute))), now, updated},
			want{next: t0.Add(time.Minute), source: governor.SourceBaselineInterval},
		},
		{
			"idle after 1h: ×2",
			given{spec(), stateWith(ran(t0), lastActivity(now.Add(-2*time.Hour))), now, updated},
			want{next: t0.Add(2 * time.Minute), source: governor.SourceActivityIdle, trail: "no activity for 2h0m0s"},
		},
		{
			"dormant after 24h: ×6",
			given{spec(), stateWith(ran(t0), lastActivity(now.Add(-25*time.Hour))), now, updated},
			want{next: t0.Add(6 * time.Minute), source: governor.SourceActivityDormant, trail: "interval ×6 = 6m0s"},
		},
		{
			"custom thresholds and multipliers",
			given{func() *events.TaskSpec {
				s := intervalSpec(time.Minute)
				s.Activity = &events.Activity{IdleAfter: events.Duration(time.Minute), DormantAfter: events.Duration(time.Hour), IdleMultiplier: 1.5, DormantMultiplier: 10}
				return mustValid(t, s)
			}(), stateWith(ran(t0), lastActivity(now.Add(-5*time.Minute))), now, updated},
			want{next: t0.Add(90 * time.Second), source: governor.SourceActivityIdle},
		},
		{
			"no activity yet: measured from creation",
			given{spec(), stateWith(ran(t0), func(s *governor.State) { s.CreatedAt = now.Add(-3 * time.Hour) }), now, updated},
			want{next: t0.Add(2 * time.Minute), source: governor.SourceActivityIdle},
		},
		{
			"a hint is activity",
			given{spec(), stateWith(ran(t0), lastActivity(now.Add(-25*time.Hour))), now, hinted(governor.Hint{At: t0.Add(time.Hour), TTL: 2 * time.Hour})},
			want{next: t0.Add(time.Minute), source: governor.SourceBaselineInterval, check: func(t *testing.T, d governor.Decision) {
				if !d.State.LastActivityAt.Equal(now) {
					t.Errorf("LastActivityAt = %s", fmtT(d.State.LastActivityAt))
				}
			}},
		},
		{
			"a changed response is activity",
			given{spec(), stateWith(ran(t0.Add(-time.Minute)), lastActivity(now.Add(-25*time.Hour)), fingerprint("a")), now, outcomeFP("succeeded", t0, "b")},
			want{next: t0.Add(time.Minute), source: governor.SourceBaselineInterval},
		},
		{
			"an unchanged response is not",
			given{spec(), stateWith(ran(t0.Add(-time.Minute)), lastActivity(now.Add(-25*time.Hour)), fingerprint("a")), now, outcomeFP("succeeded", t0, "a")},
			want{next: t0.Add(6 * time.Minute), source: governor.SourceActivityDormant},
		},
		{
			"activity stretches the adaptive interval",
			given{withAdaptive(spec(), events.AdaptiveChange, 0, 0, 0), stateWith(ran(t0), lastActivity(now.Add(-2*time.Hour)), adaptiveInterval(30*time.Second)), now, hinted(governor.Hint{})},
			want{next: t0.Add(time.Minute), source: governor.SourceActivityIdle},
		},
		{
			"accepted: created and active now",
			given{spec(), governor.State{}, now, accepted},
			want{next: now, source: governor.SourceBaselineInterval, check: func(t *testing.T, d governor.Decision) {
				if !d.State.CreatedAt.Equal(now) || !d.State.LastActivityAt.Equal(now) {
					t.Errorf("state %+v", d.State)
				}
			}},
		},
	})
}

func TestDecideCreatedAt(t *testing.T) {
	d := governor.Decide(t0, intervalSpec(time.Minute), governor.State{}, accepted)
	if !d.State.CreatedAt.Equal(t0) {
		t.Fatalf("CreatedAt = %s, want %s", fmtT(d.State.CreatedAt), fmtT(t0))
	}
	for _, in := range []governor.Input{updated, outcome("succeeded", t0), hinted(governor.Hint{Interval: time.Minute}), {Kind: governor.KindResumed}} {
		if d2 := governor.Decide(t0.Add(time.Hour), intervalSpec(time.Minute), d.State, in); !d2.State.CreatedAt.Equal(t0) {
			t.Errorf("%s changed CreatedAt to %s", in.Kind, fmtT(d2.State.CreatedAt))
		}
	}
}

// Quiet hours use January dates, when Europe/London is on UTC.
func TestDecideQuietHours(t *testing.T) {
	day := func(h, m, s int) time.Time { return time.Date(2026, 1, 15, h, m, s, 0, time.UTC) }
	night := func(every, quiet time.Duration) *events.TaskSpec {
		return withQuiet(intervalSpec(every), "00:00", "07:00", "Europe/London", quiet)
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	runDecideCases(t, []decideCase{
		{
			"before the window",
			given{night(time.Minute, 30*time.Minute), ran(day(23, 58, 0)), day(23, 58, 2), updated},
			want{next: day(23, 59, 0), source: governor.SourceBaselineInterval},
		},
		{
			"a slot in the window takes the quiet interval",
			given{night(time.Minute, 30*time.Minute), ran(day(23, 59, 30)), day(23, 59, 32), updated},
			want{next: day(24, 29, 30), source: governor.SourceQuietHours, trail: "quiet hours 00:00-07:00 Europe/London: interval 30m0s"},
		},
		{
			"never held past the end of the window",
			given{night(time.Minute, 30*time.Minute), ran(day(6, 50, 0)), day(6, 50, 2), updated},
			want{next: day(7, 0, 0), source: governor.SourceQuietHours, trail: "runs when it ends"},
		},
		{
			"the end is exclusive",
			given{night(time.Minute, 30*time.Minute), ran(day(6, 59, 0)), day(6, 59, 2), updated},
			want{next: day(7, 0, 0), source: governor.SourceBaselineInterval},
		},
		{
			"a shorter quiet interval starts when the window opens",
			given{night(time.Hour, 5*time.Minute), ran(day(23, 30, 0)), day(23, 30, 2), updated},
			want{next: day(24, 0, 0), source: governor.SourceQuietHours},
		},
		{
			"inside the window, a shorter quiet interval applies",
			given{night(time.Hour, 5*time.Minute), ran(day(3, 0, 0)), day(3, 0, 2), updated},
			want{next: day(3, 5, 0), source: governor.SourceQuietHours},
		},
		{
			// The hourly slot (07:00) is past the window, but the quiet one
			// is in it: the quiet interval holds to the end of the window.
			"... until the window ends, where the normal slot falls after it",
			given{night(time.Hour, 5*time.Minute), ran(day(6, 0, 0)), day(6, 0, 2), updated},
			want{next: day(6, 5, 0), source: governor.SourceQuietHours, trail: "quiet hours 00:00-07:00 Europe/London: interval 5m0s after the slot of 2026-01-15T06:00:00.000Z"},
		},
		{
			"... up to its last quiet slot",
			given{night(time.Hour, 5*time.Minute), ran(day(6, 50, 0)), day(6, 50, 2), updated},
			want{next: day(6, 55, 0), source: governor.SourceQuietHours},
		},
		{
			"... and not past the end",
			given{night(time.Hour, 5*time.Minute), ran(day(6, 58, 0)), day(6, 58, 2), updated},
			want{next: day(7, 58, 0), source: governor.SourceBaselineInterval},
		},
		{
			// The hourly slot (00:30) passes the whole window 00:00-00:30;
			// it was kept, and the window got no run at the quiet interval.
			"a shorter quiet interval starts when the window opens, even if the slot passes the window",
			given{withQuiet(intervalSpec(time.Hour), "00:00", "00:30", "UTC", 5*time.Minute), ran(day(23, 30, 0)), day(23, 30, 2), updated},
			want{next: day(24, 0, 0), source: governor.SourceQuietHours, trail: "from when the window opens"},
		},
		{
			"... and a longer one leaves such a slot alone",
			given{withQuiet(intervalSpec(time.Hour), "00:00", "00:30", "UTC", 2*time.Hour), ran(day(23, 30, 0)), day(23, 30, 2), updated},
			want{next: day(24, 30, 0), source: governor.SourceBaselineInterval},
		},
		{
			"backoff multiplies the quiet interval",
			given{night(time.Minute, 30*time.Minute), stateWith(ran(day(0, 10, 0)), failures(1)), day(0, 10, 2), updated},
			want{next: day(1, 10, 0), source: governor.SourceQuietHours},
		},
		{
			"a window wrapping midnight",
			given{withQuiet(intervalSpec(time.Minute), "22:00", "06:00", "UTC", 30*time.Minute), ran(day(21, 59, 30)), day(21, 59, 32), updated},
			want{next: day(22, 29, 30), source: governor.SourceQuietHours},
		},
		{
			"... still quiet after midnight",
			given{withQuiet(intervalSpec(time.Minute), "22:00", "06:00", "UTC", 30*time.Minute), ran(day(5, 0, 0)), day(5, 0, 2), updated},
			want{next: day(5, 30, 0), source: governor.SourceQuietHours},
		},
		{
			"... and not at noon",
			given{withQuiet(intervalSpec(time.Minute), "22:00", "06:00", "UTC", 30*time.Minute), ran(day(12, 0, 0)), day(12, 0, 2), updated},
			want{next: day(12, 1, 0), source: governor.SourceBaselineInterval},
		},
		{
			"start == end is an empty window",
			given{withQuiet(intervalSpec(time.Minute), "03:00", "03:00", "UTC", 30*time.Minute), ran(day(3, 0, 0)), day(3, 0, 2), updated},
			want{next: day(3, 1, 0), source: governor.SourceBaselineInterval},
		},
		{
			"a cron task's occurrences are thinned",
			given{withQuiet(cronSpec("*/5 * * * *", "UTC"), "00:00", "07:00", "UTC", 30*time.Minute), ran(day(1, 0, 0)), day(1, 0, 2), updated},
			want{next: day(1, 30, 0), source: governor.SourceQuietHours, trail: "occurrences less than 30m0s after the last run are skipped"},
		},
		{
			"... up to the end of the window",
			given{withQuiet(cronSpec("*/5 * * * *", "UTC"), "00:00", "07:00", "UTC", 30*time.Minute), ran(day(6, 50, 0)), day(6, 50, 2), updated},
			want{next: day(7, 0, 0), source: governor.SourceQuietHours},
		},
		{
			"... and never gain runs",
			given{withQuiet(cronSpec("0 */2 * * *", "UTC"), "00:00", "07:00", "UTC", 30*time.Minute), ran(day(2, 0, 0)), day(2, 0, 2), updated},
			want{next: day(4, 0, 0), source: governor.SourceBaselineCron},
		},
		{
			"a one-shot in quiet hours waits for the quiet interval",
			given{withQuiet(intervalSpec(time.Hour), "00:00", "07:00", "UTC", 30*time.Minute), ran(day(1, 0, 0)), day(1, 0, 2), hinted(governor.Hint{At: day(1, 10, 0)})},
			want{next: day(1, 30, 0), source: governor.SourceQuietHours, trail: "at most one run per 30m0s"},
		},
		{
			// Old: 00:10 budget, a run 30m into a window that allows one an hour.
			"the budget's pacing in quiet hours keeps the quiet interval",
			given{withBudget(withQuiet(intervalSpec(time.Minute), "00:00", "07:00", "UTC", time.Hour), 48), ran(day(23, 40, 0)), day(23, 40, 30), updated},
			want{next: day(23, 40, 0).Add(time.Hour), source: governor.SourceQuietHours, trail: "at most one run per 1h0m0s"},
		},
		{
			// Old: 01:00 budget, 70m after the last run in a window that
			// allows one every 3h.
			"the budget's exhaustion wait in quiet hours keeps the quiet interval",
			given{withBudget(withQuiet(intervalSpec(time.Minute), "00:00", "07:00", "UTC", 3*time.Hour), 1440), func() governor.State {
				s := ran(day(23, 50, 0))
				h := day(23, 0, 0).Unix() / 3600
				s.Budget.Hour = h
				s.Budget.Counts[(h-22)%24] = 1440 // 01:00 that day
				return s
			}(), day(23, 50, 30), updated},
			want{next: day(23, 50, 0).Add(3 * time.Hour), source: governor.SourceQuietHours},
		},
		{
			"spring forward: 01:00-03:00 Berlin lasts one real hour",
			given{
				withQuiet(intervalSpec(time.Minute), "01:00", "03:00", "Europe/Berlin", 2*time.Hour),
				ran(time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC)), time.Date(2026, 3, 29, 0, 30, 2, 0, time.UTC), updated,
			},
			want{next: time.Date(2026, 3, 29, 3, 0, 0, 0, berlin), source: governor.SourceQuietHours, check: func(t *testing.T, d governor.Decision) {
				if !d.NextRunAt.Equal(time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)) {
					t.Errorf("window end %s, want 01:00Z", fmtT(d.NextRunAt))
				}
			}},
		},
		{
			"spring forward: a window inside the gap is empty",
			given{
				withQuiet(intervalSpec(time.Minute), "02:00", "02:45", "Europe/Berlin", 2*time.Hour),
				ran(time.Date(2026, 3, 29, 0, 59, 30, 0, time.UTC)), time.Date(2026, 3, 29, 0, 59, 32, 0, time.UTC), updated,
			},
			want{next: time.Date(2026, 3, 29, 1, 0, 30, 0, time.UTC), source: governor.SourceBaselineInterval},
		},
		{
			"fall back: the window closes at the first 02:30",
			given{
				withQuiet(intervalSpec(time.Minute), "01:00", "02:30", "Europe/Berlin", 2*time.Hour),
				ran(time.Date(2026, 10, 25, 0, 20, 0, 0, time.UTC)), time.Date(2026, 10, 25, 0, 20, 2, 0, time.UTC), updated,
			},
			want{next: time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), source: governor.SourceQuietHours},
		},
		{
			"fall back: the repeated 02:00-02:30 is not quiet again",
			given{
				withQuiet(intervalSpec(time.Minute), "01:00", "02:30", "Europe/Berlin", 2*time.Hour),
				ran(time.Date(2026, 10, 25, 1, 10, 0, 0, time.UTC)), time.Date(2026, 10, 25, 1, 10, 2, 0, time.UTC), updated,
			},
			want{next: time.Date(2026, 10, 25, 1, 11, 0, 0, time.UTC), source: governor.SourceBaselineInterval},
		},
		{
			// London springs forward at 01:00 GMT (01:00Z): both edges of
			// 02:00-01:00 activate at 01:00Z on 2026-03-29, so the window
			// closes and opens again at once. It was taken for an empty
			// one, and the 23 quiet hours before it ran every minute.
			"spring forward: a window wrapping midnight with both edges in the gap stays quiet",
			given{
				withQuiet(intervalSpec(time.Minute), "02:00", "01:00", "Europe/London", 30*time.Minute),
				ran(time.Date(2026, 3, 28, 20, 0, 0, 0, time.UTC)), time.Date(2026, 3, 28, 20, 0, 2, 0, time.UTC), updated,
			},
			want{next: time.Date(2026, 3, 28, 20, 30, 0, 0, time.UTC), source: governor.SourceQuietHours},
		},
		{
			"... and a cron task is thinned there too",
			given{
				withQuiet(cronSpec("*/5 * * * *", "Europe/London"), "02:00", "01:00", "Europe/London", 30*time.Minute),
				ran(time.Date(2026, 3, 28, 20, 0, 0, 0, time.UTC)), time.Date(2026, 3, 28, 20, 0, 2, 0, time.UTC), updated,
			},
			want{next: time.Date(2026, 3, 28, 20, 30, 0, 0, time.UTC), source: governor.SourceQuietHours},
		},
	})
}

func TestDecideBudget(t *testing.T) {
	runDecideCases(t, []decideCase{
		{
			"pacing stretches the interval: 3600 runs a day are 24s apart",
			given{withBudget(intervalSpec(time.Second), 3600), ran(t0), t0.Add(500 * time.Millisecond), updated},
			want{next: t0.Add(24 * time.Second), source: governor.SourceBudget, trail: "budget of 3600 runs a day: runs at least 24s apart"},
		},
		{
			"a longer interval is left alone",
			given{withBudget(intervalSpec(time.Minute), 3600), ran(t0), t0.Add(time.Second), updated},
			want{next: t0.Add(time.Minute), source: governor.SourceBaselineInterval},
		},
		{
			"an uneven budget rounds the spacing up",
			given{withBudget(intervalSpec(time.Second), 7), ran(t0), t0.Add(time.Second), updated},
			want{next: t0.Add(24 * time.Hour / 7).Add(1), source: governor.SourceBudget},
		},
		{
			"the first run is not paced",
			given{withBudget(intervalSpec(time.Second), 1), governor.State{}, t0, accepted},
			want{next: t0, source: governor.SourceBaselineInterval},
		},
		{
			"used up: waits for the hour at which the window frees a run",
			given{withBudget(intervalSpec(3*time.Hour), 10), func() governor.State {
				s := ran(t0.Add(-30 * time.Minute))
				h := t0.Unix() / 3600 // 10:00
				s.Budget.Hour = h
				s.Budget.Counts[(h-20)%24] = 4 // 14:00 yesterday
				s.Budget.Counts[(h-2)%24] = 6  // 08:00 today
				return s
			}(), t0.Add(30 * time.Minute), updated},
			// 10 runs counted; the 4 of 14:00 yesterday leave the window at 14:00.
			want{next: t0.Add(4 * time.Hour), source: governor.SourceBudget, trail: "budget used up: 10 runs counted in this UTC hour and the 23 before it (limit 10): waits until 2026-03-02T14:00:00.000Z"},
		},
		{
			"a cron task skips to the first occurrence far enough out",
			given{withBudget(cronSpec("* * * * *", ""), 360), ran(t0), t0.Add(time.Second), updated},
			want{next: t0.Add(4 * time.Minute), source: governor.SourceBudget},
		},
		{
			"a cron task skips to the first occurrence after the budget frees",
			given{withBudget(withCatchUp(cronSpec("7 * * * *", ""), events.CatchUpNone, 0), 1), func() governor.State {
				s := ran(t0.Add(-23 * time.Hour))
				s.Budget.Hour = t0.Unix() / 3600
				s.Budget.Counts[(t0.Unix()/3600-23)%24] = 1
				return s
			}(), t0.Add(time.Second), updated},
			want{next: t0.Add(time.Hour + 7*time.Minute), source: governor.SourceBudget},
		},
	})
}

// The ledger counts runs that made a call (not their attempts, not skips),
// in the UTC hour of their slot, and forgets hours older than the current
// one and the 23 before it: exhaustion is judged over those whole UTC
// hours, not over any rolling 24 hours. Pacing (24h / maxRunsPerDay apart)
// keeps runs the hints ask for every second under the budget in any 24
// hours from a slot.
func TestBudgetLedgerAndRollingDay(t *testing.T) {
	spec := withBudget(intervalSpec(time.Minute), 100)
	st := ran(t0)
	for i, in := range []governor.Input{
		outcome("succeeded", t0.Add(time.Minute)),
		outcome("failed", t0.Add(2*time.Minute)),
		outcome("skipped", t0.Add(3*time.Minute)),
		outcome("succeeded", t0.Add(time.Hour)),
		outcome("succeeded", t0.Add(-30*time.Hour)), // older than the ledger: ignored
	} {
		st = governor.Decide(t0.Add(time.Duration(i)*time.Second), spec, st, in).State
	}
	h := t0.Unix() / 3600
	if st.Budget.Hour != h+1 || st.Budget.Counts[h%24] != 2 || st.Budget.Counts[(h+1)%24] != 1 {
		t.Fatalf("ledger %+v", st.Budget)
	}
	if d := governor.Decide(t0, intervalSpec(time.Minute), st, updated); d.State.Budget != (governor.RunLedger{}) {
		t.Errorf("ledger kept after the budget was removed: %+v", d.State.Budget)
	}

	// Hints asking for a run every second cannot break a budget of 100/day.
	spec = withBudget(intervalSpec(time.Second), 100)
	d := governor.Decide(t0, spec, governor.State{}, accepted)
	var slots []time.Time
	for len(slots) < 400 {
		slot := d.NextRunAt
		slots = append(slots, slot)
		d = governor.Decide(slot.Add(time.Second), spec, d.State, outcome("succeeded", slot))
		d = governor.Decide(slot.Add(2*time.Second), spec, d.State, hinted(governor.Hint{At: slot.Add(2 * time.Second)}))
	}
	for i := range slots {
		n := 0
		for j := i; j < len(slots) && slots[j].Before(slots[i].Add(24*time.Hour)); j++ {
			n++
		}
		if n > 100 {
			t.Fatalf("%d runs in the 24h from %s", n, fmtT(slots[i]))
		}
	}

	// Whole UTC hours: with a budget of 2, runs at 09:59 and 10:59 are
	// counted in hours 09 and 10, and the next may run when hour 09 leaves
	// the window, at 09:00 the next day (23h01m after the first).
	spec = withBudget(intervalSpec(time.Hour), 2)
	first, second := t0.Add(-time.Minute), t0.Add(59*time.Minute)
	st = governor.Decide(first.Add(time.Second), spec, ran(first.Add(-time.Hour)), outcome("succeeded", first)).State
	st = governor.Decide(second.Add(time.Second), spec, st, outcome("succeeded", second)).State
	if d := governor.Decide(second.Add(2*time.Second), spec, st, updated); !d.NextRunAt.Equal(time.Date(2026, 3, 3, 9, 0, 0, 0, time.UTC)) || d.Source != governor.SourceBudget {
		t.Errorf("runs at %s and %s, budget 2: next %s (%s), want 2026-03-03T09:00 (budget)\ntrail: %q", fmtT(first), fmtT(second), fmtT(d.NextRunAt), d.Source, d.Trail)
	}
}

// A run that starts late (an overdue slot the timer fires after a
// restart) is paced from its start, not from its slot, and counted in the
// hour it was made: paced from its slot and counted in its slot's hour,
// the next run followed it at once. A run started on time keeps the grid.
func TestBudgetPacesFromALateStart(t *testing.T) {
	at := func(day, h, m int) time.Time { return time.Date(2026, 3, day, h, m, 0, 0, time.UTC) }
	late := func(slot, started time.Time) governor.Input {
		in := outcome("succeeded", slot)
		in.Outcome.StartedAt, in.Outcome.FinishedAt = started, started.Add(2*time.Second)
		return in
	}
	for _, tc := range []struct {
		name          string
		spec          *events.TaskSpec
		prev          time.Time // the slot before the late one
		slot, started time.Time
		want          time.Time // at or after
	}{
		{"A: 24h interval, budget 1", withBudget(intervalSpec(24*time.Hour), 1), at(2, 10, 0), at(3, 10, 0), at(4, 9, 30), at(5, 9, 30)},
		{"B: 1h interval, budget 1", withBudget(intervalSpec(time.Hour), 1), at(3, 9, 0), at(3, 10, 0), at(4, 10, 30), at(5, 10, 30)},
		{"C: 1h interval, budget 2", withBudget(intervalSpec(time.Hour), 2), at(3, 21, 0), at(3, 22, 0), at(4, 10, 30), at(4, 22, 30)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := tc.started.Add(5 * time.Second)
			d := governor.Decide(now, tc.spec, ran(tc.prev), late(tc.slot, tc.started))
			if d.NextRunAt.Before(tc.want) {
				t.Errorf("slot %s started at %s: next run %s (%s), want at or after %s\ntrail: %q",
					fmtT(tc.slot), fmtT(tc.started), fmtT(d.NextRunAt), d.Source, fmtT(tc.want), d.Trail)
			}
			if h := tc.started.Unix() / 3600; d.State.Budget.Hour != h || d.State.Budget.Counts[h%24] != 1 {
				t.Errorf("run started at %s counted in ledger %+v, want in hour %d", fmtT(tc.started), d.State.Budget, h)
			}
			// Any later input keeps the pacing: it outlives the outcome.
			if d := governor.Decide(now.Add(time.Minute), tc.spec, d.State, updated); d.NextRunAt.Before(tc.want) {
				t.Errorf("after a spec update: next run %s (%s), want at or after %s\ntrail: %q", fmtT(d.NextRunAt), d.Source, fmtT(tc.want), d.Trail)
			}
		})
	}

	// A run started within half the budget's spacing of its slot keeps the
	// grid: the interval, or the cron occurrence, at the budget's spacing.
	// Outcome.StartedAt is the start of the last attempt, so a run whose
	// first try failed and whose retry (5 s later by default) succeeded,
	// or one the executor's backlog held for a second or two, is on time:
	// paced from its start, it moved an interval's grid by the delay every
	// run, and a cron task lost the next occurrence.
	for _, delay := range []time.Duration{5 * time.Millisecond, 1500 * time.Millisecond, 5 * time.Second} {
		for name, spec := range map[string]*events.TaskSpec{"1h interval": withBudget(intervalSpec(time.Hour), 24), "cron 0 * * * *": withBudget(cronSpec("0 * * * *", ""), 24)} {
			st := ran(t0.Add(-time.Hour))
			for slot := t0; slot.Before(t0.Add(2 * time.Hour)); slot = slot.Add(time.Hour) {
				d := governor.Decide(slot.Add(delay+2*time.Second), spec, st, late(slot, slot.Add(delay)))
				if want := slot.Add(time.Hour); !d.NextRunAt.Equal(want) {
					t.Errorf("%s, budget 24: slot %s started %s after it: next run %s (%s), want %s\ntrail: %q",
						name, fmtT(slot), delay, fmtT(d.NextRunAt), d.Source, fmtT(want), d.Trail)
					break
				}
				st = d.State
			}
		}
	}
}

func TestDecideBreaker(t *testing.T) {
	runDecideCases(t, []decideCase{
		{
			"open: the next run waits for retryAt",
			given{intervalSpec(time.Minute), ran(t0), t0.Add(2 * time.Second), breakerInput("open", t0.Add(5*time.Minute))},
			want{next: t0.Add(5 * time.Minute), source: governor.SourceBreakerOpen, trail: "waits for retryAt 2026-03-02T10:05:00.000Z", check: func(t *testing.T, d governor.Decision) {
				if !d.State.BreakerOpenUntil.Equal(t0.Add(5 * time.Minute)) {
					t.Errorf("BreakerOpenUntil = %s", fmtT(d.State.BreakerOpenUntil))
				}
			}},
		},
		{
			"open: a later candidate is kept (and is the probe)",
			given{intervalSpec(time.Hour), ran(t0), t0.Add(2 * time.Second), breakerInput("open", t0.Add(30*time.Second))},
			want{next: t0.Add(time.Hour), source: governor.SourceBaselineInterval, trail: "already later"},
		},
		{
			"the hold outlives other inputs",
			given{intervalSpec(time.Minute), stateWith(ran(t0.Add(-time.Minute)), breakerOpenUntil(t0.Add(5*time.Minute))), t0.Add(2 * time.Second), outcome("failed", t0)},
			want{next: t0.Add(5 * time.Minute), source: governor.SourceBreakerOpen},
		},
		{
			"closed clears it",
			given{intervalSpec(time.Minute), stateWith(ran(t0), breakerOpenUntil(t0.Add(5*time.Minute))), t0.Add(2 * time.Second), breakerInput("closed", time.Time{})},
			want{next: t0.Add(time.Minute), source: governor.SourceBaselineInterval, trail: "breaker closed", check: func(t *testing.T, d governor.Decision) {
				if !d.State.BreakerOpenUntil.IsZero() {
					t.Error("hold kept")
				}
			}},
		},
		{
			"half-open clears it: the next run is the probe",
			given{intervalSpec(time.Minute), stateWith(ran(t0), breakerOpenUntil(t0.Add(5*time.Minute))), t0.Add(2 * time.Second), breakerInput("half-open", time.Time{})},
			want{next: t0.Add(time.Minute), source: governor.SourceBaselineInterval},
		},
		{
			"a retryAt that passed is cleared",
			given{intervalSpec(time.Minute), stateWith(ran(t0.Add(4*time.Minute+30*time.Second)), breakerOpenUntil(t0.Add(5*time.Minute))), t0.Add(5 * time.Minute), updated},
			want{next: t0.Add(5*time.Minute + 30*time.Second), source: governor.SourceBaselineInterval, trail: "passed: the next run is the probe", check: func(t *testing.T, d governor.Decision) {
				if !d.State.BreakerOpenUntil.IsZero() {
					t.Error("hold kept")
				}
			}},
		},
		{
			"open without retryAt: the open delay",
			given{intervalSpec(time.Second), ran(t0), t0.Add(500 * time.Millisecond), breakerInput("open", time.Time{})},
			want{next: t0.Add(5500 * time.Millisecond), source: governor.SourceBreakerOpen, trail: "assuming 5s"},
		},
		{
			"cron waits too",
			given{cronSpec("*/10 * * * * *", ""), ran(t0), t0.Add(time.Second), breakerInput("open", t0.Add(25*time.Second))},
			want{next: t0.Add(25 * time.Second), source: governor.SourceBreakerOpen},
		},
		{
			"unknown state: ignored",
			given{intervalSpec(time.Minute), stateWith(ran(t0), breakerOpenUntil(t0.Add(5*time.Minute))), t0.Add(2 * time.Second), breakerInput("sideways", time.Time{})},
			want{next: t0.Add(5 * time.Minute), source: governor.SourceBreakerOpen, trail: "unknown breaker state"},
		},
	})
	if d := governor.Decide(t0, intervalSpec(time.Minute), ran(t0), governor.Input{Kind: governor.KindBreaker}); !d.Ignored {
		t.Error("breaker input without a signal not ignored")
	}
}

// A slot that is due (or within InFlightWindow) and whose outcome is not in
// yet is in flight: a breaker transition or a spec update keeps it, and the
// slot after it is planned from its outcome. Planning another one would let
// the timer dispatch it the moment the first ends, before a final failure
// or a dead-letter could stop it.
func TestDecideKeepsTheSlotInFlight(t *testing.T) {
	inFlight := planned(t0.Add(time.Minute), governor.SourceBaselineInterval) // ran(t0), next slot 10:01
	due := t0.Add(time.Minute + 20*time.Second)                               // its attempts are retrying
	kept := want{next: t0.Add(time.Minute), source: governor.SourceBaselineInterval, trail: "10:01:00.000Z is in flight"}
	runDecideCases(t, []decideCase{
		{
			"breaker opens during the retries",
			given{intervalSpec(time.Minute), stateWith(ran(t0), inFlight), due, breakerInput("open", due.Add(5*time.Second))},
			want{next: t0.Add(time.Minute), source: governor.SourceBaselineInterval, trail: "is in flight", check: func(t *testing.T, d governor.Decision) {
				if !d.State.BreakerOpenUntil.Equal(due.Add(5 * time.Second)) {
					t.Errorf("BreakerOpenUntil = %s: the hold must still be recorded", fmtT(d.State.BreakerOpenUntil))
				}
			}},
		},
		{"breaker half-open", given{intervalSpec(time.Minute), stateWith(ran(t0), inFlight, breakerOpenUntil(due.Add(-time.Second))), due, breakerInput("half-open", time.Time{})}, kept},
		{"breaker closed", given{intervalSpec(time.Minute), stateWith(ran(t0), inFlight), due, breakerInput("closed", time.Time{})}, kept},
		{"spec updated", given{intervalSpec(10 * time.Second), stateWith(ran(t0), inFlight), due, updated}, kept},
		{
			"the slot is about to be dispatched (within the window)",
			given{intervalSpec(time.Minute), stateWith(ran(t0), inFlight), t0.Add(time.Minute - governor.InFlightWindow), breakerInput("open", due)},
			want{next: t0.Add(time.Minute), source: governor.SourceBaselineInterval, trail: "is in flight"},
		},
		{
			"the first run of a new task",
			given{intervalSpec(time.Minute), stateWith(governor.State{TaskID: "t"}, planned(t0, governor.SourceBaselineInterval)), t0.Add(2 * time.Second), breakerInput("open", t0.Add(time.Minute))},
			want{next: t0, source: governor.SourceBaselineInterval, trail: "is in flight"},
		},
		{
			"a probe slot in flight",
			given{intervalSpec(time.Minute), stateWith(ran(t0), planned(t0.Add(30*time.Second), governor.SourceBreakerOpen)), t0.Add(31 * time.Second), breakerInput("half-open", time.Time{})},
			want{next: t0.Add(30 * time.Second), source: governor.SourceBreakerOpen, trail: "is in flight"},
		},
		{
			// Before 2026-12-02 an input re-planned it: 10:02, and a
			// breaker's retryAt planned past it ran after its final failure.
			"the run a timed pause led to",
			given{intervalSpec(time.Minute), stateWith(ran(t0), pausedUntil(t0.Add(time.Minute)), planned(t0.Add(time.Minute), governor.SourcePaused)), due, updated},
			want{next: t0.Add(time.Minute), source: governor.SourcePaused, trail: "is in flight"},
		},
		{
			"expired hints are still cleared",
			given{intervalSpec(time.Minute), stateWith(ran(t0), inFlight, intervalHint(10*time.Second, due.Add(-time.Second))), due, updated},
			want{next: t0.Add(time.Minute), source: governor.SourceBaselineInterval, trail: "expired", check: func(t *testing.T, d governor.Decision) {
				if !d.ClearedHints || d.State.IntervalHint != nil {
					t.Errorf("expired hint kept: %+v", d.State.IntervalHint)
				}
			}},
		},

		// Not in flight: the input re-plans.
		{
			"further ahead than the window",
			given{intervalSpec(time.Minute), stateWith(ran(t0), inFlight), t0.Add(time.Minute - governor.InFlightWindow - time.Millisecond), breakerInput("open", due)},
			want{next: due, source: governor.SourceBreakerOpen},
		},
		{
			"its outcome is in (the slot is the last one)",
			given{intervalSpec(time.Minute), stateWith(ran(t0.Add(time.Minute)), inFlight), due, breakerInput("open", due.Add(time.Minute))},
			want{next: due.Add(time.Minute), source: governor.SourceBreakerOpen},
		},
		{
			"a hint asks for a run",
			given{intervalSpec(time.Minute), stateWith(ran(t0), inFlight), due, hinted(governor.Hint{At: due})},
			want{next: due, source: governor.SourceHintOneShot},
		},
		{
			"a dead-letter holds the task",
			given{intervalSpec(time.Minute), stateWith(ran(t0), inFlight), due, governor.Input{Kind: governor.KindDeadLettered, DeadLetter: &governor.DeadLetterSignal{DispatchID: "t:dead", At: due}}},
			want{next: due.Add(30 * time.Minute), source: governor.SourceDeadLetterRecheck},
		},
	})
}

func TestDecideDeadLetter(t *testing.T) {
	at := t0.Add(10 * time.Second)
	runDecideCases(t, []decideCase{
		{
			"rechecked after 30m by default",
			given{intervalSpec(time.Minute), ran(t0), at, deadLetterInput("t:1", at)},
			want{
				next: at.Add(30 * time.Minute), source: governor.SourceDeadLetterRecheck, trail: "run t:1 dead-lettered (permanent) at 2026-03-02T10:00:10.000Z: recheck at 2026-03-02T10:30:10.000Z",
				check: func(t *testing.T, d governor.Decision) {
					dl := d.State.DeadLetter
					if dl == nil || dl.DispatchID != "t:1" || dl.Reason != "permanent" || !dl.At.Equal(at) || !dl.RecheckAt.Equal(at.Add(30*time.Minute)) {
						t.Errorf("DeadLetter = %+v", dl)
					}
				},
			},
		},
		{
			"the recheck waits for the budget's pacing",
			given{withBudget(intervalSpec(time.Minute), 2), ran(t0.Add(-24 * time.Hour)), t0.Add(2 * time.Second), finalFailure(t0, "max-attempts")},
			want{next: t0.Add(12 * time.Hour), source: governor.SourceBudget, trail: "budget of 2 runs a day: runs at least 12h0m0s apart"},
		},
		{
			"the recheck waits for a used-up budget",
			given{withBudget(intervalSpec(time.Minute), 24), func() governor.State {
				s := ran(t0)
				h := t0.Unix() / 3600
				s.Budget.Hour = h
				s.Budget.Counts[(h-2)%24] = 12 // 08:00 (requeues)
				s.Budget.Counts[(h-1)%24] = 11 // 09:00
				s.Budget.Counts[h%24] = 1      // 10:00
				return s
			}(), at, deadLetterInput("t:1", at)},
			want{next: t0.Add(22 * time.Hour), source: governor.SourceBudget, trail: "budget used up: 24 runs counted in this UTC hour and the 23 before it (limit 24): waits until 2026-03-03T08:00:00.000Z"},
		},
		{
			"deadLetter.recheckAfter",
			given{withRecheck(intervalSpec(time.Minute), 5*time.Minute), ran(t0), at, deadLetterInput("t:1", at)},
			want{next: at.Add(5 * time.Minute), source: governor.SourceDeadLetterRecheck},
		},
		{
			"an entry without a time counts from now",
			given{intervalSpec(time.Minute), ran(t0), at, deadLetterInput("t:1", time.Time{})},
			want{next: at.Add(30 * time.Minute), source: governor.SourceDeadLetterRecheck},
		},
		{
			"the recheck replaces a later cadence",
			given{intervalSpec(24 * time.Hour), ran(t0), at, deadLetterInput("t:1", at)},
			want{next: at.Add(30 * time.Minute), source: governor.SourceDeadLetterRecheck},
		},
		{
			"held across the dead-lettered run's outcome",
			given{intervalSpec(time.Minute), stateWith(ran(t0.Add(-time.Minute)), deadLettered(at, at.Add(30*time.Minute))), at, outcome("failed", t0)},
			want{next: at.Add(30 * time.Minute), source: governor.SourceDeadLetterRecheck},
		},
		{
			"a success clears it",
			given{intervalSpec(time.Minute), stateWith(ran(t0), deadLettered(at, at.Add(30*time.Minute))), at.Add(30*time.Minute + 2*time.Second), outcome("succeeded", at.Add(30*time.Minute))},
			want{next: at.Add(31 * time.Minute), source: governor.SourceBaselineInterval, trail: "dead-letter of 2026-03-02T10:00:10.000Z cleared", check: func(t *testing.T, d governor.Decision) {
				if d.State.DeadLetter != nil {
					t.Error("dead-letter kept")
				}
			}},
		},
		{
			"a failed recheck keeps the mark but not the hold",
			given{intervalSpec(time.Minute), stateWith(ran(t0), deadLettered(at, at.Add(30*time.Minute)), failures(5)), at.Add(30*time.Minute + 2*time.Second), outcome("failed", at.Add(30*time.Minute))},
			want{next: at.Add(62 * time.Minute), source: governor.SourceBackoff, trail: "its recheck ran", check: func(t *testing.T, d governor.Decision) {
				if d.State.DeadLetter == nil {
					t.Error("dead-letter dropped")
				}
			}},
		},
		{
			// The slot after a final failure was planned from the failure
			// alone (failure-backoff) until the dead-letter entry arrived;
			// when that slot came first (a backoff grid slot a few
			// milliseconds ahead, or the dead-letter service down), the
			// failing target was called once more than maxAttempts allows.
			"a final failure holds the task before its entry arrives",
			given{intervalSpec(10 * time.Second), ran(t0.Add(-10 * time.Second)), at, finalFailure(t0, events.DeadLetterMaxAttempts)},
			want{
				next: t0.Add(2*time.Second + 30*time.Minute), source: governor.SourceDeadLetterRecheck,
				trail: "run t:1772445600000 dead-lettered (max-attempts) at 2026-03-02T10:00:02.000Z: recheck at 2026-03-02T10:30:02.000Z",
				check: func(t *testing.T, d governor.Decision) {
					dl := d.State.DeadLetter
					if dl == nil || dl.DispatchID != events.DispatchID("t", t0) || !dl.At.Equal(t0.Add(2*time.Second)) || d.State.Failures != 1 {
						t.Errorf("DeadLetter = %+v, failures %d", dl, d.State.Failures)
					}
					// The entry the dead-letter service then writes changes nothing.
					if e := governor.Decide(at.Add(time.Second), intervalSpec(10*time.Second), d.State, deadLetterInput(events.DispatchID("t", t0), at)); !e.Ignored {
						t.Errorf("the entry after the final failure re-planned: %s %s", e.Source, e.Trail)
					}
				},
			},
		},
		{
			"a final failure of the recheck holds it again",
			given{intervalSpec(time.Minute), stateWith(ran(t0), deadLettered(at, at.Add(30*time.Minute)), failures(5)), at.Add(30*time.Minute + 2*time.Second), finalFailure(at.Add(30*time.Minute), events.DeadLetterPermanent)},
			want{next: at.Add(60*time.Minute + 2*time.Second), source: governor.SourceDeadLetterRecheck, trail: "(permanent)"},
		},
		{
			"cron tasks are rechecked too",
			given{cronSpec("@daily", ""), ran(t0), at, deadLetterInput("t:1", at)},
			want{next: at.Add(30 * time.Minute), source: governor.SourceDeadLetterRecheck},
		},
	})
	for name, tc := range map[string]struct {
		st governor.State
		in governor.Input
	}{
		"redelivered entry":         {stateWith(ran(t0), deadLettered(at, at.Add(time.Hour))), deadLetterInput("t:dead", at)},
		"entry older than requeue":  {stateWith(ran(t0), func(s *governor.State) { s.RequeuedAt = at.Add(time.Second) }), deadLetterInput("t:1", at)},
		"entry older than success":  {stateWith(ran(t0), func(s *governor.State) { s.LastSuccessAt = at.Add(time.Second) }), deadLetterInput("t:1", at)},
		"dead-letter without entry": {ran(t0), governor.Input{Kind: governor.KindDeadLettered}},
		// The entry of a final failure applied already (its hold, then a
		// requeue or a success, cleared since), stored after them: the
		// dead-letter service was down or behind. It held the task again
		// for recheckAfter and undid the requeue.
		"entry of the applied failure, after a requeue": {
			stateWith(ran(t0), func(s *governor.State) { s.LastDispatchID, s.LastOutcome, s.RequeuedAt = "t:1", "failed", at }),
			lateEntry("t:1", t0, events.DeadLetterMaxAttempts, at.Add(time.Second)),
		},
		"entry of an earlier slot, after a later success": {
			stateWith(ran(t0.Add(time.Minute)), func(s *governor.State) { s.LastDispatchID, s.LastSuccessAt = "t:2", at }),
			lateEntry("t:1", t0, events.DeadLetterPermanent, at.Add(time.Second)),
		},
	} {
		if d := governor.Decide(at.Add(time.Minute), intervalSpec(time.Minute), tc.st, tc.in); !d.Ignored {
			t.Errorf("%s: not ignored: %s %s", name, d.Source, d.Trail)
		}
	}
	// A max-deliveries entry follows no run event that held the task: it
	// holds it, whatever slots were applied (a run of the slot that the
	// sweeper dispatched again, skipped as dead-lettered, say).
	st := stateWith(ran(t0), func(s *governor.State) { s.LastDispatchID = "t:1" })
	if d := governor.Decide(at.Add(time.Minute), intervalSpec(time.Minute), st, lateEntry("t:1", t0, events.DeadLetterMaxDeliveries, at)); d.Ignored || d.State.DeadLetter == nil {
		t.Errorf("max-deliveries entry of an applied slot: ignored %v, hold %+v; want it held", d.Ignored, d.State.DeadLetter)
	}
	// An entry applied before its final failure holds the task.
	if d := governor.Decide(at.Add(time.Minute), intervalSpec(time.Minute), ran(t0), lateEntry("t:2", t0.Add(time.Minute), events.DeadLetterPermanent, at)); d.Ignored || d.State.DeadLetter == nil {
		t.Errorf("entry ahead of its final failure: ignored %v, hold %+v; want it held", d.Ignored, d.State.DeadLetter)
	}
}

// lateEntry is the dead-letter entry of dispatch id, of slot, stored at.
func lateEntry(id string, slot time.Time, reason string, at time.Time) governor.Input {
	return governor.Input{Kind: governor.KindDeadLettered, DeadLetter: &governor.DeadLetterSignal{DispatchID: id, Reason: reason, At: at, ScheduledAt: slot}}
}

func TestDecideRequeue(t *testing.T) {
	at := t0.Add(10 * time.Second)
	runDecideCases(t, []decideCase{
		{
			"runs now, clears the dead-letter and the failures",
			given{intervalSpec(time.Minute), stateWith(ran(t0), deadLettered(at, at.Add(30*time.Minute)), failures(5)), t0.Add(time.Hour), requeued},
			want{next: t0.Add(time.Hour), source: governor.SourceRequeue, trail: "requeued: dead-letter cleared, failures reset", check: func(t *testing.T, d governor.Decision) {
				s := d.State
				if s.DeadLetter != nil || s.Failures != 0 || !s.RequeuedAt.Equal(t0.Add(time.Hour)) {
					t.Errorf("state %+v", s)
				}
			}},
		},
		{
			"bounds.min still keeps its gap after the last run",
			given{withBounds(intervalSpec(time.Minute), 10*time.Minute, 0), ran(t0), t0.Add(2 * time.Minute), requeued},
			want{next: t0.Add(10 * time.Minute), source: governor.SourceClampedMin, trail: "requeued: dead-letter cleared, failures reset"},
		},
		{
			"at least 1s after the last run",
			given{intervalSpec(time.Minute), ran(t0), t0.Add(300 * time.Millisecond), requeued},
			want{next: t0.Add(time.Second), source: governor.SourceRequeue, trail: "less than 1s after the last slot"},
		},
		{
			"pending until a run at or after it completes",
			given{intervalSpec(time.Hour), stateWith(ran(t0), func(s *governor.State) { s.RequeuedAt = t0.Add(time.Minute) }), t0.Add(90 * time.Second), hinted(governor.Hint{Interval: 2 * time.Hour})},
			want{next: t0.Add(90 * time.Second), source: governor.SourceRequeue},
		},
		{
			"consumed by its run",
			given{intervalSpec(time.Hour), stateWith(ran(t0), func(s *governor.State) { s.RequeuedAt = t0.Add(time.Minute) }), t0.Add(time.Minute + 2*time.Second), outcome("failed", t0.Add(time.Minute))},
			want{next: t0.Add(time.Minute + 2*time.Hour), source: governor.SourceBackoff, check: func(t *testing.T, d governor.Decision) {
				if !d.State.RequeuedAt.IsZero() {
					t.Error("requeue kept")
				}
			}},
		},
		{
			"a new dead-letter supersedes it",
			given{intervalSpec(time.Hour), stateWith(ran(t0), func(s *governor.State) { s.RequeuedAt = t0.Add(time.Minute) }), t0.Add(2 * time.Minute), deadLetterInput("t:2", t0.Add(2*time.Minute))},
			want{next: t0.Add(32 * time.Minute), source: governor.SourceDeadLetterRecheck, check: func(t *testing.T, d governor.Decision) {
				if !d.State.RequeuedAt.IsZero() {
					t.Error("requeue kept")
				}
			}},
		},
	})
}

// TestDecideARequestWhoseRunWasSkippedStaysPending: a skip is no run.
// The slot of a requeue (or of a run-now hint) dispatched, then skipped
// by the executor because the task was paused meanwhile, cleared the
// request as a run at or after it would, and the resume planned the next
// hourly slot: the run the operator asked for never came. The request now
// stays pending until a run: the resume runs it at once, and a timed
// pause plans it at its end. A slot that ran already (skipped as
// dispatched again) consumes it, and a skip for another reason (a breaker
// with no room to wait, an invalid stored spec) does not plan it again at
// once, where the next dispatch could be skipped again, once a second:
// the next run serves it, or the next input that plans runs it at once.
// A run-now hint kept so still expires at its TTL.
func TestDecideARequestWhoseRunWasSkippedStaysPending(t *testing.T) {
	spec := intervalSpec(time.Hour)
	rq := t0.Add(10 * time.Minute) // the request, and its slot
	pause := func(until time.Time) governor.Input {
		return governor.Input{Kind: governor.KindPaused, Pause: &governor.Pause{Until: until}}
	}
	resumed := governor.Input{Kind: governor.KindResumed}
	skipped := func(slot time.Time, why governor.Skip) governor.Input {
		in := outcome("skipped", slot)
		in.Outcome.Skip = why
		return in
	}
	var nothing time.Time // nothing planned
	pausedThen := func(steps ...any) []any {
		return append([]any{rq.Add(500 * time.Millisecond), pause(time.Time{})}, steps...)
	}
	const asked = governor.Source("asked") // the request's own source
	kinds := []struct {
		name    string
		in      governor.Input
		source  governor.Source
		pending func(governor.State) bool
	}{
		{"requeue", requeued, governor.SourceRequeue, func(s governor.State) bool { return s.RequeuedAt.Equal(rq) }},
		{"run-now", hinted(governor.Hint{At: rq, TTL: 2 * time.Hour}), governor.SourceHintOneShot, func(s governor.State) bool {
			return s.OneShotHint != nil && s.OneShotHint.At.Equal(rq)
		}},
	}
	for _, tt := range []struct {
		name    string
		steps   []any // after the request at rq
		next    time.Time
		source  governor.Source
		pending bool
	}{
		{
			"paused, skipped, resumed: the request runs at the resume",
			pausedThen(rq.Add(time.Second), outcome("skipped", rq), rq.Add(time.Hour), resumed),
			rq.Add(time.Hour), asked, true,
		},
		{
			"paused, skipped (paused), resumed: the request runs at the resume",
			pausedThen(rq.Add(time.Second), skipped(rq, governor.SkipPaused), rq.Add(time.Hour), resumed),
			rq.Add(time.Hour), asked, true,
		},
		{
			"paused, skipped: nothing runs while paused",
			pausedThen(rq.Add(time.Second), skipped(rq, governor.SkipPaused)),
			nothing, governor.SourcePaused, true,
		},
		{
			"paused until 11:00, skipped: the request runs at the pause's end",
			[]any{rq.Add(500 * time.Millisecond), pause(t0.Add(time.Hour)), rq.Add(time.Second), skipped(rq, governor.SkipPaused)},
			t0.Add(time.Hour), governor.SourcePaused, true,
		},
		{
			"paused, resumed, then the skip (paused) applied: the request runs at once",
			pausedThen(rq.Add(time.Second), resumed, rq.Add(2*time.Second), skipped(rq, governor.SkipPaused)),
			rq.Add(2 * time.Second), asked, true,
		},
		{
			"skipped, the slot ran already: consumed",
			[]any{rq.Add(time.Minute), skipped(rq, governor.SkipRan)},
			rq.Add(time.Hour), governor.SourceBaselineInterval, false,
		},
		{
			"skipped for another reason: pending, not planned again at once",
			[]any{rq.Add(time.Second), skipped(rq, governor.SkipNotRun)},
			rq.Add(time.Hour), governor.SourceBaselineInterval, true,
		},
		{
			"skipped for another reason, then a breaker transition: the request runs at once",
			[]any{rq.Add(time.Second), skipped(rq, governor.SkipNotRun), rq.Add(time.Minute), breakerInput("closed", time.Time{})},
			rq.Add(time.Minute), asked, true,
		},
		{
			"skipped for another reason, then the next run: consumed",
			[]any{rq.Add(time.Second), skipped(rq, governor.SkipNotRun), rq.Add(time.Hour + 2*time.Second), outcome("succeeded", rq.Add(time.Hour))},
			rq.Add(2 * time.Hour), governor.SourceBaselineInterval, false,
		},
	} {
		for _, k := range kinds {
			t.Run(k.name+"/"+tt.name, func(t *testing.T) {
				ds := decideSteps(spec, ran(t0), append([]any{rq, k.in}, tt.steps...)...)
				d := ds[len(ds)-1]
				source := tt.source
				if source == asked {
					source = k.source
				}
				if !d.NextRunAt.Equal(tt.next) || d.Source != source || k.pending(d.State) != tt.pending {
					t.Errorf("next run %s (%s), pending %v; want %s (%s), pending %v\n%s",
						fmtT(d.NextRunAt), d.Source, k.pending(d.State), fmtT(tt.next), source, tt.pending, fmtTrail(d.Trail))
				}
			})
		}
	}
	// A run-now hint its skip kept expires at its TTL: the resume after it
	// goes back to the cadence.
	d := decideLast(spec, ran(t0), append([]any{rq, hinted(governor.Hint{At: rq})},
		pausedThen(rq.Add(time.Second), skipped(rq, governor.SkipPaused), rq.Add(governor.DefaultOneShotHintTTL), resumed)...)...)
	if d.State.OneShotHint != nil || d.Source != governor.SourceBaselineInterval || !d.NextRunAt.Equal(rq.Add(time.Hour)) || !d.ClearedHints {
		t.Errorf("resumed at the run-now hint's TTL: next run %s (%s), hint %+v, cleared %v; want %s (%s), the hint expired\n%s",
			fmtT(d.NextRunAt), d.Source, d.State.OneShotHint, d.ClearedHints, fmtT(rq.Add(time.Hour)), governor.SourceBaselineInterval, fmtTrail(d.Trail))
	}
}

func TestDecideJitter(t *testing.T) {
	spec := withJitter(intervalSpec(time.Minute), 0.1)
	seen := map[time.Duration]bool{}
	var sum time.Duration
	const n = 2000
	for run := range uint64(n) {
		st := ran(t0)
		st.Runs = run
		d := governor.Decide(t0.Add(time.Second), spec, st, updated)
		if again := governor.Decide(t0.Add(time.Second), spec, st, updated); !again.NextRunAt.Equal(d.NextRunAt) {
			t.Fatal("jitter is not deterministic")
		}
		gap := d.NextRunAt.Sub(t0)
		if gap < 54*time.Second || gap >= 66*time.Second {
			t.Fatalf("run %d: gap %s outside [54s, 66s)", run, gap)
		}
		if gap%time.Millisecond != 0 {
			t.Fatalf("gap %s is not whole milliseconds", gap)
		}
		seen[gap] = true
		sum += gap
	}
	if len(seen) < n/2 {
		t.Errorf("only %d distinct gaps in %d runs", len(seen), n)
	}
	if mean := sum / n; mean < 59*time.Second || mean > 61*time.Second {
		t.Errorf("mean gap %s, want about 1m", mean)
	}
	// Another task draws differently.
	other := withJitter(intervalSpec(time.Minute), 0.1)
	other.ID = "u"
	same := 0
	for run := range uint64(100) {
		a, b := ran(t0), ran(t0)
		a.Runs, b.Runs = run, run
		b.TaskID = "u"
		if governor.Decide(t0, spec, a, updated).NextRunAt.Equal(governor.Decide(t0, other, b, updated).NextRunAt) {
			same++
		}
	}
	if same > 5 {
		t.Errorf("two tasks drew the same jitter %d times in 100", same)
	}

	runDecideCases(t, []decideCase{
		{
			"the trail shows it",
			given{spec, ran(t0), t0.Add(time.Second), updated},
			want{source: governor.SourceBaselineInterval, trail: "jitter", next: governor.Decide(t0.Add(time.Second), spec, ran(t0), updated).NextRunAt},
		},
		{
			"not on the first run",
			given{spec, governor.State{}, t0, accepted},
			want{next: t0, source: governor.SourceBaselineInterval},
		},
		{
			"not on a one-shot",
			given{spec, ran(t0), t0.Add(time.Second), hinted(governor.Hint{At: t0.Add(10 * time.Second)})},
			want{next: t0.Add(10 * time.Second), source: governor.SourceHintOneShot},
		},
		{
			"applied before the clamps",
			given{withBounds(withJitter(intervalSpec(time.Minute), 0.5), 0, time.Minute), stateWith(ran(t0), func(s *governor.State) { s.Runs = 3 }), t0.Add(time.Second), updated},
			want{next: t0.Add(time.Minute), source: governor.SourceClampedMax},
		},
	})
	// Cron: delayed by up to 10 % of the gap to the next occurrence.
	cspec := withJitter(cronSpec("0 * * * *", ""), 0.1)
	for run := range uint64(200) {
		st := ran(t0)
		st.Runs = run
		d := governor.Decide(t0.Add(time.Second), cspec, st, updated)
		if delay := d.NextRunAt.Sub(t0.Add(time.Hour)); delay < 0 || delay >= 6*time.Minute {
			t.Fatalf("cron jitter %s outside [0, 6m)", delay)
		}
	}
}

// A cron occurrence delayed by jitter (11:00 planned at 11:23) is the
// task's next run until its jittered slot: a spec update or a breaker
// transition decided between the two keeps it, for a task that ran before
// and for one waiting for its first run. Judged by the bare occurrence,
// the decision planned the occurrence after, and the 11:23 run was lost.
func TestDecideCronJitterSlotSurvivesAReDecision(t *testing.T) {
	hour := t0.Add(time.Hour) // the occurrence after the last run (t0)
	type task struct {
		spec *events.TaskSpec
		d    governor.Decision // the decision that planned the delayed slot
	}
	// delayed finds, varying what the jitter draw hashes (run count, task
	// ID), a task whose occurrence at 11:00 is delayed by 10 minutes or more.
	delayed := func(t *testing.T, decide func(i int) task) task {
		t.Helper()
		for i := range 100 {
			if k := decide(i); k.d.NextRunAt.Sub(hour) >= 10*time.Minute {
				return k
			}
		}
		t.Fatal("no draw delays the occurrence by 10 minutes")
		return task{}
	}
	tasks := map[string]task{
		"after a run": delayed(t, func(i int) task {
			spec := withJitter(cronSpec("0 * * * *", "UTC"), 0.5)
			st := ran(t0)
			st.Runs = uint64(i)
			return task{spec, governor.Decide(t0.Add(2*time.Second), spec, st, updated)}
		}),
		"before the first run": delayed(t, func(i int) task {
			spec := withJitter(cronSpec("0 * * * *", "UTC"), 0.5)
			spec.ID = fmt.Sprint("task-", i)
			return task{spec, governor.Decide(t0.Add(30*time.Minute), spec, governor.State{}, accepted)}
		}),
	}
	for name, k := range tasks {
		slot := k.d.NextRunAt
		// From the occurrence to just before the slot counts as in flight.
		for _, now := range []time.Time{hour, hour.Add(5 * time.Minute), slot.Add(-governor.InFlightWindow - time.Second)} {
			for _, in := range []governor.Input{updated, breakerInput("closed", time.Time{}), breakerInput("open", now.Add(time.Second))} {
				d := governor.Decide(now, k.spec, k.d.State, in)
				if !d.NextRunAt.Equal(slot) || d.Source != governor.SourceBaselineCron {
					t.Errorf("%s: %s input at %s: the slot %s (occurrence %s) replaced by %s (%s)\ntrail: %q",
						name, in.Kind, fmtT(now), fmtT(slot), fmtT(hour), fmtT(d.NextRunAt), d.Source, d.Trail)
				}
			}
		}
	}
}

// After two or more missed cron occurrences that are not caught up
// (catchUp none; skip when the overdue slot's run was the catch-up), the
// last occurrence at or before now is still the next run while its
// jittered slot is ahead: last run 07:10, decided at 10:05, the 10:00
// occurrence delayed past 10:05. Judged by the bare occurrence, the
// decision planned 11:00 plus its delay and the 10:00 run was lost.
func TestDecideCronJitterSlotSurvivesMissedOccurrences(t *testing.T) {
	now := t0.Add(5 * time.Minute)                 // 10:05
	last := t0.Add(-2*time.Hour - 50*time.Minute)  // 07:10, the last run's slot
	overdue := t0.Add(-time.Hour - 50*time.Minute) // 08:10, fired late at 10:01
	spec := func(policy string) *events.TaskSpec {
		return mustValid(t, withCatchUp(withJitter(cronSpec("0 * * * *", "UTC"), 0.5), policy, 0))
	}
	// slot is the jittered slot of 10:00 for a task that has run runs
	// times, as a decision at 09:59 (nothing missed) plans it.
	slot := func(runs uint64) time.Time {
		st := ran(t0.Add(-time.Hour))
		st.Runs = runs
		return governor.Decide(t0.Add(-time.Minute), spec(events.CatchUpSkip), st, updated).NextRunAt
	}
	runs := uint64(1) // the skip case counts one run before the outcome
	for runs < 100 && !slot(runs).After(now.Add(5*time.Minute)) {
		runs++
	}
	if runs == 100 {
		t.Fatal("no run count delays the 10:00 occurrence past 10:10")
	}
	jittered := slot(runs)
	none := ran(last)
	none.Runs = runs
	skip := stateWith(ran(last), planned(overdue, governor.SourceBaselineCron))
	skip.Runs = runs - 1 // the outcome counts the run of 08:10
	late := outcome("succeeded", overdue)
	late.Outcome.StartedAt, late.Outcome.FinishedAt = t0.Add(time.Minute), t0.Add(2*time.Minute)
	runDecideCases(t, []decideCase{
		{
			"catchUp none, a spec update at 10:05",
			given{spec(events.CatchUpNone), none, now, updated},
			want{next: jittered, source: governor.SourceBaselineCron, trail: "still the next run"},
		},
		{
			"catchUp none, the outcome of the overdue slot",
			given{spec(events.CatchUpNone), skip, now, late},
			want{next: jittered, source: governor.SourceBaselineCron, trail: "still the next run"},
		},
		{
			"catchUp skip, the overdue slot was the catch-up run",
			given{spec(events.CatchUpSkip), skip, now, late},
			want{next: jittered, source: governor.SourceBaselineCron, trail: "still the next run"},
		},
		{
			"catchUp none, a week down (more occurrences missed than counted)",
			given{spec(events.CatchUpNone), func() governor.State {
				st := ran(last.Add(-7 * 24 * time.Hour))
				st.Runs = runs
				return st
			}(), now, updated},
			want{next: jittered, source: governor.SourceBaselineCron, trail: "more than 100 slots missed"},
		},
		{
			// beforeLast bisects to the 10:00 occurrence over the whole
			// downtime (about 26,000 occurrences).
			"catchUp none, three years down",
			given{spec(events.CatchUpNone), func() governor.State {
				st := ran(last.AddDate(-3, 0, 0))
				st.Runs = runs
				return st
			}(), now, updated},
			want{next: jittered, source: governor.SourceBaselineCron, trail: "still the next run"},
		},
		{
			"catchUp none, three years down, the jittered slot passed: the next occurrence",
			given{spec(events.CatchUpNone), func() governor.State {
				st := ran(last.AddDate(-3, 0, 0))
				st.Runs = runs
				return st
			}(), jittered.Add(time.Second), updated},
			want{next: t0.Add(time.Hour).Add(jittered.Sub(t0)), source: governor.SourceBaselineCron},
		},
		{
			"catchUp none, the jittered slot passed: the next occurrence",
			given{spec(events.CatchUpNone), none, jittered.Add(time.Second), updated},
			want{next: t0.Add(time.Hour).Add(jittered.Sub(t0)), source: governor.SourceBaselineCron},
		},
	})
}

// A slot bounds.min raised (the cadence's own slot comes sooner after the
// last run than bounds.min) is the task's next run until its raised time,
// even once the cadence's slot has passed: a breaker transition or a spec
// update in between keeps it, and an outcome applied late does not count
// the slots bounds.min forbade as missed. Judged by the bare slot, a daily
// cron with bounds.min 36h, last run at midnight, re-planned at 06:00
// the next day for the second midnight, 12 hours after its raised slot;
// and with catchUp all, a late outcome backfilled slots that were never
// due.
func TestDecideMinRaisedSlotSurvivesAReDecision(t *testing.T) {
	midnight := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	daily := mustValid(t, withBounds(cronSpec("0 0 * * *", "UTC"), 36*time.Hour, 0))
	halfHour := mustValid(t, withBounds(intervalSpec(30*time.Minute), 56*time.Minute, 0))
	raised := func(spec *events.TaskSpec, last time.Time) governor.State {
		t.Helper()
		d := governor.Decide(last.Add(2*time.Second), spec, ran(last), outcome("succeeded", last))
		if d.Source != governor.SourceClampedMin {
			t.Fatalf("the decision after the run planned %s (%s), want a slot raised to bounds.min\ntrail: %q", fmtT(d.NextRunAt), d.Source, d.Trail)
		}
		return d.State
	}
	dailyNext := midnight.Add(36 * time.Hour) // noon on the second day
	halfNext := t0.Add(56 * time.Minute)
	var cases []decideCase
	for _, in := range []governor.Input{updated, breakerInput("closed", time.Time{}), breakerInput("half-open", time.Time{})} {
		what := string(in.Kind)
		if in.Breaker != nil {
			what += " " + in.Breaker.State
		}
		cases = append(cases,
			decideCase{
				"daily cron, " + what + " the morning after the occurrence",
				given{daily, raised(daily, midnight), midnight.Add(30 * time.Hour), in},
				want{next: dailyNext, source: governor.SourceClampedMin, trail: "holds it until"},
			},
			decideCase{
				"30m interval, " + what + " after its grid slot",
				given{halfHour, raised(halfHour, t0), t0.Add(31 * time.Minute), in},
				want{next: halfNext, source: governor.SourceClampedMin, trail: "holds it until"},
			},
		)
	}
	late := func(slot, end time.Time) governor.Input {
		in := outcome("succeeded", slot)
		in.Outcome.FinishedAt = end // started unknown, as after a downtime
		return in
	}
	tenSeconds := mustValid(t, withCatchUp(withBounds(intervalSpec(10*time.Second), time.Minute, 0), events.CatchUpAll, 0))
	everyMinute := mustValid(t, withCatchUp(withBounds(cronSpec("* * * * *", "UTC"), 5*time.Minute, 0), events.CatchUpAll, 0))
	noBackfill := func(t *testing.T, d governor.Decision) {
		if d.State.CatchUpPending != 0 {
			t.Errorf("%d backfill runs pending for slots bounds.min never let run", d.State.CatchUpPending)
		}
	}
	cases = append(cases,
		decideCase{
			"catchUp all, a 10s interval's outcome applied 35s late",
			given{tenSeconds, ran(t0.Add(-time.Minute)), t0.Add(35 * time.Second), late(t0, t0.Add(35*time.Second))},
			want{next: t0.Add(time.Minute), source: governor.SourceClampedMin, trail: "holds it until", check: noBackfill},
		},
		decideCase{
			"catchUp all, a minutely cron's outcome applied 2m30s late",
			given{everyMinute, ran(t0.Add(-5 * time.Minute)), t0.Add(150 * time.Second), late(t0, t0.Add(150*time.Second))},
			want{next: t0.Add(5 * time.Minute), source: governor.SourceClampedMin, trail: "holds it until", check: noBackfill},
		},
		decideCase{
			"a spec update lowers bounds.min below the time passed: the next occurrence",
			given{mustValid(t, withBounds(cronSpec("0 0 * * *", "UTC"), 3*time.Hour, 0)), raised(daily, midnight), midnight.Add(30 * time.Hour), updated},
			want{next: midnight.Add(48 * time.Hour), source: governor.SourceBaselineCron, trail: "already passed: next occurrence"},
		},
	)
	runDecideCases(t, cases)
}

// A slot planned while a run ran (by a run-now hint, a requeue, an
// interval hint) is still the next run when that run's outcome is
// applied, due or not: DISPATCH holds one dispatch per task, so the
// timer's publish of it waits, refused, until the run's dispatch is acked
// after its outcome is stored. Planned after, as the slot in flight it
// looked like, it was replaced in the timer before the timer's next try,
// and the run-now or requeue never ran, without a word (an hourly task
// ran again an hour later).
func TestDecideSlotPlannedDuringARunSurvivesItsOutcome(t *testing.T) {
	spec := mustValid(t, intervalSpec(time.Hour))
	running := stateWith(ran(t0.Add(-time.Hour)), planned(t0, governor.SourceBaselineInterval)) // the 10:00 run is under way
	during := t0.Add(time.Second)
	inputs := map[string]governor.Input{
		"a run-now hint":     hinted(governor.Hint{At: during}),
		"a requeue":          requeued,
		"an interval hint":   hinted(governor.Hint{Interval: 3 * time.Second, TTL: time.Hour}),
		"a one-shot hint 4s": hinted(governor.Hint{At: during.Add(4 * time.Second)}),
	}
	for name, in := range inputs {
		d := governor.Decide(during, spec, running, in)
		if !d.NextRunAt.After(t0) {
			t.Fatalf("%s during the run planned %s (%s), not after it\ntrail: %q", name, fmtT(d.NextRunAt), d.Source, d.Trail)
		}
		queued := d.NextRunAt
		for _, end := range []time.Time{queued.Add(-time.Second), queued.Add(time.Second), queued.Add(30 * time.Second)} {
			if end.Before(during) {
				continue
			}
			o := outcome("succeeded", t0)
			o.Outcome.FinishedAt = end
			runDecideCases(t, []decideCase{{
				fmt.Sprintf("%s, the run's outcome at %s", name, fmtT(end)),
				given{spec, d.State, end, o},
				want{next: queued, source: d.Source, trail: "was planned while the run of"},
			}})
		}
		// Its own outcome plans the slot after it, as any outcome does.
		o := outcome("succeeded", t0)
		o.Outcome.FinishedAt = queued.Add(time.Second)
		kept := governor.Decide(queued.Add(time.Second), spec, d.State, o)
		after := governor.Decide(queued.Add(2*time.Second), spec, kept.State, outcome("succeeded", queued))
		if !after.NextRunAt.After(queued) || after.State.OneShotHint != nil || !after.State.RequeuedAt.IsZero() {
			t.Errorf("%s: after the kept slot %s ran: next %s (%s), one-shot %v, requeued at %s\ntrail: %q",
				name, fmtT(queued), fmtT(after.NextRunAt), after.Source, after.State.OneShotHint, fmtT(after.State.RequeuedAt), after.Trail)
		}
	}
}

// A slot planned while a run ran is still the next run when a second
// input comes during that run (a hint, a resume, a requeue), due or not:
// its dispatch waits behind the running one's, as for the run's outcome
// (TestDecideSlotPlannedDuringARunSurvivesItsOutcome). Before 2026-12-02
// the second input took it for a slot in flight and planned after it, and
// the timer replaced it before it was published: a run-now hint, then an
// interval hint during a run, and the run-now never ran. Only an input
// that stops the task (a pause, a dead-letter hold) re-plans. A run-now
// sent while the slot waits is served by it (it runs after it); a requeue
// stays pending until a slot at or after it, so it gets its own run.
func TestDecideSlotPlannedDuringARunSurvivesALaterInput(t *testing.T) {
	spec := mustValid(t, intervalSpec(time.Hour))
	running := stateWith(ran(t0.Add(-time.Hour)), planned(t0, governor.SourceBaselineInterval)) // the 10:00 run is under way
	during := t0.Add(time.Second)
	firsts := []struct {
		name  string
		in    governor.Input
		every time.Duration // the interval hint's
	}{
		{"a run-now hint", hinted(governor.Hint{At: during}), 0},
		{"a requeue", requeued, 0},
		{"an interval hint of 30s", hinted(governor.Hint{Interval: 30 * time.Second, TTL: time.Hour}), 30 * time.Second},
	}
	for _, first := range firsts {
		d := governor.Decide(during, spec, running, first.in)
		queued := d.NextRunAt
		if !queued.After(t0) || !d.State.RunningSlot.Equal(t0) {
			t.Fatalf("%s during the run planned %s (%s), running slot %s\ntrail: %q", first.name, fmtT(queued), d.Source, fmtT(d.State.RunningSlot), d.Trail)
		}
		times := map[string]time.Time{"due": queued.Add(2 * time.Second)}
		if ahead := queued.Add(-500 * time.Millisecond); ahead.After(during) {
			times["ahead"] = ahead
		}
		seconds := []struct {
			name string
			in   governor.Input
			// after is the decision on the kept slot's own outcome.
			after want
		}{
			{"an interval hint of 10m", hinted(governor.Hint{Interval: 10 * time.Minute}), want{next: queued.Add(10 * time.Minute), source: governor.SourceHintInterval}},
			{"a one-shot hint for 10:10", hinted(governor.Hint{At: t0.Add(10 * time.Minute)}), want{next: t0.Add(10 * time.Minute), source: governor.SourceHintOneShot}},
			{"a resume", governor.Input{Kind: governor.KindResumed}, want{}},
			{"a spec update", updated, want{}},
			{"a breaker transition", breakerInput("closed", time.Time{}), want{}},
		}
		for when, at := range times {
			for _, second := range seconds {
				name := fmt.Sprintf("%s, then %s (the slot %s)", first.name, second.name, when)
				d2 := governor.Decide(at, spec, d.State, second.in)
				if !d2.NextRunAt.Equal(queued) || d2.Source != d.Source || !d2.State.RunningSlot.Equal(t0) {
					t.Errorf("%s: next %s (%s), running %s; want %s (%s) kept, running %s\n%s",
						name, fmtT(d2.NextRunAt), d2.Source, fmtT(d2.State.RunningSlot), fmtT(queued), d.Source, fmtT(t0), fmtTrail(d2.Trail))
					continue
				}
				// The running slot's outcome keeps it too, and its own
				// outcome plans the slot after it, the second input applied.
				o := outcome("succeeded", t0)
				o.Outcome.FinishedAt = at.Add(time.Second)
				kept := governor.Decide(at.Add(time.Second), spec, d2.State, o)
				if !kept.NextRunAt.Equal(queued) {
					t.Errorf("%s: the running slot's outcome moved %s to %s (%s)\n%s", name, fmtT(queued), fmtT(kept.NextRunAt), kept.Source, fmtTrail(kept.Trail))
					continue
				}
				end := maxTime(queued, at).Add(3 * time.Second)
				after := governor.Decide(end, spec, kept.State, outcome("succeeded", queued))
				w := second.after
				if first.every != 0 && second.name != "an interval hint of 10m" { // the first's cadence
					w = want{next: queued.Add(first.every), source: governor.SourceHintInterval}
				} else if w.next.IsZero() {
					w = want{next: queued.Add(time.Hour), source: governor.SourceBaselineInterval}
				}
				if !after.NextRunAt.Equal(w.next) || after.Source != w.source {
					t.Errorf("%s: after the kept slot %s ran: next %s (%s), want %s (%s)\n%s", name, fmtT(queued), fmtT(after.NextRunAt), after.Source, fmtT(w.next), w.source, fmtTrail(after.Trail))
				}
			}
		}
		due := queued.Add(2 * time.Second)
		runDecideCases(t, []decideCase{
			{
				first.name + ", then a run-now hint while it waits: served by it",
				given{spec, d.State, due, hinted(governor.Hint{At: due})},
				want{next: queued, source: d.Source, trail: "was planned while the run of", check: func(t *testing.T, d governor.Decision) {
					// Kept until the slot's outcome (a pause drops the
					// slot, and the resume plans the hint again), dated
					// to the slot, whose outcome consumes it.
					if h := d.State.OneShotHint; h != nil && h.At.After(queued) {
						t.Errorf("one-shot hint %+v left for a run after the slot that serves it", h)
					}
					after := governor.Decide(due.Add(2*time.Second), spec, d.State, outcome("succeeded", queued))
					if h := after.State.OneShotHint; h != nil {
						t.Errorf("one-shot hint %+v left after the slot that serves it ran", h)
					}
				}},
			},
			{
				first.name + ", then a requeue while it waits: its own run after it",
				given{spec, d.State, due, requeued},
				want{next: queued, source: d.Source, trail: "was planned while the run of", check: func(t *testing.T, d governor.Decision) {
					after := governor.Decide(due.Add(time.Second), spec, d.State, outcome("succeeded", t0))
					after = governor.Decide(due.Add(2*time.Second), spec, after.State, outcome("succeeded", queued))
					if after.Source != governor.SourceRequeue || !after.NextRunAt.Equal(due.Add(2*time.Second)) {
						t.Errorf("after the kept slot ran: next %s (%s), want the requeue at once\n%s", fmtT(after.NextRunAt), after.Source, fmtTrail(after.Trail))
					}
				}},
			},
			{
				first.name + ", then a pause: it stops the task",
				given{spec, d.State, due, governor.Input{Kind: governor.KindPaused}},
				want{next: time.Time{}, source: governor.SourcePaused},
			},
			{
				first.name + ", then a dead-letter hold: it waits for its recheck",
				given{spec, d.State, due, deadLetterInput("t:other", due)},
				want{next: due.Add(30 * time.Minute), source: governor.SourceDeadLetterRecheck},
			},
		})
	}
}

// An input that re-plans while a slot is in flight (due, its outcome not
// in yet; a hint, a requeue) plans the slot after it: the one in flight
// runs first, whatever is decided, so the grid, the first-run rule,
// catch-up counting, the budget's pacing, bounds.min and the MinGap floor
// measure from it. Measured from the last completed slot, a hint during
// the first run planned "first run at once" again, one during a slow run
// counted the slots it outlasted as missed and ran a catch-up, and a
// run-now hint put a second call right behind the day's only one.
func TestDecideInputDuringARunPlansAfterTheSlotInFlight(t *testing.T) {
	firstRun := stateWith(governor.Decide(t0, intervalSpec(time.Minute), governor.State{}, accepted).State) // slot t0 dispatched
	slow := stateWith(ran(t0), planned(t0.Add(time.Minute), governor.SourceBaselineInterval))               // 10:01 running since
	daily := stateWith(ran(t0.Add(-24*time.Hour)), planned(t0, governor.SourceBaselineInterval))            // today's run, at t0
	startAt := withStartAt(intervalSpec(time.Minute), t0)
	runDecideCases(t, []decideCase{
		{
			"interval hint during the first run: after its slot, not at once again",
			given{intervalSpec(time.Minute), firstRun, t0.Add(30 * time.Second), hinted(governor.Hint{Interval: 10 * time.Minute})},
			want{next: t0.Add(10 * time.Minute), source: governor.SourceHintInterval},
		},
		{
			"interval hint during the first run of a task with startAt",
			given{startAt, governor.Decide(t0.Add(-time.Hour), startAt, governor.State{}, accepted).State, t0.Add(30 * time.Second), hinted(governor.Hint{Interval: 10 * time.Minute})},
			want{next: t0.Add(10 * time.Minute), source: governor.SourceHintInterval},
		},
		{
			"interval hint during a slow run: the next slot on its grid, not a catch-up",
			given{intervalSpec(time.Minute), slow, t0.Add(2*time.Minute + 30*time.Second), hinted(governor.Hint{Interval: time.Minute})},
			want{next: t0.Add(3 * time.Minute), source: governor.SourceHintInterval, check: func(t *testing.T, d governor.Decision) {
				if d.State.CatchUpPending != 0 {
					t.Errorf("CatchUpPending = %d", d.State.CatchUpPending)
				}
			}},
		},
		{
			"interval hint two slots into a slow run: not a catch-up before its outcome",
			given{intervalSpec(time.Minute), slow, t0.Add(3*time.Minute + 30*time.Second), hinted(governor.Hint{Interval: time.Minute})},
			want{next: t0.Add(4 * time.Minute), source: governor.SourceHintInterval, trail: "not caught up before its outcome is in"},
		},
		{
			"interval hint during a slow run, catchUp all: nothing to backfill",
			given{withCatchUp(intervalSpec(time.Minute), events.CatchUpAll, 0), slow, t0.Add(3*time.Minute + 30*time.Second), hinted(governor.Hint{Interval: time.Minute})},
			want{next: t0.Add(4 * time.Minute), source: governor.SourceHintInterval},
		},
		{
			"budget of 1 a day: a run-now hint waits a day after the run in flight",
			given{withBudget(intervalSpec(24*time.Hour), 1), daily, t0.Add(time.Second), hinted(governor.Hint{At: t0.Add(time.Second)})},
			want{next: t0.Add(24 * time.Hour), source: governor.SourceBudget},
		},
		{
			"bounds.min: a run-now hint waits bounds.min after the run in flight",
			given{withBounds(intervalSpec(time.Hour), 5*time.Minute, 0), stateWith(ran(t0.Add(-time.Hour)), planned(t0, governor.SourceBaselineInterval)), t0.Add(time.Second), hinted(governor.Hint{At: t0.Add(time.Second)})},
			want{next: t0.Add(5 * time.Minute), source: governor.SourceClampedMin},
		},
		{
			"a requeue just after the slot in flight: at least MinGap after it",
			given{intervalSpec(time.Hour), stateWith(ran(t0.Add(-time.Hour)), planned(t0, governor.SourceBaselineInterval)), t0.Add(200 * time.Millisecond), requeued},
			want{next: t0.Add(governor.MinGap), source: governor.SourceRequeue},
		},
		// The slot in flight already serves the request a rule stands for:
		// planned again, it ran a second time right behind the running one
		// (old: 10:05:01 hint-oneshot, 10:30:01 deadletter-recheck, 10:00:01
		// requeue, 10:05:31 catch-up).
		{
			"interval hint while the one-shot's run is in flight: the one-shot is not planned again",
			given{
				intervalSpec(time.Hour), stateWith(ran(t0), oneShotHint(t0.Add(5*time.Minute), t0.Add(30*time.Minute)), planned(t0.Add(5*time.Minute), governor.SourceHintOneShot)),
				t0.Add(5*time.Minute + 500*time.Millisecond), hinted(governor.Hint{Interval: 10 * time.Minute}),
			},
			want{next: t0.Add(15 * time.Minute), source: governor.SourceHintInterval, trail: "served by the slot in flight"},
		},
		{
			"interval hint while a dead-letter recheck is in flight: not a second recheck",
			given{
				intervalSpec(time.Minute), stateWith(ran(t0), failures(1), deadLettered(t0, t0.Add(30*time.Minute)), planned(t0.Add(30*time.Minute), governor.SourceDeadLetterRecheck)),
				t0.Add(30*time.Minute + 500*time.Millisecond), hinted(governor.Hint{Interval: 10 * time.Minute}),
			},
			want{next: t0.Add(50 * time.Minute), source: governor.SourceBackoff, trail: "its recheck is the slot in flight"},
		},
		{
			"interval hint while the requeued run is in flight: not a second run",
			given{
				intervalSpec(time.Hour), stateWith(ran(t0.Add(-time.Hour)), requeuedAt(t0), planned(t0, governor.SourceRequeue)),
				t0.Add(500 * time.Millisecond), hinted(governor.Hint{Interval: 10 * time.Minute}),
			},
			want{next: t0.Add(10 * time.Minute), source: governor.SourceHintInterval, trail: "served by the slot in flight"},
		},
		{
			"interval hint while a backfill run is in flight: the next one waits for its success",
			given{
				withCatchUp(intervalSpec(time.Minute), events.CatchUpAll, 0), stateWith(ran(t0), pending(3), planned(t0.Add(5*time.Minute+30*time.Second), governor.SourceCatchUp)),
				t0.Add(5*time.Minute + 30*time.Second + 500*time.Millisecond), hinted(governor.Hint{Interval: time.Minute}),
			},
			want{next: t0.Add(6*time.Minute + 30*time.Second), source: governor.SourceHintInterval, trail: "wait for the slot in flight", check: func(t *testing.T, d governor.Decision) {
				if d.State.CatchUpPending != 3 {
					t.Errorf("CatchUpPending = %d", d.State.CatchUpPending)
				}
			}},
		},
		// The run a timed pause leads to is in flight from InFlightWindow
		// before the pause ends: an input then keeps it (it may not be
		// published yet), and the slot after it is planned from its
		// outcome (old: 10:00:01 paused, all three).
		{
			"breaker closed 1 s before the pause ends: the day's run is kept, budget 1 a day",
			given{
				withBudget(intervalSpec(24*time.Hour), 1), stateWith(ran(t0.Add(-24*time.Hour)), pausedUntil(t0), planned(t0, governor.SourcePaused)),
				t0.Add(-time.Second), breakerInput("closed", time.Time{}),
			},
			want{next: t0, source: governor.SourcePaused, trail: "is in flight", check: func(t *testing.T, d governor.Decision) {
				if !d.State.Paused || !d.State.PausedAt(t0.Add(-time.Second)) {
					t.Error("the pause ended before its end")
				}
			}},
		},
		{
			"a one-shot for after the pause's end, 1 s before it: the run the pause leads to is kept",
			given{
				withBounds(intervalSpec(time.Hour), 5*time.Minute, 0), stateWith(ran(t0.Add(-24*time.Hour)), pausedUntil(t0), planned(t0, governor.SourcePaused)),
				t0.Add(-time.Second), hinted(governor.Hint{At: t0.Add(500 * time.Millisecond)}),
			},
			want{next: t0, source: governor.SourcePaused, check: func(t *testing.T, d governor.Decision) {
				if d.State.OneShotHint == nil {
					t.Error("the one-shot for after the run was dropped")
				}
			}},
		},
		{
			"a run-now hint 1 s before the pause ends: served by the run the pause leads to",
			given{
				withBounds(intervalSpec(time.Hour), 5*time.Minute, 0), stateWith(ran(t0.Add(-24*time.Hour)), pausedUntil(t0), planned(t0, governor.SourcePaused)),
				t0.Add(-time.Second), hinted(governor.Hint{At: t0.Add(-time.Second)}),
			},
			want{next: t0, source: governor.SourcePaused},
		},
	})
}

func requeuedAt(at time.Time) func(*governor.State) {
	return func(s *governor.State) { s.RequeuedAt = at }
}

func TestDecideCatchUp(t *testing.T) {
	all := func(limit int) *events.TaskSpec {
		return withCatchUp(intervalSpec(time.Minute), events.CatchUpAll, limit)
	}
	down := t0.Add(5*time.Minute + 30*time.Second) // slots t0+1m … t0+5m missed
	runDecideCases(t, []decideCase{
		{
			"all: backfill every missed slot, one now",
			given{all(0), ran(t0), down, updated},
			want{
				next: down, source: governor.SourceCatchUp, trail: "5 slots missed since 2026-03-02T10:00:00.000Z (catchUp all, at most 100): backfilling 5, one now",
				check: func(t *testing.T, d governor.Decision) {
					if d.State.CatchUpPending != 5 {
						t.Errorf("CatchUpPending = %d", d.State.CatchUpPending)
					}
				},
			},
		},
		{
			"all: capped by catchUpMax",
			given{all(3), ran(t0), down, updated},
			want{next: down, source: governor.SourceCatchUp, trail: "backfilling 3", check: func(t *testing.T, d governor.Decision) {
				if d.State.CatchUpPending != 3 {
					t.Errorf("CatchUpPending = %d", d.State.CatchUpPending)
				}
			}},
		},
		{
			"all: the next backfill run follows a success",
			given{all(0), stateWith(ran(down), pending(3)), down.Add(200 * time.Millisecond), outcome("succeeded", down.Add(100*time.Millisecond))},
			want{next: down.Add(1100 * time.Millisecond), source: governor.SourceCatchUp, trail: "2 still to run", check: func(t *testing.T, d governor.Decision) {
				if d.State.CatchUpPending != 2 {
					t.Errorf("CatchUpPending = %d", d.State.CatchUpPending)
				}
			}},
		},
		{
			"all: the last one resumes the cadence",
			given{all(0), stateWith(ran(down), pending(1)), down.Add(3 * time.Second), outcome("succeeded", down.Add(2*time.Second))},
			want{next: down.Add(62 * time.Second), source: governor.SourceBaselineInterval},
		},
		{
			"all: a failure holds the backlog behind backoff",
			given{all(0), stateWith(ran(down), pending(3)), down.Add(3 * time.Second), outcome("failed", down.Add(2*time.Second))},
			want{next: down.Add(122 * time.Second), source: governor.SourceBackoff, trail: "3 backfill runs wait for a successful run", check: func(t *testing.T, d governor.Decision) {
				if d.State.CatchUpPending != 3 {
					t.Errorf("CatchUpPending = %d", d.State.CatchUpPending)
				}
			}},
		},
		{
			"a policy change drops the backlog",
			given{intervalSpec(time.Minute), stateWith(ran(down), pending(3)), down.Add(time.Second), updated},
			want{next: down.Add(time.Minute), source: governor.SourceBaselineInterval, check: func(t *testing.T, d governor.Decision) {
				if d.State.CatchUpPending != 0 {
					t.Errorf("CatchUpPending = %d", d.State.CatchUpPending)
				}
			}},
		},
		{
			"a failing task keeps its backoff grid",
			given{intervalSpec(time.Minute), stateWith(ran(t0), failures(1)), t0.Add(7 * time.Minute), updated},
			want{next: t0.Add(8 * time.Minute), source: governor.SourceBackoff, trail: "while failing: not caught up"},
		},
		{
			"slots in a pause are not caught up",
			given{all(0), stateWith(ran(t0), pausedUntil(t0.Add(time.Hour))), t0.Add(time.Hour), updated},
			want{next: t0.Add(61 * time.Minute), source: governor.SourceBaselineInterval, trail: "fell in the pause"},
		},
		{
			"cron, all: counted occurrence by occurrence",
			given{withCatchUp(cronSpec("*/10 * * * *", ""), events.CatchUpAll, 0), ran(t0), t0.Add(35 * time.Minute), updated},
			want{next: t0.Add(35 * time.Minute), source: governor.SourceCatchUp, trail: "3 slots missed"},
		},
		{
			"cron, all: capped",
			given{withCatchUp(cronSpec("* * * * * *", ""), events.CatchUpAll, 10), ran(t0), t0.Add(time.Hour), updated},
			want{next: t0.Add(time.Hour), source: governor.SourceCatchUp, trail: "more than 10 slots missed", check: func(t *testing.T, d governor.Decision) {
				if d.State.CatchUpPending != 10 {
					t.Errorf("CatchUpPending = %d", d.State.CatchUpPending)
				}
			}},
		},
		{
			"cron, skip: counting stops at 100",
			given{cronSpec("* * * * * *", ""), ran(t0), t0.Add(time.Hour), updated},
			want{next: t0.Add(time.Hour), source: governor.SourceCatchUp, trail: "more than 100 slots missed"},
		},
	})

	// A backlog replays one run per second at most, then the cadence
	// resumes from the last backfill run.
	spec := withCatchUp(intervalSpec(time.Minute), events.CatchUpAll, 0)
	d := governor.Decide(t0.Add(10*time.Minute+500*time.Millisecond), spec, ran(t0), updated)
	var runs []time.Time
	for range 20 {
		slot := d.NextRunAt
		runs = append(runs, slot)
		d = governor.Decide(slot.Add(10*time.Millisecond), spec, d.State, outcome("succeeded", slot))
	}
	backfill := 0
	for i, r := range runs {
		if i > 0 && r.Sub(runs[i-1]) < governor.MinGap {
			t.Fatalf("runs %d and %d only %s apart", i-1, i, r.Sub(runs[i-1]))
		}
		if r.Before(t0.Add(11 * time.Minute)) {
			backfill++
		}
	}
	if backfill != 10 {
		t.Errorf("%d backfill runs, want 10: %v", backfill, runs)
	}
	if gap := runs[11].Sub(runs[10]); gap != time.Minute {
		t.Errorf("cadence after the backlog %s, want 1m", gap)
	}
}

// Catch-up is for slots that were due and did not run. A spec update or
// an interval hint that shortens the cadence while the planned run is
// still ahead puts grid slots in the past that were never due: they are
// not caught up (with catchUp all they were backfilled in a burst).
func TestDecideCatchUpOnlyForSlotsThatWereDue(t *testing.T) {
	hourAhead := stateWith(ran(t0), planned(t0.Add(time.Hour), governor.SourceBaselineInterval))
	minuteDue := stateWith(ran(t0), planned(t0.Add(time.Minute), governor.SourceBaselineInterval))
	noBacklog := func(t *testing.T, d governor.Decision) {
		if d.State.CatchUpPending != 0 {
			t.Errorf("CatchUpPending = %d, want 0", d.State.CatchUpPending)
		}
	}
	runDecideCases(t, []decideCase{
		{
			"interval shortened from 1h to 1m at 10:30: next 1m slot, no backlog",
			given{withCatchUp(intervalSpec(time.Minute), events.CatchUpAll, 0), hourAhead, t0.Add(30 * time.Minute), updated},
			want{next: t0.Add(31 * time.Minute), source: governor.SourceBaselineInterval, trail: "30 slots since 2026-03-02T10:00:00.000Z were never due (the run planned was at 2026-03-02T11:00:00.000Z): not caught up", check: noBacklog},
		},
		{
			"... with catchUp skip too",
			given{intervalSpec(time.Minute), hourAhead, t0.Add(30 * time.Minute), updated},
			want{next: t0.Add(31 * time.Minute), source: governor.SourceBaselineInterval, check: noBacklog},
		},
		{
			"an interval hint 1m on an hourly task",
			given{withCatchUp(intervalSpec(time.Hour), events.CatchUpAll, 0), hourAhead, t0.Add(30 * time.Minute), hinted(governor.Hint{Interval: time.Minute})},
			want{next: t0.Add(31 * time.Minute), source: governor.SourceHintInterval, trail: "never due", check: noBacklog},
		},
		{
			"a cron expression changed from hourly to every 10 minutes",
			given{withCatchUp(cronSpec("*/10 * * * *", ""), events.CatchUpAll, 0), stateWith(ran(t0), planned(t0.Add(time.Hour), governor.SourceBaselineCron)), t0.Add(35 * time.Minute), updated},
			want{next: t0.Add(40 * time.Minute), source: governor.SourceBaselineCron, trail: "never due", check: noBacklog},
		},
		{
			"slots missed in a downtime are still caught up (the planned run is past)",
			given{withCatchUp(intervalSpec(time.Minute), events.CatchUpAll, 0), minuteDue, t0.Add(5*time.Minute + 30*time.Second), outcome("succeeded", t0.Add(time.Minute))},
			want{next: t0.Add(5*time.Minute + 30*time.Second), source: governor.SourceCatchUp, trail: "backfilling 4", check: func(t *testing.T, d governor.Decision) {
				if d.State.CatchUpPending != 4 {
					t.Errorf("CatchUpPending = %d, want 4", d.State.CatchUpPending)
				}
			}},
		},
	})
}

func TestDecideHintNudging(t *testing.T) {
	runDecideCases(t, []decideCase{
		{
			"an earlier hint moves the planned run at once",
			given{intervalSpec(time.Hour), stateWith(ran(t0), planned(t0.Add(time.Hour), governor.SourceBaselineInterval)), t0.Add(time.Minute), hinted(governor.Hint{At: t0.Add(5 * time.Minute)})},
			want{next: t0.Add(5 * time.Minute), source: governor.SourceHintOneShot, trail: "nudged: earlier than the run planned at 2026-03-02T11:00:00.000Z"},
		},
		{
			"an earlier interval hint too",
			given{intervalSpec(time.Hour), stateWith(ran(t0), planned(t0.Add(time.Hour), governor.SourceBaselineInterval)), t0.Add(time.Minute), hinted(governor.Hint{Interval: 10 * time.Minute})},
			want{next: t0.Add(10 * time.Minute), source: governor.SourceHintInterval, trail: "nudged"},
		},
		{
			"a hint never delays the planned run",
			given{intervalSpec(time.Minute), stateWith(ran(t0), planned(t0.Add(time.Minute), governor.SourceBaselineInterval)), t0.Add(10 * time.Second), hinted(governor.Hint{Interval: 10 * time.Minute})},
			want{next: t0.Add(time.Minute), source: governor.SourceBaselineInterval, trail: "does not delay the run planned at 2026-03-02T10:01:00.000Z", check: func(t *testing.T, d governor.Decision) {
				if d.State.IntervalHint == nil {
					t.Error("hint not stored")
				}
			}},
		},
		{
			"... it applies from the next run",
			given{intervalSpec(time.Minute), stateWith(ran(t0), intervalHint(10*time.Minute, t0.Add(time.Hour))), t0.Add(time.Minute + time.Second), outcome("succeeded", t0.Add(time.Minute))},
			want{next: t0.Add(11 * time.Minute), source: governor.SourceHintInterval},
		},
		{
			"a planned run in the past is not kept",
			given{intervalSpec(time.Minute), stateWith(ran(t0), planned(t0.Add(time.Minute), governor.SourceBaselineInterval)), t0.Add(90 * time.Second), hinted(governor.Hint{At: t0.Add(10 * time.Minute)})},
			want{next: t0.Add(2 * time.Minute), source: governor.SourceBaselineInterval},
		},
		{
			"both hints: the earlier one (one-shot)",
			given{intervalSpec(time.Hour), ran(t0), t0.Add(time.Second), hinted(governor.Hint{Interval: 10 * time.Second, At: t0.Add(5 * time.Second)})},
			want{next: t0.Add(5 * time.Second), source: governor.SourceHintOneShot},
		},
		{
			"both hints: the earlier one (interval)",
			given{intervalSpec(time.Hour), ran(t0), t0.Add(time.Second), hinted(governor.Hint{Interval: 10 * time.Second, At: t0.Add(20 * time.Second)})},
			want{next: t0.Add(10 * time.Second), source: governor.SourceHintInterval},
		},
		{
			"expired hints are reported as cleared",
			given{intervalSpec(time.Hour), stateWith(ran(t0), intervalHint(time.Minute, t0.Add(time.Minute)), oneShotHint(t0.Add(2*time.Hour), t0.Add(time.Minute))), t0.Add(2 * time.Minute), updated},
			want{next: t0.Add(time.Hour), source: governor.SourceBaselineInterval, trail: "one-shot hint for 2026-03-02T12:00:00.000Z expired at 2026-03-02T10:01:00.000Z: cleared", check: func(t *testing.T, d governor.Decision) {
				if !d.ClearedHints || d.State.IntervalHint != nil || d.State.OneShotHint != nil {
					t.Errorf("ClearedHints = %v, hints %+v %+v", d.ClearedHints, d.State.IntervalHint, d.State.OneShotHint)
				}
			}},
		},
		{
			"live hints are not",
			given{intervalSpec(time.Hour), stateWith(ran(t0), intervalHint(time.Minute, t0.Add(time.Hour))), t0.Add(2 * time.Second), updated},
			want{next: t0.Add(time.Minute), source: governor.SourceHintInterval, check: func(t *testing.T, d governor.Decision) {
				if d.ClearedHints {
					t.Error("ClearedHints set")
				}
			}},
		},
		{
			"a one-shot right after a run still waits 1s",
			given{intervalSpec(time.Hour), ran(t0), t0.Add(200 * time.Millisecond), hinted(governor.Hint{At: t0})},
			want{next: t0.Add(time.Second), source: governor.SourceHintOneShot, trail: "less than 1s after the last slot"},
		},
	})
}

// Every run failing at once must not loop: interval tasks back off, and
// nothing runs more often than once a second.
func TestDecideNoTightLoop(t *testing.T) {
	for _, spec := range []*events.TaskSpec{
		intervalSpec(time.Second),
		cronSpec("* * * * * *", ""),
		withAdaptive(intervalSpec(time.Second), events.AdaptiveChange, 0, 1, 0),
		withCatchUp(intervalSpec(time.Second), events.CatchUpAll, 0),
	} {
		slots, _ := simulate(t, spec, t0, t0.Add(time.Hour), time.Millisecond, func(int, time.Time) (string, string) { return "failed", "" })
		if len(slots) > 3600 {
			t.Errorf("%s/%s: %d runs in an hour", spec.Schedule.Interval, spec.Schedule.Cron, len(slots))
		}
	}
}

func TestDecideOverflow(t *testing.T) {
	far := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	spec := withBudget(withJitter(withActivity(withAdaptive(intervalSpec(events.MaxInterval), events.AdaptiveChange, 0, 0, 0)), 0.5), 1)
	st := stateWith(ran(t0), failures(math.MaxInt), adaptiveInterval(math.MaxInt64), func(s *governor.State) {
		s.Runs = math.MaxUint64
		s.LastActivityAt = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
		s.IntervalHint = &governor.IntervalHint{Interval: math.MaxInt64, ExpiresAt: far}
	})
	for _, now := range []time.Time{t0, far} {
		d := governor.Decide(now, spec, st, updated)
		if d.NextRunAt.Before(now) {
			t.Errorf("NextRunAt %s before now %s", fmtT(d.NextRunAt), fmtT(now))
		}
	}
}

// TestDecideAdaptiveRelaxesToAHugeBoundsMax: bounds.max had no upper
// limit, so adaptive "change" could relax toward the largest Duration.
// With smoothing 1 the EMA step float64(target-cur) rounds up to 2^63;
// converted back it wrapped negative, was clamped to the current
// interval, and the cadence never relaxed. The step now saturates.
// Validation caps bounds.max at events.MaxInterval since 2026-11-30, but
// a spec stored before (or by hand) still reaches Decide: it relaxes to
// MaxInterval (TestDecideStoredBoundsMaxPastTheCapStopsAtMaxInterval).
func TestDecideAdaptiveRelaxesToAHugeBoundsMax(t *testing.T) {
	s := withBounds(intervalSpec(time.Minute), 0, time.Duration(math.MaxInt64))
	s = withAdaptive(s, events.AdaptiveChange, 1, 1, 0)
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "bounds.max") {
		t.Fatalf("Validate() = %v, want bounds.max refused past %s", err, events.MaxInterval)
	}
	slot := t0.Add(time.Minute)
	d := governor.Decide(slot.Add(time.Second), s, stateWith(ran(t0), fingerprint("a")), outcomeFP("succeeded", slot, "a"))
	if d.State.AdaptiveInterval != events.MaxInterval || d.Source != governor.SourceAdaptiveRelax {
		t.Fatalf("unchanged response with smoothing 1: adaptive interval %s, source %s; want %s, adaptive-relax\ntrail %q",
			d.State.AdaptiveInterval, d.Source, events.MaxInterval, d.Trail)
	}
	if _, err := d.State.AppendJSON(nil); err != nil {
		t.Fatalf("decision cannot be stored: %v", err)
	}
}

// TestDecideStoredBoundsMaxPastTheCapStopsAtMaxInterval: validation
// refuses a bounds.max past events.MaxInterval only for new specs; one
// stored before the rule still loads. Adaptive cadence took it as its
// ceiling as it was: a 1h task with bounds.max 2190000h relaxed, on its
// second unchanged response, to a slot in 2276, past what the timer can
// queue (2262), and never ran again. The range stops at MaxInterval, as
// deadLetter.recheckAfter's recheck does.
func TestDecideStoredBoundsMaxPastTheCapStopsAtMaxInterval(t *testing.T) {
	for _, activity := range []bool{false, true} {
		s := withBounds(intervalSpec(time.Hour), 0, 2_190_000*time.Hour)
		s = withAdaptive(s, events.AdaptiveChange, 1, 1, 0)
		if activity {
			s = withActivity(s)
		}
		if err := s.ValidateStored(); err != nil {
			t.Fatalf("a stored spec with bounds.max %s no longer loads: %v", s.Bounds.Max, err)
		}
		if lo, hi := governor.AdaptiveRange(s); hi != events.MaxInterval || lo != 15*time.Minute {
			t.Errorf("AdaptiveRange = %s, %s; want 15m0s, %s", lo, hi, events.MaxInterval)
		}
		slot := t0.Add(time.Hour)
		st := stateWith(ran(t0), fingerprint("a"), lastActivity(t0.Add(-48*time.Hour)))
		d := governor.Decide(slot.Add(time.Second), s, st, outcomeFP("succeeded", slot, "a"))
		if d.State.AdaptiveInterval != events.MaxInterval || d.NextRunAt.After(slot.Add(events.MaxInterval)) {
			t.Errorf("activity %v: second unchanged response: adaptive interval %s, next run %s (%s); want %s at most, by %s\ntrail %q",
				activity, d.State.AdaptiveInterval, fmtT(d.NextRunAt), d.Source, events.MaxInterval, fmtT(slot.Add(events.MaxInterval)), d.Trail)
		}
	}
}

// A stored bounds.min past the cap, like bounds.max, is held to
// events.MaxInterval: clamp raised the next run to 2276, past what the
// timer queues, and the task never ran again.
func TestDecideStoredBoundsMinPastTheCapStopsAtMaxInterval(t *testing.T) {
	s := withBounds(intervalSpec(time.Hour), 2_190_000*time.Hour, 0)
	if err := s.ValidateStored(); err != nil {
		t.Fatalf("a stored spec with bounds.min %s no longer loads: %v", s.Bounds.Min, err)
	}
	slot := t0.Add(time.Hour)
	d := governor.Decide(slot.Add(time.Second), s, stateWith(ran(t0)), outcome("succeeded", slot))
	if want := slot.Add(events.MaxInterval); !d.NextRunAt.Equal(want) || d.Source != governor.SourceClampedMin {
		t.Errorf("next run %s (%s), want %s (%s)\ntrail %q", fmtT(d.NextRunAt), d.Source, fmtT(want), governor.SourceClampedMin, d.Trail)
	}
}

// slowRun is the outcome of the run of slot, which started on time and
// ended at end.
func slowRun(slot, end time.Time) governor.Input {
	in := outcome("succeeded", slot)
	in.Outcome.StartedAt = slot.Add(time.Millisecond)
	in.Outcome.FinishedAt = end
	return in
}

// A run that outlasts two intervals (or cron occurrences) is not a
// downtime: the slots that passed while it ran were not missed, the task
// was busy. Counted as
// missed, every such run was a catch-up: a target slower than two
// intervals was called again the moment it answered (skip), with a
// backlog that never drained (all).
func TestDecideSlowRunIsNotACatchUp(t *testing.T) {
	slot := t0.Add(5 * time.Second)
	end := slot.Add(12 * time.Second) // slots 10:00:10 and :15 passed while it ran
	due := stateWith(ran(t0), planned(slot, governor.SourceBaselineInterval))
	cronDue := stateWith(ran(t0), planned(slot, governor.SourceBaselineCron))
	every5s := "*/5 * * * * *"
	all := withCatchUp(intervalSpec(5*time.Second), events.CatchUpAll, 0)
	noBacklog := func(t *testing.T, d governor.Decision) {
		if d.State.CatchUpPending != 0 {
			t.Errorf("CatchUpPending = %d, want 0", d.State.CatchUpPending)
		}
	}
	runDecideCases(t, []decideCase{
		{
			"skip: the next slot on the grid",
			given{intervalSpec(5 * time.Second), due, end.Add(2 * time.Millisecond), slowRun(slot, end)},
			want{next: t0.Add(20 * time.Second), source: governor.SourceBaselineInterval, trail: "2 slots passed while the run of 2026-03-02T10:00:05.000Z ran (2026-03-02T10:00:05.001Z to 2026-03-02T10:00:17.000Z): not missed", check: func(t *testing.T, d governor.Decision) {
				if last := d.Trail[len(d.Trail)-1]; last != "baseline-interval: 3 × 5s after the slot of 2026-03-02T10:00:05.000Z" {
					t.Errorf("last trail line %q, want the 3 × 5s it planned", last)
				}
			}},
		},
		{
			"all: nothing to backfill",
			given{all, due, end.Add(2 * time.Millisecond), slowRun(slot, end)},
			want{next: t0.Add(20 * time.Second), source: governor.SourceBaselineInterval, trail: "not missed", check: noBacklog},
		},
		{
			"skip: slots that passed after it ended are still caught up",
			given{intervalSpec(5 * time.Second), due, end.Add(11 * time.Second), slowRun(slot, end)},
			want{next: end.Add(11 * time.Second), source: governor.SourceCatchUp, trail: "catchUp skip"},
		},
		{
			"cron, skip: the next occurrence",
			given{cronSpec(every5s, ""), cronDue, end.Add(2 * time.Millisecond), slowRun(slot, end)},
			want{next: t0.Add(20 * time.Second), source: governor.SourceBaselineCron, trail: "2 slots passed while the run of 2026-03-02T10:00:05.000Z ran"},
		},
		{
			"cron, all: nothing to backfill",
			given{withCatchUp(cronSpec(every5s, ""), events.CatchUpAll, 0), cronDue, end.Add(2 * time.Millisecond), slowRun(slot, end)},
			want{next: t0.Add(20 * time.Second), source: governor.SourceBaselineCron, trail: "not missed", check: noBacklog},
		},
		{
			// More occurrences passed while it ran than the cap counts
			// (catchUpMax 10): still busy, not down. It was a backlog of 10.
			"cron, all: a run that outlasts more occurrences than catchUpMax",
			given{withCatchUp(cronSpec(every5s, ""), events.CatchUpAll, 10), cronDue, slot.Add(2*time.Minute + 2*time.Millisecond), slowRun(slot, slot.Add(2*time.Minute))},
			want{next: slot.Add(2*time.Minute + 5*time.Second), source: governor.SourceBaselineCron, trail: "11 or more slots passed while the run of 2026-03-02T10:00:05.000Z ran", check: noBacklog},
		},
		{
			"cron, skip: a run that outlasts more occurrences than the cap of 100",
			given{cronSpec(every5s, ""), cronDue, slot.Add(10*time.Minute + 2*time.Millisecond), slowRun(slot, slot.Add(10*time.Minute))},
			want{next: slot.Add(10*time.Minute + 5*time.Second), source: governor.SourceBaselineCron, trail: "not missed", check: noBacklog},
		},
		{
			"cron, all: past the cap, occurrences after it ended are still caught up",
			given{withCatchUp(cronSpec(every5s, ""), events.CatchUpAll, 10), cronDue, slot.Add(2*time.Minute + 11*time.Second), slowRun(slot, slot.Add(2*time.Minute))},
			want{next: slot.Add(2*time.Minute + 11*time.Second), source: governor.SourceCatchUp, trail: "backfilling 2", check: func(t *testing.T, d governor.Decision) {
				if d.State.CatchUpPending != 2 {
					t.Errorf("CatchUpPending = %d, want 2", d.State.CatchUpPending)
				}
			}},
		},
		{
			// With a budget (34 a day, 42m21s apart) too: the run started
			// on time, so its start changes nothing for the budget, but it
			// is what tells a slow run from a downtime (FuzzDecide's
			// on-time invariant leaves such decisions out).
			"cron, skip, with a budget: a 2h run on time is followed by the next occurrence",
			given{withBudget(cronSpec("*/15 * * * *", ""), 34), stateWith(ran(t0), planned(t0.Add(15*time.Minute), governor.SourceBaselineCron)), t0.Add(2*time.Hour + 15*time.Minute + time.Second), slowRun(t0.Add(15*time.Minute), t0.Add(2*time.Hour+15*time.Minute))},
			want{next: t0.Add(2*time.Hour + 30*time.Minute), source: governor.SourceBaselineCron, trail: "8 slots passed while the run of 2026-03-02T10:15:00.000Z ran"},
		},
		{
			// Without its start the run's span is unknown: the slots since
			// its slot count as missed, as after a downtime.
			"cron, skip, with a budget: the same run without its start is caught up",
			given{withBudget(cronSpec("*/15 * * * *", ""), 34), stateWith(ran(t0), planned(t0.Add(15*time.Minute), governor.SourceBaselineCron)), t0.Add(2*time.Hour + 15*time.Minute + time.Second), outcome("succeeded", t0.Add(15*time.Minute))},
			want{next: t0.Add(2*time.Hour + 15*time.Minute + time.Second), source: governor.SourceCatchUp, trail: "catchUp skip"},
		},
		{
			"cron, skip: occurrences after it ended are still caught up",
			given{cronSpec(every5s, ""), cronDue, end.Add(11 * time.Second), slowRun(slot, end)},
			want{next: end.Add(11 * time.Second), source: governor.SourceCatchUp, trail: "catchUp skip"},
		},
		{
			"all: only those are backfilled",
			given{all, due, end.Add(11 * time.Second), slowRun(slot, end)},
			want{next: end.Add(11 * time.Second), source: governor.SourceCatchUp, trail: "backfilling 2", check: func(t *testing.T, d governor.Decision) {
				if d.State.CatchUpPending != 2 {
					t.Errorf("CatchUpPending = %d, want 2", d.State.CatchUpPending)
				}
			}},
		},
	})
}

// lateRun is the outcome of the run of slot, which started late at start
// (the timer fired an overdue slot after a downtime) and took 3 ms.
func lateRun(slot, start time.Time) governor.Input {
	in := outcome("succeeded", slot)
	in.Outcome.StartedAt = start
	in.Outcome.FinishedAt = start.Add(3 * time.Millisecond)
	return in
}

// After a downtime the timer fires the overdue slot at once. That late
// run is the run catch-up "skip" asks for: it is not followed by another
// one at once (before, every task ran twice in a row after a restart), and
// a backfill ("all") waits MinGap after it started, not after its slot.
func TestDecideCatchUpAfterALateRun(t *testing.T) {
	slot := t0.Add(5 * time.Second)        // planned before the downtime
	start := t0.Add(28 * time.Second)      // fired late, after the restart
	now := start.Add(5 * time.Millisecond) // its outcome is decided
	due := stateWith(ran(t0), planned(slot, governor.SourceBaselineInterval))
	cronDue := stateWith(ran(t0), planned(t0.Add(10*time.Second), governor.SourceBaselineCron))
	cronStart := t0.Add(38 * time.Second) // occurrences 10:00:20 and :30 passed
	cronNow := cronStart.Add(5 * time.Millisecond)
	every10s := "*/10 * * * * *"
	runDecideCases(t, []decideCase{
		{
			"skip: the late run was the catch-up; the grid resumes",
			given{intervalSpec(5 * time.Second), due, now, lateRun(slot, start)},
			want{next: t0.Add(30 * time.Second), source: governor.SourceBaselineInterval, trail: "4 slots passed before the run of 2026-03-02T10:00:05.000Z started at 2026-03-02T10:00:28.000Z: it was the run catch-up skip asks for"},
		},
		{
			"skip, cron: the same",
			given{cronSpec(every10s, ""), cronDue, cronNow, lateRun(t0.Add(10*time.Second), cronStart)},
			want{next: t0.Add(40 * time.Second), source: governor.SourceBaselineCron, trail: "2 slots passed before the run of 2026-03-02T10:00:10.000Z started at 2026-03-02T10:00:38.000Z"},
		},
		{
			"skip: slots missed after a run started on time are still caught up",
			given{intervalSpec(5 * time.Second), due, now, lateRun(slot, slot.Add(time.Millisecond))},
			want{next: now, source: governor.SourceCatchUp, trail: "catchUp skip"},
		},
		{
			"skip: two slots passed while the late run ran",
			given{intervalSpec(5 * time.Second), due, start.Add(11 * time.Second), lateRun(slot, start)},
			want{next: start.Add(11 * time.Second), source: governor.SourceCatchUp, trail: "catchUp skip"},
		},
		{
			"all: the late run's slots are backfilled, the first one a second after it started",
			given{withCatchUp(intervalSpec(5*time.Second), events.CatchUpAll, 0), due, now, lateRun(slot, start)},
			want{next: start.Add(governor.MinGap), source: governor.SourceCatchUp, trail: "backfilling 4", check: func(t *testing.T, d governor.Decision) {
				if d.State.CatchUpPending != 4 {
					t.Errorf("CatchUpPending = %d, want 4", d.State.CatchUpPending)
				}
			}},
		},
		{
			"all, cron: the same",
			given{withCatchUp(cronSpec(every10s, ""), events.CatchUpAll, 0), cronDue, cronNow, lateRun(t0.Add(10*time.Second), cronStart)},
			want{next: cronStart.Add(governor.MinGap), source: governor.SourceCatchUp, trail: "backfilling 2"},
		},
		{
			"a start after now (another clock) is taken as now",
			given{withCatchUp(intervalSpec(5*time.Second), events.CatchUpAll, 0), due, now, lateRun(slot, now.Add(100*365*24*time.Hour))},
			want{next: now.Add(governor.MinGap), source: governor.SourceCatchUp, trail: "backfilling 4"},
		},
	})
}

// The run a timed pause leads to (source paused) is a real dispatch: the
// executor runs it once the pause has ended. An input during that run
// plans after it, as after any slot in flight: measured from the slot
// before the pause, a run-now hint ran right behind it, whatever the
// budget, bounds.min or the 1 s floor.
func TestDecideInputDuringThePauseEndRunPlansAfterIt(t *testing.T) {
	// Paused until 10:00 (t0); the run a resume at 10:00 plans is 10:00.
	pauseEnd := func(last time.Time) governor.State {
		return stateWith(ran(last), pausedUntil(t0), planned(t0, governor.SourcePaused))
	}
	runDecideCases(t, []decideCase{
		{
			"a run-now hint 500 ms into the run: at least MinGap after it",
			given{intervalSpec(time.Hour), pauseEnd(t0.Add(-3 * time.Hour)), t0.Add(500 * time.Millisecond), hinted(governor.Hint{At: t0.Add(500 * time.Millisecond)})},
			want{next: t0.Add(governor.MinGap), source: governor.SourceHintOneShot},
		},
		{
			"budget of 1 a day: a run-now hint waits a day after the run",
			given{withBudget(intervalSpec(24*time.Hour), 1), pauseEnd(t0.Add(-48 * time.Hour)), t0.Add(time.Second), hinted(governor.Hint{At: t0.Add(time.Second)})},
			want{next: t0.Add(24 * time.Hour), source: governor.SourceBudget},
		},
		{
			"bounds.min: a run-now hint waits bounds.min after the run",
			given{withBounds(intervalSpec(time.Hour), 5*time.Minute, 0), pauseEnd(t0.Add(-3 * time.Hour)), t0.Add(time.Second), hinted(governor.Hint{At: t0.Add(time.Second)})},
			want{next: t0.Add(5 * time.Minute), source: governor.SourceClampedMin},
		},
	})
}

// The adaptive interval reaches the ends of its range: a response that keeps
// changing tightens it to the floor, and one that keeps repeating relaxes
// it to the ceiling. Rounded to whole milliseconds, the EMA step stalled
// short of them: 15.001s for a 1m baseline (floor 15s) at the default
// smoothing, 3m59.999s (ceiling 4m) at a smoothing of 0.3.
func TestDecideAdaptiveReachesTheEndsOfItsRange(t *testing.T) {
	for _, tc := range []struct {
		name      string
		smoothing float64
		changing  bool
		want      time.Duration
	}{
		{"changing responses, default smoothing: the floor", 0, true, 15 * time.Second},
		{"changing responses, smoothing 0.3: the floor", 0.3, true, 15 * time.Second},
		{"repeated responses, default smoothing: the ceiling", 0, false, 4 * time.Minute},
		{"repeated responses, smoothing 0.3: the ceiling", 0.3, false, 4 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := withAdaptive(intervalSpec(time.Minute), events.AdaptiveChange, 1, tc.smoothing, 0)
			st := stateWith(ran(t0), fingerprint("v0"))
			prev := time.Minute
			for i := 1; i <= 100; i++ {
				slot := st.LastScheduledAt.Add(time.Minute)
				fp := "v0"
				if tc.changing {
					fp = "v" + strconv.Itoa(i)
				}
				d := governor.Decide(slot.Add(time.Second), spec, st, outcomeFP("succeeded", slot, fp))
				st = d.State
				got := st.AdaptiveInterval
				if (tc.changing && got > prev) || (!tc.changing && got < prev) {
					t.Fatalf("run %d: interval %s after %s: not monotonic", i, got, prev)
				}
				prev = got
			}
			if prev != tc.want {
				t.Errorf("AdaptiveInterval after 100 runs = %s, want %s", prev, tc.want)
			}
		})
	}
}

// A request a slot still ahead serves (within InFlightWindow, perhaps not
// published yet: the timer publishes a dispatch only its lead before the
// slot) keeps that slot: planned after it, the slot the timer had not
// published yet was dropped, and the request with it (old: 10:00 the next
// day for the requeue and the pause end, 11:00 for the run-now hint).
func TestDecideRequestServedByASlotAheadKeepsIt(t *testing.T) {
	daily := withBudget(intervalSpec(24*time.Hour), 1)
	pausedDay := stateWith(ran(t0.Add(-24*time.Hour)), pausedUntil(t0), planned(t0, governor.SourcePaused))
	runDecideCases(t, []decideCase{
		{
			"requeue 1.5 s before the recheck: the recheck is the requeued run",
			given{
				intervalSpec(24 * time.Hour), stateWith(ran(t0.Add(-25*time.Hour)), failures(1), deadLettered(t0.Add(-24*time.Hour), t0), planned(t0, governor.SourceDeadLetterRecheck)),
				t0.Add(-1500 * time.Millisecond), requeued,
			},
			want{next: t0, source: governor.SourceDeadLetterRecheck, trail: "in flight", check: func(t *testing.T, d governor.Decision) {
				if d.State.DeadLetter != nil || !d.State.RequeuedAt.Equal(t0.Add(-1500*time.Millisecond)) {
					t.Errorf("DeadLetter = %+v, RequeuedAt = %s", d.State.DeadLetter, fmtT(d.State.RequeuedAt))
				}
			}},
		},
		{
			"run-now hint 1.7 s before the slot: the slot is the run",
			given{
				intervalSpec(time.Hour), stateWith(ran(t0.Add(-time.Hour)), planned(t0, governor.SourceBaselineInterval)),
				t0.Add(-1700 * time.Millisecond), hinted(governor.Hint{At: t0.Add(-1700 * time.Millisecond)}),
			},
			want{next: t0, source: governor.SourceBaselineInterval, trail: "in flight", check: func(t *testing.T, d governor.Decision) {
				if d.State.OneShotHint == nil {
					t.Error("the one-shot hint was dropped before its run")
				}
			}},
		},
		{
			// A hint that would move a plain slot still ahead: planned
			// after it, the slot (perhaps not yet published) was dropped,
			// and the hourly task ran at 09:00, then 11:00.
			"interval hint of 2h 1.5 s before a baseline slot: the slot is kept",
			given{
				intervalSpec(time.Hour), stateWith(ran(t0.Add(-time.Hour)), planned(t0, governor.SourceBaselineInterval)),
				t0.Add(-1500 * time.Millisecond), hinted(governor.Hint{Interval: 2 * time.Hour}),
			},
			want{next: t0, source: governor.SourceBaselineInterval, trail: "in flight"},
		},
		{
			"interval hint of 25m 1.5 s before a baseline slot: the slot is kept",
			given{
				intervalSpec(time.Hour), stateWith(ran(t0.Add(-time.Hour)), planned(t0, governor.SourceBaselineInterval)),
				t0.Add(-1500 * time.Millisecond), hinted(governor.Hint{Interval: 25 * time.Minute}),
			},
			want{next: t0, source: governor.SourceBaselineInterval, trail: "in flight"},
		},
		{
			"interval hint of 10m 1.5 s before a breaker probe: the probe is kept",
			given{
				intervalSpec(time.Hour), stateWith(ran(t0.Add(-time.Hour)), breakerOpenUntil(t0), planned(t0, governor.SourceBreakerOpen)),
				t0.Add(-1500 * time.Millisecond), hinted(governor.Hint{Interval: 10 * time.Minute}),
			},
			want{next: t0, source: governor.SourceBreakerOpen, trail: "in flight"},
		},
		{
			"breaker closed 1.5 s before the pause ends: the run it leads to is kept",
			given{daily, pausedDay, t0.Add(-1500 * time.Millisecond), breakerInput("closed", time.Time{})},
			want{next: t0, source: governor.SourcePaused, trail: "in flight", check: func(t *testing.T, d governor.Decision) {
				if !d.State.Paused || !d.State.PausedAt(t0.Add(-time.Second)) {
					t.Error("the pause ended before its end")
				}
			}},
		},
		{
			"spec update 1.5 s before the pause ends: the run it leads to is kept",
			given{daily, pausedDay, t0.Add(-1500 * time.Millisecond), updated},
			want{next: t0, source: governor.SourcePaused, trail: "in flight"},
		},
		{
			"a pause 1.5 s before the slot still stops the task",
			given{intervalSpec(time.Hour), stateWith(ran(t0.Add(-time.Hour)), planned(t0, governor.SourceBaselineInterval)), t0.Add(-1500 * time.Millisecond), governor.Input{Kind: governor.KindPaused}},
			want{next: time.Time{}, source: governor.SourcePaused},
		},
	})
}

// Two or more inputs during one run: the first plans after the running
// slot, which the state then remembers (RunningSlot) until that slot's
// outcome, so the inputs after it measure from it too, and none plans
// again the request it serves. Before 2026-12-02 the state no longer named
// the running slot: a second input measured from the last completed one
// (a second 10m hint during the 10:05 one-shot's run → 10:10), planned a
// requeue still in the state again right behind the requeued run (kept by
// the run's outcome, it ran twice), a second recheck behind the running
// one, and the next backfill run before the running one's success.
func TestDecideSecondInputDuringARunDoesNotPlanTheServedRequestAgain(t *testing.T) {
	after := func(spec *events.TaskSpec, st governor.State, steps ...any) governor.Decision {
		var d governor.Decision
		for i := 0; i < len(steps); i += 2 {
			d = governor.Decide(steps[i].(time.Time), spec, st, steps[i+1].(governor.Input))
			st = d.State
		}
		return d
	}
	hint10m := hinted(governor.Hint{Interval: 10 * time.Minute})
	closed := breakerInput("closed", time.Time{})
	oneShotRun := stateWith(ran(t0), oneShotHint(t0.Add(5*time.Minute), t0.Add(30*time.Minute)), planned(t0.Add(5*time.Minute), governor.SourceHintOneShot))
	requeuedRun := stateWith(ran(t0.Add(-time.Hour)), requeuedAt(t0), planned(t0, governor.SourceRequeue))
	recheckRun := stateWith(ran(t0), failures(1), deadLettered(t0, t0.Add(30*time.Minute)), planned(t0.Add(30*time.Minute), governor.SourceDeadLetterRecheck))
	backfillRun := stateWith(ran(t0), pending(3), planned(t0.Add(5*time.Minute+30*time.Second), governor.SourceCatchUp))
	backfill := withCatchUp(intervalSpec(time.Minute), events.CatchUpAll, 0)
	half := 500 * time.Millisecond
	tests := []struct {
		name  string
		d     governor.Decision
		next  time.Time
		src   governor.Source
		check func(t *testing.T, s governor.State)
	}{
		{
			// Measured from the last completed slot (10:00): 10:10.
			"one-shot at 10:05 running, two hints",
			after(intervalSpec(time.Hour), oneShotRun, t0.Add(5*time.Minute+half), hint10m, t0.Add(5*time.Minute+time.Second), hint10m),
			t0.Add(15 * time.Minute), governor.SourceHintInterval, nil,
		},
		{
			"requeued run at 10:00 running, a hint then a breaker transition",
			after(intervalSpec(time.Hour), requeuedRun, t0.Add(half), hint10m, t0.Add(time.Second), closed),
			t0.Add(10 * time.Minute), governor.SourceHintInterval,
			func(t *testing.T, s governor.State) {
				if !s.RequeuedAt.Equal(t0) {
					t.Errorf("RequeuedAt = %s, want %s until the run's outcome", fmtT(s.RequeuedAt), fmtT(t0))
				}
			},
		},
		{
			"requeued run at 10:00 running, a hint then a spec update",
			after(intervalSpec(time.Hour), requeuedRun, t0.Add(half), hint10m, t0.Add(time.Second), updated),
			t0.Add(10 * time.Minute), governor.SourceHintInterval, nil,
		},
		{
			"requeued run at 10:00 running, two hints",
			after(intervalSpec(time.Hour), requeuedRun, t0.Add(half), hint10m, t0.Add(time.Second), hint10m),
			t0.Add(10 * time.Minute), governor.SourceHintInterval, nil,
		},
		{
			// Its outcome kept the second run (keepQueued): the requeue
			// ran twice.
			"requeued run at 10:00 running, a hint, a breaker transition, then the run's outcome",
			after(intervalSpec(time.Hour), requeuedRun, t0.Add(half), hint10m, t0.Add(time.Second), closed, t0.Add(3*time.Second), outcome("succeeded", t0)),
			t0.Add(10 * time.Minute), governor.SourceHintInterval,
			func(t *testing.T, s governor.State) {
				if !s.RequeuedAt.IsZero() || !s.RunningSlot.IsZero() {
					t.Errorf("RequeuedAt = %s, RunningSlot = %s after the run's outcome", fmtT(s.RequeuedAt), fmtT(s.RunningSlot))
				}
			},
		},
		{
			"recheck at 10:30 running, two hints",
			after(intervalSpec(time.Minute), recheckRun, t0.Add(30*time.Minute+half), hint10m, t0.Add(30*time.Minute+time.Second), hint10m),
			t0.Add(50 * time.Minute), governor.SourceBackoff, nil,
		},
		{
			"recheck at 10:30 running, a hint then a breaker transition",
			after(intervalSpec(time.Minute), recheckRun, t0.Add(30*time.Minute+half), hint10m, t0.Add(30*time.Minute+time.Second), closed),
			t0.Add(50 * time.Minute), governor.SourceBackoff, nil,
		},
		{
			"backfill run in flight, two hints",
			after(backfill, backfillRun, t0.Add(5*time.Minute+30*time.Second+half), hinted(governor.Hint{Interval: time.Minute}), t0.Add(5*time.Minute+31*time.Second), hinted(governor.Hint{Interval: time.Minute})),
			t0.Add(6*time.Minute + 30*time.Second), governor.SourceHintInterval,
			func(t *testing.T, s governor.State) {
				if s.CatchUpPending != 3 {
					t.Errorf("CatchUpPending = %d", s.CatchUpPending)
				}
			},
		},
		{
			"backfill run in flight, a hint then a spec update",
			after(backfill, backfillRun, t0.Add(5*time.Minute+30*time.Second+half), hinted(governor.Hint{Interval: time.Minute}), t0.Add(5*time.Minute+31*time.Second), updated),
			t0.Add(6*time.Minute + 30*time.Second), governor.SourceHintInterval, nil,
		},
		{
			"breaker closed 1 s before the pause ends, then a run-now hint just after: budget 1 a day",
			after(withBudget(intervalSpec(24*time.Hour), 1), stateWith(ran(t0.Add(-24*time.Hour)), pausedUntil(t0), planned(t0, governor.SourcePaused)),
				t0.Add(-time.Second), closed, t0.Add(half), hinted(governor.Hint{At: t0.Add(half)})),
			t0.Add(24 * time.Hour), governor.SourceBudget, nil,
		},
		{
			"breaker closed 1 s before the pause ends, then two run-now hints: budget 1 a day",
			after(withBudget(intervalSpec(24*time.Hour), 1), stateWith(ran(t0.Add(-24*time.Hour)), pausedUntil(t0), planned(t0, governor.SourcePaused)),
				t0.Add(-time.Second), closed, t0.Add(half), hinted(governor.Hint{At: t0.Add(half)}), t0.Add(time.Second), hinted(governor.Hint{At: t0.Add(time.Second)})),
			t0.Add(24 * time.Hour), governor.SourceBudget, nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.d.NextRunAt.Equal(tt.next) || tt.d.Source != tt.src {
				t.Errorf("NextRunAt = %s (%s), want %s (%s)\n%s", fmtT(tt.d.NextRunAt), tt.d.Source, fmtT(tt.next), tt.src, fmtTrail(tt.d.Trail))
			}
			if tt.check != nil {
				tt.check(t, tt.d.State)
			}
		})
	}
}

// The state remembers the slot in flight that a decision planned past
// (RunningSlot) while its outcome is not in: later decisions keep it, the
// outcome of that slot or a later one clears it, and so do the inputs
// that do not plan after it (an acceptance, a delete). A pause keeps it:
// the run goes on, and its outcome follows.
func TestDecideRemembersTheRunningSlot(t *testing.T) {
	spec := intervalSpec(time.Hour)
	running := stateWith(ran(t0.Add(-time.Hour)), planned(t0, governor.SourceBaselineInterval)) // 10:00 runs
	first := governor.Decide(t0.Add(time.Second), spec, running, hinted(governor.Hint{Interval: 10 * time.Minute}))
	if got := first.State.RunningSlot; !got.Equal(t0) || !first.NextRunAt.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("a hint during the 10:00 run: RunningSlot %s, next %s; want 10:00, 10:10\n%s", fmtT(got), fmtT(first.NextRunAt), fmtTrail(first.Trail))
	}
	st := first.State
	for _, c := range []struct {
		name string
		now  time.Time
		in   governor.Input
		want time.Time
	}{
		{"a breaker transition keeps it", t0.Add(2 * time.Second), breakerInput("open", t0.Add(time.Minute)), t0},
		{"a spec update keeps it", t0.Add(2 * time.Second), updated, t0},
		{"a second hint keeps it", t0.Add(2 * time.Second), hinted(governor.Hint{At: t0.Add(5 * time.Minute)}), t0},
		{"a requeue keeps it", t0.Add(2 * time.Second), requeued, t0},
		{"a dead letter keeps it", t0.Add(2 * time.Second), deadLetterInput("t:other", t0.Add(time.Second)), t0},
		{"the outcome of an earlier slot keeps it", t0.Add(2 * time.Second), outcome("succeeded", t0.Add(-30*time.Minute)), t0},
		{"its outcome clears it", t0.Add(3 * time.Second), outcome("failed", t0), time.Time{}},
		{"a later slot's outcome clears it", t0.Add(11 * time.Minute), outcome("succeeded", t0.Add(10*time.Minute)), time.Time{}},
		{"a delete clears it", t0.Add(2 * time.Second), governor.Input{Kind: governor.KindDeleted}, time.Time{}},
		{"an acceptance clears it", t0.Add(2 * time.Second), accepted, time.Time{}},
		{"a pause keeps it (the run goes on)", t0.Add(2 * time.Second), governor.Input{Kind: governor.KindPaused, Pause: &governor.Pause{Until: t0.Add(time.Hour)}}, t0},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := governor.Decide(c.now, spec, st, c.in)
			if !d.State.RunningSlot.Equal(c.want) {
				t.Errorf("RunningSlot = %s, want %s\n%s", fmtT(d.State.RunningSlot), fmtT(c.want), fmtTrail(d.Trail))
			}
		})
	}
	// A breaker transition or spec update keeps a slot in flight in
	// place: nothing was planned past it, nothing to remember.
	if d := governor.Decide(t0.Add(time.Second), spec, running, updated); !d.State.RunningSlot.IsZero() || !d.NextRunAt.Equal(t0) {
		t.Errorf("a spec update during the run: next %s, RunningSlot %s", fmtT(d.NextRunAt), fmtT(d.State.RunningSlot))
	}
}

// TestDecideDormantMultiplierOfOne: once dormantAfter has passed, the
// interval is × dormantMultiplier whatever its value, 1 included; it
// used to fall through to the idle multiplier.
func TestDecideDormantMultiplierOfOne(t *testing.T) {
	spec := intervalSpec(time.Minute)
	spec.Activity = &events.Activity{IdleMultiplier: 3, DormantMultiplier: 1}
	spec.Normalize()
	mustValid(t, spec)
	now := t0.Add(time.Second)
	d := governor.Decide(now, spec, stateWith(ran(t0), lastActivity(now.Add(-25*time.Hour))), updated)
	if !d.NextRunAt.Equal(t0.Add(time.Minute)) || d.Source != governor.SourceActivityDormant {
		t.Fatalf("idle 25h with dormantMultiplier 1: next %s (%s), want %s (activity-dormant)\n%s",
			fmtT(d.NextRunAt), d.Source, fmtT(t0.Add(time.Minute)), d.Trail)
	}
	// Unset, the dormant multiplier is still the default 6.
	spec.Activity = &events.Activity{IdleMultiplier: 3}
	d = governor.Decide(now, spec, stateWith(ran(t0), lastActivity(now.Add(-25*time.Hour))), updated)
	if !d.NextRunAt.Equal(t0.Add(6*time.Minute)) || d.Source != governor.SourceActivityDormant {
		t.Fatalf("idle 25h with dormantMultiplier unset: next %s (%s), want %s (activity-dormant)", fmtT(d.NextRunAt), d.Source, fmtT(t0.Add(6*time.Minute)))
	}
}

// TestDecideBudgetCapsAFailingTask: a task whose every run fails for good
// (each is dead-lettered) still runs at most maxRunsPerDay times in any
// budget window: its dead-letter rechecks wait for the budget. They used
// to run every recheckAfter, 46 times a day for a budget of 2.
func TestDecideBudgetCapsAFailingTask(t *testing.T) {
	spec := mustValid(t, withBudget(intervalSpec(time.Minute), 2))
	end := t0.Add(72 * time.Hour)
	d := governor.Decide(t0, spec, governor.State{}, accepted)
	var slots []time.Time
	for i := 0; !d.NextRunAt.IsZero() && !d.NextRunAt.After(end); i++ {
		if i > 10_000 {
			t.Fatal("simulation does not end")
		}
		slot := d.NextRunAt
		slots = append(slots, slot)
		done := slot.Add(5 * time.Second)
		d = governor.Decide(done, spec, d.State, finalFailure(slot, "max-attempts"))
		if d.Ignored {
			t.Fatalf("final failure of %s ignored", fmtT(slot))
		}
		// The dead-letter entry follows: the same dispatch as the mark.
		if e := governor.Decide(done.Add(time.Second), spec, d.State, deadLetterInput(events.DispatchID(spec.ID, slot), done.Add(time.Second))); !e.Ignored {
			d = e
		}
		if d.Source == governor.SourceRequeue {
			t.Fatalf("after %s: requeue without a requeue", fmtT(slot))
		}
	}
	for i, s := range slots {
		h := s.Unix() / 3600
		n := 0
		for _, r := range slots[:i+1] {
			if rh := r.Unix() / 3600; rh >= h-23 && rh <= h {
				n++
			}
		}
		if n > 2 {
			t.Fatalf("run %d at %s: %d runs in the budget window of 24 hours ending in hour %s (limit 2); %d runs in 72h",
				i, fmtT(s), n, time.Unix(h*3600, 0).UTC().Format("15:04"), len(slots))
		}
	}
	if len(slots) < 6 {
		t.Fatalf("%d runs in 72h, want 6 (2 a day)", len(slots))
	}
}

// A resume that ends no pause (the task was not paused) is an input like
// any other: the slot in flight runs first, and the slots that pass while
// it runs are not caught up (old: "catch-up: 4 slots missed … run once
// now", next 10:00:45).
func TestDecideResumeOfAnUnpausedTaskDuringARun(t *testing.T) {
	slow := stateWith(ran(t0), planned(t0.Add(10*time.Second), governor.SourceBaselineInterval)) // 10:00:10 in flight
	resumed := governor.Input{Kind: governor.KindResumed}
	runDecideCases(t, []decideCase{
		{
			"catchUp skip: the next slot after the one in flight",
			given{intervalSpec(10 * time.Second), slow, t0.Add(45 * time.Second), resumed},
			want{next: t0.Add(50 * time.Second), source: governor.SourceBaselineInterval, trail: "not caught up before its outcome is in"},
		},
		{
			"catchUp all: nothing to backfill",
			given{withCatchUp(intervalSpec(10*time.Second), events.CatchUpAll, 0), slow, t0.Add(45 * time.Second), resumed},
			want{next: t0.Add(50 * time.Second), source: governor.SourceBaselineInterval, check: func(t *testing.T, d governor.Decision) {
				if d.State.CatchUpPending != 0 {
					t.Errorf("CatchUpPending = %d, want 0", d.State.CatchUpPending)
				}
			}},
		},
		{
			"a resume that ends a pause still does not keep the slot the pause ended on",
			given{intervalSpec(10 * time.Second), stateWith(ran(t0), pausedUntil(time.Time{}), planned(time.Time{}, governor.SourcePaused)), t0.Add(45 * time.Second), resumed},
			want{next: t0.Add(50 * time.Second), source: governor.SourceBaselineInterval, trail: "fell in the pause"},
		},
	})
}

// An interval hint plans no slot after its TTL: the slot after the
// expiry gives way to the cadence's first slot at or after it (old:
// 10:20 hint-interval, the grid re-anchored to 11:20, 12:20).
func TestDecideIntervalHintPlansNothingAfterItsTTL(t *testing.T) {
	expires := t0.Add(15*time.Minute + 30*time.Second)
	hint := intervalHint(10*time.Minute, expires)
	runDecideCases(t, []decideCase{
		{
			"the hint's run at 10:10, before the expiry",
			given{intervalSpec(time.Hour), ran(t0), t0.Add(30 * time.Second), hinted(governor.Hint{Interval: 10 * time.Minute, TTL: 15 * time.Minute})},
			want{next: t0.Add(10 * time.Minute), source: governor.SourceHintInterval},
		},
		{
			"its outcome: 10:20 is after the expiry, the cadence's 11:10",
			given{intervalSpec(time.Hour), stateWith(ran(t0), hint, planned(t0.Add(10*time.Minute), governor.SourceHintInterval)), t0.Add(10*time.Minute + 2*time.Second), outcome("succeeded", t0.Add(10*time.Minute))},
			want{next: t0.Add(70 * time.Minute), source: governor.SourceBaselineInterval, trail: "the cadence after it applies"},
		},
	})
}

// A step past MaxInterval plans a slot the timer may not queue (after
// 2262): a stored spec's recheckAfter past it rechecks after MaxInterval,
// and the activity multipliers stretch the interval to MaxInterval at
// most (old: recheck in year 2311; dormant slot 292 years on).
func TestDecideStepsAreCappedAtMaxInterval(t *testing.T) {
	stored := withRecheck(intervalSpec(time.Hour), 2500000*time.Hour) // refused by Validate, accepted by ValidateStored before the cap
	dormant := withActivity(intervalSpec(events.MaxInterval))
	dormant.Activity.DormantMultiplier = 1000
	mustValid(t, dormant)
	runDecideCases(t, []decideCase{
		{
			"a stored recheckAfter of 2500000h: the recheck MaxInterval after the dead letter",
			given{stored, ran(t0), t0.Add(time.Minute), governor.Input{Kind: governor.KindDeadLettered, DeadLetter: &governor.DeadLetterSignal{DispatchID: "t:dead", Reason: "max-attempts", At: t0.Add(time.Minute)}}},
			want{next: t0.Add(time.Minute + events.MaxInterval), source: governor.SourceDeadLetterRecheck, check: func(t *testing.T, d governor.Decision) {
				if dl := d.State.DeadLetter; dl == nil || !dl.RecheckAt.Equal(t0.Add(time.Minute+events.MaxInterval)) {
					t.Errorf("DeadLetter = %+v, want the recheck at %s", dl, fmtT(t0.Add(time.Minute+events.MaxInterval)))
				}
			}},
		},
		{
			"dormantMultiplier 1000 on a 8784h interval: stretched to MaxInterval",
			given{dormant, stateWith(ran(t0), lastActivity(t0.Add(-48*time.Hour))), t0.Add(time.Second), updated},
			want{next: t0.Add(events.MaxInterval), source: governor.SourceActivityDormant},
		},
	})
}

// A pause during a run does not stop that run (the executor checks the
// pause before a call, and the run's outcome follows), so the state still
// remembers it (RunningSlot), and the resume that ends the pause plans
// after it, as any input during the run does. Before, the pause and the
// resume forgot it: the resume planned again the requeue or run-now the
// running slot serves, at once, and the run's outcome kept that slot
// (planned while it ran), so the target was called twice; under a budget
// the resume planned from the slot before the running one.
func TestDecideAPauseDuringARunDoesNotForgetIt(t *testing.T) {
	paused := governor.Input{Kind: governor.KindPaused, Pause: &governor.Pause{}}
	pausedUntil := func(at time.Time) governor.Input {
		return governor.Input{Kind: governor.KindPaused, Pause: &governor.Pause{Until: at}}
	}
	resumed := governor.Input{Kind: governor.KindResumed}
	steps := decideSteps
	hourly := intervalSpec(time.Hour)
	requeuedRun := stateWith(ran(t0.Add(-time.Hour)), requeuedAt(t0), planned(t0, governor.SourceRequeue))
	runNowRun := stateWith(ran(t0.Add(-time.Hour)), oneShotHint(t0, t0.Add(30*time.Minute)), planned(t0, governor.SourceHintOneShot))
	budget := mustValid(t, withBudget(intervalSpec(time.Minute), 60)) // 24m apart
	budgetRun := stateWith(ran(t0.Add(-24*time.Minute)), planned(t0, governor.SourceBudget))
	done := outcome("succeeded", t0)
	done.Outcome.FinishedAt = t0.Add(5 * time.Second)
	s1, s2, s5 := t0.Add(time.Second), t0.Add(2*time.Second), t0.Add(5*time.Second)
	for _, tt := range []struct {
		name string
		ds   []governor.Decision
		next time.Time // after the last step
		src  governor.Source
	}{
		{"requeued run: pause, resume, the run's outcome", steps(hourly, requeuedRun, s1, paused, s2, resumed, s5, done), t0.Add(time.Hour), governor.SourceBaselineInterval},
		{"requeued run: pause, resume", steps(hourly, requeuedRun, s1, paused, s2, resumed), t0.Add(time.Hour), governor.SourceBaselineInterval},
		{"run-now's run: pause, resume, the run's outcome", steps(hourly, runNowRun, s1, paused, s2, resumed, s5, done), t0.Add(time.Hour), governor.SourceBaselineInterval},
		{"budget of 60 a day: pause, resume", steps(budget, budgetRun, s1, paused, s2, resumed), t0.Add(24 * time.Minute), governor.SourceBudget},
		{"requeued run: a pause until a time past", steps(hourly, requeuedRun, s1, pausedUntil(t0), s5, done), t0.Add(time.Hour), governor.SourceBaselineInterval},
		{"requeued run: a pause until now (the service's reading of the zero time)", steps(hourly, requeuedRun, s1, pausedUntil(s1), s5, done), t0.Add(time.Hour), governor.SourceBaselineInterval},
		{"requeued run: a pause that ends before its outcome", steps(hourly, requeuedRun, s1, pausedUntil(t0.Add(3*time.Second)), s5, done), t0.Add(time.Hour), governor.SourceBaselineInterval},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.ds[len(tt.ds)-1]
			if !d.NextRunAt.Equal(tt.next) || d.Source != tt.src {
				t.Errorf("NextRunAt = %s (%s), want %s (%s)\n%s", fmtT(d.NextRunAt), d.Source, fmtT(tt.next), tt.src, fmtTrail(d.Trail))
			}
			if got := tt.ds[0].State.RunningSlot; !got.Equal(t0) {
				t.Errorf("the pause: RunningSlot = %s, want %s\n%s", fmtT(got), fmtT(t0), fmtTrail(tt.ds[0].Trail))
			}
		})
	}
	// A slot a run-now planned during the run waits behind it: a pause
	// drops it, but the running slot is still the one remembered, and the
	// run-now is planned again by the resume.
	st := stateWith(ran(t0.Add(-time.Hour)), planned(t0, governor.SourceBaselineInterval))
	ds := steps(hourly, st, s1, hinted(governor.Hint{At: s1}), s2, paused, t0.Add(3*time.Second), resumed, s5, done)
	if got := ds[1].State.RunningSlot; !got.Equal(t0) {
		t.Errorf("a pause while a run-now waits behind the run: RunningSlot = %s, want %s\n%s", fmtT(got), fmtT(t0), fmtTrail(ds[1].Trail))
	}
	if d := ds[3]; !d.NextRunAt.Equal(t0.Add(3*time.Second)) || d.Source != governor.SourceHintOneShot {
		t.Errorf("the run-now after the resume and the run's outcome: next %s (%s), want %s (%s)\n%s",
			fmtT(d.NextRunAt), d.Source, fmtT(t0.Add(3*time.Second)), governor.SourceHintOneShot, fmtTrail(d.Trail))
	}
}

// A final failure holds the task for its dead-letter recheck, and no slot
// planned before it runs after it. The run a timed pause leads to is a
// slot in flight like any other: a breaker transition or a spec update
// during its retries keeps it (before, they planned a slot past it,
// which waited behind it and ran after its final failure, despite the
// hold, for a second dead letter). And the hold outranks a slot planned
// during the run by a rule below it (a spec update, a run-now hint): the
// final failure's outcome no longer keeps it. Only the operator's
// requeue outranks the recheck: a requeue sent during the run still runs
// after it.
func TestDecideAFinalFailureHoldsTheTaskOverASlotPlannedDuringItsRun(t *testing.T) {
	spec := mustValid(t, intervalSpec(time.Minute))
	final := func(at time.Time) governor.Input {
		in := finalFailure(t0, events.DeadLetterMaxAttempts)
		in.Outcome.FinishedAt = at
		return in
	}
	steps := func(st governor.State, steps ...any) governor.Decision { return decideLast(spec, st, steps...) }
	afterPause := stateWith(ran(t0.Add(-30*time.Minute)), pausedUntil(t0), planned(t0, governor.SourcePaused)) // 10:00 is the run after the pause
	onTime := stateWith(ran(t0.Add(-time.Minute)), planned(t0, governor.SourceBaselineInterval))
	open := breakerInput("open", t0.Add(90*time.Second))
	s1, s5, failed := t0.Add(time.Second), t0.Add(5*time.Second), t0.Add(95*time.Second)
	recheck := failed.Add(30 * time.Minute)
	for _, tt := range []struct {
		name string
		d    governor.Decision
		next time.Time
		src  governor.Source
	}{
		{"the run after a pause: breaker open during its retries, then its final failure", steps(afterPause, s5, open, failed, final(failed)), recheck, governor.SourceDeadLetterRecheck},
		{"the run after a pause: a spec update during its retries, then its final failure", steps(afterPause, s5, updated, failed, final(failed)), recheck, governor.SourceDeadLetterRecheck},
		{"without the pause", steps(onTime, s5, open, failed, final(failed)), recheck, governor.SourceDeadLetterRecheck},
		{"a run-now hint during the run, then its final failure", steps(onTime, s1, hinted(governor.Hint{At: s1}), failed, final(failed)), recheck, governor.SourceDeadLetterRecheck},
		{"a requeue during the run, then its final failure: the requeue still runs", steps(onTime, s1, requeued, failed, final(failed)), s1, governor.SourceRequeue},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.d.NextRunAt.Equal(tt.next) || tt.d.Source != tt.src {
				t.Errorf("NextRunAt = %s (%s), want %s (%s)\n%s", fmtT(tt.d.NextRunAt), tt.d.Source, fmtT(tt.next), tt.src, fmtTrail(tt.d.Trail))
			}
			if dl := tt.d.State.DeadLetter; dl == nil || !dl.RecheckAt.Equal(recheck) {
				t.Errorf("DeadLetter = %+v, want the recheck at %s", dl, fmtT(recheck))
			}
			if r := tt.d.State.RunningSlot; !r.IsZero() {
				t.Errorf("RunningSlot = %s after the run's outcome, want none", fmtT(r))
			}
		})
	}
	// The breaker transition itself keeps the run after the pause.
	d := governor.Decide(s5, spec, afterPause, open)
	if !d.NextRunAt.Equal(t0) || d.Source != governor.SourcePaused || !d.State.RunningSlot.IsZero() {
		t.Errorf("breaker open during the run after the pause: next %s (%s), running %s; want %s kept\n%s", fmtT(d.NextRunAt), d.Source, fmtT(d.State.RunningSlot), fmtT(t0), fmtTrail(d.Trail))
	}
}

// Only the slots that fell in a pause are not caught up. An outage that
// began after a timed pause ended is a downtime like any other: catchUp
// all backfills the slots after the pause's end. Before, the outcome of
// the run after the pause, applied once flyball was back, found the pause
// over and counted every missed slot as in it ("90 slots fell in the
// pause: not caught up"), and the backlog was dropped.
func TestDecideCatchUpAfterATimedPauseCountsOnlyTheSlotsInIt(t *testing.T) {
	// Paused from 09:00 until 09:30; flyball down from before 09:30 until
	// 11:00, when the overdue 09:30 slot runs.
	pausedState := stateWith(ran(t0.Add(-time.Hour)), pausedUntil(t0.Add(-30*time.Minute)), planned(t0.Add(-30*time.Minute), governor.SourcePaused))
	back := t0.Add(time.Hour)
	late := outcome("succeeded", t0.Add(-30*time.Minute))
	late.Outcome.StartedAt, late.Outcome.FinishedAt = back, back.Add(2*time.Second)
	backlog := func(n int) func(t *testing.T, d governor.Decision) {
		return func(t *testing.T, d governor.Decision) {
			if d.State.CatchUpPending != n || d.State.Paused {
				t.Errorf("CatchUpPending = %d, paused %v; want %d, not paused", d.State.CatchUpPending, d.State.Paused, n)
			}
		}
	}
	runDecideCases(t, []decideCase{
		{
			"interval, catchUp all: the 90 slots after the pause's end",
			given{withCatchUp(intervalSpec(time.Minute), events.CatchUpAll, 0), pausedState, back.Add(2 * time.Second), late},
			want{next: back.Add(2 * time.Second), source: governor.SourceCatchUp, trail: "90 slots missed", check: backlog(90)},
		},
		{
			"cron every minute, catchUp all",
			given{withCatchUp(cronSpec("* * * * *", "UTC"), events.CatchUpAll, 0), pausedState, back.Add(2 * time.Second), late},
			want{next: back.Add(2 * time.Second), source: governor.SourceCatchUp, check: backlog(90)},
		},
		{
			// The overdue slot's late run was the run skip asks for.
			"interval, catchUp skip: the late run was the catch-up run",
			given{intervalSpec(time.Minute), pausedState, back.Add(2 * time.Second), late},
			want{next: back.Add(time.Minute), source: governor.SourceBaselineInterval, trail: "it was the run catch-up skip asks for", check: backlog(0)},
		},
		{
			// Resumed at 11:00 (the pause until then): every slot fell in it.
			"a resume still drops the slots in the pause",
			given{withCatchUp(intervalSpec(time.Minute), events.CatchUpAll, 0), stateWith(ran(t0.Add(-time.Hour)), pausedUntil(time.Time{})), back, governor.Input{Kind: governor.KindResumed}},
			want{next: back.Add(time.Minute), source: governor.SourceBaselineInterval, trail: "120 slots fell in the pause: not caught up", check: backlog(0)},
		},
	})
}

// A requeue sent during a run that then fails finally outranks the hold
// that failure makes, as a requeue after it does: it stays pending and
// runs. Before, the hold was judged by when the failure (or its entry)
// arrived, after the requeue, so it cleared the requeue; and the slot a
// run-now or interval hint had queued before the requeue was dropped by
// the hold: neither ran, and the task waited for its recheck.
func TestDecideARequeueDuringAFailingRunSurvivesItsFinalFailure(t *testing.T) {
	hourly := mustValid(t, intervalSpec(time.Hour))
	minTen := mustValid(t, withBounds(intervalSpec(time.Minute), 10*time.Minute, 0))
	paused := governor.Input{Kind: governor.KindPaused, Pause: &governor.Pause{}}
	resumed := governor.Input{Kind: governor.KindResumed}
	onTime := stateWith(ran(t0.Add(-time.Hour)), planned(t0, governor.SourceBaselineInterval))
	onTimeMin := stateWith(ran(t0.Add(-10*time.Minute)), planned(t0, governor.SourceBaselineInterval))
	s1, s2, failed := t0.Add(time.Second), t0.Add(2*time.Second), t0.Add(95*time.Second)
	final := finalFailure(t0, events.DeadLetterMaxAttempts)
	final.Outcome.FinishedAt = failed
	entry := lateEntry(events.DispatchID("t", t0), t0, events.DeadLetterMaxAttempts, failed)
	steps := decideLast
	runNow, every10s := hinted(governor.Hint{At: s1}), hinted(governor.Hint{Interval: 10 * time.Second})
	for _, tt := range []struct {
		name string
		d    governor.Decision
		next time.Time
		src  governor.Source
	}{
		{"run-now, requeue, final failure", steps(hourly, onTime, s1, runNow, s2, requeued, failed, final), failed, governor.SourceRequeue},
		{"10s interval hint, requeue once its slot is due, final failure", steps(hourly, onTime, s1, every10s, t0.Add(11*time.Second), requeued, failed, final), failed, governor.SourceRequeue},
		{"10s interval hint, requeue, final failure: the requeue's slot", steps(hourly, onTime, s1, every10s, s2, requeued, failed, final), s2, governor.SourceRequeue},
		{"run-now, requeue, the entry before the final failure", steps(hourly, onTime, s1, runNow, s2, requeued, failed, entry, failed.Add(time.Second), final), failed, governor.SourceRequeue},
		{"requeue, the entry before the final failure", steps(hourly, onTime, s1, requeued, failed, entry), failed, governor.SourceRequeue},
		{"requeue, pause, final failure, resume", steps(hourly, onTime, s1, requeued, s2, paused, failed, final, failed.Add(5*time.Second), resumed), failed.Add(5 * time.Second), governor.SourceRequeue},
		{"bounds.min 10m: requeue, final failure", steps(minTen, onTimeMin, s1, requeued, failed, final), t0.Add(10 * time.Minute), governor.SourceClampedMin},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.d.NextRunAt.Equal(tt.next) || tt.d.Source != tt.src {
				t.Errorf("NextRunAt = %s (%s), want %s (%s)\n%s", fmtT(tt.d.NextRunAt), tt.d.Source, fmtT(tt.next), tt.src, fmtTrail(tt.d.Trail))
			}
			if tt.d.State.RequeuedAt.IsZero() {
				t.Errorf("RequeuedAt cleared before the requeue ran\n%s", fmtTrail(tt.d.Trail))
			}
		})
	}
	// The requeued run's outcome settles the requeue, and the run-now
	// hint with it: one run for both.
	d := steps(hourly, onTime, s1, runNow, s2, requeued, failed, final, failed.Add(3*time.Second), outcome("succeeded", failed))
	if !d.NextRunAt.Equal(failed.Add(time.Hour)) || !d.State.RequeuedAt.IsZero() || d.State.OneShotHint != nil || d.State.DeadLetter != nil {
		t.Errorf("after the requeued run: next %s (%s), requeue %s, hint %+v, hold %+v\n%s", fmtT(d.NextRunAt), d.Source,
			fmtT(d.State.RequeuedAt), d.State.OneShotHint, d.State.DeadLetter, fmtTrail(d.Trail))
	}
}

// A second run-now hint while the first one's slot waits behind the run
// is served by that slot, and stays in the state until its outcome: a
// pause then drops the slot, and the resume plans the run-now again.
// Before, the second hint was consumed at once, and it had replaced the
// first: the resume found no hint, and the run-now never ran. Without the
// pause, the two hints still make one run.
func TestDecideASecondRunNowDuringARunSurvivesAPause(t *testing.T) {
	hourly := mustValid(t, intervalSpec(time.Hour))
	paused := governor.Input{Kind: governor.KindPaused, Pause: &governor.Pause{}}
	resumed := governor.Input{Kind: governor.KindResumed}
	onTime := stateWith(ran(t0.Add(-time.Hour)), planned(t0, governor.SourceBaselineInterval))
	s1, s3, s4, s5 := t0.Add(time.Second), t0.Add(3*time.Second), t0.Add(4*time.Second), t0.Add(5*time.Second)
	steps := func(st governor.State, steps ...any) []governor.Decision { return decideSteps(hourly, st, steps...) }
	done := func(slot, at time.Time) governor.Input {
		in := outcome("succeeded", slot)
		in.Outcome.FinishedAt = at
		return in
	}
	check := func(name string, d governor.Decision, next time.Time, src governor.Source) {
		t.Helper()
		if !d.NextRunAt.Equal(next) || d.Source != src {
			t.Errorf("%s: NextRunAt = %s (%s), want %s (%s)\n%s", name, fmtT(d.NextRunAt), d.Source, fmtT(next), src, fmtTrail(d.Trail))
		}
	}
	ds := steps(onTime, s1, hinted(governor.Hint{At: s1}), s3, hinted(governor.Hint{At: s3}), s4, paused, s5, resumed,
		t0.Add(6*time.Second), done(t0, t0.Add(6*time.Second)), t0.Add(8*time.Second), done(s5, t0.Add(8*time.Second)))
	check("the second run-now", ds[1], s1, governor.SourceHintOneShot)
	check("the resume", ds[3], s5, governor.SourceHintOneShot)
	check("the run's outcome", ds[4], s5, governor.SourceHintOneShot)
	check("the run-now's outcome", ds[5], s5.Add(time.Hour), governor.SourceBaselineInterval)
	if h := ds[5].State.OneShotHint; h != nil {
		t.Errorf("hint %+v left after the run-now ran", h)
	}
	// Without the pause: one run for both hints.
	ds = steps(onTime, s1, hinted(governor.Hint{At: s1}), s3, hinted(governor.Hint{At: s3}),
		t0.Add(6*time.Second), done(t0, t0.Add(6*time.Second)), t0.Add(8*time.Second), done(s1, t0.Add(8*time.Second)))
	check("no pause: the run's outcome", ds[2], s1, governor.SourceHintOneShot)
	check("no pause: the run-now's outcome", ds[3], s1.Add(time.Hour), governor.SourceBaselineInterval)
	if h := ds[3].State.OneShotHint; h != nil {
		t.Errorf("no pause: hint %+v left after the run-now ran", h)
	}
}

// A slot that waited behind a long run (the run after a pause, or a
// run-now, planned during it) started once that run ended: the slots that
// passed while the task was busy with it were not missed, and catchUp all
// does not backfill them. Before, the waiting slot's outcome counted them
// from its own slot ("3 slots missed … backfilling 3", 45 after a 45-minute
// run).
func TestDecideSlotsPassedBehindALongRunAreNotCaughtUp(t *testing.T) {
	all := mustValid(t, withCatchUp(intervalSpec(time.Minute), events.CatchUpAll, 0))
	allCron := mustValid(t, withCatchUp(cronSpec("* * * * *", "UTC"), events.CatchUpAll, 0))
	onTime := stateWith(ran(t0.Add(-time.Minute)), planned(t0, governor.SourceBaselineInterval))
	onTimeCron := stateWith(ran(t0.Add(-time.Minute)), planned(t0, governor.SourceBaselineCron))
	s1 := t0.Add(time.Second)
	pauseTo := func(at time.Time) governor.Input {
		return governor.Input{Kind: governor.KindPaused, Pause: &governor.Pause{Until: at}}
	}
	// run is the outcome of slot, started at start and ended at end.
	run := func(slot, start, end time.Time) governor.Input {
		in := outcome("succeeded", slot)
		in.Outcome.StartedAt, in.Outcome.FinishedAt = start, end
		return in
	}
	steps := decideLast
	behind := func(spec *events.TaskSpec, st governor.State, long time.Duration, first governor.Input, queued time.Time) governor.Decision {
		end := t0.Add(long)
		start := end.Add(2 * time.Second) // the timer's retry once the long run's dispatch left DISPATCH
		return steps(spec, st, s1, first, end, run(t0, t0, end), start.Add(time.Second), run(queued, start, start.Add(time.Second)))
	}
	for _, tt := range []struct {
		name string
		d    governor.Decision
	}{
		{"a 5-minute run, paused until 10:02 during it", behind(all, onTime, 5*time.Minute, pauseTo(t0.Add(2*time.Minute)), t0.Add(2*time.Minute))},
		{"a 45-minute run, paused until 10:02 during it", behind(all, onTime, 45*time.Minute, pauseTo(t0.Add(2*time.Minute)), t0.Add(2*time.Minute))},
		{"cron: a 45-minute run, paused until 10:02 during it", behind(allCron, onTimeCron, 45*time.Minute, pauseTo(t0.Add(2*time.Minute)), t0.Add(2*time.Minute))},
		{"a 45-minute run, a run-now hint during it", behind(all, onTime, 45*time.Minute, hinted(governor.Hint{At: s1}), s1)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if n := tt.d.State.CatchUpPending; n != 0 || tt.d.Source == governor.SourceCatchUp {
				t.Errorf("CatchUpPending = %d, next %s (%s); want no backlog\n%s", n, fmtT(tt.d.NextRunAt), tt.d.Source, fmtTrail(tt.d.Trail))
			}
		})
	}
	// A downtime after the long run is still caught up: the slots after
	// its end.
	end := t0.Add(5 * time.Minute)
	back := end.Add(10 * time.Minute)
	d := steps(all, onTime, s1, hinted(governor.Hint{At: s1}), end, run(t0, t0, end), back.Add(time.Second), run(s1, back, back.Add(time.Second)))
	if n := d.State.CatchUpPending; n != 10 {
		t.Errorf("a downtime of 10 minutes after the long run: CatchUpPending = %d, want 10\n%s", n, fmtTrail(d.Trail))
	}
}

// decideSteps applies Decide to st for each pair of steps (the time of
// the input, the input), the state of each decision feeding the next,
// and returns every decision.
func decideSteps(spec *events.TaskSpec, st governor.State, steps ...any) []governor.Decision {
	var ds []governor.Decision
	for i := 0; i < len(steps); i += 2 {
		d := governor.Decide(steps[i].(time.Time), spec, st, steps[i+1].(governor.Input))
		ds = append(ds, d)
		st = d.State
	}
	return ds
}

// decideLast is decideSteps' last decision.
func decideLast(spec *events.TaskSpec, st governor.State, steps ...any) governor.Decision {
	ds := decideSteps(spec, st, steps...)
	return ds[len(ds)-1]
}
