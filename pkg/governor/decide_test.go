package governor_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // tests must not depend on the host's zoneinfo

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/pkg/governor"
)

// t0 is the slot of the last run in most cases.
var t0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

func intervalSpec(every time.Duration) *events.TaskSpec {
	s := &events.TaskSpec{
		ID:       "t",
		Target:   events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/"}},
		Schedule: events.Schedule{Interval: events.Duration(every)},
	}
	s.Normalize()
	return s
}

func cronSpec(expr, tz string) *events.TaskSpec {
	s := &events.TaskSpec{
		ID:       "t",
		Target:   events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/"}},
		Schedule: events.Schedule{Cron: expr, Timezone: tz},
	}
	s.Normalize()
	return s
}

func withBounds(s *events.TaskSpec, lo, hi time.Duration) *events.TaskSpec {
	s.Bounds = &events.Bounds{Min: events.Duration(lo), Max: events.Duration(hi)}
	return s
}

func withCatchUp(s *events.TaskSpec, policy string, limit int) *events.TaskSpec {
	s.CatchUp, s.CatchUpMax = policy, limit
	s.Normalize()
	return s
}

func withStartAt(s *events.TaskSpec, at time.Time) *events.TaskSpec {
	s.StartAt = &at
	return s
}

func outcome(result string, slot time.Time) governor.Input {
	return governor.Input{Kind: governor.KindOutcome, Outcome: &governor.Outcome{
		DispatchID:  events.DispatchID("t", slot),
		ScheduledAt: slot,
		Result:      result,
		FinishedAt:  slot.Add(2 * time.Second),
	}}
}

func ran(slot time.Time) governor.State {
	return governor.State{TaskID: "t", LastScheduledAt: slot, LastDispatchID: "t:previous", Runs: 1}
}

func hinted(h governor.Hint) governor.Input {
	return governor.Input{Kind: governor.KindHinted, Hint: &h}
}

var updated = governor.Input{Kind: governor.KindUpdated}

type given struct {
	spec  *events.TaskSpec
	state governor.State
	now   time.Time
	in    governor.Input
}

type want struct {
	next   time.Time // zero: nothing scheduled
	source governor.Source
	trail  string // a substring of the joined trail, if set
	check  func(t *testing.T, d governor.Decision)
}

type decideCase struct {
	name  string
	given given
	want  want
}

func runDecideCases(t *testing.T, tests []decideCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := tt.given
			before := cloneState(g.state)
			d := governor.Decide(g.now, g.spec, g.state, g.in)
			if !reflect.DeepEqual(g.state, before) {
				t.Errorf("Decide mutated its input state:\n got %+v\nwant %+v", g.state, before)
			}
			if !d.NextRunAt.Equal(tt.want.next) || d.NextRunAt.IsZero() != tt.want.next.IsZero() {
				t.Errorf("NextRunAt = %s, want %s\ntrail: %q", fmtT(d.NextRunAt), fmtT(tt.want.next), d.Trail)
			}
			if d.Source != tt.want.source {
				t.Errorf("Source = %q, want %q\ntrail: %q", d.Source, tt.want.source, d.Trail)
			}
			if tt.want.trail != "" && !strings.Contains(strings.Join(d.Trail, "\n"), tt.want.trail) {
				t.Errorf("trail %q does not mention %q", d.Trail, tt.want.trail)
			}
			if !d.Ignored {
				if !d.State.NextRunAt.Equal(d.NextRunAt) || d.State.Source != d.Source || !slices.Equal(d.State.Trail, d.Trail) {
					t.Errorf("State does not mirror the decision: %+v", d.State)
				}
				if !d.State.DecidedAt.Equal(g.now) || d.State.Input != g.in.Kind {
					t.Errorf("State.DecidedAt = %s, Input = %q; want %s, %q", d.State.DecidedAt, d.State.Input, g.now, g.in.Kind)
				}
				if len(d.Trail) == 0 {
					t.Error("empty trail")
				}
				if loc := d.NextRunAt.Location(); !d.NextRunAt.IsZero() && loc != time.UTC {
					t.Errorf("NextRunAt in %s, want UTC", loc)
				}
			}
			if tt.want.check != nil {
				tt.want.check(t, d)
			}
		})
	}
}

