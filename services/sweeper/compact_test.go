package sweeper

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/streams"
)

// shiftedClock is time.Now moved forward by a shift the test sets.
type shiftedClock struct{ shift atomic.Int64 }

func (c *shiftedClock) Now() time.Time { return time.Now().Add(time.Duration(c.shift.Load())) }

// TestSweeperCompactsOldDeleteMarkers: a deleted task leaves delete
// markers in flyball-tasks (behind which the bucket kept up to 4 older
// revisions of the spec), flyball-schedules and flyball-breakers, which
// nothing removed: 10,000 tasks created and deleted a day grew
// KV_flyball-tasks by 600,000 messages a month, for no live task. The
// sweeper removes markers older than DeleteMarkerAge, and only those: a
// young marker stays, and a key written again after its marker keeps
// its new value. The sweeper runs as its compose user: it may purge
// those three buckets' streams.
func TestSweeperCompactsOldDeleteMarkers(t *testing.T) {
	srv := natstest.StartCompose(t)
	ctx := t.Context()
	const n = 300
	buckets := map[string]jetstream.KeyValue{}
	for _, b := range []string{streams.BucketTasks, streams.BucketSchedules, streams.BucketBreakers} {
		kv, err := srv.JS.KeyValue(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		buckets[b] = kv
		for i := range n {
			k := "gone-" + strconv.Itoa(i)
			for range 3 { // several revisions: flyball-tasks keeps 5
				if _, err := kv.Put(ctx, k, []byte(`{}`)); err != nil {
					t.Fatal(err)
				}
			}
			if err := kv.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
		// Deleted, then written again: the new value stays.
		if err := kv.Delete(ctx, "back"); err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, "back", []byte(`{"back":true}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, "live", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	msgs := func(b string) uint64 {
		st, err := buckets[b].Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.Msgs
	}
	before := map[string]uint64{}
	for b := range buckets {
		before[b] = msgs(b)
	}

	clock := &shiftedClock{}
	_, js := srv.Connect(t, "sweeper")
	s := startHourlyWith(t, svcconf.Common{JS: js, Now: clock.Now})
	s.compactions.Wait() // the pass runs beside the sweep
	// The first sweep found the markers young: all stay.
	for b := range buckets {
		if got := msgs(b); got != before[b] {
			t.Fatalf("%s: %d messages after a sweep with young markers, want the %d stored", b, got, before[b])
		}
	}
	// A pass removes at most compactCap markers a bucket, the oldest
	// first; the next pass, an hour later, the rest.
	s.compactCap = 200
	removed := func(b string) float64 {
		return testutil.ToFloat64(s.cfg.Metrics.MarkersCompacted.WithLabelValues(b))
	}
	clock.shift.Store(int64(25 * time.Hour))
	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	s.compactions.Wait()
	for b := range buckets {
		if got := removed(b); got != 200 {
			t.Fatalf("%s: first pass removed %v markers, want the cap, 200", b, got)
		}
	}
	clock.shift.Store(int64(26 * time.Hour))
	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	s.compactions.Wait()
	for b := range buckets {
		if got := removed(b); got != n {
			t.Fatalf("%s: two passes removed %v markers, want all %d", b, got, n)
		}
	}
	for b, kv := range buckets {
		// The live keys; in flyball-tasks (history 5) back keeps its
		// marker as history behind its new value.
		want := uint64(2)
		if b == streams.BucketTasks {
			want = 3
		}
		if got := msgs(b); got != want {
			t.Fatalf("%s: %d messages a day after %d keys were deleted (%d before), want %d (the live keys): the delete markers stay for good", b, got, n, before[b], want)
		}
		e, err := kv.Get(ctx, "back")
		if err != nil || string(e.Value()) != `{"back":true}` {
			t.Fatalf("%s: the key written again after its delete: %v, %v; want its new value", b, e, err)
		}
	}
}
