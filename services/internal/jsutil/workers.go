package jsutil

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Workers configures ConsumeWorkers.
type Workers struct {
	// N is the number of messages handled at once. Defaults to 1.
	N int
	// Key, when set, shards messages: messages with the same key are
	// handled by the same worker, in delivery order (a task's outcomes are
	// applied in order). Without it any free worker takes the next message.
	Key func(jetstream.Msg) string
	// Buffer is each shard's queue length, unless the durable pins one
	// client and its max_ack_pending sizes them (shardBuffer). Defaults
	// to 64.
	Buffer int
	// MaxWait is how long one pull waits for messages. Defaults to 5s.
	MaxWait time.Duration
	// PullFailures, when set, counts failed pulls.
	PullFailures prometheus.Counter
	// PullStalls, when set, counts the pulls a stall of the process
	// outlasted (stalled).
	PullStalls prometheus.Counter
}

// pinHeader names the pin a message was delivered under (see pinned).
const pinHeader = "Nats-Pin-Id"

// ConsumeWorkers consumes the durable with w.N concurrent handlers, pulling
// with Fetch: each pull asks the server for at most as many messages as
// there is room for (in sharded mode 2×N, and the next pull waits until
// the last one's are all in their queues), so a message is never buffered
// where it cannot be handled. Both alternatives fail when every worker is busy for a while:
// a Consume callback that blocks can stall the pull until it expires
// (docs/benchmark-findings.md finding 8), and the Messages iterator delivers into a
// fixed channel whose overflow the client drops as a slow consumer, which
// leaves the message to be redelivered only after AckWait.
//
// The result drains like Consume's ConsumeContext: Drain (or Stop) ends
// the pull in progress and hands what arrived to the workers; Closed() is
// closed once no more messages will reach a worker, and Done() once every
// handler has returned as well. A message the server sends in the very
// instant the pull is cancelled is redelivered after AckWait.
//
// A durable with the pinned_client priority policy (streams/defs) is read
// by one client at a time: every pull names the durable's first priority
// group, the server pins the first puller and holds the other pulls until
// that client stops pulling for the durable's priority_timeout, and a
// drained reader hands the pin on at once when it still holds it. That
// keeps the stream's order for a durable shared by replicas.
func ConsumeWorkers(ctx context.Context, js jetstream.JetStream, stream, durable string, log *slog.Logger, w Workers, h jetstream.MessageHandler) (*WorkerConsume, error) {
	w.N = max(w.N, 1)
	if w.Buffer <= 0 {
		w.Buffer = 64
	}
	if w.MaxWait <= 0 {
		w.MaxWait = 5 * time.Second
	}
	cons, err := js.Consumer(ctx, stream, durable)
	if err != nil {
		return nil, fmt.Errorf("consumer %s/%s: %w (run flyball provision, or flyball serve with --ensure-streams)", stream, durable, err)
	}
	pullCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c := &WorkerConsume{
		cons: cons, w: w, log: log.With("stream", stream, "durable", durable),
		ctx: pullCtx, cancel: cancel,
		closed: make(chan struct{}), done: make(chan struct{}),
	}
	if cfg := cons.CachedInfo().Config; cfg.PriorityPolicy == jetstream.PriorityPolicyPinned && len(cfg.PriorityGroups) > 0 {
		c.pin = &pinned{js: js, stream: stream, durable: durable, group: cfg.PriorityGroups[0]}
	}
	c.ackWait = cons.CachedInfo().Config.AckWait
	if c.ackWait <= 0 {
		c.ackWait = 30 * time.Second
	}
	if w.Key != nil {
		if c.pin != nil {
			w.Buffer = shardBuffer(w.Buffer, cons.CachedInfo().Config.MaxAckPending)
			c.w.Buffer = w.Buffer
		}
		c.shards = make([]chan jetstream.Msg, w.N)
		c.waiting = make([]waitQueue, w.N)
		c.seed = maphash.MakeSeed()
		c.pending = make([]pendingMsg, 0, 2*w.N)
		c.behind = make([]bool, w.N)
		for i := range c.shards {
			q := make(chan jetstream.Msg, w.Buffer)
			c.shards[i] = q
			wq := &c.waiting[i]
			// The queue, a pull's messages waiting to be sent, and the
			// one the worker has taken and not yet popped.
			wq.max = w.Buffer + 2*w.N + 2
			wq.ring = make([]waiting, min(wq.max, ringStart))
			c.wg.Go(func() {
				for m := range q {
					wq.pop()
					h(m)
				}
			})
		}
		go c.keepWaitingAlive()
	} else {
		// Long-lived workers rather than a goroutine per message: a handler
		// making an HTTP call grows its stack, and a fresh goroutine would
		// grow it again for every message.
		c.slots = make(chan struct{}, w.N)
		c.work = make(chan jetstream.Msg)
		for range w.N {
			c.slots <- struct{}{}
			c.wg.Go(func() {
				for m := range c.work {
					h(m)
					c.slots <- struct{}{}
				}
			})
		}
	}
	go c.run()
	return c, nil
}