func fmtT(t time.Time) string {
	if t.IsZero() {
		return "(none)"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func cloneState(s governor.State) governor.State {
	c := s
	c.Trail = slices.Clone(s.Trail)
	c.RecentDispatchIDs = slices.Clone(s.RecentDispatchIDs)
	if s.IntervalHint != nil {
		h := *s.IntervalHint
		c.IntervalHint = &h
	}
	if s.OneShotHint != nil {
		h := *s.OneShotHint
		c.OneShotHint = &h
	}
	if s.DeadLetter != nil {
		h := *s.DeadLetter
		c.DeadLetter = &h
	}
	return c
}

func TestDecideBaselineInterval(t *testing.T) {
	runDecideCases(t, []decideCase{
		{
			"first run at once",
			given{intervalSpec(time.Minute), governor.State{}, t0, governor.Input{Kind: governor.KindAccepted}},
			want{next: t0, source: governor.SourceBaselineInterval, trail: "runs at once", check: func(t *testing.T, d governor.Decision) {
				if d.State.TaskID != "t" || !d.State.LastScheduledAt.IsZero() {
					t.Errorf("state %+v", d.State)
				}
			}},
		},
		{
			"accepted resets a previous state",
			given{intervalSpec(time.Minute), governor.State{TaskID: "t", LastScheduledAt: t0, Failures: 3, Paused: true}, t0.Add(time.Hour), governor.Input{Kind: governor.KindAccepted}},
			want{next: t0.Add(time.Hour), source: governor.SourceBaselineInterval, check: func(t *testing.T, d governor.Decision) {
				if d.State.Failures != 0 || d.State.Paused || !d.State.LastScheduledAt.IsZero() {
					t.Errorf("state not reset: %+v", d.State)
				}
			}},
		},
		{
			"after a success: one interval after the slot",
			given{intervalSpec(time.Minute), ran(t0.Add(-time.Minute)), t0.Add(5 * time.Second), outcome("succeeded", t0)},
			want{next: t0.Add(time.Minute), source: governor.SourceBaselineInterval, check: func(t *testing.T, d governor.Decision) {
				s := d.State
				if s.Runs != 2 || s.Failures != 0 || !s.LastScheduledAt.Equal(t0) || s.LastOutcome != "succeeded" ||
					s.LastDispatchID != events.DispatchID("t", t0) || !s.LastSuccessAt.Equal(t0.Add(2*time.Second)) {
					t.Errorf("state %+v", s)
				}
			}},
		},
		{
			// It ended before the newer slot began: a redelivery of an
			// outcome applied before that slot was planned.
			"a late outcome of an older slot is ignored and keeps the newer anchor",
			given{intervalSpec(time.Minute), stateWith(ran(t0), planned(t0.Add(time.Minute), governor.SourceBaselineInterval)), t0.Add(5 * time.Second), outcome("succeeded", t0.Add(-time.Minute))},
			want{next: t0.Add(time.Minute), source: governor.SourceBaselineInterval, check: func(t *testing.T, d governor.Decision) {
				if !d.Ignored || !d.State.LastScheduledAt.Equal(t0) || d.State.Runs != 1 {
					t.Errorf("ignored %v, state %+v", d.Ignored, d.State)
				}
			}},
		},
		{
			"a late outcome of a run that ended after the newer slot began counts, and keeps the newer anchor",
			given{intervalSpec(time.Minute), ran(t0), t0.Add(5 * time.Second), func() governor.Input {
				in := outcome("succeeded", t0.Add(-time.Second))
				in.Outcome.FinishedAt = t0.Add(time.Second)
				return in
			}()},
			want{next: t0.Add(time.Minute), source: governor.SourceBaselineInterval, check: func(t *testing.T, d governor.Decision) {
				if d.Ignored || !d.State.LastScheduledAt.Equal(t0) || d.State.Runs != 2 {
					t.Errorf("ignored %v, state %+v", d.Ignored, d.State)
				}
			}},
		},
		{
			"skipped run advances the grid without counting",
			given{intervalSpec(time.Minute), ran(t0.Add(-time.Minute)), t0.Add(time.Second), outcome("skipped", t0)},
			want{next: t0.Add(time.Minute), source: governor.SourceBaselineInterval, check: func(t *testing.T, d governor.Decision) {
				if d.State.Runs != 1 || d.State.LastOutcome != "skipped" {
					t.Errorf("state %+v", d.State)
				}
			}},
		},
		{
			"update keeps the grid",
			given{intervalSpec(10 * time.Minute), governor.State{TaskID: "t", LastScheduledAt: t0, Runs: 7}, t0.Add(time.Minute), updated},
			want{next: t0.Add(10 * time.Minute), source: governor.SourceBaselineInterval, check: func(t *testing.T, d governor.Decision) {
				if d.State.Runs != 7 || !d.State.LastScheduledAt.Equal(t0) {
					t.Errorf("update lost state: %+v", d.State)
				}
			}},
		},
		{
			"one slot passed (a late decision): next grid slot after now",
			given{intervalSpec(time.Minute), ran(t0), t0.Add(time.Minute + 30*time.Second), updated},
			want{next: t0.Add(2 * time.Minute), source: governor.SourceBaselineInterval, trail: "already passed: skipped to the next slot on the grid\nbaseline-interval: 2 × 1m0s after the slot of "},
		},
		{
			"slots passed, catch-up none: next grid slot after now",
			given{withCatchUp(intervalSpec(time.Minute), events.CatchUpNone, 0), ran(t0), t0.Add(3*time.Minute + 30*time.Second), updated},
			want{next: t0.Add(4 * time.Minute), source: governor.SourceBaselineInterval, trail: "catch-up none: 3 slots missed"},
		},
		{
			"slot passed exactly on the grid: strictly after now",
			given{withCatchUp(intervalSpec(time.Minute), events.CatchUpNone, 0), ran(t0), t0.Add(3 * time.Minute), updated},
			want{next: t0.Add(4 * time.Minute), source: governor.SourceBaselineInterval, trail: "already passed"},
		},
		{
			"slots passed, catch-up skip (default): once now",
			given{intervalSpec(time.Minute), ran(t0), t0.Add(3*time.Minute + 30*time.Second), updated},
			want{next: t0.Add(3*time.Minute + 30*time.Second), source: governor.SourceCatchUp, trail: "3 slots missed since 2026-03-02T10:00:00.000Z (catchUp skip): run once now"},
		},
		{
			"slot due exactly now: next one",
			given{intervalSpec(time.Minute), ran(t0), t0.Add(time.Minute), updated},
			want{next: t0.Add(2 * time.Minute), source: governor.SourceBaselineInterval},
		},
		{
			"slot passed long ago keeps the grid",
			given{withCatchUp(intervalSpec(7*time.Second), events.CatchUpNone, 0), ran(t0), t0.Add(500000*7*time.Second + 5*time.Second), updated},
			want{next: t0.Add(500001 * 7 * time.Second), source: governor.SourceBaselineInterval},
		},
		{
			"366-day interval",
			given{intervalSpec(events.MaxInterval), ran(t0), t0.Add(time.Second), updated},
			want{next: t0.Add(events.MaxInterval), source: governor.SourceBaselineInterval},
		},
		{
			"anchor far in the past: caught up now",
			given{intervalSpec(time.Second), ran(time.Date(1, 1, 2, 0, 0, 0, 0, time.UTC)), t0, updated},
			want{next: t0, source: governor.SourceCatchUp},
		},
		{
			"anchor far in the past, catch-up none: floored to now",
			given{withCatchUp(intervalSpec(time.Second), events.CatchUpNone, 0), ran(time.Date(1, 1, 2, 0, 0, 0, 0, time.UTC)), t0, updated},
			want{next: t0, source: governor.SourceBaselineInterval, trail: "floored to now"},
		},
		{
			"anchor in the future (clock skew)",
			given{intervalSpec(time.Minute), governor.State{TaskID: "t"}, t0, outcome("succeeded", t0.Add(time.Second))},
			want{next: t0.Add(time.Minute + time.Second), source: governor.SourceBaselineInterval},
		},
	})
}

func TestDecideFailureBackoff(t *testing.T) {
	var tests []decideCase
	for _, tc := range []struct {
		failuresBefore int
		factor         time.Duration
	}{{0, 2}, {1, 4}, {2, 8}, {3, 16}, {4, 32}, {5, 32}, {9, 32}, {1<<20 - 1, 32}, {1 << 20, 32}} {
		st := ran(t0.Add(-time.Minute))
		st.Failures = tc.failuresBefore
		wantFailures := min(tc.failuresBefore+1, 1<<20)
		tests = append(tests, decideCase{
			fmt.Sprintf("failure %d", tc.failuresBefore+1),
			given{intervalSpec(time.Minute), st, t0.Add(5 * time.Second), outcome("failed", t0)},
			want{
				next: t0.Add(tc.factor * time.Minute), source: governor.SourceBackoff, trail: fmt.Sprintf("interval ×%d", tc.factor),
				check: func(t *testing.T, d governor.Decision) {
					if d.State.Failures != wantFailures || !d.State.LastFailureAt.Equal(t0.Add(2*time.Second)) || d.State.LastOutcome != "failed" {
						t.Errorf("Failures = %d, LastFailureAt = %s; want %d", d.State.Failures, d.State.LastFailureAt, wantFailures)
					}
				},
			},
		})
	}
	failing := ran(t0.Add(-time.Minute))
	failing.Failures = 4
	tests = append(tests,
		decideCase{
			"a success resets the count",
			given{intervalSpec(time.Minute), failing, t0.Add(5 * time.Second), outcome("succeeded", t0)},
			want{next: t0.Add(time.Minute), source: governor.SourceBaselineInterval, check: func(t *testing.T, d governor.Decision) {
				if d.State.Failures != 0 {
					t.Errorf("Failures = %d, want 0", d.State.Failures)
				}
			}},
		},
		decideCase{
			"a skip keeps the count",
			given{intervalSpec(time.Minute), failing, t0.Add(5 * time.Second), outcome("skipped", t0)},
			want{next: t0.Add(16 * time.Minute), source: governor.SourceBackoff},
		},
		decideCase{
			"backoff keeps its own grid when its slot passed",
			given{intervalSpec(time.Minute), governor.State{TaskID: "t", LastScheduledAt: t0, Failures: 2}, t0.Add(9 * time.Minute), updated},
			want{next: t0.Add(12 * time.Minute), source: governor.SourceBackoff, trail: "already passed: skipped to the next slot on the grid\nfailure-backoff: 3 × 4m0s after the slot of "},
		},
		decideCase{
			"backoff of a 366-day interval does not overflow",
			given{intervalSpec(events.MaxInterval), governor.State{TaskID: "t", LastScheduledAt: t0, Failures: 1 << 20}, t0, updated},
			want{next: t0.Add(32 * events.MaxInterval), source: governor.SourceBackoff},
		},
		decideCase{
			"cron tasks do not back off",
			given{cronSpec("0 * * * *", ""), governor.State{TaskID: "t", LastScheduledAt: t0, Failures: 3}, t0.Add(time.Second), outcome("failed", t0)},
			want{next: t0.Add(time.Hour), source: governor.SourceBaselineCron, check: func(t *testing.T, d governor.Decision) {
				if d.State.Failures != 4 {
					t.Errorf("Failures = %d, want 4 (counted, not applied)", d.State.Failures)
				}
			}},
		},
	)
	runDecideCases(t, tests)
}

func TestDecideBaselineCron(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	at := func(y int, m time.Month, d, h, mi int) time.Time { return time.Date(y, m, d, h, mi, 0, 0, berlin) }
	nineBerlin := cronSpec("0 0 9 * * *", "Europe/Berlin")
	runDecideCases(t, []decideCase{
		{
			"first run waits for the next occurrence",
			given{nineBerlin, governor.State{}, at(2026, 3, 2, 11, 0), governor.Input{Kind: governor.KindAccepted}},
			want{next: at(2026, 3, 3, 9, 0), source: governor.SourceBaselineCron, trail: `"0 0 9 * * *" in Europe/Berlin`},
		},
		{
			"before today's occurrence",
			given{nineBerlin, governor.State{}, at(2026, 3, 2, 8, 59), governor.Input{Kind: governor.KindAccepted}},
			want{next: at(2026, 3, 2, 9, 0), source: governor.SourceBaselineCron},
		},
		{
			"at the occurrence: the next one",
			given{nineBerlin, ran(at(2026, 3, 2, 9, 0)), at(2026, 3, 2, 9, 0).Add(3 * time.Second), outcome("succeeded", at(2026, 3, 2, 9, 0))},
			want{next: at(2026, 3, 3, 9, 0), source: governor.SourceBaselineCron},
		},
		{
			"across the spring-forward night",
			given{nineBerlin, governor.State{}, at(2026, 3, 28, 10, 0), governor.Input{Kind: governor.KindAccepted}},
			want{next: time.Date(2026, 3, 29, 7, 0, 0, 0, time.UTC), source: governor.SourceBaselineCron},
		},
		{
			"one missed occurrence (a late decision): the next one",
			given{nineBerlin, ran(at(2026, 3, 2, 9, 0)), at(2026, 3, 3, 12, 0), updated},
			want{next: at(2026, 3, 4, 9, 0), source: governor.SourceBaselineCron, trail: "already passed: next occurrence"},
		},
		{
			"missed occurrences, catch-up none: not replayed",
			given{withCatchUp(cronSpec("0 0 9 * * *", "Europe/Berlin"), events.CatchUpNone, 0), ran(at(2026, 3, 2, 9, 0)), at(2026, 3, 10, 12, 0), updated},
			want{next: at(2026, 3, 11, 9, 0), source: governor.SourceBaselineCron, trail: "catch-up none: 8 slots missed"},
		},
		{
			"missed occurrences, catch-up skip: once now",
			given{nineBerlin, ran(at(2026, 3, 2, 9, 0)), at(2026, 3, 10, 12, 0), updated},
			want{next: at(2026, 3, 10, 12, 0), source: governor.SourceCatchUp, trail: "8 slots missed"},
		},
		{
			"anchor after now (clock skew) does not repeat it",
			given{cronSpec("*/10 * * * * *", ""), ran(t0.Add(10 * time.Second)), t0, updated},
			want{next: t0.Add(20 * time.Second), source: governor.SourceBaselineCron},
		},
		{
			"empty timezone means UTC",
			given{cronSpec("@daily", ""), governor.State{}, t0, governor.Input{Kind: governor.KindAccepted}},
			want{next: time.Date(2026, 3, 3, 0, 0, 0, 0, time.UTC), source: governor.SourceBaselineCron},
		},
		{
			"interval hints do not apply to cron tasks",
			given{cronSpec("@hourly", ""), ran(t0), t0.Add(time.Second), hinted(governor.Hint{Interval: time.Second})},
			want{next: t0.Add(time.Hour), source: governor.SourceBaselineCron},
		},
		{
			// Validation refuses it (it never fires); only a spec stored by
			// an older flyball gets here.
			"stored spec whose cron never fires",
			given{cronSpec("0 0 30 2 *", ""), governor.State{}, t0, governor.Input{Kind: governor.KindAccepted}},
			want{source: governor.SourceBaselineCron, trail: "never fires"},
		},
		{
			// 2100 is no leap year: the next leap day is 8 years on.
			"leap-day cron across 2100 waits for 2104",
			given{mustValid(t, cronSpec("0 0 29 2 *", "UTC")), governor.State{}, time.Date(2096, 3, 1, 0, 0, 0, 0, time.UTC), accepted},
			want{next: time.Date(2104, 2, 29, 0, 0, 0, 0, time.UTC), source: governor.SourceBaselineCron},
		},
		{
			"leap-day cron after its last run before 2100",
			given{mustValid(t, cronSpec("0 0 29 2 *", "UTC")), ran(time.Date(2096, 2, 29, 0, 0, 0, 0, time.UTC)), time.Date(2096, 2, 29, 0, 0, 5, 0, time.UTC), updated},
			want{next: time.Date(2104, 2, 29, 0, 0, 0, 0, time.UTC), source: governor.SourceBaselineCron},
		},
		{
			"stored spec with a broken expression",
			given{&events.TaskSpec{ID: "t", Schedule: events.Schedule{Cron: "61 * * * *"}}, governor.State{}, t0, governor.Input{Kind: governor.KindAccepted}},
			want{source: governor.SourceBaselineCron, trail: "cannot evaluate cron"},
		},
		{
			"stored spec with a broken zone",
			given{&events.TaskSpec{ID: "t", Schedule: events.Schedule{Cron: "@daily", Timezone: "Mars/Olympus"}}, governor.State{}, t0, governor.Input{Kind: governor.KindAccepted}},
			want{source: governor.SourceBaselineCron, trail: "cannot evaluate cron"},
		},
	})
}

func TestDecideStartAt(t *testing.T) {
	runDecideCases(t, []decideCase{
		{
			"future startAt",
			given{withStartAt(intervalSpec(time.Minute), t0.Add(time.Hour)), governor.State{}, t0, governor.Input{Kind: governor.KindAccepted}},
			want{next: t0.Add(time.Hour), source: governor.SourceStartAt, trail: "startAt"},
		},
		{
			"startAt overrides cron",
			given{withStartAt(cronSpec("@daily", ""), t0.Add(time.Hour)), governor.State{}, t0, governor.Input{Kind: governor.KindAccepted}},
			want{next: t0.Add(time.Hour), source: governor.SourceStartAt},
		},
		{
			"past startAt is floored to now",
			given{withStartAt(intervalSpec(time.Minute), t0.Add(-time.Hour)), governor.State{}, t0, governor.Input{Kind: governor.KindAccepted}},
			want{next: t0, source: governor.SourceStartAt, trail: "floored to now"},
		},
		{
			"startAt is only the first run",
			given{withStartAt(intervalSpec(time.Minute), t0.Add(time.Hour)), ran(t0), t0.Add(time.Second), updated},
			want{next: t0.Add(time.Minute), source: governor.SourceBaselineInterval},
		},
	})
}

// TestDecideStartAtZeroTimeRunsAtOnce: a Go client that marshals an unset
// time.Time sends startAt "0001-01-01T00:00:00Z". The docs say "a time in
// the past means at once"; the first decision took the zero time for
// "nothing scheduled" and the task never ran.
func TestDecideStartAtZeroTimeRunsAtOnce(t *testing.T) {
	var spec events.TaskSpec
	body := `{"id":"t","target":{"http":{"url":"https://example.com/"}},"schedule":{"interval":"1m"},"startAt":"0001-01-01T00:00:00Z"}`
	if err := json.Unmarshal([]byte(body), &spec); err != nil {
		t.Fatal(err)
	}
	mustValid(t, &spec)
	spec.Normalize()
	d := governor.Decide(t0, &spec, governor.State{}, accepted)
	if !d.NextRunAt.Equal(t0) || d.Source != governor.SourceStartAt {
		t.Fatalf("startAt 0001-01-01 (a past time): NextRunAt = %s, source %s, want %s (at once), start-at\ntrail %q", fmtT(d.NextRunAt), d.Source, fmtT(t0), d.Trail)
	}
}

// TestDecideKeepsEveryStateStorable: the service writes each decision with
// State.AppendJSON, which fails (like json.Marshal) for times past year
// 9999. A pause until "9999-12-31T23:30:00-01:00" (valid RFC 3339,
// 10000-01-01T00:30:00Z in UTC) made a decision that could not be
// stored. Whatever the input, the decision's times are now clamped into
// the storable range.
func TestDecideKeepsEveryStateStorable(t *testing.T) {
	var p events.TaskPause
	if err := json.Unmarshal([]byte(`{"until":"9999-12-31T23:30:00-01:00"}`), &p); err != nil {
		t.Fatal(err)
	}
	late := *p.Until
	early := time.Date(-5, 1, 1, 0, 0, 0, 0, time.UTC)
	spec := intervalSpec(time.Minute)
	start := withStartAt(intervalSpec(time.Minute), late)
	now := t0.Add(time.Second)
	for _, c := range []struct {
		name string
		spec *events.TaskSpec
		st   governor.State
		in   governor.Input
	}{
		{"pause until past 9999", spec, ran(t0), governor.Input{Kind: governor.KindPaused, Pause: &governor.Pause{Until: late}}},
		{"hint at past 9999", spec, ran(t0), governor.Input{Kind: governor.KindHinted, Hint: &governor.Hint{At: late}}},
		{"hint at before year 0", spec, ran(t0), governor.Input{Kind: governor.KindHinted, Hint: &governor.Hint{At: early}}},
		{"breaker retryAt past 9999", spec, ran(t0), governor.Input{Kind: governor.KindBreaker, Breaker: &governor.BreakerSignal{State: "open", RetryAt: late}}},
		{"dead letter at the end of 9999", spec, ran(t0), governor.Input{Kind: governor.KindDeadLettered, DeadLetter: &governor.DeadLetterSignal{DispatchID: "x:1", At: events.MaxTime}}},
		{"outcome past 9999", spec, ran(t0), outcome("succeeded", late)},
		{"startAt past 9999", start, governor.State{}, accepted},
	} {
		d := governor.Decide(now, c.spec, c.st, c.in)
		if _, err := d.State.AppendJSON(nil); err != nil {
			t.Errorf("%s: decision cannot be stored: %v (next %s, source %s)", c.name, err, fmtT(d.NextRunAt), d.Source)
		}
	}
	d := governor.Decide(now, spec, ran(t0), governor.Input{Kind: governor.KindPaused, Pause: &governor.Pause{Until: late}})
	if !d.State.Paused || !d.State.PausedUntil.Equal(events.MaxTime) {
		t.Errorf("pause until %s: paused %v until %s, want paused until %s", late.Format(time.RFC3339), d.State.Paused, fmtT(d.State.PausedUntil), fmtT(events.MaxTime))
	}
}

func TestDecidePause(t *testing.T) {
	paused := func(until time.Time) governor.State {
		s := ran(t0)
		s.Paused, s.PausedUntil, s.PauseReason = true, until, "maintenance"
		return s
	}
	runDecideCases(t, []decideCase{
		{
			"paused until T",
			given{intervalSpec(time.Minute), ran(t0), t0.Add(time.Second), governor.Input{Kind: governor.KindPaused, Pause: &governor.Pause{Until: t0.Add(time.Hour), Reason: "maintenance"}}},
			want{next: t0.Add(time.Hour), source: governor.SourcePaused, trail: "paused until", check: func(t *testing.T, d governor.Decision) {
				if !d.State.Paused || !d.State.PausedUntil.Equal(t0.Add(time.Hour)) || d.State.PauseReason != "maintenance" {
					t.Errorf("state %+v", d.State)
				}
			}},
		},
		{
			"paused indefinitely",
			given{intervalSpec(time.Minute), ran(t0), t0.Add(time.Second), governor.Input{Kind: governor.KindPaused, Pause: &governor.Pause{}}},
			want{source: governor.SourcePaused, trail: "paused indefinitely", check: func(t *testing.T, d governor.Decision) {
				if !d.State.Paused || !d.State.PausedUntil.IsZero() {
					t.Errorf("state %+v", d.State)
				}
			}},
		},
		{
			"pause without data is indefinite",
			given{intervalSpec(time.Minute), paused(t0.Add(time.Hour)), t0, governor.Input{Kind: governor.KindPaused}},
			want{source: governor.SourcePaused, check: func(t *testing.T, d governor.Decision) {
				if d.State.PauseReason != "" || !d.State.PausedUntil.IsZero() {
					t.Errorf("old pause kept: %+v", d.State)
				}
			}},
		},
		{"pause wins over a one-shot hint", given{intervalSpec(time.Minute), func() governor.State {
			s := paused(time.Time{})
			s.OneShotHint = &governor.OneShotHint{At: t0.Add(time.Second), ExpiresAt: t0.Add(time.Hour)}
			return s
		}(), t0, updated}, want{source: governor.SourcePaused}},
		{
			"outcome while paused stays paused; the run after it keeps the outcome's grid",
			given{intervalSpec(time.Minute), paused(t0.Add(time.Hour)), t0.Add(time.Minute), outcome("succeeded", t0.Add(30*time.Second))},
			want{next: t0.Add(time.Hour + 30*time.Second), source: governor.SourcePaused},
		},
		{
			"pause that has ended is cleared",
			given{intervalSpec(time.Minute), paused(t0.Add(30 * time.Second)), t0.Add(30 * time.Second), updated},
			want{next: t0.Add(time.Minute), source: governor.SourceBaselineInterval, trail: "pause ended", check: func(t *testing.T, d governor.Decision) {
				if d.State.Paused || !d.State.PausedUntil.IsZero() || d.State.PauseReason != "" {
					t.Errorf("pause not cleared: %+v", d.State)
				}
			}},
		},
		{
			"pause until the past is cleared at once",
			given{intervalSpec(time.Minute), ran(t0), t0.Add(30 * time.Second), governor.Input{Kind: governor.KindPaused, Pause: &governor.Pause{Until: t0}}},
			want{next: t0.Add(time.Minute), source: governor.SourceBaselineInterval, trail: "pause ended"},
		},
		{
			// No slot fell in it (it ended at the last slot): the two
			// missed since are caught up (before 2026-12-02 they counted
			// as in the pause).
			"pause until the past, after missed slots",
			given{intervalSpec(time.Minute), ran(t0), t0.Add(2 * time.Minute), governor.Input{Kind: governor.KindPaused, Pause: &governor.Pause{Until: t0}}},
			want{next: t0.Add(2 * time.Minute), source: governor.SourceCatchUp, trail: "pause ended"},
		},
		{
			"pause until the past, after missed slots: only those in it are dropped",
			given{intervalSpec(time.Minute), ran(t0), t0.Add(3*time.Minute + 30*time.Second), governor.Input{Kind: governor.KindPaused, Pause: &governor.Pause{Until: t0.Add(90 * time.Second)}}},
			want{next: t0.Add(3*time.Minute + 30*time.Second), source: governor.SourceCatchUp, trail: "fell in the pause: not caught up; 2 missed after it"},
		},
		{
			"pause ending before a future last slot does not repeat it",
			given{intervalSpec(time.Minute), ran(t0.Add(10 * time.Second)), t0, governor.Input{Kind: governor.KindPaused, Pause: &governor.Pause{Until: t0.Add(5 * time.Second)}}},
			want{next: t0.Add(70 * time.Second), source: governor.SourcePaused, trail: "the first run after it is"},
		},
		{
			"resumed: the baseline applies",
			given{intervalSpec(time.Minute), paused(time.Time{}), t0.Add(10 * time.Second), governor.Input{Kind: governor.KindResumed}},
			want{next: t0.Add(time.Minute), source: governor.SourceBaselineInterval, check: func(t *testing.T, d governor.Decision) {
				if d.State.Paused || !d.State.PausedUntil.IsZero() || d.State.PauseReason != "" {
					t.Errorf("still paused: %+v", d.State)
				}
			}},
		},
		{
			"resumed after a long pause: next grid slot",
			given{intervalSpec(time.Minute), paused(time.Time{}), t0.Add(90 * time.Minute), governor.Input{Kind: governor.KindResumed}},
			want{next: t0.Add(91 * time.Minute), source: governor.SourceBaselineInterval},
		},
		{
			"resumed cron task",
			given{cronSpec("@hourly", ""), paused(time.Time{}), t0.Add(10 * time.Second), governor.Input{Kind: governor.KindResumed}},
			want{next: t0.Add(time.Hour), source: governor.SourceBaselineCron},
		},
		{
			"resuming an active task changes nothing",
			given{intervalSpec(time.Minute), ran(t0), t0.Add(time.Second), governor.Input{Kind: governor.KindResumed}},
			want{next: t0.Add(time.Minute), source: governor.SourceBaselineInterval},
		},
	})
}

func TestDecideHints(t *testing.T) {
	withInterval := func(s governor.State, every time.Duration, expires time.Time) governor.State {
		s.IntervalHint = &governor.IntervalHint{Interval: every, ExpiresAt: expires, Reason: "busy"}
		return s
	}
	withOneShot := func(s governor.State, at, expires time.Time) governor.State {
		s.OneShotHint = &governor.OneShotHint{At: at, ExpiresAt: expires}
		return s
	}
	runDecideCases(t, []decideCase{
		{
			"interval hint overrides the baseline",
			given{intervalSpec(time.Hour), ran(t0), t0.Add(2 * time.Second), hinted(governor.Hint{Interval: 10 * time.Second, Reason: "busy"})},
			want{next: t0.Add(10 * time.Second), source: governor.SourceHintInterval, check: func(t *testing.T, d governor.Decision) {
				h := d.State.IntervalHint
				if h == nil || h.Interval != 10*time.Second || !h.ExpiresAt.Equal(t0.Add(2*time.Second+governor.DefaultIntervalHintTTL)) || h.Reason != "busy" {
					t.Errorf("IntervalHint = %+v", h)
				}
			}},
		},
		{
			"interval hint with its own TTL",
			given{intervalSpec(time.Hour), ran(t0), t0, hinted(governor.Hint{Interval: 10 * time.Second, TTL: 5 * time.Minute})},
			want{next: t0.Add(10 * time.Second), source: governor.SourceHintInterval, check: func(t *testing.T, d governor.Decision) {
				if h := d.State.IntervalHint; h == nil || !h.ExpiresAt.Equal(t0.Add(5*time.Minute)) {
					t.Errorf("IntervalHint = %+v", h)
				}
			}},
		},
		{
			"interval hint on the first run runs at once",
			given{intervalSpec(time.Hour), governor.State{TaskID: "t"}, t0, hinted(governor.Hint{Interval: 10 * time.Second})},
			want{next: t0, source: governor.SourceHintInterval},
		},
		{
			"interval hint holds until its TTL",
			given{intervalSpec(time.Hour), withInterval(ran(t0), 10*time.Second, t0.Add(time.Minute)), t0.Add(12 * time.Second), outcome("succeeded", t0.Add(10*time.Second))},
			want{next: t0.Add(20 * time.Second), source: governor.SourceHintInterval},
		},
		{
			"interval hint backs off too",
			given{intervalSpec(time.Hour), withInterval(ran(t0), 10*time.Second, t0.Add(time.Minute)), t0.Add(12 * time.Second), outcome("failed", t0.Add(10*time.Second))},
			want{next: t0.Add(30 * time.Second), source: governor.SourceBackoff},
		},
		{
			"expired interval hint is cleared",
			given{intervalSpec(time.Hour), withInterval(ran(t0), 10*time.Second, t0.Add(time.Minute)), t0.Add(time.Minute), updated},
			want{next: t0.Add(time.Hour), source: governor.SourceBaselineInterval, trail: "interval hint 10s expired", check: func(t *testing.T, d governor.Decision) {
				if d.State.IntervalHint != nil {
					t.Errorf("IntervalHint = %+v, want cleared", d.State.IntervalHint)
				}
			}},
		},
		{
			"a new interval hint replaces the old",
			given{intervalSpec(time.Hour), withInterval(ran(t0), 10*time.Second, t0.Add(time.Minute)), t0.Add(time.Second), hinted(governor.Hint{Interval: 30 * time.Second})},
			want{next: t0.Add(30 * time.Second), source: governor.SourceHintInterval},
		},
		{
			"earlier one-shot wins",
			given{intervalSpec(time.Hour), ran(t0), t0.Add(time.Minute), hinted(governor.Hint{At: t0.Add(5 * time.Minute), Reason: "webhook"})},
			want{next: t0.Add(5 * time.Minute), source: governor.SourceHintOneShot, trail: "is earlier", check: func(t *testing.T, d governor.Decision) {
				h := d.State.OneShotHint
				if h == nil || !h.At.Equal(t0.Add(5*time.Minute)) || !h.ExpiresAt.Equal(t0.Add(time.Minute+governor.DefaultOneShotHintTTL)) || h.Reason != "webhook" {
					t.Errorf("OneShotHint = %+v", h)
				}
			}},
		},
		{
			"later one-shot waits behind the baseline",
			given{intervalSpec(time.Hour), ran(t0), t0.Add(time.Minute), hinted(governor.Hint{At: t0.Add(2 * time.Hour), TTL: 3 * time.Hour})},
			want{next: t0.Add(time.Hour), source: governor.SourceBaselineInterval, check: func(t *testing.T, d governor.Decision) {
				if d.State.OneShotHint == nil {
					t.Error("one-shot hint dropped")
				}
			}},
		},
		{
			"past one-shot is floored to now",
			given{intervalSpec(time.Hour), ran(t0), t0.Add(time.Minute), hinted(governor.Hint{At: t0})},
			want{next: t0.Add(time.Minute), source: governor.SourceHintOneShot},
		},
		{
			"one-shot beats a cron occurrence",
			given{cronSpec("@daily", ""), ran(t0), t0.Add(time.Minute), hinted(governor.Hint{At: t0.Add(2 * time.Minute)})},
			want{next: t0.Add(2 * time.Minute), source: governor.SourceHintOneShot},
		},
		{
			// The governor accepts it and keeps the calendar; the trail
			// said nothing, so "hinted" read as if it were in force.
			"an interval hint on a cron task is kept out of the calendar, and the trail says so",
			given{cronSpec("@daily", ""), ran(t0), t0.Add(time.Minute), hinted(governor.Hint{Interval: time.Minute})},
			want{next: time.Date(2026, 3, 3, 0, 0, 0, 0, time.UTC), source: governor.SourceBaselineCron, trail: "interval hint 1m0s has no effect on a cron schedule"},
		},
		{
			"one-shot beats startAt",
			given{withStartAt(intervalSpec(time.Hour), t0.Add(time.Hour)), governor.State{TaskID: "t"}, t0, hinted(governor.Hint{At: t0.Add(time.Minute)})},
			want{next: t0.Add(time.Minute), source: governor.SourceHintOneShot},
		},
		{
			"interval and one-shot at once",
			given{intervalSpec(time.Hour), ran(t0), t0.Add(time.Second), hinted(governor.Hint{Interval: 10 * time.Minute, At: t0.Add(time.Minute)})},
			want{next: t0.Add(time.Minute), source: governor.SourceHintOneShot, check: func(t *testing.T, d governor.Decision) {
				if d.State.IntervalHint == nil || d.State.OneShotHint == nil {
					t.Errorf("hints %+v %+v", d.State.IntervalHint, d.State.OneShotHint)
				}
			}},
		},
		{
			"one-shot consumed by the run at its time",
			given{intervalSpec(time.Hour), withOneShot(ran(t0), t0.Add(5*time.Minute), t0.Add(time.Hour)), t0.Add(5*time.Minute + 3*time.Second), outcome("succeeded", t0.Add(5*time.Minute))},
			want{next: t0.Add(65 * time.Minute), source: governor.SourceBaselineInterval, check: func(t *testing.T, d governor.Decision) {
				if d.State.OneShotHint != nil {
					t.Errorf("OneShotHint = %+v, want consumed", d.State.OneShotHint)
				}
			}},
		},
		{
			"one-shot consumed by a later run",
			given{intervalSpec(time.Hour), withOneShot(ran(t0), t0.Add(5*time.Minute), t0.Add(time.Hour)), t0.Add(6 * time.Minute), outcome("failed", t0.Add(6*time.Minute))},
			want{next: t0.Add(126 * time.Minute), source: governor.SourceBackoff, check: func(t *testing.T, d governor.Decision) {
				if d.State.OneShotHint != nil {
					t.Errorf("OneShotHint = %+v, want consumed", d.State.OneShotHint)
				}
			}},
		},
		{
			"one-shot survives an earlier run",
			given{intervalSpec(time.Minute), withOneShot(ran(t0), t0.Add(5*time.Minute+30*time.Second), t0.Add(time.Hour)), t0.Add(time.Minute + time.Second), outcome("succeeded", t0.Add(time.Minute))},
			want{next: t0.Add(2 * time.Minute), source: governor.SourceBaselineInterval, check: func(t *testing.T, d governor.Decision) {
				if d.State.OneShotHint == nil {
					t.Error("one-shot hint consumed by an earlier run")
				}
			}},
		},
		{
			"expired one-shot is cleared",
			given{intervalSpec(time.Hour), withOneShot(ran(t0), t0.Add(5*time.Minute), t0.Add(time.Minute)), t0.Add(2 * time.Minute), updated},
			want{next: t0.Add(time.Hour), source: governor.SourceBaselineInterval, trail: "expired", check: func(t *testing.T, d governor.Decision) {
				if d.State.OneShotHint != nil {
					t.Errorf("OneShotHint = %+v, want cleared", d.State.OneShotHint)
				}
			}},
		},
		{
			"empty hint changes nothing",
			given{intervalSpec(time.Hour), ran(t0), t0.Add(time.Second), hinted(governor.Hint{})},
			want{next: t0.Add(time.Hour), source: governor.SourceBaselineInterval},
		},
		{
			"nil hint changes nothing",
			given{intervalSpec(time.Hour), ran(t0), t0.Add(time.Second), governor.Input{Kind: governor.KindHinted}},
			want{next: t0.Add(time.Hour), source: governor.SourceBaselineInterval},
		},
	})
}

// A hint holds only until its TTL: a one-shot whose time comes after it
// expires never runs, and an interval hint longer than its TTL gives way
// to the cadence after it at the TTL.
func TestDecideHintsEndAtTheirTTL(t *testing.T) {
	hourly := stateWith(ran(t0), planned(t0.Add(time.Hour), governor.SourceBaselineInterval))
	weekHint := governor.Decide(t0.Add(30*time.Second), intervalSpec(time.Hour), hourly, hinted(governor.Hint{Interval: 200 * time.Hour, TTL: 168 * time.Hour}))
	runDecideCases(t, []decideCase{
		{
			"a one-shot after its TTL expires unused",
			given{intervalSpec(time.Hour), hourly, t0.Add(time.Second), hinted(governor.Hint{At: t0.Add(45 * time.Minute)})},
			want{next: t0.Add(time.Hour), source: governor.SourceBaselineInterval, trail: "one-shot hint for 2026-03-02T10:45:00.000Z comes at or after it expires at 2026-03-02T10:30:01.000Z: not planned"},
		},
		{
			"a one-shot exactly at its expiry too",
			given{intervalSpec(time.Hour), hourly, t0, hinted(governor.Hint{At: t0.Add(30 * time.Minute)})},
			want{next: t0.Add(time.Hour), source: governor.SourceBaselineInterval, trail: "not planned"},
		},
		{
			"a one-shot with a TTL that outlasts it runs",
			given{intervalSpec(time.Hour), hourly, t0.Add(time.Second), hinted(governor.Hint{At: t0.Add(45 * time.Minute), TTL: 50 * time.Minute})},
			want{next: t0.Add(45 * time.Minute), source: governor.SourceHintOneShot},
		},
		{
			"an interval hint longer than its TTL: the baseline grid after the TTL",
			given{intervalSpec(time.Minute), ran(t0), t0.Add(time.Second), hinted(governor.Hint{Interval: 6 * time.Hour, TTL: 15 * time.Minute})},
			want{next: t0.Add(16 * time.Minute), source: governor.SourceBaselineInterval, trail: "interval hint 6h0m0s expires at 2026-03-02T10:15:01.000Z before its slot 2026-03-02T16:00:00.000Z: the cadence after it applies"},
		},
		{
			"... and the trail gives the cadence's gap, not the hint's",
			given{intervalSpec(time.Minute), ran(t0), t0.Add(time.Second), hinted(governor.Hint{Interval: 6 * time.Hour, TTL: 15 * time.Minute})},
			want{next: t0.Add(16 * time.Minute), source: governor.SourceBaselineInterval, trail: "the cadence after it applies\nbaseline-interval: 16 × 1m0s after the slot of 2026-03-02T10:00:00.000Z"},
		},
		{
			"... and the runs under it",
			given{intervalSpec(time.Minute), stateWith(ran(t0), intervalHint(6*time.Hour, t0.Add(15*time.Minute))), t0.Add(time.Minute + time.Second), outcome("succeeded", t0.Add(time.Minute))},
			want{next: t0.Add(15 * time.Minute), source: governor.SourceBaselineInterval},
		},
		{
			"... an hourly baseline waits for its own slot",
			given{intervalSpec(time.Hour), ran(t0), t0.Add(time.Second), hinted(governor.Hint{Interval: 6 * time.Hour, TTL: 15 * time.Minute})},
			want{next: t0.Add(time.Hour), source: governor.SourceBaselineInterval},
		},
		{
			"... backoff applies to the cadence after it",
			given{intervalSpec(time.Minute), stateWith(ran(t0), failures(1), intervalHint(6*time.Hour, t0.Add(15*time.Minute))), t0.Add(time.Second), updated},
			want{next: t0.Add(16 * time.Minute), source: governor.SourceBackoff},
		},
		{
			// At 10:15 the hint has expired (a decision then clears it),
			// as a one-shot at its expiry has: its slot there is not its
			// to plan. Planned, it ran or not depending on whether another
			// input was decided at 10:15 exactly.
			"an interval hint whose slot is exactly at its expiry too",
			given{intervalSpec(time.Hour), hourly, t0.Add(30 * time.Second), hinted(governor.Hint{Interval: 15 * time.Minute, TTL: 14*time.Minute + 30*time.Second})},
			want{next: t0.Add(time.Hour), source: governor.SourceBaselineInterval, trail: "interval hint 15m0s expires at 2026-03-02T10:15:00.000Z, its slot: the cadence after it applies"},
		},
		{
			"... the same slot decided at the expiry",
			given{intervalSpec(time.Hour), stateWith(hourly, intervalHint(15*time.Minute, t0.Add(15*time.Minute))), t0.Add(15 * time.Minute), updated},
			want{next: t0.Add(time.Hour), source: governor.SourceBaselineInterval, trail: "expired"},
		},
		{
			// docs/governor.md's example: a hint longer than its TTL runs
			// nothing of its own; nudging keeps the run already planned
			// (11:00), and the run after it is the cadence's first slot at
			// or after the TTL, a week later.
			"hourly task, --interval 200h --ttl 168h: the planned 11:00 run stays",
			given{intervalSpec(time.Hour), hourly, t0.Add(30 * time.Second), hinted(governor.Hint{Interval: 200 * time.Hour, TTL: 168 * time.Hour})},
			want{next: t0.Add(time.Hour), source: governor.SourceBaselineInterval, trail: "nudge: the hint does not delay the run planned at 2026-03-02T11:00:00.000Z"},
		},
		{
			"... and the run after it is a week later",
			given{intervalSpec(time.Hour), weekHint.State, t0.Add(time.Hour + 2*time.Second), outcome("succeeded", t0.Add(time.Hour))},
			want{next: t0.Add(169 * time.Hour), source: governor.SourceBaselineInterval, trail: "interval hint 200h0m0s expires at 2026-03-09T10:00:30.000Z before its slot"},
		},
		{
			"an interval hint within its TTL holds",
			given{intervalSpec(time.Minute), ran(t0), t0.Add(time.Second), hinted(governor.Hint{Interval: 10 * time.Minute, TTL: 15 * time.Minute})},
			want{next: t0.Add(10 * time.Minute), source: governor.SourceHintInterval},
		},
	})
}

func TestDecideBounds(t *testing.T) {
	runDecideCases(t, []decideCase{
		{
			"hint below bounds.min",
			given{withBounds(intervalSpec(time.Hour), 5*time.Minute, 0), ran(t0), t0.Add(time.Second), hinted(governor.Hint{Interval: 10 * time.Second})},
			want{next: t0.Add(5 * time.Minute), source: governor.SourceClampedMin, trail: "raised to bounds.min 5m0s"},
		},
		{
			"one-shot below bounds.min",
			given{withBounds(intervalSpec(time.Hour), 5*time.Minute, 0), ran(t0), t0.Add(time.Second), hinted(governor.Hint{At: t0.Add(time.Second)})},
			want{next: t0.Add(5 * time.Minute), source: governor.SourceClampedMin},
		},
		{
			"backoff above bounds.max",
			given{withBounds(intervalSpec(time.Minute), 0, 10*time.Minute), func() governor.State {
				s := ran(t0.Add(-time.Minute))
				s.Failures = 4
				return s
			}(), t0.Add(5 * time.Second), outcome("failed", t0)},
			want{next: t0.Add(10 * time.Minute), source: governor.SourceClampedMax, trail: "lowered to bounds.max 10m0s"},
		},
		{
			"cron above bounds.max",
			given{withBounds(cronSpec("@daily", ""), time.Minute, time.Hour), ran(t0), t0.Add(time.Second), updated},
			want{next: t0.Add(time.Hour), source: governor.SourceClampedMax},
		},
		{
			"within bounds",
			given{withBounds(intervalSpec(time.Minute), time.Second, time.Hour), ran(t0), t0.Add(time.Second), updated},
			want{next: t0.Add(time.Minute), source: governor.SourceBaselineInterval},
		},
		{
			"bounds do not apply to the first run",
			given{withBounds(intervalSpec(time.Minute), 5*time.Minute, time.Hour), governor.State{}, t0, governor.Input{Kind: governor.KindAccepted}},
			want{next: t0, source: governor.SourceBaselineInterval},
		},
		{
			"clamped slot in the past is floored",
			given{withBounds(intervalSpec(time.Hour), 0, 10*time.Minute), ran(t0), t0.Add(20 * time.Minute), updated},
			want{next: t0.Add(20 * time.Minute), source: governor.SourceClampedMax, trail: "floored to now"},
		},
		{
			"bounds do not apply while paused",
			given{withBounds(intervalSpec(time.Minute), 0, 10*time.Minute), ran(t0), t0.Add(time.Second), governor.Input{Kind: governor.KindPaused, Pause: &governor.Pause{Until: t0.Add(time.Hour)}}},
			want{next: t0.Add(time.Hour), source: governor.SourcePaused},
		},
	})
}

func TestDecideDeleted(t *testing.T) {
	st := ran(t0)
	st.NextRunAt, st.Source = t0.Add(time.Minute), governor.SourceBaselineInterval
	runDecideCases(t, []decideCase{
		{
			"deleted",
			given{intervalSpec(time.Minute), st, t0.Add(time.Second), governor.Input{Kind: governor.KindDeleted}},
			want{source: governor.SourceDeleted, trail: "deleted", check: func(t *testing.T, d governor.Decision) {
				if !d.State.Deleted || !d.State.NextRunAt.IsZero() || d.State.Source != governor.SourceDeleted {
					t.Errorf("state %+v", d.State)
				}
			}},
		},
	})
}

func TestDecideDuplicateOutcomeIsIgnored(t *testing.T) {
	st := ran(t0)
	st.LastDispatchID = events.DispatchID("t", t0)
	st.NextRunAt, st.Source, st.Trail = t0.Add(time.Minute), governor.SourceBaselineInterval, []string{"baseline-interval: 1m0s after the slot"}
	st.Failures = 2
	st.OneShotHint = &governor.OneShotHint{At: t0.Add(30 * time.Second), ExpiresAt: t0.Add(time.Hour)}
	for _, tc := range []struct {
		name string
		in   governor.Input
	}{
		{"same dispatch", outcome("failed", t0)},
		{"same dispatch, different result", outcome("succeeded", t0)},
		{"nil outcome", governor.Input{Kind: governor.KindOutcome}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := cloneState(st)
			d := governor.Decide(t0.Add(2*time.Hour), intervalSpec(time.Minute), st, tc.in)
			if !d.Ignored {
				t.Fatal("Ignored = false")
			}
			if !reflect.DeepEqual(d.State, before) {
				t.Errorf("state changed:\n got %+v\nwant %+v", d.State, before)
			}
			if !d.NextRunAt.Equal(st.NextRunAt) || d.Source != st.Source || !slices.Equal(d.Trail, st.Trail) {
				t.Errorf("decision %+v does not repeat the stored one", d)
			}
		})
	}
	// An outcome without a dispatch ID is never taken for a duplicate.
	noID := outcome("succeeded", t0.Add(time.Minute))
	noID.Outcome.DispatchID = ""
	st2 := ran(t0)
	st2.LastDispatchID = ""
	if d := governor.Decide(t0.Add(time.Minute), intervalSpec(time.Minute), st2, noID); d.Ignored {
		t.Error("outcome without DispatchID ignored")
	}
}

// Stored state a human edited, or hints no validation bounded, must never
// panic the governor.
func TestDecideHostileState(t *testing.T) {
	zeroHint := ran(t0)
	zeroHint.IntervalHint = &governor.IntervalHint{Interval: 0, ExpiresAt: t0.Add(time.Hour)}
	negHint := ran(t0)
	negHint.IntervalHint = &governor.IntervalHint{Interval: -time.Second, ExpiresAt: t0.Add(time.Hour)}
	huge := ran(t0)
	huge.Failures = 3
	// The hints outlast their slots (a hint ends at its TTL).
	huge.IntervalHint = &governor.IntervalHint{Interval: 1 << 62, ExpiresAt: events.MaxTime} // ×8 wraps to 0
	hugeNoAnchor := huge
	hugeNoAnchor.LastScheduledAt = time.Time{}
	maxHint := ran(t0)
	maxHint.Failures = 1
	maxHint.IntervalHint = &governor.IntervalHint{Interval: 1<<63 - 1, ExpiresAt: events.MaxTime}
	runDecideCases(t, []decideCase{
		{
			"zero interval hint",
			given{intervalSpec(time.Minute), zeroHint, t0.Add(time.Hour - time.Second), updated},
			want{source: governor.SourceHintInterval, trail: "not positive"},
		},
		{
			"negative interval hint",
			given{intervalSpec(time.Minute), negHint, t0.Add(time.Hour - time.Second), updated},
			want{source: governor.SourceHintInterval, trail: "not positive"},
		},
		{
			"zero interval spec",
			given{&events.TaskSpec{ID: "t"}, ran(t0), t0.Add(time.Hour), updated},
			want{source: governor.SourceBaselineInterval, trail: "not positive"},
		},
		{
			"backoff of a huge hint saturates",
			given{intervalSpec(time.Minute), huge, t0.Add(time.Second), updated},
			want{next: t0.Add(1<<63 - 1), source: governor.SourceBackoff},
		},
		{
			"backoff of the largest hint saturates",
			given{intervalSpec(time.Minute), maxHint, t0.Add(time.Second), updated},
			want{next: t0.Add(1<<63 - 1), source: governor.SourceBackoff},
		},
		{
			"huge hint on the first run",
			given{intervalSpec(time.Minute), hugeNoAnchor, t0, updated},
			want{next: t0, source: governor.SourceHintInterval},
		},
	})
}

func TestDecideIsDeterministic(t *testing.T) {
	spec := withBounds(cronSpec("0 */5 * * * *", "Europe/Berlin"), time.Minute, time.Hour)
	st := ran(t0)
	st.OneShotHint = &governor.OneShotHint{At: t0.Add(time.Minute), ExpiresAt: t0.Add(time.Hour)}
	in := outcome("failed", t0.Add(30*time.Second))
	a := governor.Decide(t0.Add(time.Minute), spec, st, in)
	for range 10 {
		if b := governor.Decide(t0.Add(time.Minute), spec, st, in); !reflect.DeepEqual(a, b) {
			t.Fatalf("Decide differs between calls:\n%+v\n%+v", a, b)
		}
	}
}

func BenchmarkDecideInterval(b *testing.B) {
	spec := intervalSpec(time.Minute)
	st := ran(t0)
	now := t0.Add(time.Minute + 2*time.Second)
	in := outcome("succeeded", t0.Add(time.Minute))
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		governor.Decide(now, spec, st, in)
	}
	reportCPU(b, cpu)
}

