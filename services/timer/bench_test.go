package timer

import (
	"container/heap"
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// kvEntry is a KV watch entry as the watcher delivers it: the key is a
// substring of the message subject, as nats.go slices it.
type kvEntry struct {
	subject string
	value   []byte
	op      jetstream.KeyValueOp
}

var kvPrefix = "$KV." + streams.BucketSchedules + "."

func putEntry(id string, value []byte) *kvEntry {
	return &kvEntry{subject: kvPrefix + id, value: value}
}

func (e *kvEntry) Bucket() string                  { return streams.BucketSchedules }
func (e *kvEntry) Key() string                     { return e.subject[len(kvPrefix):] }
func (e *kvEntry) Value() []byte                   { return e.value }
func (e *kvEntry) Revision() uint64                { return 1 }
func (e *kvEntry) Created() time.Time              { return time.Time{} }
func (e *kvEntry) Delta() uint64                   { return 0 }
func (e *kvEntry) Operation() jetstream.KeyValueOp { return e.op }

// acceptedState is the schedule the governor stores for a new interval task
// whose first run is at, as the scale benchmark seeds it.
func acceptedState(tb testing.TB, now time.Time, id string, at time.Time) []byte {
	tb.Helper()
	spec := events.TaskSpec{
		ID:       id,
		Target:   events.Target{HTTP: &events.HTTPTarget{URL: "http://127.0.0.1:8080/t/" + id}},
		Schedule: events.Schedule{Interval: events.Duration(time.Hour)},
		StartAt:  &at,
	}
	if err := spec.Validate(); err != nil {
		tb.Fatal(err)
	}
	spec.Normalize()
	dec := gov.Decide(now, &spec, gov.State{}, gov.Input{Kind: gov.KindAccepted})
	dec.State.LastCommandID = "bench-seed-" + id
	b, err := json.Marshal(dec.State)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// BenchmarkApplyLoad is the timer's share of loading the schedules bucket:
// apply of n governor-written states, as the KV watch delivers them. It
// reports the heap the timer holds per task once loaded.
func BenchmarkApplyLoad(b *testing.B) {
	const n = 100_000
	srv := natstest.Start(b)
	now := time.Now().UTC()
	ids := make([]string, n)
	values := make([][]byte, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("scale-%07d", i)
		at := now.Add(30*time.Minute + 30*time.Minute*time.Duration(i)/n).Truncate(time.Millisecond)
		values[i] = acceptedState(b, now, ids[i], at)
	}
	var heapPerTask float64
	b.ReportAllocs()
	for b.Loop() {
		var with, without runtime.MemStats
		func() {
			b.StopTimer()
			// Fresh subjects every round, dead once applied, so the heap
			// figure counts whatever the timer pins of them.
			entries := make([]*kvEntry, n)
			for i, id := range ids {
				entries[i] = putEntry(id, values[i])
			}
			b.StartTimer()
			s, err := New(Config{JS: srv.JS})
			if err != nil {
				b.Fatal(err)
			}
			s.reserve(n) // as Start does from the bucket's key count
			for _, e := range entries {
				s.apply(e)
			}
			b.StopTimer()
			if len(s.queue) != n {
				b.Fatalf("queued %d of %d", len(s.queue), n)
			}
			runtime.GC()
			runtime.ReadMemStats(&with)
			runtime.KeepAlive(s)
		}()
		runtime.GC()
		runtime.ReadMemStats(&without)
		heapPerTask = float64(int64(with.HeapAlloc)-int64(without.HeapAlloc)) / n
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/task")
	b.ReportMetric(heapPerTask, "heapB/task")
}

// BenchmarkDispatchBurst measures a burst: n tasks fall due at the same
// instant on a real embedded server, and the benchmark waits until every
// dispatch is acknowledged. "median-last-ms" is how late the last ack came
// after the due time, in the median round.
func BenchmarkDispatchBurst(b *testing.B) {
	const n = 10_000
	srv := natstest.StartWithStreams(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := New(Config{JS: srv.JS})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer s.Stop()
	<-s.Ready()
	dispatch, err := srv.JS.Stream(ctx, streams.StreamDispatch)
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("burst-%05d", i)
	}
	var lastMS []float64
	done := 0.0
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		if err := dispatch.Purge(ctx); err != nil {
			b.Fatal(err)
		}
		// A new millisecond every round, so every round has new dispatch
		// IDs; all n are queued in one lock hold so they fall due at once.
		due := time.Now().Truncate(time.Millisecond)
		b.StartTimer()
		queueDue(s, ids, due.UnixNano(), "bench")
		done += n
		waitCount(s, done)
		lastMS = append(lastMS, float64(time.Since(due).Microseconds())/1000)
	}
	// The median: the machine is shared, and one slow round skews a mean.
	slices.Sort(lastMS)
	b.ReportMetric(lastMS[len(lastMS)/2], "median-last-ms")
	if got := counterValue(s.cfg.Metrics.DispatchTotal, "new"); got != done {
		b.Fatalf("%v new dispatches, want %v", got, done)
	}
}

// queueDue queues ids at the same due time in one lock hold, then wakes the
// dispatcher, so a burst starts whole.
func queueDue(s *Service, ids []string, at int64, source string) {
	s.mu.Lock()
	for _, id := range ids {
		it, ok := s.items[id]
		if !ok {
			it = &item{id: id, fired: noSlot, index: -1}
			s.items[id] = it
		}
		it.source, it.at, it.due = source, at, at
		if it.index >= 0 {
			heap.Fix(&s.queue, int(it.index))
		} else {
			heap.Push(&s.queue, it)
		}
	}
	s.mu.Unlock()
	s.poke()
}

// waitCount polls, every 200µs, until the timer has counted done dispatch
// results.
func waitCount(s *Service, done float64) {
	t := time.NewTicker(200 * time.Microsecond)
	defer t.Stop()
	for counterSum(s.cfg.Metrics.DispatchTotal) < done {
		<-t.C
	}
}

func counterValue(v *prometheus.CounterVec, label string) float64 {
	return testutil.ToFloat64(v.WithLabelValues(label))
}

func counterSum(v *prometheus.CounterVec) float64 {
	var sum float64
	for _, l := range []string{"new", "duplicate", "pending", "error"} {
		sum += counterValue(v, l)
	}
	return sum
}
