package sweeper

import (
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/kvcache"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/streams"
)

// TestScheduleSourceFollowsTheWriteRate: with many more schedule writes
// than keys between sweeps, the sweeper stops watching flyball-schedules
// and reads every schedule at each sweep, seeing new, changed and deleted
// schedules as the watch would (a zombie written meanwhile is re-nudged);
// once writes are rare it watches again.
func TestScheduleSourceFollowsTheWriteRate(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	tasks, schedules := taskBuckets(t, srv.JS)
	now := time.Now().UTC()
	put := func(id string, st gov.State) {
		t.Helper()
		spec, _ := json.Marshal(events.TaskSpec{ID: id, Schedule: events.Schedule{Interval: events.Duration(time.Minute)}})
		if _, err := tasks.Put(ctx, id, spec); err != nil {
			t.Fatal(err)
		}
		st.TaskID = id
		if _, err := schedules.Put(ctx, id, stateJSON(st)); err != nil {
			t.Fatal(err)
		}
	}
	busy := func(rounds int) time.Time {
		t.Helper()
		var next time.Time
		for i := range rounds {
			next = now.Add(time.Hour + time.Duration(i)*time.Second)
			for _, id := range []string{"a", "b", "c"} {
				if _, err := schedules.Put(ctx, id, scheduleJSON(id, next)); err != nil {
					t.Fatal(err)
				}
			}
		}
		return next
	}
	s := startHourly(t, srv.JS) // the first sweep is of an empty bucket
	if s.scanning() {
		t.Fatal("scanning from the start: nothing is known of the write rate yet")
	}
	for _, id := range []string{"a", "b", "c"} {
		put(id, gov.State{NextRunAt: now.Add(time.Hour)})
	}
	gauge := func() float64 { return testutil.ToFloat64(s.cfg.Metrics.SweeperScanning) }
	view := func(id string) (schedule, bool) {
		s.view.mu.Lock()
		defer s.view.mu.Unlock()
		s.view.decodeStale()
		st, ok := s.view.schedules[id]
		return st, ok
	}

	// Busy: 33 writes to 3 keys since the last sweep (which saw none).
	last := busy(10)
	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if !s.scanning() || gauge() != 1 {
		t.Fatalf("after 33 writes to 3 keys: scanning=%v, gauge %v; want a scan", s.scanning(), gauge())
	}
	if st, _ := view("a"); !st.NextRunAt.Equal(last) {
		t.Fatalf("scanned a.nextRunAt = %v, want the last write %v", st.NextRunAt, last)
	}

	// Still busy, and meanwhile a zombie appears and c is deleted.
	dispatches := make(chan *nats.Msg, 4)
	natstest.ChanSubscribe(t, srv.NC, events.DispatchSubject("zombie"), dispatches)
	busy(10)
	created := now.Add(-time.Hour).Add(123 * time.Nanosecond)
	put("zombie", gov.State{NextRunAt: now.Add(-10 * time.Minute), LastScheduledAt: now.Add(-11 * time.Minute), Source: gov.SourceBaselineInterval, CreatedAt: created})
	// The spec view is watch-fed: a sweep that does not know the spec yet
	// takes the schedule for an orphan (and leaves it, the bucket has the
	// spec) rather than a zombie, and only the next sweep would re-nudge.
	natstest.Eventually(t, 10*time.Second, "the sweeper's spec view knows the zombie", func() bool {
		s.view.mu.Lock()
		defer s.view.mu.Unlock()
		_, ok := s.view.specs["zombie"]
		return ok
	})
	if err := schedules.Delete(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if !s.scanning() {
		t.Fatal("stopped scanning while writes still outnumber keys")
	}
	if _, ok := view("c"); ok {
		t.Fatal("a deleted schedule is still in the scanned view")
	}
	select {
	case m := <-dispatches:
		var d events.Dispatch
		ev, err := events.Decode(m.Header, m.Data)
		if err == nil {
			err = events.DecodeData(ev, &d)
		}
		if err != nil || d.Reason != "zombie" || !d.TaskCreatedAt.Equal(created) {
			t.Fatalf("dispatch for the zombie = %+v (%v), want reason zombie and taskCreatedAt %v (the schedule's createdAt)", d, err, created)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a zombie written while scanning was not re-nudged")
	}

	// Quiet: no writes since the last sweep, so the watch comes back and
	// keeps the view current between sweeps again.
	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if s.scanning() || gauge() != 0 {
		t.Fatalf("after a quiet interval: scanning=%v, gauge %v; want the watch back", s.scanning(), gauge())
	}
	moved := now.Add(2 * time.Hour)
	if _, err := schedules.Put(ctx, "b", scheduleJSON("b", moved)); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, "the watch delivers a write after the switch back", func() bool {
		st, _ := view("b")
		return st.NextRunAt.Equal(moved)
	})
	if _, ok := view("c"); ok {
		t.Fatal("the restarted watch brought back a deleted schedule")
	}
}

// TestAnEndedWatchDoesNotOverwriteTheScan: when the sweeper switches to
// scanning, it ends the schedules watch and reads every schedule, but the
// watch may still be delivering an older write. That delivery must not
// reach the view: it overwrote the scan's schedule with the older one,
// and TestScheduleSourceFollowsTheWriteRate failed once in CI with
// "scanned a.nextRunAt = …:06, want the last write …:10".
func TestAnEndedWatchDoesNotOverwriteTheScan(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	_, schedules := taskBuckets(t, srv.JS)
	now := time.Now().UTC()
	s, err := New(Config{Common: svcconf.Common{JS: srv.JS}, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// Once armed, the watch's first delivery of "a" waits in entered
	// until released, then reports it was applied (or dropped).
	var armed atomic.Bool
	entered, release, applied := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // before Stop, which waits for the watch
	s.tuneFollow = func(bucket string, f *kvcache.Follower) {
		if bucket != streams.BucketSchedules {
			return
		}
		apply := f.Apply
		f.Apply = func(e jetstream.KeyValueEntry) {
			if e.Key() == "a" && armed.CompareAndSwap(true, false) {
				close(entered)
				<-release
				apply(e)
				close(applied)
				return
			}
			apply(e)
		}
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	select { // the first sweep, of an empty bucket, learns the write rate
	case <-s.Swept():
	case <-time.After(10 * time.Second):
		t.Fatal("no first sweep within 10s")
	}
	armed.Store(true)
	var last time.Time
	for i := range 10 { // 30 writes to 3 keys: the next sweep scans
		last = now.Add(time.Hour + time.Duration(i)*time.Second)
		for _, id := range []string{"a", "b", "c"} {
			if _, err := schedules.Put(ctx, id, scheduleJSON(id, last)); err != nil {
				t.Fatal(err)
			}
		}
	}
	select {
	case <-entered: // the watch holds a's first write
	case <-time.After(10 * time.Second):
		t.Fatal("the watch delivered no write of a")
	}
	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if !s.scanning() {
		t.Fatal("not scanning after 30 writes to 3 keys")
	}
	releaseOnce.Do(func() { close(release) })
	select {
	case <-applied:
	case <-time.After(10 * time.Second):
		t.Fatal("the ended watch's held delivery did not return within 10s")
	}
	s.view.mu.Lock()
	s.view.decodeStale()
	st := s.view.schedules["a"]
	s.view.mu.Unlock()
	if !st.NextRunAt.Equal(last) {
		t.Fatalf("a.nextRunAt = %v after the scan and a late delivery of the ended watch, want the scanned last write %v", st.NextRunAt, last)
	}
}