func BenchmarkDecideCron(b *testing.B) {
	spec := cronSpec("0 */5 * * * *", "Europe/Berlin")
	st := ran(t0)
	now := t0.Add(5*time.Minute + 2*time.Second)
	in := outcome("succeeded", t0.Add(5*time.Minute))
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		governor.Decide(now, spec, st, in)
	}
	reportCPU(b, cpu)
}

// BenchmarkDecideAllRules decides for an interval task with every optional
// rule configured: adaptive cadence, activity modes, quiet hours in a DST
// zone, a budget, jitter and bounds.
func BenchmarkDecideAllRules(b *testing.B) {
	spec := withBudget(withJitter(withQuiet(withActivity(withAdaptive(intervalSpec(time.Minute), events.AdaptiveChange, 0, 0, 0)),
		"00:00", "07:00", "Europe/Berlin", 5*time.Minute), 0.1), 10000)
	spec.Bounds = &events.Bounds{Min: events.Duration(5 * time.Second), Max: events.Duration(time.Hour)}
	st := stateWith(ran(t0), fingerprint("a"), lastActivity(t0))
	now := t0.Add(time.Minute + 2*time.Second)
	in := outcomeFP("succeeded", t0.Add(time.Minute), "b")
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		governor.Decide(now, spec, st, in)
	}
	reportCPU(b, cpu)
}

