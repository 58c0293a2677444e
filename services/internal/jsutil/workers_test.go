package jsutil

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/services/internal/natstest"
)

// workStream makes a work-queue stream on work.> with a durable pull
// consumer "w" and returns a JetStream context.
func workStream(t testing.TB, ackWait time.Duration) jetstream.JetStream {
	t.Helper()
	srv := natstest.Start(t)
	ctx := t.Context()
	if _, err := srv.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "W", Subjects: []string{"work.>"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.JS.CreateOrUpdateConsumer(ctx, "W", jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxAckPending: 10_000}); err != nil {
		t.Fatal(err)
	}
	return srv.JS
}

func publish(t *testing.T, js jetstream.JetStream, subject string, n int) {
	t.Helper()
	for i := range n {
		if _, err := js.PublishAsync(subject, []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(10 * time.Second):
		t.Fatal("publish acks did not arrive")
	}
}

func lastToken(m jetstream.Msg) string {
	s := m.Subject()
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '.' {
			return s[i+1:]
		}
	}
	return s
}

// TestShardedWorkersKeepPerKeyOrder: every message of a key is handled by
// one worker in stream order, and all of them are handled.
func TestShardedWorkersKeepPerKeyOrder(t *testing.T) {
	js := workStream(t, 30*time.Second)
	const keys, per = 20, 50
	var mu sync.Mutex
	seen := map[string][]int{}
	total := 0
	all := make(chan struct{})
	cc, err := ConsumeWorkers(t.Context(), js, "W", "w", slog.Default(), Workers{N: 4, Key: lastToken}, func(m jetstream.Msg) {
		n, _ := strconv.Atoi(string(m.Data()))
		mu.Lock()
		seen[lastToken(m)] = append(seen[lastToken(m)], n)
		total++
		if total == keys*per {
			close(all)
		}
		mu.Unlock()
		_ = m.Ack()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	for i := range per {
		for k := range keys {
			if _, err := js.PublishAsync("work.k"+strconv.Itoa(k), []byte(strconv.Itoa(i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	select {
	case <-all:
	case <-time.After(20 * time.Second):
		t.Fatalf("handled %d of %d", total, keys*per)
	}
	mu.Lock()
	defer mu.Unlock()
	for k, got := range seen {
		for i, n := range got {
			if n != i {
				t.Fatalf("key %s: message %d handled at position %d (order %v)", k, n, i, got)
			}
		}
	}
}

// TestBatchBehindAFullShardIsNotRedelivered: one key's worker holds
// message 0 (the governor's untilSettled through an outage); the key's
// other messages arrive while its queue (one message here) is full. None
// that this client took may be redelivered to another replica while it
// holds them. Before, the fetch loop, blocked handing message 2 to the
// full queue, held message 3 in the batch where nothing marked it in
// progress: after AckWait the server gave it to the other replica, which
// applied it before this client applied 1 and 2. The durable's
// max_ack_pending (10,000) does not size an unpinned reader's queues
// (shardBuffer), so they keep Buffer's length and can fill.
func TestBatchBehindAFullShardIsNotRedelivered(t *testing.T) {
	js := workStream(t, time.Second)
	ctx := t.Context()
	cons, err := js.Consumer(ctx, "W", "w")
	if err != nil {
		t.Fatal(err)
	}
	holding, release := make(chan struct{}), make(chan struct{})
	var hold sync.Once // message 0 may come back once released
	cc, err := ConsumeWorkers(ctx, js, "W", "w", slog.Default(), Workers{N: 2, Buffer: 1, Key: lastToken, MaxWait: time.Minute}, func(m jetstream.Msg) {
		if string(m.Data()) == "0" {
			hold.Do(func() {
				close(holding)
				<-release
			})
		}
		_ = m.Ack()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	t.Cleanup(func() { close(release) })
	publish(t, js, "work.k", 1)
	<-holding
	for i := 1; i <= 3; i++ {
		if _, err := js.Publish(ctx, "work.k", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	// Until this client has no pull open, it is the only reader: what it
	// will hold, it has.
	natstest.Eventually(t, 10*time.Second, "no pull open", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumWaiting == 0
	})
	// Another replica reads the durable until message 0, which the handler
	// holds without marking it in progress, comes a second time: two
	// AckWaits have passed since this client took the others.
	var redelivered []string
	for again := 0; again < 2; {
		batch, err := cons.Fetch(4, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			if string(m.Data()) == "0" {
				again++
				continue // left unacked, to come again
			}
			if meta.NumDelivered > 1 {
				redelivered = append(redelivered, fmt.Sprintf("%s@%d", m.Data(), meta.NumDelivered))
			}
			_ = m.Ack()
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			t.Fatal(err)
		}
	}
	if len(redelivered) > 0 {
		t.Fatalf("redelivered to another reader while this one held them (message@delivery): %v", redelivered)
	}
}

// TestSaturatedWorkersKeepPulling is docs/benchmark-findings.md finding 8: with
// every worker blocked far longer than a pull's heartbeat, the consumer
// must resume delivering as soon as they free up, with no stall until a
// pull expires.
func TestSaturatedWorkersKeepPulling(t *testing.T) {
	js := workStream(t, 30*time.Second)
	const n, workers = 2000, 8
	gate := make(chan struct{})
	var mu sync.Mutex
	handled := 0
	blocked := make(chan struct{}, workers)
	all := make(chan struct{})
	cc, err := ConsumeWorkers(t.Context(), js, "W", "w", slog.Default(), Workers{N: workers, MaxWait: time.Second}, func(m jetstream.Msg) {
		select {
		case blocked <- struct{}{}:
			<-gate // the first `workers` messages hold every worker
		default:
		}
		_ = m.Ack()
		mu.Lock()
		handled++
		if handled == n {
			close(all)
		}
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	publish(t, js, "work.x", n)
	for range workers {
		<-blocked
	}
	// Hold the workers for several heartbeat periods, with the client's
	// buffer full and the server holding the rest.
	hold := time.NewTimer(3 * time.Second)
	<-hold.C
	start := time.Now()
	close(gate)
	select {
	case <-all:
	case <-time.After(15 * time.Second):
		mu.Lock()
		t.Fatalf("stalled: %d of %d handled 15s after the workers freed up", handled, n)
	}
	t.Logf("drained %d messages in %s after the workers freed up", n, time.Since(start))
}

// TestDrainFinishesHandlers: Drain lets the handlers in flight finish
// (Done closes after them), and messages never handed out stay in the
// stream for the next consumer.
func TestDrainFinishesHandlers(t *testing.T) {
	js := workStream(t, 2*time.Second)
	publish(t, js, "work.x", 50)
	inFlight := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	acked := 0
	cc, err := ConsumeWorkers(t.Context(), js, "W", "w", slog.Default(), Workers{N: 1}, func(m jetstream.Msg) {
		once.Do(func() { close(inFlight); <-release })
		if m.Ack() == nil {
			mu.Lock()
			acked++
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	<-inFlight
	cc.Drain()
	select {
	case <-cc.Done():
		t.Fatal("Done closed while a handler was still running")
	default:
	}
	close(release)
	select {
	case <-cc.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after the handler returned")
	}
	<-cc.Closed()
	mu.Lock()
	got := acked
	mu.Unlock()
	if got == 0 || got > 50 {
		t.Fatalf("acked %d during drain", got)
	}
	// Whatever was not handed out is still there for the next consumer.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cons, err := js.Consumer(ctx, "W", "w")
	if err != nil {
		t.Fatal(err)
	}
	rest := 0
	for rest < 50-got {
		batch, err := cons.Fetch(50, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		for m := range batch.Messages() {
			_ = m.Ack()
			k++
		}
		if k == 0 {
			break
		}
		rest += k
	}
	if got+rest != 50 {
		t.Fatalf("acked %d while draining + %d afterwards = %d, want 50", got, rest, got+rest)
	}
}

// TestPullsResumeSoonAfterConsumerReturns: while the consumer has no
// leader every pull fails at once ("no responders"), as in a failover.
// The retry wait is capped at pullRetryCap, so once the consumer is back
// the next pull follows within about a second however long it was gone;
// an uncapped backoff added up to 5 s to every failover (the compose e2e
// test saw an 11.8 s pause after killing the consumer's leader).
func TestPullsResumeSoonAfterConsumerReturns(t *testing.T) {
	js := workStream(t, 30*time.Second)
	ctx := t.Context()
	got := make(chan string, 1)
	failures := prometheus.NewCounter(prometheus.CounterOpts{Name: "pull_failures"})
	failed := func() float64 { return testutil.ToFloat64(failures) }
	cc, err := ConsumeWorkers(ctx, js, "W", "w", slog.Default(), Workers{N: 2, MaxWait: 2 * time.Second, PullFailures: failures}, func(m jetstream.Msg) {
		_ = m.Ack()
		got <- string(m.Data())
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	if err := js.DeleteConsumer(ctx, "W", "w"); err != nil {
		t.Fatal(err)
	}
	// Seven failures in a row: an uncapped doubling from 100 ms would wait
	// 6.4 s before the next pull; the capped policy waits at most 1 s.
	natstest.Eventually(t, 20*time.Second, "seven failed pulls", func() bool { return failed() >= 7 })
	if _, err := js.CreateOrUpdateConsumer(ctx, "W", jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	publish(t, js, "work.x", 1)
	select {
	case v := <-got:
		if v != "0" {
			t.Fatalf("handled %q, want the message published after the consumer returned", v)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("no message 3s after the consumer returned (%v failed pulls so far)", failed())
	}
}

// TestPullStreakBacksOffToTheCap: 100 ms, doubling, never above
// pullRetryCap, and a success starts the next streak from the minimum.
func TestPullStreakBacksOffToTheCap(t *testing.T) {
	var s pullStreak
	log := slog.New(slog.DiscardHandler)
	now := time.Now()
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second, time.Second}
	for i, w := range want {
		if got := s.failed(log, context.DeadlineExceeded, now); got != w {
			t.Fatalf("failure %d: wait %s, want %s", i+1, got, w)
		}
	}
	s.recovered(log)
	if got := s.failed(log, context.DeadlineExceeded, now); got != pullRetryFirst {
		t.Fatalf("after recovery: wait %s, want %s", got, pullRetryFirst)
	}
}

// waitingIn is how many messages the ring of key's shard holds: those in
// its queue and those of the pull in progress still waiting to be sent.
func waitingIn(cc *WorkerConsume, key string) int {
	q := &cc.waiting[maphash.String(cc.seed, key)%uint64(len(cc.shards))]
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// TestOneHeldKeyHoldsABoundedShare: one key's worker is held (the governor
// retrying a decision in place through an outage, or cut off from the KV
// leader) while the key keeps getting messages, as in a burst or a
// backlog. The reader stops pulling once the key's queue is full and its
// pull's messages for the shard wait behind it, marked in progress; it
// holds at most the queue, one pull and the message in hand, and leaves
// the rest of the durable to the other replicas. Before, an unpinned
// queue held max_ack_pending (10,000 here): the reader kept pulling 2×N
// and hoarded the held key's messages up to the durable's limit.
func TestOneHeldKeyHoldsABoundedShare(t *testing.T) {
	js := workStream(t, 30*time.Second)
	ctx := t.Context()
	const n, workers, heldEvery = 4000, 16, 20
	for i := range n {
		key := "k" + strconv.Itoa(i%(heldEvery-1))
		if i%heldEvery == 0 {
			key = "held"
		}
		if _, err := js.PublishAsync("work."+key, nil); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(10 * time.Second):
		t.Fatal("publish acks did not arrive")
	}
	release := make(chan struct{})
	cc, err := ConsumeWorkers(ctx, js, "W", "w", slog.Default(), Workers{N: workers, Key: lastToken, MaxWait: time.Minute}, func(m jetstream.Msg) {
		if lastToken(m) == "held" {
			<-release
		}
		_ = m.Ack()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	t.Cleanup(func() { close(release) })
	cons, err := js.Consumer(ctx, "W", "w")
	if err != nil {
		t.Fatal(err)
	}
	// Stuck for good: the held shard's ring holds more than its queue, so
	// the pull's last messages wait to be sent and no pull follows; every
	// other message it took is acked, and the one in hand is the only
	// unacked message outside the ring.
	var info *jetstream.ConsumerInfo
	natstest.Eventually(t, 20*time.Second, "the reader stuck behind the held key's full queue, holding only its shard's messages", func() bool {
		ring := waitingIn(cc, "held")
		info, err = cons.Info(ctx)
		return err == nil && ring > cc.w.Buffer && info.NumWaiting == 0 && info.NumAckPending == ring+1
	})
	if limit := cc.w.Buffer + 2*workers + 1; info.NumAckPending > limit {
		t.Fatalf("the reader holds %d messages of the durable, want at most %d (queue %d, one pull of %d, one in hand)", info.NumAckPending, limit, cc.w.Buffer, 2*workers)
	}
	if info.NumPending == 0 {
		t.Fatal("the reader took every message: none left for the other replicas")
	}
	t.Logf("stuck holding %d messages; %d left for the other replicas", info.NumAckPending, info.NumPending)
}

// TestAStuckShardLeavesTheDurableToTheOtherReaders: one reader's worker is
// stuck on a key that keeps getting messages; another replica (a plain
// Fetch here) must go on receiving the durable's messages. Before, an
// unpinned shard queue held max_ack_pending (200 here): the stuck reader
// kept pulling and hoarded the key's messages, kept alive, until the
// server, at max_ack_pending, delivered to no reader at all.
func TestAStuckShardLeavesTheDurableToTheOtherReaders(t *testing.T) {
	js := workStream(t, 30*time.Second)
	ctx := t.Context()
	const maxAckPending = 200
	cons, err := js.CreateOrUpdateConsumer(ctx, "W", jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxAckPending: maxAckPending})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	cc, err := ConsumeWorkers(ctx, js, "W", "w", slog.Default(), Workers{N: 4, Key: lastToken, MaxWait: time.Minute}, func(m jetstream.Msg) {
		if lastToken(m) == "stuck" {
			<-release
		}
		_ = m.Ack()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	t.Cleanup(func() { close(release) })
	publish(t, js, "work.stuck", 1000)
	// The reader has taken what it will: it is stuck behind the key's full
	// queue, or it holds the durable's max_ack_pending.
	var info *jetstream.ConsumerInfo
	natstest.Eventually(t, 20*time.Second, "the reader stuck", func() bool {
		info, err = cons.Info(ctx)
		return err == nil && (waitingIn(cc, "stuck") > cc.w.Buffer || info.NumAckPending >= maxAckPending)
	})
	publish(t, js, "work.other", 10)
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for m := range batch.Messages() {
		got++
		_ = m.Ack()
	}
	if got == 0 {
		info, _ = cons.Info(ctx)
		t.Fatalf("the other reader received nothing in 5s while the stuck one holds %d of the durable (max_ack_pending %d), %d waiting", info.NumAckPending, maxAckPending, info.NumPending)
	}
}

// TestWaitQueueGrowsInOrder: a ring that grows while it wraps keeps its
// messages in the order they were pushed, and stops growing at max.
func TestWaitQueueGrowsInOrder(t *testing.T) {
	q := waitQueue{ring: make([]waiting, 3), max: 10}
	at := func(i int) time.Time { return time.Unix(int64(i), 0) }
	next, first := 0, 0
	push := func(k int) {
		for range k {
			q.push(nil, at(next))
			next++
		}
	}
	push(2)
	q.pop()
	first++
	push(12) // wraps the first ring, then grows to 6 and to 10, then is full
	if len(q.ring) != 10 || q.n != 10 {
		t.Fatalf("ring of %d holding %d, want 10 holding 10", len(q.ring), q.n)
	}
	for k := range q.n {
		if got := q.ring[(q.head+k)%len(q.ring)].at; !got.Equal(at(first + k)) {
			t.Fatalf("position %d holds message %d, want %d", k, got.Unix(), first+k)
		}
	}
}
