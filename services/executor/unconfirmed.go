package executor

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
)

// unconfirmed holds the run events the outbox gave up on (errUnconfirmed:
// every publish's ack lost, the event may well be stored), by the DISPATCH
// sequence of their dispatch, so that its redelivery to this executor
// publishes the same event again and settles from it (replay) rather than
// calling the target a second time: the call's outcome is known, only its
// publication is not. Another executor, or this one once the entry is
// gone, calls again, as before (at least once).
//
// An entry lives unconfirmedTTL, well inside RUNS's 2-minute duplicate
// window, so a republish of a stored event is always dropped; the
// redelivery comes a second after the give-up. The entries are bounded in
// number and bytes, the oldest dropped first: a RUNS outage makes the
// outbox give up on whole batches.
type unconfirmed struct {
	mu    sync.Mutex
	runs  map[uint64]*unconfirmedRun
	bytes int
}

const (
	unconfirmedTTL      = time.Minute
	unconfirmedMax      = 4096
	unconfirmedMaxBytes = outboxMaxBytes
)

// unconfirmedRun is a given-up run event and what settled its dispatch
// once stored (settleAfter).
type unconfirmedRun struct {
	dispatchID string
	// called is the attempt whose call the event reports, 0 for one
	// that reports no call (a skip, a give-up): its settle records
	// nothing past what the record held.
	called  int
	msg     *nats.Msg
	hold    time.Duration
	settled func(jetstream.Msg)
	expires time.Time
}

// put remembers r for the dispatch at DISPATCH sequence seq.
func (u *unconfirmed) put(seq uint64, r *unconfirmedRun) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.runs == nil {
		u.runs = make(map[uint64]*unconfirmedRun)
	}
	u.drop(seq)
	size, now := len(r.msg.Data), time.Now()
	for len(u.runs) > 0 && (len(u.runs) >= unconfirmedMax || u.bytes+size > unconfirmedMaxBytes) {
		// Full, which takes a give-up of thousands of events: the scan
		// drops what expired, then the oldest if that was not enough.
		var oldest uint64
		var first time.Time
		for s, e := range u.runs {
			switch {
			case now.After(e.expires):
				u.drop(s)
			case first.IsZero() || e.expires.Before(first):
				oldest, first = s, e.expires
			}
		}
		if !first.IsZero() && (len(u.runs) >= unconfirmedMax || u.bytes+size > unconfirmedMaxBytes) {
			u.drop(oldest)
		}
	}
	u.runs[seq] = r
	u.bytes += size
}

// take removes and returns the event remembered for the dispatch at
// DISPATCH sequence seq, if it is still fresh and of that dispatch.
func (u *unconfirmed) take(seq uint64, dispatchID string) *unconfirmedRun {
	u.mu.Lock()
	defer u.mu.Unlock()
	r := u.runs[seq]
	if r == nil {
		return nil
	}
	u.drop(seq)
	if r.dispatchID != dispatchID || time.Now().After(r.expires) {
		return nil
	}
	return r
}

// drop forgets the entry of seq, if any. The caller holds mu.
func (u *unconfirmed) drop(seq uint64) {
	if r, ok := u.runs[seq]; ok {
		u.bytes -= len(r.msg.Data)
		delete(u.runs, seq)
	}
}

// remember keeps the event the outbox gave up on for m's redelivery
// (replay). Not on m's last delivery: none follows.
func (s *Service) remember(m jetstream.Msg, dispatchID string, called int, msg *nats.Msg, hold time.Duration, settled func(jetstream.Msg)) {
	md, err := m.Metadata()
	if err != nil || (s.maxDeliver > 0 && int(md.NumDelivered) >= s.maxDeliver) {
		return
	}
	s.unconfirmed.put(md.Sequence.Stream, &unconfirmedRun{
		dispatchID: dispatchID, called: called, msg: msg, hold: hold, settled: settled, expires: time.Now().Add(unconfirmedTTL),
	})
}

// replay publishes again the run event this executor gave up on for a
// redelivered dispatch, and settles the dispatch from it as settleAfter
// would have: the same event ID, so RUNS stores it at most once, and the
// same settle (an ack, the retry's nak with its backoff, a term, each
// after its attempt record). The breaker's probe claim is not taken
// again: no call is made. It reports whether it did. Not on the last
// delivery: a failure whose retry the first delivery planned would be
// nakked with no redelivery to follow, where a call is final
// (lastDelivery).
//
// Not either once the attempt record shows that a delivery to another
// executor went on past the event's attempt (counted it, or a later
// one, or ended the dispatch) since this one gave up: the event's
// settle writes its own attempt's record, and would set the count back
// (the attempts after it made again, past maxAttempts, their events
// dropped by RUNS as duplicates). That redelivery goes on from the
// record instead, as any other.
func (s *Service) replay(ctx context.Context, m jetstream.Msg, md *jetstream.MsgMetadata, d *events.Dispatch, arrived time.Time) bool {
	return s.replayTry(ctx, m, md, d, arrived, 0)
}

// replayTry is replay after fails infrastructure failures in a row: a
// failed read of the attempt record keeps the dispatch for another try
// (retryInfra).
func (s *Service) replayTry(ctx context.Context, m jetstream.Msg, md *jetstream.MsgMetadata, d *events.Dispatch, arrived time.Time, fails int) bool {
	if s.maxDeliver > 0 && int(md.NumDelivered) >= s.maxDeliver {
		return false
	}
	r := s.unconfirmed.take(md.Sequence.Stream, d.DispatchID)
	if r == nil {
		return false
	}
	if r.called > 0 {
		prior, found, err := s.readAttempt(ctx, d)
		if err != nil {
			s.unconfirmed.put(md.Sequence.Stream, r) // for the next try
			s.retryInfra(ctx, m, md, d, arrived, fails, true, "attempt record not read before a replay", err)
			return true
		}
		if found && (prior.Outcome != "" || prior.Attempts >= r.called) {
			s.log.Warn("dispatch redelivered after its run event was not confirmed stored, but another delivery went on since; not publishing the event again",
				"dispatch", d.DispatchID, "delivery", md.NumDelivered, "event_attempt", r.called, "recorded_attempts", prior.Attempts, "recorded_outcome", prior.Outcome)
			return false
		}
	}
	s.log.Warn("dispatch redelivered after its run event was not confirmed stored; publishing the event again instead of calling the target",
		"dispatch", d.DispatchID, "delivery", md.NumDelivered)
	s.waitBegin(m, arrived) // until its settle, through the outbox
	s.publishThenSettle(m, d.DispatchID, r.called, r.msg, r.hold, r.settled)
	return true
}
