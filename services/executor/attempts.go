package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/jsutil"
)

// attemptRecord is the value stored in KV flyball-attempts: how many calls
// of one dispatch have been made, and, once the dispatch is done, its
// outcome. JetStream's NumDelivered cannot serve: breaker deferrals and
// crash redeliveries increment it too.
type attemptRecord struct {
	Attempts int `json:"attempts"`
	// Outcome is set once the dispatch is done: succeeded, or failed for
	// good. A redelivery that finds it (its ack or term was lost) is acked
	// or terminated again, without calling the target.
	Outcome events.Outcome `json:"outcome,omitempty"`
	// HandedBack marks a dispatch an executor handed back at shutdown
	// without calling its target in that delivery (nor sending a request
	// it may have processed: mayHaveCalled), while no attempt was
	// counted (markHandedBack). It is written only with Attempts 0 and no
	// Outcome, and removed before any call (unmarkHandedBack), so it tells
	// a redelivery that no earlier delivery started a call: a slot missed
	// meanwhile under catchUp "none" is skipped (missedUnderNone) rather
	// than run late.
	HandedBack bool      `json:"handedBack,omitempty"`
	UpdatedAt  time.Time `json:"updatedAt"`
	// rev is the entry's revision, when read (attemptNumber).
	rev uint64
}

// handedBackOnly reports whether r is only a hand-back mark: no attempt
// counted, no outcome.
func (r attemptRecord) handedBackOnly() bool {
	return r.HandedBack && r.Attempts == 0 && r.Outcome == ""
}

// attemptKey is the flyball-attempts key of a dispatch (events.AttemptKey).
func attemptKey(d *events.Dispatch) string { return events.AttemptKey(d.DispatchID) }

// attemptNumber is the number of the call about to be made, and the
// record it follows (with a hand-back mark, attempt 1: execute removes
// the mark before the call). The first delivery of a dispatch fired on time is
// attempt 1 and costs no KV read; a redelivery, and the first delivery of
// a dispatch fired or stored LateRedispatch or more after its slot
// (lateBy), read the record
// written after the last call whose run event was stored. Such a late
// dispatch can be the slot published again with the same dispatch ID (a
// zombie the sweeper re-dispatched after its dispatch was lost while a
// retry was pending, or a timer that started while the governor lagged):
// read as attempt 1, it called the target again as attempt 1, overwrote
// the count and got maxAttempts more calls on top of those made. A delivery whose predecessor crashed
// mid-call, or whose run event could not be stored, repeats that attempt
// number: the crash is not the target's failure, and a call without an
// event is one nobody can see. A record with an Outcome means the
// dispatch is done: the caller settles it again (settleAgain) and makes
// no call.
func (s *Service) attemptNumber(ctx context.Context, md *jetstream.MsgMetadata, d *events.Dispatch) (int, attemptRecord, error) {
	if md.NumDelivered <= 1 && lateBy(md, d) < LateRedispatch {
		return 1, attemptRecord{}, nil
	}
	r, found, err := s.readAttempt(ctx, d)
	if err != nil {
		return 0, attemptRecord{}, err
	}
	if !found {
		return 1, attemptRecord{}, nil
	}
	return r.Attempts + 1, r, nil
}

// readAttempt reads d's record in flyball-attempts, with its revision.
// A missing record, or one that does not decode or names an unknown
// outcome (a corrupt record restarts the count rather than blocking the
// run), is not found; err is a read that failed.
func (s *Service) readAttempt(ctx context.Context, d *events.Dispatch) (r attemptRecord, found bool, err error) {
	e, err := s.attempts.Get(ctx, attemptKey(d))
	if jsutil.IsKeyMissing(err) {
		return attemptRecord{}, false, nil
	}
	if err != nil {
		return attemptRecord{}, false, err
	}
	if err := json.Unmarshal(e.Value(), &r); err != nil || (r.Outcome != "" && r.Outcome != events.OutcomeSucceeded && r.Outcome != events.OutcomeFailed) {
		return attemptRecord{}, false, nil //nolint:nilerr // corrupt: not found, as above
	}
	r.rev = e.Revision()
	return r, true, nil
}

