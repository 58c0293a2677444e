package jsutil

import (
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/services/internal/natstest"
)

// pinReader is one replica reading a pinned durable: what it handled, in
// order, and its failed pulls.
type pinReader struct {
	name     string
	cc       *WorkerConsume
	failures prometheus.Counter
	mu       sync.Mutex
	got      []int
}

func (r *pinReader) handled() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.got...)
}

// TestPinnedDurableIsReadByOneReaderAtATime: two readers share a durable
// with the pinned_client policy (as two governor replicas share
// TASKS/governor). Every message goes to one of them, in stream order;
// the other's pulls wait without counting as failures; and when the
// pinned reader drains, it hands the pin on, so the other takes over at
// once rather than after the durable's priority timeout (a minute here).
func TestPinnedDurableIsReadByOneReaderAtATime(t *testing.T) {
	srv := natstest.Start(t)
	js, ctx := srv.JS, t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "P", Subjects: []string{"pin.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, "P", jetstream.ConsumerConfig{
		Durable: "p", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
		PriorityPolicy: jetstream.PriorityPolicyPinned, PriorityGroups: []string{"g"}, PinnedTTL: time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		total int
		want  int
		all   = make(chan struct{})
	)
	readers := make([]*pinReader, 2)
	for i := range readers {
		r := &pinReader{name: fmt.Sprint("reader-", i), failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "f"})}
		cc, err := ConsumeWorkers(ctx, js, "P", "p", slog.Default(),
			Workers{N: 4, Key: lastToken, MaxWait: 2 * time.Second, PullFailures: r.failures},
			func(m jetstream.Msg) {
				n, _ := strconv.Atoi(string(m.Data()))
				r.mu.Lock()
				r.got = append(r.got, n)
				r.mu.Unlock()
				_ = m.Ack()
				mu.Lock()
				total++
				if total == want {
					close(all)
				}
				mu.Unlock()
			})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cc.Stop)
		r.cc = cc
		readers[i] = r
	}
	await := func(n int, what string) {
		t.Helper()
		select {
		case <-all:
		case <-time.After(20 * time.Second):
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("%s: handled %d of %d", what, total, n)
		}
	}

	mu.Lock()
	want = 300
	mu.Unlock()
	publish(t, js, "pin.task", 300)
	await(300, "both readers up")
	var pinnedR, other *pinReader
	for i, r := range readers {
		switch got := r.handled(); len(got) {
		case 300:
			pinnedR, other = r, readers[1-i]
			for k, n := range got {
				if n != k {
					t.Fatalf("%s handled message %d in place %d: out of stream order", r.name, n, k)
				}
			}
		case 0:
		default:
			t.Fatalf("%s handled %d of 300 messages: the durable was not read by one reader at a time", r.name, len(got))
		}
	}

	mu.Lock()
	all, want = make(chan struct{}), 400
	mu.Unlock()
	pinnedR.cc.Drain()
	select {
	case <-pinnedR.cc.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the pinned reader did not drain")
	}
	start := time.Now()
	publish(t, js, "pin.task", 100)
	await(400, "after the pinned reader drained")
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("the other reader took over after %s: the pin was not handed on", took)
	}
	if got := other.handled(); len(got) != 100 {
		t.Fatalf("%s handled %d messages after the pinned reader drained, want 100", other.name, len(got))
	}
	for _, r := range readers {
		if f := testutil.ToFloat64(r.failures); f != 0 {
			t.Errorf("%s counted %v failed pulls; waiting for the pin is not a failure", r.name, f)
		}
	}
}
