package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/metrics"
)

// outbox publishes run events in batches with PublishMsgAsync and settles
// each dispatch (ack, nak or term) once its event is stored. A worker hands
// over the event and is free for its next call at once, and a burst of
// outcomes costs one flush per batch instead of a round trip per run.
//
// The order of the at-least-once chain is unchanged: a dispatch is acked
// only after its run event is stored, so a crash in between redelivers the
// dispatch (a second call, with the same Idempotency-Key), never loses the
// outcome.
type outbox struct {
	js     jetstream.JetStream
	log    *slog.Logger
	max    int           // events per publish round (outboxMaxBatch)
	round  time.Duration // wait for one round's acks (outboxRound)
	budget time.Duration // bound on a batch's rounds (outboxBudget)

	m *metrics.Set // OutboxRepublished, OutboxAbandoned, OutboxEvents

	// busy reports whether calls are still in flight; idle is signalled
	// (wake) when the last one ends, or when a publish waits for room. A
	// batch goes out at once when the executor is idle, and lingers only
	// while its burst is still running.
	busy func() bool
	idle chan struct{}

	in       chan *outItem
	room     *room         // bounds the events, and their bytes, waiting in the outbox
	stopping chan struct{} // closed by close: no more waiting for NATS to come back
	closed   chan struct{}
}

// outboxLinger is the shortest time a run event waits for company while
// other calls are still in flight; once none is, the batch goes out at
// once. Each event brings its own hold (settleHold: from outboxLinger up
// to outboxMaxHold, an eighth of the shortest interval its task can run
// at), and a batch goes out when its earliest hold ends.
//
// Besides batching, the linger moves the work each outcome causes
// downstream (the governor's decision, the breaker, the KV watchers) out
// of the burst of calls it came from, which on a small machine competes
// with the calls of that same burst for the CPU: a 1,000-call burst on 2
// cores takes about 100 ms to start, a 10,000-call one over a second
// (docs/benchmark-findings.md, findings 13, 14 and 16). An outcome is stored, and
// its dispatch acked, at most its hold later (plus the publish); a lone
// call's outcome is not held at all.
const (
	outboxLinger  = 100 * time.Millisecond
	outboxMaxHold = time.Second
)

// outboxMaxBatch bounds the events of one publish round; a batch that
// lingered past it goes out in rounds of this many.
const outboxMaxBatch = 512

// outboxPerCall is the outbox's event capacity per call slot
// (Config.Concurrency): enough for a burst of thousands of calls to finish
// while its outcomes linger, at a few KB per event.
const outboxPerCall = 64

// outboxMaxBytes bounds the bytes of the run events the outbox holds (one
// event is always let in, however large). With the event count bound
// (capacity) it keeps a burst of large response bodies from piling up in
// memory: a full outbox blocks the calls that finish, and the batch then
// goes out at once rather than after its hold.
const outboxMaxBytes = 32 << 20

type outItem struct {
	msg    *nats.Msg
	hold   time.Duration
	settle func(error)
	// cause is the last retryable error a publish of msg failed with,
	// which the give-up reports. An ack timeout replaces only another: the
	// round the budget cuts short ends with one whatever the cause, and
	// "no publish ack" in the give-up hid the "no response from stream"
	// of a deleted RUNS that the rounds before had seen.
	cause error
}

// failed records err, a retryable publish error, as its cause unless it
// is an ack timeout and a more telling error came before.
func (it *outItem) failed(err error) {
	if it.cause == nil || !errors.Is(err, jsutil.ErrAckTimeout) {
		it.cause = err
	}
}

// size is what the item counts against outboxMaxBytes.
func (it *outItem) size() int { return len(it.msg.Data) }

// newOutbox starts an outbox holding up to capacity events. busy reports
// whether calls are in flight (nil: never), and the caller calls wake when
// the last one ends.
func newOutbox(js jetstream.JetStream, log *slog.Logger, capacity int, m *metrics.Set, busy func() bool) *outbox {
	if busy == nil {
		busy = func() bool { return false }
	}
	o := &outbox{
		js: js, log: log, m: m, max: outboxMaxBatch, round: outboxRound, budget: outboxBudget,
		busy: busy, idle: make(chan struct{}, 1),
		in: make(chan *outItem, capacity), stopping: make(chan struct{}), closed: make(chan struct{}),
	}
	o.room = newRoom(capacity, outboxMaxBytes, o.wake, m.OutboxEvents)
	go o.run()
	return o
}

// publish queues msg, to be published within hold while calls are in
// flight (at once when none is); settle is called with the publish
// result, on the outbox goroutine (keep it short). It blocks while the
// outbox is full.
func (o *outbox) publish(msg *nats.Msg, hold time.Duration, settle func(error)) {
	it := &outItem{msg: msg, hold: hold, settle: settle}
	o.room.take(it.size())
	o.in <- it
}