// maxShardBuffer caps a pinned reader's shard queues (shardBuffer).
const maxShardBuffer = 1 << 16

// shardBuffer is a shard queue's length for a pinned_client durable. A
// sharded reader stops pulling while a pull's messages wait for a full
// queue (pull), and a pinned reader that stops pulling loses its pin
// after the durable's priority_timeout, though it is alive: another
// replica is pinned and handles the newer messages of the tasks whose
// older ones the first still holds, out of their order. So each queue
// holds as many messages as the durable lets one client have unacked
// (max_ack_pending): all of them could be one task's. The server then
// stops delivering, but the reader's pulls go on, each renewing the pin;
// the pinned reader is the only one, so it holds nothing another could
// take. A durable with no max_ack_pending, or one over maxShardBuffer,
// keeps the bounded queue.
//
// An unpinned durable (the governor's RUNS and DEADLETTER) keeps Buffer:
// its replicas share it, and a reader whose queue never fills would go on
// pulling behind a stuck worker and hoard the stuck key's messages, kept
// alive, up to max_ack_pending, when the server delivers to no replica.
// With Buffer a stuck worker stops only its own reader, which holds at
// most its queues and one pull.
//
// Each queue is a channel of that length, allocated up front (16 B a
// message); the ring mirroring it grows as it fills (waitQueue).
func shardBuffer(buffer, maxAckPending int) int {
	if maxAckPending <= 0 || maxAckPending > maxShardBuffer {
		return buffer
	}
	return max(buffer, maxAckPending)
}

// WorkerConsume is a running ConsumeWorkers. It implements
// jetstream.ConsumeContext, so lifecycle.Base drains it like any consumer.
type WorkerConsume struct {
	cons   jetstream.Consumer
	w      Workers
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc

	shards []chan jetstream.Msg // sharded mode: one queue per worker
	seed   maphash.Seed
	// pending holds a pull's messages that found their shard's queue full,
	// or a message of their shard ahead of them here (sharded mode);
	// behind marks those shards. Only the fetch loop uses them.
	pending []pendingMsg
	behind  []bool
	// waiting mirrors each shard's queue (sharded mode), for
	// keepWaitingAlive.
	waiting []waitQueue
	ackWait time.Duration // the durable's
	slots   chan struct{} // unsharded mode: a token per idle worker
	work    chan jetstream.Msg
	wg      sync.WaitGroup

	closed chan struct{}
	done   chan struct{}

	pin *pinned // nil unless the durable pins one client
}

// pendingMsg is a message of the pull in progress waiting for its shard's
// queue.
type pendingMsg struct {
	m     jetstream.Msg
	shard int
}

// pinned is the state of a pinned_client durable's reader.
type pinned struct {
	js                     jetstream.JetStream
	stream, durable, group string
	mu                     sync.Mutex
	id                     string // the pin of the last message delivered here
}

func (p *pinned) seen(m jetstream.Msg) {
	id := m.Headers().Get(pinHeader)
	if id == "" {
		return
	}
	p.mu.Lock()
	p.id = id
	p.mu.Unlock()
}

