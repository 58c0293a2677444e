package sweeper

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/kvcache"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/streams"
)

// scheduleJSON is a schedule as the governor stores it.
func scheduleJSON(id string, next time.Time) []byte {
	return stateJSON(gov.State{TaskID: id, NextRunAt: next, Source: gov.SourceBaselineInterval})
}

// stateJSON encodes st as the governor stores it.
func stateJSON(st gov.State) []byte {
	b, err := st.AppendJSON(nil)
	if err != nil {
		panic(err)
	}
	return b
}

func TestViewDecodesSchedulesAtTheSweep(t *testing.T) {
	v := newView()
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

	// The initial load decodes at once.
	v.putSchedule("a", scheduleJSON("a", t0))
	if got := v.schedules["a"].NextRunAt; !got.Equal(t0) || len(v.stale) != 0 {
		t.Fatalf("initial load: nextRunAt %v, %d stale", got, len(v.stale))
	}
	v.caughtUp = true

	// Later writes wait for the sweep; the last one wins.
	for i := 1; i <= 3; i++ {
		v.putSchedule("a", scheduleJSON("a", t0.Add(time.Duration(i)*time.Second)))
	}
	v.putSchedule("b", scheduleJSON("b", t0))
	if got := v.schedules["a"].NextRunAt; !got.Equal(t0) || len(v.stale) != 2 {
		t.Fatalf("before the sweep: nextRunAt %v, %d stale", got, len(v.stale))
	}
	v.decodeStale()
	if got := v.schedules["a"].NextRunAt; !got.Equal(t0.Add(3*time.Second)) || v.schedules["b"].TaskID != "b" || len(v.stale) != 0 {
		t.Fatalf("after the sweep: a.nextRunAt %v, b %+v, %d stale", got, v.schedules["b"], len(v.stale))
	}

	// A delete drops the decoded and the undecoded value.
	v.putSchedule("a", scheduleJSON("a", t0.Add(time.Hour)))
	v.deleteSchedule("a")
	v.decodeStale()
	if _, ok := v.schedules["a"]; ok {
		t.Fatalf("deleted schedule still in the view: %+v", v.schedules["a"])
	}

	// An unreadable value drops the previous schedule: the task is one
	// with no schedule, which the sweeper repairs.
	v.putSchedule("b", []byte(`{"taskId":`))
	v.decodeStale()
	if st, ok := v.schedules["b"]; ok {
		t.Fatalf("unreadable write kept the previous schedule in the view: %+v", st)
	}
}

// TestViewTakesAScheduleThatNamesNoDecisionForNone: a value that decodes
// but names no decision (JSON null, {}, a taskId alone: no nextRunAt, no
// source, not paused) is one with no schedule, which the sweeper repairs,
// as an unreadable one. Kept, the task had no next run and nothing
// repaired it. A state the governor writes with no next run names its
// source, and stays.
func TestViewTakesAScheduleThatNamesNoDecisionForNone(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for _, raw := range []string{`null`, `{}`, `{"taskId":"a"}`, `{"taskId":"a","failures":3,"createdAt":"2026-12-01T00:00:00Z"}`} {
		v := newView()
		v.putSchedule("a", scheduleJSON("a", t0))
		v.caughtUp = true
		v.putSchedule("a", []byte(raw))
		v.decodeStale()
		if st, ok := v.schedules["a"]; ok {
			t.Errorf("%s: kept in the view as a schedule: %+v", raw, st)
		}
	}
	for name, st := range map[string]gov.State{
		"paused indefinitely": {TaskID: "a", Source: gov.SourcePaused, Paused: true},
		"cron never fires":    {TaskID: "a", Source: gov.SourceBaselineCron},
	} {
		v := newView()
		v.putSchedule("a", stateJSON(st))
		if _, ok := v.schedules["a"]; !ok {
			t.Errorf("%s: a state the governor writes with no next run was dropped", name)
		}
	}
	v := newView()
	v.putSchedule("a", []byte(`{"taskId":"a","paused":true}`))
	if _, ok := v.schedules["a"]; !ok {
		t.Error("a paused state with no source was dropped: it is paused indefinitely")
	}
}