// An outcome redelivered after a later run's outcome was applied (its ack
// was lost, or its replica died before the ack: the redelivery comes an
// AckWait later, after the runs of a fast task) is a duplicate too, though
// it is no longer the last dispatch applied. Applied again, it counted the
// run twice (runs, budget) and replaced the newer run's result: a failure
// redelivered after a success put the task back into backoff.
func TestDecideRedeliveredOlderOutcomeIsIgnored(t *testing.T) {
	spec := withBudget(intervalSpec(time.Minute), 10000)
	a := outcome("failed", t0)
	st := governor.Decide(t0.Add(3*time.Second), spec, ran(t0.Add(-time.Minute)), a).State
	b := outcome("succeeded", t0.Add(time.Minute))
	st = governor.Decide(t0.Add(time.Minute+2*time.Second), spec, st, b).State
	if st.Failures != 0 || st.LastOutcome != "succeeded" {
		t.Fatalf("after the later success: failures %d, last outcome %q", st.Failures, st.LastOutcome)
	}
	before := cloneState(st)
	d := governor.Decide(t0.Add(time.Minute+30*time.Second), spec, st, a) // a again, an AckWait later
	if !d.Ignored {
		t.Errorf("redelivered older outcome applied again: failures %d, runs %d → %d, budget %v → %v, next %s (%s)",
			d.State.Failures, before.Runs, d.State.Runs, before.Budget.Counts[10], d.State.Budget.Counts[10], fmtT(d.NextRunAt), d.Source)
	}
	if !reflect.DeepEqual(d.State, before) {
		t.Errorf("state changed:\n got %+v\nwant %+v", d.State, before)
	}

	// A run planned before a slot already in flight (a run-now hint while
	// the slot was held) runs after it, so its outcome comes after that
	// slot's: it ended after the last slot applied began, and counts.
	y := outcome("failed", t0.Add(time.Minute-500*time.Millisecond))
	y.Outcome.FinishedAt = t0.Add(time.Minute + 300*time.Millisecond)
	if d := governor.Decide(t0.Add(time.Minute+time.Second), spec, before, y); d.Ignored || d.State.Failures != 1 || d.State.Runs != before.Runs+1 {
		t.Errorf("outcome of a run that ended after the last slot: ignored %v, failures %d, runs %d", d.Ignored, d.State.Failures, d.State.Runs)
	}
}

