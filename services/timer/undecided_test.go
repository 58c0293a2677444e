package timer

import (
	"context"
	"log/slog"
	"testing"
	"time"

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