// release unpins the durable if this client still holds its pin, so
// another replica takes over now rather than after priority_timeout. The
// check and the unpin are two requests: a pin that moved in between is
// taken back, and its holder's next pull is pinned afresh.
func (p *pinned) release(ctx context.Context, log *slog.Logger) {
	p.mu.Lock()
	id := p.id
	p.mu.Unlock()
	if id == "" {
		return
	}
	err := func() error {
		str, err := p.js.Stream(ctx, p.stream)
		if err != nil {
			return err
		}
		cons, err := str.Consumer(ctx, p.durable)
		if err != nil {
			return err
		}
		for _, g := range cons.CachedInfo().PriorityGroups {
			if g.Group == p.group && g.PinnedClientID == id {
				return str.UnpinConsumer(ctx, p.durable, p.group)
			}
		}
		return nil
	}()
	switch {
	case err == nil:
	case errors.Is(err, nats.ErrConnectionClosed):
		log.Debug("pin not released", "err", err)
	default:
		log.Warn("pin not released; another reader takes over after the durable's priority timeout", "err", err)
	}
}

// Stop ends pulling; what already arrived is still handled.
func (c *WorkerConsume) Stop() { c.cancel() }

// Drain ends pulling; what already arrived is still handled.
func (c *WorkerConsume) Drain() { c.cancel() }

// Closed is closed once no more messages will reach a worker.
func (c *WorkerConsume) Closed() <-chan struct{} { return c.closed }

// Done is closed once, after Closed, every handler has returned.
func (c *WorkerConsume) Done() <-chan struct{} { return c.done }

// Pull retry policy. While a consumer has no leader (its node died and
// the raft group has not elected another, 4 to 9 s in nats-server) every
// pull fails at once with "no responders". Retrying quickly costs one tiny
// request per retry; a retry that has backed off to many seconds adds that
// much to every failover, so the wait is capped at pullRetryCap.
const (
	pullRetryFirst = 100 * time.Millisecond
	pullRetryCap   = time.Second
	// pullWarnEvery repeats the warning while pulls keep failing.
	pullWarnEvery = 30 * time.Second
)