func TestViewDecodesAtTheCap(t *testing.T) {
	v := newView()
	v.caughtUp = true
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	for i := range maxStale {
		id := fmt.Sprintf("t%d", i)
		v.putSchedule(id, scheduleJSON(id, t0))
	}
	if len(v.stale) != 0 || len(v.schedules) != maxStale {
		t.Fatalf("at the cap: %d stale, %d decoded; want 0 and %d", len(v.stale), len(v.schedules), maxStale)
	}
}

// TestViewPrunesWhatAReplayNoLongerHolds: after a watch of
// flyball-schedules ends and is established again, schedules purged
// meanwhile leave the view, decoded or not, and the rest stay.
func TestViewPrunesWhatAReplayNoLongerHolds(t *testing.T) {
	v := newView()
	t0 := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	for _, id := range []string{"a", "b", "c"} {
		v.putSchedule(id, scheduleJSON(id, t0))
	}
	v.caughtUp = true
	v.putSchedule("b", scheduleJSON("b", t0.Add(time.Second))) // undecoded until the sweep
	v.putSchedule("d", scheduleJSON("d", t0))
	v.pruneSchedules(func(id string) bool { return id == "a" || id == "d" })
	v.decodeStale()
	if len(v.schedules) != 2 || v.schedules["a"].TaskID != "a" || v.schedules["d"].TaskID != "d" {
		t.Fatalf("after the prune the view holds %v, want a and d", v.schedules)
	}
}

// TestViewWatchesAgainWhenAWatchEnds ends the sweeper's watch of
// flyball-tasks the way nats.go does when it cannot re-create the watch's
// consumer, and changes the bucket while no watch is up: after the
// replay the view holds the spec written meanwhile, keeps the one left
// alone, and has forgotten the one removed without a trace. A watch that
// stayed ended would leave the view as it was.
func TestViewWatchesAgainWhenAWatchEnds(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	tasks, err := srv.JS.KeyValue(ctx, streams.BucketTasks)
	if err != nil {
		t.Fatal(err)
	}
	put := func(id string) {
		spec, _ := json.Marshal(events.TaskSpec{ID: id, Schedule: events.Schedule{Interval: events.Duration(time.Minute)}})
		if _, err := tasks.Put(context.Background(), id, spec); err != nil {
			t.Error(err) // may run on the follower's goroutine
		}
	}
	put("kept")
	put("gone")
	watchers := make(chan jetstream.KeyWatcher, 4)
	loads := make(chan struct{}, 4)
	s, err := New(Config{Common: svcconf.Common{JS: srv.JS}, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s.tuneFollow = func(bucket string, f *kvcache.Follower) {
		if bucket != streams.BucketTasks {
			return
		}
		f.Watching = func(w jetstream.KeyWatcher) { watchers <- w }
		loaded := f.Loaded
		f.Loaded = func() { loaded(); loads <- struct{}{} }
		f.Ended = func(error) {
			put("during")
			// Deleted, then its marker and history removed: no trace.
			if err := tasks.Delete(context.Background(), "gone"); err != nil {
				t.Error(err)
			}
			if err := tasks.PurgeDeletes(context.Background(), jetstream.DeleteMarkersOlderThan(-1)); err != nil {
				t.Error(err)
			}
		}
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	specs := func() []string {
		s.view.mu.Lock()
		defer s.view.mu.Unlock()
		return slices.Sorted(maps.Keys(s.view.specs))
	}
	<-loads // the first snapshot
	if got := specs(); !slices.Equal(got, []string{"gone", "kept"}) {
		t.Fatalf("after the first load the view holds %v", got)
	}
	natstest.EndWatch(t, watchers, loads)
	if got := specs(); !slices.Equal(got, []string{"during", "kept"}) {
		t.Fatalf("after the replay the view holds %v, want [during kept]", got)
	}
}
