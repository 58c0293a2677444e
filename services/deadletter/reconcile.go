package deadletter

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/streams"
)

// A dispatch that exhausts the executor consumer's MaxDeliver stays in
// DISPATCH, holding its task's one slot, until the MAX_DELIVERIES advisory
// has it dead-lettered and deleted. Advisories are plain NATS publishes:
// one lost on its way to ADVISORIES (no stream leader at that moment)
// left the dispatch there for good. JetStream never delivers it again,
// the timer's next dispatch of the task is refused (10077), and the
// sweeper, seeing a dispatch pending, never re-dispatches: the task
// stopped without a trace.
//
// JetStream tells no one which message exhausted its deliveries (nats-
// server v2.15.2: the message stays in the stream, its redelivery count
// stays, the consumer's info shows nothing per message). It does tell
// which delivered messages the consumer no longer tracks: those at or
// below its ack floor, and every delivered one when it has none pending.
// On a work queue, a settled message is deleted as it is settled, so a
// message still stored there was neither acked nor terminated: its
// deliveries ran out. An ack's delete can trail the floor's move by a
// moment, so a message is dead-lettered only when two passes in a row
// find it.
//
// The server may keep the floor below an exhausted message while other
// deliveries are pending (it moves past at the latest when none is), so on
// an executor that always holds some dispatch the reconciliation waits for
// such a moment.

// maxReconcile bounds the messages one pass reads.
const maxReconcile = 1000

// reconcileEvery runs a reconcile pass now and every ReconcileInterval
// until ctx ends.
func (s *Service) reconcileEvery(ctx context.Context) {
	t := time.NewTicker(s.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		if err := s.Reconcile(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("exhausted-dispatch check failed; retrying next interval", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Reconcile runs one pass: it dead-letters and deletes the DISPATCH
// messages that the executor consumer no longer tracks, found by this pass
// and the one before.
func (s *Service) Reconcile(ctx context.Context) error {
	s.recMu.Lock()
	defer s.recMu.Unlock()
	cons, err := s.dispatch.Consumer(ctx, streams.ConsumerExecutor)
	if err != nil {
		return err
	}
	info := cons.CachedInfo()
	bound := info.AckFloor.Stream
	if info.NumAckPending == 0 {
		bound = info.Delivered.Stream
	}
	found := map[uint64]bool{}
	for seq := uint64(1); seq <= bound && len(found) < maxReconcile; {
		raw, err := s.dispatch.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(events.DispatchSubject("*")))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return err
		}
		if raw.Sequence > bound {
			break
		}
		found[raw.Sequence] = true
		seq = raw.Sequence + 1
	}
	next := map[uint64]bool{}
	for seq := range found {
		if !s.suspects[seq] {
			next[seq] = true // seen once: confirm at the next pass
			continue
		}
		task, wrote, err := s.deadLetterBySeq(ctx, seq)
		if err != nil {
			next[seq] = true
			s.cfg.Logger.Warn("exhausted dispatch not dead-lettered; retrying next interval", "seq", seq, "err", err)
			continue
		}
		if !wrote {
			// Gone meanwhile (the advisory, another replica), already
			// dead-lettered, deleted without an entry (unreadable or
			// too large: counted in flyball_rejected_events_total), or
			// its run succeeded (its attempt record says so).
			continue
		}
		s.cfg.Metrics.DeadLetterReconciled.Inc()
		s.cfg.Logger.Warn("dispatch exhausted its deliveries without an advisory; dead-lettered", "task", task, "seq", seq)
	}
	s.suspects = next
	return nil
}