// The record of an attempt is written only once its run event is stored,
// and before its dispatch is settled (recordThenSettle).
//
// After the event, because that order is safe. Written before (as it
// once was), a run event the outbox could not store, or a crash between
// the two, left an attempt counted with no event on RUNS: the redelivery
// became the next attempt, the failed call was invisible, and maxAttempts
// came a call early. In this order, a crash between the event and the
// record only makes the redelivery repeat the attempt number (with the
// same Idempotency-Key), as a crash mid-call does: calls are at least
// once, and the count never runs ahead of the events.
//
// Before the settle, so that a lost ack or term (a consumer-leader
// election longer than the AckWait) finds the record on the redelivery. A
// done dispatch's record carries its Outcome and is never purged: it
// expires with the bucket's 72h TTL (a purge would leave a marker as
// long). The redelivery is settled again instead of starting over at
// attempt 1 and calling the target up to maxAttempts more times for a run
// that already failed for good, or that already succeeded after retries.
// A run that succeeds at attempt 1, the common case, writes nothing: a
// redelivery after its lost ack calls the target again (at least once).

// attemptRecordTimeout bounds the write of an attempt record.
const attemptRecordTimeout = 5 * time.Second

// recordThenSettle stores r as d's attempt record, then settles m (kind
// and body: an ack, nak or term). The outbox calls it once the run event
// of attempt r.Attempts is stored; it works in the background, as the
// outbox must not wait on a round trip. If the record cannot be written,
// m is settled anyway and a warning logged: a redelivery then repeats the
// attempt (for a done dispatch: calls the target again) rather than the
// dispatch waiting on the bookkeeping.
func (s *Service) recordThenSettle(m jetstream.Msg, d *events.Dispatch, r attemptRecord, kind string, body []byte) {
	s.records.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), attemptRecordTimeout)
		defer cancel()
		r.UpdatedAt = time.Now().UTC()
		b, err := json.Marshal(r)
		if err == nil {
			_, err = s.attempts.Put(ctx, attemptKey(d), b)
		}
		if err != nil {
			s.log.Warn("attempt record not written; a redelivery would repeat this attempt", "dispatch", d.DispatchID, "attempt", r.Attempts, "outcome", r.Outcome, "err", err)
		}
		s.settle(m, kind, body)
	})
}

// settleAgain settles a redelivered dispatch that is already done (r has
// its Outcome): its ack or term was lost and JetStream redelivered it
// after AckWait. Its run event is on RUNS, so the target is not called:
// the dispatch is acked or terminated again.
func (s *Service) settleAgain(m jetstream.Msg, d *events.Dispatch, r attemptRecord) {
	s.log.Warn("dispatch redelivered after its outcome was stored (its ack or term was lost); settling it again without calling the target",
		"dispatch", d.DispatchID, "outcome", r.Outcome, "attempts", r.Attempts)
	if r.Outcome == events.OutcomeSucceeded {
		s.ack(m)
		return
	}
	s.settle(m, "term", termBody(fmt.Sprintf("final failure after %d attempt(s), already reported; terminated again", r.Attempts)))
}

// A dispatch an executor hands back at shutdown comes back as a
// redelivery (a nak counts as a delivery). missedUnderNone cannot tell a
// redelivery from one whose earlier delivery crashed mid-call (the
// attempt record is written only after a call's run event is stored), so
// it used to skip a missed slot only on its first delivery: after a full
// restart, a catchUp "none" slot whose dispatch a stopping executor held
// ran minutes late although its next slot had passed too. So a hand-back
// of a dispatch on its first delivery, which made no call, first leaves a
// mark in
// flyball-attempts (markHandedBack), and the delivery that goes on to
// call the target removes it first (unmarkHandedBack, on the revision it
// read; if that fails the dispatch is nakked uncalled): a mark is never
// left over a call, even one that crashes. A redelivery that finds the
// mark, and no attempt or outcome, may be skipped as missed. A mark that
// cannot be written costs only that: the slot runs late, at least once,
// as before. The first delivery of a dispatch fired on time reads no
// record (attemptNumber) and can meet no mark: a mark implies an earlier
// delivery of the dispatch, and a second dispatch of the slot is refused
// by DISPATCH's duplicate window or fired LateRedispatch late, and read.

