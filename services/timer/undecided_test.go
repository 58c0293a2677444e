package timer

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestTimerReportsAScheduleThatNamesNoDecision: a schedule that decodes
// but names no decision (JSON null, {}: no nextRunAt, no source, not
// paused), written by hand or by a bad restore, was skipped without a
// word, like a task paused indefinitely, and the task never ran again. It
// is logged as an unreadable schedule (the sweeper repairs it); a task
// paused indefinitely is still skipped quietly.
func TestTimerReportsAScheduleThatNamesNoDecision(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := context.Background()
	logs := &warnings{}
	s, err := New(Config{JS: srv.JS, Instance: "test", Logger: slog.New(logs), Metrics: metrics.New(), RetryDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	kv, err := srv.JS.KeyValue(ctx, streams.BucketSchedules)
	if err != nil {
		t.Fatal(err)
	}
	// The paused ones first: the watch applies them before the others.
	for _, kvp := range [][2]string{
		{"paused", `{"taskId":"paused","source":"paused","paused":true}`},
		{"paused-by-hand", `{"taskId":"paused-by-hand","paused":true}`},
		{"null", `null`},
		{"empty", `{}`},
		{"id-alone", `{"taskId":"id-alone"}`},
	} {
		if _, err := kv.PutString(ctx, kvp[0], kvp[1]); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"null", "empty", "id-alone"} {
		natstest.Eventually(t, within, id+" logged as unreadable", func() bool {
			return logs.with("unreadable schedule", "task="+id, "names no decision")
		})
	}
	for _, id := range []string{"paused", "paused-by-hand"} {
		if logs.with("unreadable schedule", "task="+id) {
			t.Errorf("%s, paused indefinitely, was logged as unreadable", id)
		}
	}
}

// TestTimerDropsAScheduleWhoseKeyIsNoTaskID: a flyball-schedules key
// that is not a task ID (dot.ted, written by hand) was queued, and its
// dispatch, to a subject DISPATCH does not take, was retried every
// RetryDelay for good ("dispatch not stored; retrying", counted as
// errors). It is dropped when loaded, with one error naming the key; the
// other tasks are dispatched as before.
func TestTimerDropsAScheduleWhoseKeyIsNoTaskID(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := context.Background()
	tasks, err := srv.JS.KeyValue(ctx, streams.BucketTasks)
	if err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(-time.Minute).UTC()
	for _, id := range []string{"dot.ted", "ok"} {
		if _, err := tasks.PutString(ctx, id, `{"id":"`+id+`"}`); err != nil {
			t.Fatal(err)
		}
		putSchedule(t, srv.JS, id, due, gov.SourceBaselineInterval)
	}
	logs := &warnings{}
	s := startTimer(t, srv.JS, func(s *Service) { s.log = slog.New(logs) })
	natstest.Eventually(t, within, "ok dispatched", func() bool { return results(s)[resultNew] == 1 })
	s.mu.Lock()
	_, held := s.items["dot.ted"]
	s.mu.Unlock()
	if held {
		t.Error("dot.ted is held for dispatch")
	}
	if got := results(s); got[resultError] != 0 {
		t.Errorf("flyball_dispatch_total = %v, want no error", got)
	}
	logs.mu.Lock()
	n := 0
	for _, l := range logs.list {
		if strings.Contains(l, "key=dot.ted") {
			n++
			if !strings.HasPrefix(l, msgBadScheduleKey) {
				t.Errorf("logged %q, want %q", l, msgBadScheduleKey)
			}
		}
	}
	logs.mu.Unlock()
	if n != 1 {
		t.Errorf("dot.ted logged %d times, want once", n)
	}
}