// Two runs of one task overlap when a run-now hint or a requeue plans a
// slot S2 while the run of slot S1 is still in flight, and S1's run ends
// after S2 began. S1's outcome X is applied, its ack is lost, S2's outcome
// is applied, and X comes again an AckWait later: it is no longer the last
// dispatch applied, and it ended after the last slot applied began, so
// neither check caught it and it was applied a second time (runs and
// budget counted twice; a stale success cleared S2's dead letter).
func TestDecideRedeliveredOverlappingOutcomeIsIgnored(t *testing.T) {
	spec := withBudget(intervalSpec(time.Minute), 10000)
	s1, s2 := t0, t0.Add(time.Second)
	x := outcome("succeeded", s1)
	x.Outcome.FinishedAt = s1.Add(5 * time.Second) // after S2 began
	for _, tc := range []struct {
		name       string
		deadLetter string
	}{
		{"S2 failed", ""},
		{"S2 dead-lettered", "max attempts reached"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := governor.Decide(s1.Add(5*time.Second), spec, ran(t0.Add(-time.Minute)), x)
			if d.Ignored || d.State.Runs != 2 {
				t.Fatalf("first delivery of X: ignored %v, runs %d", d.Ignored, d.State.Runs)
			}
			y := outcome("failed", s2)
			y.Outcome.FinishedAt = s2.Add(5 * time.Second)
			y.Outcome.DeadLetterReason = tc.deadLetter
			d = governor.Decide(s2.Add(5*time.Second), spec, d.State, y)
			if d.Ignored || d.State.Runs != 3 || d.State.Failures != 1 {
				t.Fatalf("S2's outcome: ignored %v, runs %d, failures %d", d.Ignored, d.State.Runs, d.State.Failures)
			}
			if tc.deadLetter != "" && d.State.DeadLetter == nil {
				t.Fatal("S2's final failure: no dead-letter hold")
			}
			before := cloneState(d.State)
			r := governor.Decide(s1.Add(35*time.Second), spec, d.State, x) // X again, an AckWait later
			if !r.Ignored || r.State.Runs != before.Runs {
				t.Errorf("redelivered X applied again: ignored %v, runs %d → %d, failures %d → %d, budget %v → %v, dead letter %v → %v",
					r.Ignored, before.Runs, r.State.Runs, before.Failures, r.State.Failures,
					before.Budget.Counts[10], r.State.Budget.Counts[10], before.DeadLetter != nil, r.State.DeadLetter != nil)
			}
			if tc.deadLetter != "" && r.State.DeadLetter == nil {
				t.Errorf("the stale success cleared the dead-letter hold of S2")
			}
			if !reflect.DeepEqual(r.State, before) {
				t.Errorf("state changed:\n got %+v\nwant %+v", r.State, before)
			}
		})
	}
}

