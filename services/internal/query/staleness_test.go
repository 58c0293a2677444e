package query_test

import (
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/query"
)

// TestCronStalenessCountsOccurrencesMissed: a cron task's staleness was
// measured against the gap between its next two occurrences, taken when
// the spec was read. For an irregular calendar that is wrong both ways:
// "0 9 1,2 * *" read on the 2nd expects 24 h, so a healthy task that ran
// on the 2nd scored 1 (and FlyballTaskStale fired) for most of the month;
// a weekday task scored 0.49 on Monday morning. The score now counts the
// occurrences due since the last success, as an interval task's does: 0
// until the first is due, 1 once five are.
func TestCronStalenessCountsOccurrencesMissed(t *testing.T) {
	cronTask := func(expr string) query.Expectation {
		return query.Expect(&events.TaskSpec{ID: "c", Schedule: events.Schedule{Cron: expr}})
	}
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	twiceMonthly := cronTask("0 9 1,2 * *")
	ran := at("2026-03-02T09:00:00Z")
	for _, c := range []struct {
		now  string
		want float64
	}{
		{"2026-03-20T12:00:00Z", 0},    // next due on April 1st
		{"2026-04-01T09:00:00Z", 0},    // the first due occurrence: just due
		{"2026-04-02T09:00:00Z", 0.25}, // one missed
		{"2026-06-01T09:00:00Z", 1},    // five due since
	} {
		if got := twiceMonthly.Score(at(c.now), ran, time.Time{}); got != c.want {
			t.Errorf("0 9 1,2 * *, last success %s, at %s: score %v, want %v", ran.Format(time.RFC3339), c.now, got, c.want)
		}
	}
	weekdays := cronTask("0 9 * * 1-5")
	if got := weekdays.Score(at("2026-03-09T08:00:00Z"), at("2026-03-06T09:00:00Z"), time.Time{}); got != 0 { // Friday's run, Monday 08:00
		t.Errorf("weekday task on Monday before its run: score %v, want 0", got)
	}
	// An interval task keeps its formula: (age - interval) / (4 × interval).
	every := query.Expect(&events.TaskSpec{ID: "i", Schedule: events.Schedule{Interval: events.Duration(time.Minute)}})
	if got := every.Score(at("2026-03-02T09:03:00Z"), ran, time.Time{}); got != 0.5 {
		t.Errorf("1m task 3m after its last success: score %v, want 0.5", got)
	}
	// Never succeeded: measured from creation.
	if got := twiceMonthly.Score(at("2026-04-02T09:00:00Z"), time.Time{}, ran); got != 0.25 {
		t.Errorf("cron task created on the 2nd, never succeeded, on April 2nd: score %v, want 0.25", got)
	}
}

// TestStalenessOfAHintedCronTask: the health summary measured every task
// with an active interval hint against the hint's interval. An interval
// hint does not change a cron task's calendar (the governor accepts it and
// keeps the occurrences), so an hourly cron task hinted to 1m scored 1
// (FlyballTaskStale's threshold) five minutes after each run it made on
// time. A hinted interval task still counts the hint's interval.
func TestStalenessOfAHintedCronTask(t *testing.T) {
	ran := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	now := ran.Add(30 * time.Minute)
	hint := &gov.IntervalHint{Interval: time.Minute, ExpiresAt: now.Add(time.Hour)}
	hourly := query.Expect(&events.TaskSpec{ID: "c", Schedule: events.Schedule{Cron: "0 * * * *"}}).Hinted(hint, now)
	if got := hourly.Score(now, ran, time.Time{}); got != 0 {
		t.Errorf("hourly cron task hinted to 1m, 30m after its run: score %v, want 0 (the hint does not apply)", got)
	}
	if got := hourly.Interval(now); got != time.Hour {
		t.Errorf("hourly cron task hinted to 1m: expected interval %s, want 1h", got)
	}
	every := query.Expect(&events.TaskSpec{ID: "i", Schedule: events.Schedule{Interval: events.Duration(time.Hour)}})
	if got := every.Hinted(hint, now).Score(now, ran, time.Time{}); got != 1 {
		t.Errorf("hourly interval task hinted to 1m, 30m after its run: score %v, want 1", got)
	}
	if got := every.Hinted(hint, hint.ExpiresAt).Score(now, ran, time.Time{}); got != 0 {
		t.Errorf("expired hint still counted: score %v, want 0", got)
	}
}
