package governor_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/pkg/governor"
)

// perLocalDay counts the slots on each local date of loc.
func perLocalDay(slots []time.Time, loc *time.Location) map[string][]time.Time {
	days := map[string][]time.Time{}
	for _, s := range slots {
		k := s.In(loc).Format(time.DateOnly)
		days[k] = append(days[k], s)
	}
	return days
}

// TestCronBudgetAtItsRateDropsNoOccurrence: a budget equal to a cron
// task's own rate never drops an occurrence, with jitter or across the
// DST transitions (a day of 23 h).
func TestCronBudgetAtItsRateDropsNoOccurrence(t *testing.T) {
	start := time.Date(2026, 3, 2, 10, 30, 0, 0, time.UTC)
	t.Run("hourly, jitter 0.2, budget 24", func(t *testing.T) {
		spec := withBudget(withJitter(cronSpec("0 * * * *", ""), 0.2), 24)
		slots, ds := simulate(t, spec, start, start.Add(240*time.Hour), 2*time.Second, succeed)
		if len(slots) < 239 {
			t.Errorf("%d runs in 240 h, want 239 or 240", len(slots))
		}
		for _, d := range ds[1:] {
			if d.Source != governor.SourceBaselineCron {
				t.Fatalf("source %s, want baseline-cron: %q", d.Source, d.Trail)
			}
		}
	})
	t.Run("daily, jitter 0.1, budget 1", func(t *testing.T) {
		spec := withBudget(withJitter(cronSpec("0 9 * * *", ""), 0.1), 1)
		// Accepted at 10:30: a run on each of the next 30 days, the last
		// one's jitter (up to 2h24m) included.
		slots, _ := simulate(t, spec, start, start.AddDate(0, 0, 30).Add(3*time.Hour), 2*time.Second, succeed)
		if len(slots) != 30 {
			t.Errorf("%d runs in 30 days, want 30: %v", len(slots), slots)
		}
	})
	for _, tc := range []struct {
		zone           string
		spring, autumn time.Time
	}{
		{"Europe/Berlin", date(2026, 3, 29), date(2026, 10, 25)},
		{"America/New_York", date(2026, 3, 8), date(2026, 11, 1)},
	} {
		loc, err := time.LoadLocation(tc.zone)
		if err != nil {
			t.Fatal(err)
		}
		for _, day := range []time.Time{tc.spring, tc.autumn} {
			for _, jitter := range []float64{0, 0.1} {
				spec := withBudget(withJitter(cronSpec("0 9 * * *", tc.zone), jitter), 1)
				from := time.Date(day.Year(), day.Month(), day.Day()-5, 12, 0, 0, 0, loc)
				to := time.Date(day.Year(), day.Month(), day.Day()+5, 12, 0, 0, 0, loc)
				slots, _ := simulate(t, spec, from, to, 2*time.Second, succeed)
				days := perLocalDay(slots, loc)
				for d := from.AddDate(0, 0, 1); d.Before(to); d = d.AddDate(0, 0, 1) {
					if k := d.Format(time.DateOnly); len(days[k]) != 1 {
						t.Errorf("%s, jitter %v, budget 1: %s has %d runs %v, want exactly 1", tc.zone, jitter, k, len(days[k]), days[k])
					}
				}
			}
		}
	}
}

// occurrencesRun checks that the slots are the occurrences of the cron
// expression in (from, to], one each: a slot on or after its occurrence
// and before the next.
func occurrencesRun(t *testing.T, name, expr, tz string, slots []time.Time, from, to time.Time) {
	t.Helper()
	sched, loc := cronOf(t, cronSpec(expr, tz))
	i := 0
	for o := sched.Next(from, loc); !o.After(to); o = sched.Next(o, loc) {
		n := sched.Next(o, loc)
		var got []time.Time
		for ; i < len(slots) && slots[i].Before(n); i++ {
			if !slots[i].Before(o) {
				got = append(got, slots[i])
			}
		}
		if len(got) != 1 {
			t.Errorf("%s: occurrence %s (%s) ran %d times: %v", name, fmtT(o), o.In(loc).Format(time.DateTime), len(got), got)
		}
	}
}

