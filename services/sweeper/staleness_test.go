package sweeper

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/query"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/streams"
)

// TestStalenessCountsAnIntervalHint: flyball status measured a task with
// an active interval hint against the hint's interval, the cadence the
// operator asked for, but the sweeper's flyball_staleness_score (what
// FlyballTaskStale fires on) ignored the hint. A 1m task relaxed to 1h
// for maintenance scored 1 there ten minutes after its last run, while
// flyball status said 0; a task hinted to 10s during an incident that
// stopped succeeding scored far below what status showed. Both now use
// the hint, until it expires.
func TestStalenessCountsAnIntervalHint(t *testing.T) {
	ctx := t.Context()
	s := unstartedSweeper(t)
	now := time.Now().UTC()
	ran := now.Add(-10 * time.Minute)
	v := s.view
	for id, every := range map[string]time.Duration{"relaxed": time.Hour, "expired": time.Hour, "tight": 10 * time.Second} {
		v.specs[id] = query.Expect(&events.TaskSpec{ID: id, Schedule: events.Schedule{Interval: events.Duration(time.Minute)}})
		hint := &gov.IntervalHint{Interval: every, ExpiresAt: now.Add(time.Hour)}
		last := ran
		switch id {
		case "expired":
			hint.ExpiresAt = now.Add(-time.Second)
		case "tight":
			last = now.Add(-30 * time.Second)
		}
		st := gov.State{
			TaskID: id, NextRunAt: last.Add(every), Source: gov.SourceHintInterval,
			CreatedAt: ran, LastScheduledAt: last, LastSuccessAt: last, IntervalHint: hint,
		}
		if id == "expired" { // the run planned when it expired, on the baseline
			st.NextRunAt, st.Source = now.Add(-time.Second), gov.SourceBaselineInterval
		}
		v.putSchedule(id, stateJSON(st))
	}
	s.sweepTasks(ctx, now)
	scores := s.Scores()
	want := map[string]float64{
		"relaxed": 0,   // 10m into a 1h hint
		"expired": 1,   // back on its 1m baseline: 10 intervals
		"tight":   0.5, // 30s since its last success, on a 10s hint
	}
	for id, w := range want {
		if got := scores[id]; got != w {
			t.Errorf("%s: staleness %v, want %v", id, got, w)
		}
	}
	if got := testutil.ToFloat64(s.cfg.Metrics.StalenessMax); got != 1 {
		t.Errorf("flyball_staleness_score = %v, want 1 (the task whose hint expired)", got)
	}
}

// TestStalenessFollowsARelaxationOnPurpose: a next run the task's own
// settings put further out (activity dormancy, quiet hours, a budget,
// bounds.min, adaptive relax) is not late: the score stays 0 until it
// passes, then grows at the interval's pace. A dormant 1m task (6×) scored
// 1 at five minutes and kept FlyballTaskStale firing while it ran as
// configured. Failure-driven holds (backoff, breaker, dead-letter) still
// count against the interval.
func TestStalenessFollowsARelaxationOnPurpose(t *testing.T) {
	ctx := t.Context()
	s := unstartedSweeper(t)
	now := time.Now().UTC()
	for id, c := range map[string]struct {
		src       gov.Source
		ago, next time.Duration // last slot (and success) before now; next run after it
		want      float64
	}{
		"dormant, before its run":        {gov.SourceActivityDormant, 5 * time.Minute, 6 * time.Minute, 0},
		"dormant, 2m past its run":       {gov.SourceActivityDormant, 8 * time.Minute, 6 * time.Minute, 0.5},
		"quiet hours, before its run":    {gov.SourceQuietHours, 20 * time.Minute, 30 * time.Minute, 0},
		"budget, before its run":         {gov.SourceBudget, 3 * time.Minute, 24 * time.Minute, 0},
		"backing off after a failure":    {gov.SourceBackoff, 3 * time.Minute, 4 * time.Minute, 0.5},
		"held for a dead-letter recheck": {gov.SourceDeadLetterRecheck, 5 * time.Minute, 30 * time.Minute, 1},
	} {
		s.view.specs[id] = query.Expect(&events.TaskSpec{ID: id, Schedule: events.Schedule{Interval: events.Duration(time.Minute)}})
		last := now.Add(-c.ago)
		s.view.putSchedule(id, stateJSON(gov.State{
			TaskID: id, NextRunAt: last.Add(c.next), Source: c.src, CreatedAt: last, LastScheduledAt: last, LastSuccessAt: last,
		}))
		defer func() {
			if got := s.Scores()[id]; got != c.want {
				t.Errorf("%s: staleness %v, want %v", id, got, c.want)
			}
		}()
	}
	s.sweepTasks(ctx, now)
}

// unstartedSweeper is a sweeper on its own embedded server, with its
// buckets bound and nothing running: a test fills its view and calls
// sweepTasks itself.
func unstartedSweeper(t *testing.T) *Service {
	t.Helper()
	srv := natstest.StartWithStreams(t)
	s, err := New(Config{Common: svcconf.Common{JS: srv.JS}, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := jsutil.BindBuckets(t.Context(), srv.JS,
		jsutil.Bucket{Name: streams.BucketTasks, KV: &s.tasks},
		jsutil.Bucket{Name: streams.BucketSchedules, KV: &s.schedules},
		jsutil.Bucket{Name: streams.BucketBreakers, KV: &s.breakers},
	); err != nil {
		t.Fatal(err)
	}
	return s
}
