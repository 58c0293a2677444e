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
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	s, err := New(Config{Common: svcconf.Common{JS: srv.JS}, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := jsutil.BindBuckets(ctx, srv.JS,
		jsutil.Bucket{Name: streams.BucketSchedules, KV: &s.schedules},
		jsutil.Bucket{Name: streams.BucketBreakers, KV: &s.breakers},
	); err != nil {
		t.Fatal(err)
	}
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
		v.putSchedule(id, stateJSON(gov.State{
			TaskID: id, NextRunAt: now.Add(time.Minute), Source: gov.SourceHintInterval,
			CreatedAt: ran, LastScheduledAt: last, LastSuccessAt: last, IntervalHint: hint,
		}))
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