// TestCronBudgetAndBoundsAtItsRateMoveNoOccurrence: a budget, a
// bounds.min or a bounds.max equal to the cron's own rate runs every
// occurrence, on its own slot (jittered or not), across both 2026 DST
// transitions of Berlin, New York, Santiago and Havana. A daily run before
// the clocks fall back draws its jitter over a gap of 25 hours: the budget
// is checked over many task ids (their draws) with jitter 0.5 and minutes
// past the half hour, where that run may end up in a later hour than the
// next occurrence's jitter reaches.
func TestCronBudgetAndBoundsAtItsRateMoveNoOccurrence(t *testing.T) {
	crons := []struct {
		expr   string
		perDay int
	}{
		{"0 9 * * *", 1},
		{"30 2 * * *", 1}, // in the spring-forward gap: at its end that day
		{"30 1 * * *", 1}, // repeated on the fall-back day in New York
		{"0 9,21 * * *", 2},
		{"0 */2 * * *", 12},
		{"0 * * * *", 24},
		{"*/30 * * * *", 48},
		{"45 9 * * *", 1},
		{"50 9 * * *", 1},
		{"45 1 * * *", 1},
	}
	for _, z := range []struct {
		tz   string
		days []time.Time
	}{
		{"Europe/Berlin", []time.Time{date(2026, 3, 29), date(2026, 10, 25)}},
		{"America/New_York", []time.Time{date(2026, 3, 8), date(2026, 11, 1)}},
		{"America/Santiago", []time.Time{date(2026, 4, 4), date(2026, 9, 6)}},
		{"America/Havana", []time.Time{date(2026, 3, 8), date(2026, 11, 1)}},
	} {
		tz := z.tz
		loc, err := time.LoadLocation(tz)
		if err != nil {
			t.Fatal(err)
		}
		for _, day := range z.days {
			from := time.Date(day.Year(), day.Month(), day.Day()-4, 12, 0, 0, 0, loc)
			to := time.Date(day.Year(), day.Month(), day.Day()+4, 12, 0, 0, 0, loc)
			for _, c := range crons {
				period := 24 * time.Hour / time.Duration(c.perDay)
				for _, jitter := range []float64{0, 0.1, 0.5} {
					for rule, spec := range map[string]*events.TaskSpec{
						"budget":     withBudget(cronSpec(c.expr, tz), c.perDay),
						"bounds.min": withBounds(cronSpec(c.expr, tz), period, 0),
						"bounds.max": withBounds(cronSpec(c.expr, tz), 0, period),
					} {
						spec = mustValid(t, withJitter(spec, jitter))
						ids := []string{spec.ID}
						if rule == "budget" && jitter == 0.5 && c.perDay == 1 {
							ids = ids[:0]
							for i := range 300 {
								ids = append(ids, "task-"+strconv.Itoa(i))
							}
						}
						for _, id := range ids {
							spec.ID = id
							// Every occurrence up to a day before the end,
							// its jittered slot included.
							slots, ds := simulate(t, spec, from, to, 2*time.Second, succeed)
							name := c.expr + " " + tz + " " + day.Format(time.DateOnly) + " jitter " + strconv.FormatFloat(jitter, 'g', -1, 64) + " " + rule + " " + id
							occurrencesRun(t, name, c.expr, tz, slots, from, to.Add(-24*time.Hour))
							// Each on its own slot: the cron rule's, not moved.
							for i, d := range ds[1 : len(ds)-1] {
								if d.Source != governor.SourceBaselineCron {
									t.Errorf("%s: run %s by %s, want baseline-cron\ntrail: %q", name, fmtT(slots[i+1]), d.Source, d.Trail)
									break
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestCronBudgetStillBitesOnExtraRuns: a budget at a cron task's own rate
// lets every occurrence run, but still holds back the occurrence after
// runs the cron did not ask for (requeues, which outrank the budget): by
// its pacing, and once used up, until the hour that frees a run, less the
// jitter the occurrence may draw.
func TestCronBudgetStillBitesOnExtraRuns(t *testing.T) {
	day := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	at := func(h, m int) time.Time { return day.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute) }
	// run applies the outcome of the slot the decision d planned.
	run := func(spec *events.TaskSpec, d governor.Decision) governor.Decision {
		slot := d.NextRunAt
		in := outcome("succeeded", slot)
		in.Outcome.DispatchID = events.DispatchID(spec.ID, slot)
		return governor.Decide(slot.Add(2*time.Second), spec, d.State, in)
	}
	for _, tc := range []struct {
		name     string
		perDay   int
		requeues []time.Time
		want     time.Time // the next run is at or after it
		source   governor.Source
	}{
		// Paced 24h from the requeued run at 15:00 (not within jitter of
		// the 09:00 occurrence): the next occurrence is the day after.
		{"pacing", 1, []time.Time{at(15, 0)}, at(48+9, 0), governor.SourceBudget},
		// Budget 2 (12h apart): two requeued runs in hour 12 use it up
		// until 13:00 the next day; 09:00 jittered by at most 2h24m is
		// before 12:00, a day after the hour whose runs leave the window.
		{"exhaustion", 2, []time.Time{at(12, 30), at(12, 45)}, at(24+13, 0), governor.SourceBudget},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := mustValid(t, withBudget(withJitter(cronSpec("0 9 * * *", ""), 0.1), tc.perDay))
			d := run(spec, governor.Decide(at(8, 0), spec, governor.State{}, accepted))
			for _, r := range tc.requeues {
				d = governor.Decide(r, spec, d.State, requeued)
				if d.Source != governor.SourceRequeue {
					t.Fatalf("requeue at %s planned %s (%s)", fmtT(r), fmtT(d.NextRunAt), d.Source)
				}
				d = run(spec, d)
			}
			if d.NextRunAt.Before(tc.want) || d.Source != tc.source {
				t.Errorf("next run %s (%s), want at or after %s (%s)\ntrail: %q", fmtT(d.NextRunAt), d.Source, fmtT(tc.want), tc.source, d.Trail)
			}
		})
	}
}