// TestDecideTimedPauseEndsAsAResume: a pause until T planned its run at T
// whatever the other rules said, so a daily 09:00 cron task paused until
// 14:00 ran at 14:00, off its calendar, and a task whose daily budget was
// spent ran over it. The run after a timed pause is now the one a resume
// at T plans; the state stays paused until it, and PausedAt tells.
func TestDecideTimedPauseEndsAsAResume(t *testing.T) {
	until := t0.Add(4 * time.Hour) // 14:00
	pause := governor.Input{Kind: governor.KindPaused, Pause: &governor.Pause{Until: until}}

	daily := cronSpec("0 9 * * *", "UTC")
	d := governor.Decide(t0, daily, ran(t0.Add(-time.Hour)), pause)
	if want := time.Date(2026, 3, 3, 9, 0, 0, 0, time.UTC); !d.NextRunAt.Equal(want) || d.Source != governor.SourcePaused {
		t.Fatalf("daily 09:00 task paused until 14:00: next %s (%s), want %s paused\ntrail %q", fmtT(d.NextRunAt), d.Source, fmtT(want), d.Trail)
	}
	if !d.State.PausedAt(until.Add(-time.Second)) || d.State.PausedAt(until) {
		t.Errorf("PausedAt: %v before the end, %v at it; want true, false", d.State.PausedAt(until.Add(-time.Second)), d.State.PausedAt(until))
	}
	after := governor.Decide(d.NextRunAt.Add(time.Second), daily, d.State, outcome("succeeded", d.NextRunAt))
	if after.State.Paused || after.Source != governor.SourceBaselineCron {
		t.Errorf("the outcome of the run after the pause: paused=%v source %s, want the pause ended and the calendar back", after.State.Paused, after.Source)
	}

	spent := withBudget(intervalSpec(time.Minute), 2)
	st := governor.Decide(t0.Add(-30*time.Second), spent, ran(t0.Add(-time.Minute)), outcome("succeeded", t0.Add(-time.Minute))).State
	st = governor.Decide(t0.Add(30*time.Second), spent, st, outcome("succeeded", t0)).State
	resumed := st
	resumed.Paused, resumed.PausedUntil = true, until
	want := governor.Decide(until.Add(-time.Nanosecond), spent, resumed, governor.Input{Kind: governor.KindResumed})
	if want.Source != governor.SourceBudget || !want.NextRunAt.After(until) {
		t.Fatalf("test setup: a resume at 14:00 plans %s (%s), want a budget deferral past 14:00", fmtT(want.NextRunAt), want.Source)
	}
	d = governor.Decide(t0.Add(time.Minute), spent, st, pause)
	if !d.NextRunAt.Equal(want.NextRunAt) {
		t.Fatalf("budget spent, paused until 14:00: next %s, want %s as the budget allows\ntrail %q", fmtT(d.NextRunAt), fmtT(want.NextRunAt), d.Trail)
	}
}
