package executor

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// unconfirmedRun is a run event on its way to RUNS and what settles its
// dispatch once it is stored (settleAfter). When the outbox gives up on
// it (errUnconfirmed: every publish's ack lost, or RUNS without a leader
// or gone, while the event may well be stored), the dispatch is kept
// here, alive, and the same event is published again in place
// (republish), after a pause that grows as for any infrastructure failure
// (retryInfra), until it is stored: the call's outcome is known, only its
// publication is not. It was nakked for a second, one delivery each, and
// only the same executor's redelivery published it again: a RUNS outage
// longer than MaxDeliver give-ups (about 13 minutes) used up every
// delivery, the last one called the target again, and the dispatch, even
// of a success, was dead-lettered as max-deliveries.
type unconfirmedRun struct {
	// called is the attempt whose call the event reports, 0 for one
	// that reports no call (a skip, a give-up): its settle records
	// nothing past what the record held.
	called  int
	msg     *nats.Msg
	hold    time.Duration
	settled func(jetstream.Msg)
	// counted: its bytes are counted in eventBytes (keepsEvent), from the
	// outbox's first give-up until the dispatch is settled (releaseEvent).
	counted bool
}

// unconfirmedFirst is what retryInfra reads as the arrival of a
// dispatch whose run event the outbox gave up on: its next InProgress is
// due at once (keep's waitBegin), as the last may have been sent up to
// three quarters of an AckWait ago.
func (s *Service) unconfirmedFirst() time.Time { return time.Now().Add(-s.cfg.AckWait / 2) }

// republish publishes again the run event of h, a dispatch kept after the
// outbox gave up on that event (h.event), and settles the dispatch from it
// as settleAfter would have: the same event ID, so RUNS stores it at most
// once within its duplicate window, and the same settle (an ack, the
// retry's nak with its backoff, a term, each after its attempt record).
// The breaker's probe claim is not taken again: no call is made. It
// reports whether it did.
//
// Not once the attempt record shows that a delivery to another executor
// (after a keep-alive that did not get through) went on past the event's
// attempt (counted it, or a later one, or ended the dispatch): the
// event's settle writes its own attempt's record, and would set the count
// back (the attempts after it made again, past maxAttempts, their events
// dropped by RUNS as duplicates). The dispatch goes on from the record
// instead, as any other.
func (s *Service) republish(ctx context.Context, h *held) bool {
	r := h.event
	if r.called > 0 {
		prior, found, err := s.readAttempt(ctx, h.d)
		if err != nil {
			s.retryInfra(ctx, h.m, h.md, h.d, h.arrived, h.retry, r, "attempt record not read before a run event is published again", err)
			return true
		}
		if found && (prior.Outcome != "" || prior.Attempts >= r.called) {
			s.log.Warn("run event not confirmed stored, but another delivery of its dispatch went on since; not publishing the event again",
				"dispatch", h.d.DispatchID, "delivery", h.md.NumDelivered, "event_attempt", r.called, "recorded_attempts", prior.Attempts, "recorded_outcome", prior.Outcome)
			// Read as the redelivery it now is, so that the run reads the
			// record (attemptNumber): a first delivery's is attempt 1,
			// and called the target again over their count.
			redelivered := *h.md
			redelivered.NumDelivered = max(redelivered.NumDelivered, 2)
			h.md = &redelivered
			s.releaseEvent(r)
			h.event = nil
			return false
		}
	}
	s.waitBegin(h.m, h.arrived) // until its settle, through the outbox
	s.publishThenSettle(ctx, h.m, h.d, *r, h.retry)
	return true
}

// keepsEvent reports whether a dispatch may be kept to publish its run
// event of n bytes again, and counts them if so: the events kept stay
// within eventBytesMax (outboxMaxBytes, as the outbox's own), since a RUNS
// outage makes the outbox give up on every event in flight, up to
// MaxAckPending of them and each up to max_payload. An event stays
// counted until its dispatch is settled (releaseEvent), so the ones kept
// first are never pushed out by later give-ups. Past the bound, the
// dispatch is nakked: one delivery used, and its redelivery calls the
// target again.
func (s *Service) keepsEvent(n int) bool {
	for {
		cur := s.eventBytes.Load()
		if cur+int64(n) > s.eventBytesMax {
			s.settles.warns.Log(time.Now(), slog.LevelWarn, "run event not confirmed stored, and the run events kept to publish again fill their bound; nakking the dispatch (its redelivery calls the target again)",
				"bound_bytes", s.eventBytesMax)
			return false
		}
		if s.eventBytes.CompareAndSwap(cur, cur+int64(n)) {
			return true
		}
	}
}

// releaseEvent stops counting r's bytes, if they are counted (keepsEvent):
// its dispatch is settled, or handed back, or goes on without it.
func (s *Service) releaseEvent(r *unconfirmedRun) {
	s.uncount(r.counted, r.msg)
	r.counted = false
}

// uncount stops counting msg's bytes if counted (releaseEvent; the
// closure of publishThenSettle calls it on its copy of the event, as
// releaseEvent(&r) there would move that copy to the heap on every run).
func (s *Service) uncount(counted bool, msg *nats.Msg) {
	if counted {
		s.eventBytes.Add(-int64(len(msg.Data)))
	}
}

// handBackHeld hands h back at shutdown with a nak delayed by delay. One
// kept to publish its run event again made its call, or skipped it: it is
// not marked handed back (handBackNak), as a mark says no call was made.
func (s *Service) handBackHeld(h *held, delay time.Duration) {
	if h.event != nil {
		s.releaseEvent(h.event)
		s.nak(h.m, delay, nil)
		return
	}
	s.handBackNak(h.m, h.d, delay)
}
