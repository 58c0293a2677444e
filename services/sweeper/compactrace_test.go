package sweeper

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/streams"
)

// purgeRacedJS is the sweeper's JetStream whose stream purges run race
// first, with the stream's name: a test writes there what the governor
// or the breaker writes between the compaction's watch and its purge, a
// window too small to hit by timing.
type purgeRacedJS struct {
	jetstream.JetStream
	race func(ctx context.Context, stream string)
}

func (j *purgeRacedJS) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	st, err := j.JetStream.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	return &purgeRacedStream{Stream: st, name: name, race: j.race}, nil
}

type purgeRacedStream struct {
	jetstream.Stream
	name string
	race func(ctx context.Context, stream string)
}

func (s *purgeRacedStream) Purge(ctx context.Context, opts ...jetstream.StreamPurgeOpt) error {
	s.race(ctx, s.name)
	return s.Stream.Purge(ctx, opts...)
}

// TestWritesDuringACompactionAreKept: the compaction runs on its own
// goroutine beside the sweeps, while the governor and the breaker keep
// writing, and compact.go says a key written again after its marker
// keeps its new value (each purge goes up to and including the marker's
// sequence only). Here every deleted key is written again after the pass
// has read its markers and before its first purge (a task created again
// under a deleted ID), and other keys are written all through the pass.
// Every one of those writes must be there after it, and every old marker
// removed.
func TestWritesDuringACompactionAreKept(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	const n = 50
	names := []string{streams.BucketTasks, streams.BucketSchedules, streams.BucketBreakers}
	buckets := map[string]jetstream.KeyValue{}
	for _, b := range names {
		kv := bucket(t, srv.JS, b)
		buckets[b] = kv
		for i := range n {
			k := "gone-" + strconv.Itoa(i)
			if _, err := kv.Put(ctx, k, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			if err := kv.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	again := func(i int) []byte { return []byte(`{"again":` + strconv.Itoa(i) + `}`) }
	var mu sync.Mutex
	raced := map[string]bool{} // streams whose first purge was raced
	race := func(ctx context.Context, stream string) {
		mu.Lock()
		defer mu.Unlock()
		if raced[stream] {
			return
		}
		raced[stream] = true
		kv := buckets[stream[len("KV_"):]]
		for i := range n {
			if _, err := kv.Put(ctx, "gone-"+strconv.Itoa(i), again(i)); err != nil {
				t.Errorf("%s: write gone-%d during the compaction: %v", stream, i, err)
			}
		}
	}
	clock := &shiftedClock{}
	_, js := srv.Connect(t)
	s := startHourlyWith(t, svcconf.Common{JS: &purgeRacedJS{JetStream: js, race: race}, Now: clock.Now, Logger: slog.New(slog.DiscardHandler)})
	s.compactions.Wait() // the first pass found the markers young

	// Writes all through the pass, from another connection.
	stop := make(chan struct{})
	var writer sync.WaitGroup
	written := map[string]int{} // bucket: keys written during-0 … during-(n-1)
	writer.Add(1)
	go func() {
		defer writer.Done()
		for i := 0; i < 1000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			for _, b := range names {
				if _, err := buckets[b].Put(ctx, "during-"+strconv.Itoa(i), []byte(`{}`)); err != nil {
					t.Errorf("%s: write during-%d: %v", b, i, err)
					return
				}
				written[b] = i + 1
			}
		}
	}()
	clock.shift.Store(int64(25 * time.Hour))
	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	s.compactions.Wait()
	close(stop)
	writer.Wait()

	for _, b := range names {
		if !raced["KV_"+b] {
			t.Fatalf("%s: no purge was raced: the pass removed nothing", b)
		}
		if got := testutil.ToFloat64(s.cfg.Metrics.MarkersCompacted.WithLabelValues(b)); got != n {
			t.Errorf("%s: the pass removed %v markers, want %d", b, got, n)
		}
		kv := buckets[b]
		for i := range n {
			e, err := kv.Get(ctx, "gone-"+strconv.Itoa(i))
			if err != nil || string(e.Value()) != string(again(i)) {
				t.Fatalf("%s: gone-%d, written again during the compaction: %v, %v; want %s (the purge removed a write made after its marker)", b, i, e, err, again(i))
			}
		}
		for i := range written[b] {
			if _, err := kv.Get(ctx, "during-"+strconv.Itoa(i)); err != nil {
				t.Fatalf("%s: during-%d, written during the compaction: %v", b, i, err)
			}
		}
	}
}