func (c *WorkerConsume) run() {
	defer func() {
		for _, q := range c.shards {
			close(q)
		}
		if c.work != nil {
			close(c.work)
		}
		close(c.closed)
		c.wg.Wait()
		if c.pin != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			c.pin.release(ctx, c.log)
			cancel()
		}
		close(c.done)
	}()
	var streak pullStreak
	for c.ctx.Err() == nil {
		n := c.room()
		if n == 0 {
			return // cancelled while waiting for a free worker
		}
		err := c.pull(n)
		if err == nil || c.ctx.Err() != nil {
			streak.recovered(c.log)
			continue
		}
		if c.w.PullFailures != nil {
			c.w.PullFailures.Inc()
		}
		wait := streak.failed(c.log, err, time.Now())
		t := time.NewTimer(wait)
		select {
		case <-c.ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// pullStreak tracks consecutive failed pulls: the retry wait, and one
// warning when the streak starts (and every pullWarnEvery while it lasts)
// rather than one per retry.
type pullStreak struct {
	failures int
	since    time.Time
	warned   time.Time
	wait     time.Duration
}

// failed records a failed pull and returns how long to wait before the
// next one: pullRetryFirst, doubling up to pullRetryCap.
func (s *pullStreak) failed(log *slog.Logger, err error, now time.Time) time.Duration {
	if s.failures == 0 {
		s.since, s.wait = now, pullRetryFirst
	} else {
		s.wait = min(2*s.wait, pullRetryCap)
	}
	s.failures++
	switch {
	case errors.Is(err, nats.ErrConnectionClosed):
		log.Debug("pull", "err", err)
	case s.failures == 1 || now.Sub(s.warned) >= pullWarnEvery:
		s.warned = now
		log.Warn("pull failed; retrying", "err", err, "failures", s.failures, "since", s.since, "retry_every", pullRetryCap)
	}
	return s.wait
}

// recovered ends a streak of failures, logging how long it lasted.
func (s *pullStreak) recovered(log *slog.Logger) {
	if s.failures == 0 {
		return
	}
	log.Info("pulling again", "failed_pulls", s.failures, "after", time.Since(s.since).Round(time.Millisecond))
	*s = pullStreak{}
}

// room blocks until a worker is free and returns how many messages the
// next pull may ask for: the idle workers (their slots are taken now), or
// in sharded mode twice the worker count. A sharded pull follows only once
// the previous one's messages are all in their queues (pull), so a stuck
// worker stops this reader's pulls, and the other replicas take the rest
// of the durable.
func (c *WorkerConsume) room() int {
	if c.slots == nil {
		return 2 * c.w.N
	}
	select {
	case <-c.slots:
	case <-c.ctx.Done():
		return 0
	}
	n := 1
	for n < c.w.N {
		select {
		case <-c.slots:
			n++
			continue
		default:
		}
		break
	}
	return n
}

// pull fetches up to n messages and hands each to a worker as it arrives.
func (c *WorkerConsume) pull(n int) error {
	ctx, cancel := context.WithTimeout(c.ctx, c.w.MaxWait)
	defer cancel()
	deadline, _ := ctx.Deadline()
	opts := []jetstream.FetchOpt{jetstream.FetchContext(ctx)}
	if hb := c.w.MaxWait / 4; hb >= 500*time.Millisecond {
		// A pull sent to a consumer leader that then dies is lost; the
		// missing heartbeats end it after 2×hb instead of at MaxWait.
		opts = append(opts, jetstream.FetchHeartbeat(hb))
	}
	if c.pin != nil {
		opts = append(opts, jetstream.FetchPriorityGroup(c.pin.group))
	}
	batch, err := c.cons.Fetch(n, opts...)
	got, stalled := 0, false
	if err == nil {
		for m := range batch.Messages() {
			got++
			c.dispatch(m)
		}
		// Before sendPending, which waits for the workers.
		stalled = got < n && c.stalled(deadline)
		c.sendPending()
		err = batch.Error()
	}
	for range n - got { // give back the slots no message used
		if c.slots != nil {
			c.slots <- struct{}{}
		}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, nats.ErrTimeout):
		return nil // an idle pull expiring, or Drain
	case stalled && errors.Is(err, jetstream.ErrNoHeartbeat):
		return nil // the stall, reported, not the consumer's leader
	case errors.Is(err, jetstream.ErrPinIDMismatch):
		// The pin moved to another client (this one stopped pulling for
		// the priority timeout, or a new consumer leader); nats.go has
		// forgotten the old pin, and the next pull waits its turn.
		c.log.Info("pin moved to another reader; waiting for it")
		return nil
	}
	return err
}

// stallMargin is how long past its deadline a pull may come back before
// stalled takes it for a stall of the process. A pull ends at the
// server's expiry, a tenth of MaxWait (at most 1 s) before the deadline,
// or, when that answer is lost, at the deadline itself: a goroutine wakes
// milliseconds late, and a CPU quota's throttling holds it a period
// (100 ms). Half a second more means the process did not run.
const stallMargin = 500 * time.Millisecond

// msgPullStalled is stalled's warning.
const msgPullStalled = "pull came back late: this process stalled (stopped, paused or starved of CPU); messages delivered to it meanwhile may come back only after the durable's AckWait"

// stalled reports whether a pull that did not fill its batch (one that
// did ended on its last message, and lost none) came back more than
// stallMargin past its deadline, and if so warns and counts it: the
// process stalled (SIGSTOP, docker pause, a paused VM, CPU starvation)
// for at least that long. When it wakes, the messages the server
// delivered meanwhile wait in its socket and the pull's timers (the
// deadline, the missing heartbeats, nats.go's own) have run out; nats.go's
// fetch selects between them at random, and when a timer wins it
// unsubscribes and drops the messages without a nak (a stall of a few
// heartbeats can also overflow the pull's subscription, which drops the
// rest as a slow consumer). JetStream redelivers them after AckWait. No
// option of nats.go's Fetch avoids it, as every client timer a stall
// outlasts races the messages, and the pull's error does not tell a
// dropped batch from an idle pull's end: so the stall is reported, once,
// as the pull in progress is the only one it outlasts.
func (c *WorkerConsume) stalled(deadline time.Time) bool {
	late := time.Since(deadline)
	if late <= stallMargin || c.ctx.Err() != nil {
		return false
	}
	if c.w.PullStalls != nil {
		c.w.PullStalls.Inc()
	}
	c.log.Warn(msgPullStalled, "stalled", late.Round(time.Millisecond), "ack_wait", c.ackWait)
	return true
}

func (c *WorkerConsume) dispatch(m jetstream.Msg) {
	if c.pin != nil {
		c.pin.seen(m)
	}
	if c.shards != nil {
		c.dispatchShard(m)
		return
	}
	c.work <- m // a worker is free: pull reserved its slot
}

// dispatchShard hands m to its shard's queue without blocking while the
// batch is still arriving. It registers m in the shard's ring at once, so
// keepWaitingAlive marks it in progress however long it waits: a message
// left unregistered in nats.go's batch while the loop waited for a full
// queue was redelivered to another replica after AckWait, which handled
// it before this one handled the key's messages ahead of it. A message
// that finds the queue full, or its shard's earlier ones pending, waits
// in pending, in order, until the batch ends (sendPending).
func (c *WorkerConsume) dispatchShard(m jetstream.Msg) {
	i := int(maphash.String(c.seed, c.w.Key(m)) % uint64(len(c.shards)))
	c.waiting[i].push(m, time.Now())
	if !c.behind[i] {
		select {
		case c.shards[i] <- m:
			return
		default:
			c.behind[i] = true
		}
	}
	c.pending = append(c.pending, pendingMsg{m: m, shard: i})
}

// sendPending sends the pull's pending messages in order, waiting for
// their queues: a full queue holds up this reader's next pull until its
// worker takes them. Drain waits for them too, like for any message that
// arrived.
func (c *WorkerConsume) sendPending() {
	for _, p := range c.pending {
		c.shards[p.shard] <- p.m
		c.behind[p.shard] = false
	}
	clear(c.pending)
	c.pending = c.pending[:0]
}

// A message waiting in a shard's queue is this client's: nothing else
// settles it. While the shard's worker is slow (the governor tries a
// message again in place through a NATS or KV outage, for as long as it
// lasts), the server would redeliver the waiting ones after AckWait, and
// the copies would queue behind the messages published since, out of
// their order. keepWaitingAlive marks each message that has waited half
// an AckWait in progress (checking every quarter AckWait, so at most
// three quarters pass between two marks), and again every half AckWait
// while it waits. A message waits a few milliseconds normally, and gets
// none.
func (c *WorkerConsume) keepWaitingAlive() {
	t := time.NewTicker(c.ackWait / 4)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case now := <-t.C:
			for i := range c.waiting {
				c.waiting[i].keepAlive(now, c.ackWait/2, c.log)
			}
		}
	}
}