// wake tells the outbox that the last call in flight ended: a lingering
// batch goes out now. It never blocks.
func (o *outbox) wake() {
	select {
	case o.idle <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// close publishes and settles everything queued, then returns. No publish
// may follow. While NATS is unreachable, what cannot be published settles
// with its error at once (flush), so a stop does not wait for NATS.
func (o *outbox) close() {
	close(o.stopping)
	close(o.in)
	<-o.closed
}

func (o *outbox) run() {
	defer close(o.closed)
	var buf []*outItem
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for {
		first, ok := <-o.in
		if !ok {
			return
		}
		batch := buf[:0]
		batch = append(batch, first)
		due := time.Now().Add(first.hold)
		linger.Reset(first.hold)
	collect:
		for o.busy() && !o.room.full() {
			select {
			case it, ok := <-o.in:
				if !ok {
					break collect
				}
				batch = append(batch, it)
				if d := time.Now().Add(it.hold); d.Before(due) {
					due = d
					linger.Reset(it.hold)
				}
			case <-o.idle: // the loop condition checks again
			case <-linger.C:
				break collect
			}
		}
		linger.Stop()
		batch = o.collectQueued(batch)
		buf = batch
		for len(batch) > 0 {
			n := min(len(batch), o.max)
			o.flush(batch[:n:n])
			batch = batch[n:]
		}
		clear(buf) // let the settled events go
	}
}

// collectQueued adds the events already queued, without waiting: an idle
// executor's last events go out with the batch.
func (o *outbox) collectQueued(batch []*outItem) []*outItem {
	for {
		select {
		case it, ok := <-o.in:
			if !ok {
				return batch
			}
			batch = append(batch, it)
		default:
			return batch
		}
	}
}

// Outbox publish rounds. A round publishes what is not yet stored and
// waits up to outboxRound for the acks; what is left (an ack lost with a
// RUNS leader that died, "no responders" while the new one is elected) is
// published again, with the same Nats-Msg-Id so a stored event is not
// stored twice, until outboxBudget has passed since the batch's first
// round. A round that met the connection down (jsutil.Reconnecting: with
// no reconnect buffer, as flyball serve connects, a publish fails at once
// while nats.go reconnects) is followed by the next only once the
// connection is back (awaitConnected), within the same budget: a NATS
// restart or the loss of the node the executor was connected to costs
// the event a wait, not its dispatch a nak and its target a second call.
// Only once the budget is spent does the outbox give up (errUnconfirmed): the executor
// keeps the dispatch and hands the same event back to it later (republish).
// The budget outlasts a raft election (4-9 s in nats-server); the round is
// short because every task whose outcome waits here is held back from its
// next run (the dispatch stays pending), and a healthy server acks a
// 512-event batch in well under a second.
const (
	outboxRound  = 2 * time.Second
	outboxBudget = 15 * time.Second
)

// flush publishes a batch and settles every item: stored, failed for good
// (an error no retry fixes), or still unstored when the budget is spent.
func (o *outbox) flush(batch []*outItem) {
	deadline := time.Now().Add(o.budget)
	sent := make([]sentItem, 0, len(batch))
	// nats.go retries "no responders" a few times within the round; later
	// rounds retry it again. The options are built once per batch (each is
	// an allocation).
	opts := []jetstream.PublishOpt{
		jetstream.WithStallWait(o.round),
		jetstream.WithRetryAttempts(4),
		jetstream.WithRetryWait(250 * time.Millisecond),
	}
	for round := 1; ; round++ {
		sent = sent[:0]
		for _, it := range batch {
			f, err := o.js.PublishMsgAsync(it.msg, opts...)
			sent = append(sent, sentItem{it, f, err})
		}
		end := time.NewTimer(max(min(o.round, time.Until(deadline)), 0))
		acks := jsutil.NewAckDeadline(end.C)
		var lastErr error
		down := false     // a publish failed as the connection was down
		batch = batch[:0] // what is left for the next round
		for _, p := range sent {
			err := p.err
			if err == nil {
				_, err = acks.Await(context.Background(), p.f)
			}
			switch {
			case err == nil:
				o.done(p.it, nil)
			case retryable(err):
				lastErr = err
				p.it.failed(err)
				batch = append(batch, p.it)
				down = down || jsutil.Reconnecting(err)
			default:
				o.done(p.it, err)
			}
		}
		end.Stop()
		if len(batch) == 0 {
			return
		}
		if time.Now().After(deadline) {
			// What is left may be stored all the same: an ack lost in
			// every round (a leader that died after storing the event,
			// then an election longer than the budget) leaves no trace
			// here. The executor keeps the dispatch either way and
			// publishes this event again (republish), under the same
			// Nats-Msg-Id: within RUNS's duplicate window it is dropped
			// as a duplicate, so the governor sees one outcome. "not stored"
			// misled an operator into counting a lost run. The error
			// ends with the event's own last publish error (cause), not
			// the last round's, which the budget cut short.
			o.m.OutboxAbandoned.Add(float64(len(batch)))
			for _, it := range batch {
				o.done(it, fmt.Errorf("%w within %s (%d rounds; it may have been stored, its ack lost); last publish error: %w", errUnconfirmed, o.budget, round, it.cause))
			}
			return
		}
		if down && o.isStopping() {
			// The executor stops while NATS is unreachable: it does not
			// wait for NATS (the dispatches are nakked, or redelivered
			// once NATS is back, as after a crash).
			for _, it := range batch {
				o.done(it, it.cause)
			}
			return
		}
		o.m.OutboxRepublished.Add(float64(len(batch)))
		o.log.Warn("run events not stored yet; publishing them again", "events", len(batch), "round", round, "err", lastErr)
		if down {
			o.awaitConnected(deadline)
		}
	}
}

// awaitConnected waits until the connection is back from a reconnect, the
// deadline passes or the outbox is closed. Publishing again at once would
// fail the same way, with no ack to wait on: the rounds would spin
// through the budget.
func (o *outbox) awaitConnected(deadline time.Time) {
	nc := o.js.Conn()
	if nc == nil {
		return
	}
	back := nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
	defer nc.RemoveStatusListener(back)
	if st := nc.Status(); st != nats.RECONNECTING && st != nats.DISCONNECTED && st != nats.CONNECTING {
		return // back already (or closed for good)
	}
	t := time.NewTimer(max(time.Until(deadline), 0))
	defer t.Stop()
	select {
	case <-back:
	case <-t.C:
	case <-o.stopping:
	}
}

// isStopping reports whether close was called.
func (o *outbox) isStopping() bool {
	select {
	case <-o.stopping:
		return true
	default:
		return false
	}
}

// errUnconfirmed is the error an event settles with when the outbox gave
// up on it: its budget ran out with no ack, while the event may be stored.
var errUnconfirmed = errors.New("run event not confirmed stored")

// sentItem is an event published in the current round.
type sentItem struct {
	it  *outItem
	f   jetstream.PubAckFuture
	err error // PublishMsgAsync's own error; f is nil then
}

// retryable reports whether publishing again (same Nats-Msg-Id) may store
// an event that failed with err: its ack is late or lost, the stream has
// no leader, too many acks are pending, or the connection is down
// (jsutil.Reconnecting: nats.go fails the acks pending when it starts to
// reconnect with ErrDisconnected, and, with no reconnect buffer, a
// publish made while it reconnects with ErrReconnectBufExceeded; the next
// round waits for the connection).
func retryable(err error) bool {
	return errors.Is(err, jsutil.ErrAckTimeout) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, jetstream.ErrAsyncPublishTimeout) || errors.Is(err, jetstream.ErrTooManyStalledMsgs) ||
		jsutil.Reconnecting(err) ||
		// 10158: the same event is being stored right now (an earlier
		// round's publish); the next round gets its duplicate ack.
		jsutil.IsDuplicateInProcess(err)
}

// done settles it and frees its place.
func (o *outbox) done(it *outItem, err error) {
	o.room.give(it.size())
	it.settle(err)
}

// room bounds what the outbox holds: at most maxN events and maxBytes
// bytes, though one event is always let in.
type room struct {
	mu       sync.Mutex
	freed    sync.Cond
	n, bytes int
	waiting  int // publishes blocked in take
	maxN     int
	maxBytes int
	blocked  func()           // called when a take starts to wait (it must not block)
	held     prometheus.Gauge // n, as flyball_outbox_events
}

func newRoom(maxN, maxBytes int, blocked func(), held prometheus.Gauge) *room {
	r := &room{maxN: maxN, maxBytes: maxBytes, blocked: blocked, held: held}
	r.freed.L = &r.mu
	return r
}

// take waits until an event of size bytes fits, and counts it in.
func (r *room) take(size int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.n > 0 && (r.n >= r.maxN || r.bytes+size > r.maxBytes) {
		r.waiting++
		r.blocked()
		r.freed.Wait()
		r.waiting--
	}
	r.n++
	r.bytes += size
	r.held.Set(float64(r.n))
}

// give counts out an event taken with size bytes.
func (r *room) give(size int) {
	r.mu.Lock()
	r.n--
	r.bytes -= size
	r.held.Set(float64(r.n))
	r.mu.Unlock()
	r.freed.Broadcast()
}

// full reports whether no more events can come in until some go out: the
// count bound is reached or a publish is waiting for room.
func (r *room) full() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n >= r.maxN || r.waiting > 0
}
