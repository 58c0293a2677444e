package jsutil

import (
	"fmt"
	"log/slog"
	"slices"
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

// TestAPinnedReaderWithAFullShardKeepsThePin: a governor replica holds
// the pin of TASKS/governor while one task's messages wait behind a
// worker that tries one again in place (a KV outage). Once that shard's
// queue was full, handing it the next message blocked the pull loop, so
// the replica stopped pulling; after the durable's priority timeout the
// server pinned another replica, which applied the task's newer commands
// before the older ones the first still held. A pinned reader's shard
// queues now hold as many messages as the durable lets it have unacked,
// so it keeps pulling, keeps the pin, and keeps the task's order.
func TestAPinnedReaderWithAFullShardKeepsThePin(t *testing.T) {
	srv := natstest.Start(t)
	js, ctx := srv.JS, t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "P", Subjects: []string{"pin.>"}}); err != nil {
		t.Fatal(err)
	}
	const ttl = time.Second
	if _, err := js.CreateOrUpdateConsumer(ctx, "P", jetstream.ConsumerConfig{
		Durable: "p", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxAckPending: 20,
		PriorityPolicy: jetstream.PriorityPolicyPinned, PriorityGroups: []string{"g"}, PinnedTTL: ttl,
	}); err != nil {
		t.Fatal(err)
	}
	send := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if _, err := js.Publish(ctx, "pin.task", []byte(strconv.Itoa(i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	stuck := make(chan struct{})
	a := &pinReader{name: "pinned"}
	reader := func(r *pinReader, hold chan struct{}) {
		cc, err := ConsumeWorkers(ctx, js, "P", "p", slog.Default(),
			Workers{N: 1, Key: lastToken, Buffer: 1, MaxWait: ttl / 4},
			func(m jetstream.Msg) {
				if hold != nil {
					<-hold // the worker tries its first message again in place
				}
				n, _ := strconv.Atoi(string(m.Data()))
				r.mu.Lock()
				r.got = append(r.got, n)
				r.mu.Unlock()
				_ = m.Ack()
			})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cc.Stop)
		r.cc = cc
	}
	reader(a, stuck)
	t.Cleanup(func() {
		select {
		case <-stuck:
		default:
			close(stuck)
		}
	})
	send(0, 4) // one in the worker, one queued, two more than the queue holds
	cons, err := js.Consumer(ctx, "P", "p")
	if err != nil {
		t.Fatal(err)
	}
	var pin string
	natstest.Eventually(t, 10*time.Second, "the first reader holds the pin and has every message", func() bool {
		info, err := cons.Info(ctx)
		if err != nil || len(info.PriorityGroups) == 0 {
			return false
		}
		pin = info.PriorityGroups[0].PinnedClientID
		return pin != "" && info.NumAckPending == 4
	})
	b := &pinReader{name: "standby"}
	reader(b, nil)
	// The pin outlives several priority timeouts while the first reader's
	// shard is stuck: it goes on pulling.
	natstest.Eventually(t, 20*time.Second, "the pin held for three priority timeouts", func() bool {
		info, err := cons.Info(ctx)
		if err != nil || len(info.PriorityGroups) == 0 {
			return false
		}
		g := info.PriorityGroups[0]
		if g.PinnedClientID != pin {
			t.Fatalf("the pin moved from the reader whose shard is full (alive, still pulling) to another: %q -> %q; the standby handled %v", pin, g.PinnedClientID, b.handled())
		}
		return time.Since(g.PinnedTS) > 3*ttl
	})
	send(4, 6)
	natstest.Eventually(t, 10*time.Second, "the pinned reader takes the newer messages too", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 6
	})
	close(stuck)
	natstest.Eventually(t, 10*time.Second, "every message handled", func() bool { return len(a.handled())+len(b.handled()) == 6 })
	if got := a.handled(); !slices.Equal(got, []int{0, 1, 2, 3, 4, 5}) || len(b.handled()) != 0 {
		t.Fatalf("the pinned reader handled %v and the standby %v; want the pinned one all six in order", got, b.handled())
	}
}
