package executor

import (
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
	js      jetstream.JetStream
	linger  time.Duration // how long the first event of a batch waits for company
	max     int           // batch size bound
	ackWait time.Duration // bound on one batch's acks (retries included)

	in     chan *outItem
	slots  chan struct{} // bounds events waiting in the outbox
	closed chan struct{}
}

// outboxLinger is how long the first run event of a batch waits for more.
// Besides batching, it moves the work each outcome causes downstream (the
// governor's decision, the breaker, the KV watchers) out of the burst of
// calls it came from. In one 20 s load-test run each (docs/benchmarks.md),
// the p99 lateness of 100- and 1,000-call bursts was 1-3 ms over the
// no-scheduler floor with 20 ms, and 8-11 ms over with 2 ms. An outcome is
// stored at most this much later.
const outboxLinger = 20 * time.Millisecond

type outItem struct {
	msg    *nats.Msg
	settle func(error)
}

func newOutbox(js jetstream.JetStream, capacity int) *outbox {
	o := &outbox{
		js: js, linger: outboxLinger, max: 512, ackWait: 10 * time.Second,
		in: make(chan *outItem, capacity), slots: make(chan struct{}, capacity), closed: make(chan struct{}),
	}
	go o.run()
	return o
}

// publish queues msg; settle is called with the publish result, on the
// outbox goroutine (keep it short). It blocks while the outbox is full.
func (o *outbox) publish(msg *nats.Msg, settle func(error)) {
	o.slots <- struct{}{}
	o.in <- &outItem{msg: msg, settle: settle}
}

// close publishes and settles everything queued, then returns. No publish
// may follow.
func (o *outbox) close() {
	close(o.in)
	<-o.closed
}

func (o *outbox) run() {
	defer close(o.closed)
	batch := make([]*outItem, 0, o.max)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for {
		first, ok := <-o.in
		if !ok {
			return
		}
		batch = append(batch[:0], first)
		linger.Reset(o.linger)
	collect:
		for len(batch) < o.max {
			select {
			case it, ok := <-o.in:
				if !ok {
					break collect
				}
				batch = append(batch, it)
			case <-linger.C:
				break collect
			}
		}
		linger.Stop()
		o.flush(batch)
	}
}

// flush publishes a batch and settles every item.
func (o *outbox) flush(batch []*outItem) {
	futures := make([]jetstream.PubAckFuture, len(batch))
	for i, it := range batch {
		// The retries ride out a stream leader election ("no responders"),
		// as the synchronous publish did.
		f, err := o.js.PublishMsgAsync(it.msg, jetstream.WithStallWait(o.ackWait),
			jetstream.WithRetryAttempts(20), jetstream.WithRetryWait(250*time.Millisecond))
		if err != nil {
			o.done(it, err)
			continue
		}
		futures[i] = f
	}
	timeout := time.NewTimer(o.ackWait)
	defer timeout.Stop()
	expired := false
	for i, f := range futures {
		if f == nil {
			continue
		}
		if !expired {
			select {
			case <-f.Ok():
				o.done(batch[i], nil)
				continue
			case err := <-f.Err():
				o.done(batch[i], err)
				continue
			case <-timeout.C:
				expired = true
			}
		}
		// Past the deadline: take what has arrived, time out the rest.
		select {
		case <-f.Ok():
			o.done(batch[i], nil)
		case err := <-f.Err():
			o.done(batch[i], err)
		default:
			o.done(batch[i], errors.New("no publish ack within "+o.ackWait.String()))
		}
	}
}

// done settles it and frees its place.
func (o *outbox) done(it *outItem, err error) {
	<-o.slots
	it.settle(err)
}