// handBackNak hands m, whose delivery made no call of d's target that
// has an outcome, back at shutdown with a nak delayed by delay. For a
// task under catchUp "none" (or one the view does not know), d is first
// marked handed back, unless the delivery sent a request (mayHaveCalled);
// both happen in the background, as the callers may hold heldMu, and Stop
// waits for them (records) before it stops the settler.
func (s *Service) handBackNak(m jetstream.Msg, d *events.Dispatch, delay time.Duration) {
	// Only a first delivery is marked: no earlier one can have started a
	// call. A later one may follow a delivery that crashed mid-call
	// (leaving no record) or that removed the mark and then crashed;
	// marked, that call would be reported skipped. A mark an earlier
	// hand-back wrote stays as it is.
	if md, err := m.Metadata(); err != nil || md.NumDelivered != 1 || s.mayHaveCalled(m) {
		s.nak(m, delay, nil)
		return
	}
	if r := s.specs.Lookup(d.TaskID); r.Known && (!r.Found || r.Err != nil || r.Value.spec.CatchUp != events.CatchUpNone) {
		s.nak(m, delay, nil)
		return
	}
	s.records.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), attemptRecordTimeout)
		defer cancel()
		if err := s.markHandedBack(ctx, d); err != nil {
			s.log.Debug("hand-back mark not written; a missed slot would run late", "dispatch", d.DispatchID, "err", err)
		}
		s.nak(m, delay, nil)
	})
}

// markHandedBack writes d's hand-back mark, if d has no record yet. A
// record that exists is left alone: another dispatch of the slot's
// attempts (a pending retry runs under catchUp "none", missedUnderNone), its
// outcome (settled again, settleAgain), or a mark already.
func (s *Service) markHandedBack(ctx context.Context, d *events.Dispatch) error {
	b, err := json.Marshal(attemptRecord{HandedBack: true, UpdatedAt: time.Now().UTC()})
	if err != nil {
		return err
	}
	if _, err := s.attempts.Create(ctx, attemptKey(d), b); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return err
	}
	return nil
}

// unmarkHandedBack removes d's hand-back mark, read at revision rev,
// before a call of its target.
func (s *Service) unmarkHandedBack(ctx context.Context, d *events.Dispatch, rev uint64) error {
	if err := s.attempts.Delete(ctx, attemptKey(d), jetstream.LastRevision(rev)); err != nil {
		return fmt.Errorf("remove the hand-back mark of %s before its call: %w", d.DispatchID, err)
	}
	return nil
}

// calledMaybe notes that m's delivery sent a NATS-target request that
// may have reached its target, though its outcome was lost with the
// executor's own connection (result.sent), until m is settled.
func (s *Service) calledMaybe(m jetstream.Msg) {
	s.sentMu.Lock()
	s.sent[m] = struct{}{}
	s.sentMu.Unlock()
}

// mayHaveCalled reports whether m's delivery sent a request that may have
// reached its target (calledMaybe). Such a delivery is tried again in
// place (retryInfra) and, handed back at shutdown meanwhile, is not marked
// (handBackNak): it was, as if no call had been made, and after a restart
// missedUnderNone reported the slot run.skipped as missed although the
// target may have processed the request. Unmarked, the slot runs again,
// late, at least once.
func (s *Service) mayHaveCalled(m jetstream.Msg) bool {
	s.sentMu.Lock()
	defer s.sentMu.Unlock()
	_, ok := s.sent[m]
	return ok
}