// waiting is a message in a shard's queue and when it was queued or last
// marked in progress.
type waiting struct {
	m  jetstream.Msg
	at time.Time
}

// waitQueue mirrors a shard's channel: dispatch pushes each message as it
// arrives, before it sends it, and the worker pops it just after it
// receives it, so the ring holds, in order, the messages sent or waiting
// to be sent and not yet handled (at most the channel's length, a pull's
// 2×N and one, max). The ring starts at ringStart and doubles when full,
// up to max: a queue sized by max_ack_pending (shardBuffer) takes 40 B a
// message it holds rather than its whole length up front, and a
// message's path allocates only when its queue holds more than it ever
// did.
type waitQueue struct {
	mu      sync.Mutex
	ring    []waiting
	head, n int
	max     int
}

// ringStart is a waitQueue's first length: the default Buffer and two.
const ringStart = 64 + 2

func (q *waitQueue) push(m jetstream.Msg, now time.Time) {
	q.mu.Lock()
	if q.n == len(q.ring) && len(q.ring) < q.max {
		q.grow()
	}
	if q.n < len(q.ring) { // always: the ring grows to what it can hold
		q.ring[(q.head+q.n)%len(q.ring)] = waiting{m: m, at: now}
		q.n++
	}
	q.mu.Unlock()
}

// grow doubles the ring, up to max, keeping its order.
func (q *waitQueue) grow() {
	ring := make([]waiting, min(2*len(q.ring), q.max))
	for k := range q.n {
		ring[k] = q.ring[(q.head+k)%len(q.ring)]
	}
	q.ring, q.head = ring, 0
}

func (q *waitQueue) pop() {
	q.mu.Lock()
	if q.n > 0 {
		q.ring[q.head] = waiting{}
		q.head = (q.head + 1) % len(q.ring)
		q.n--
	}
	q.mu.Unlock()
}

// keepAlive marks in progress each message that has waited at least
// every. It holds the lock while it does, so a message is not marked
// once its worker has it (the worker pops it first).
func (q *waitQueue) keepAlive(now time.Time, every time.Duration, log *slog.Logger) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for k := range q.n {
		w := &q.ring[(q.head+k)%len(q.ring)]
		if now.Sub(w.at) < every {
			continue
		}
		w.at = now
		if err := w.m.InProgress(); err != nil {
			log.Debug("in-progress not sent for a waiting message", "subject", w.m.Subject(), "err", err)
		}
	}
}
