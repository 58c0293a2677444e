package executor

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
)

// attemptRecord is the value stored in KV flyball-attempts: how many calls
// of one dispatch have been made. JetStream's NumDelivered cannot serve:
// breaker deferrals and crash redeliveries increment it too.
type attemptRecord struct {
	Attempts  int       `json:"attempts"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// attemptKey is the flyball-attempts key of a dispatch: "<task>.<unix ms>".
func attemptKey(d *events.Dispatch) string { return strings.Replace(d.DispatchID, ":", ".", 1) }

// attemptNumber is the number of the call about to be made. The first
// delivery is always attempt 1 and costs no KV read; a redelivery reads
// the count recorded after the last failed call whose run event was
// stored. A delivery whose predecessor crashed mid-call, or whose run
// event could not be stored, repeats that attempt number: the crash is
// not the target's failure, and a call without an event is one nobody
// can see.
func (s *Service) attemptNumber(ctx context.Context, md *jetstream.MsgMetadata, d *events.Dispatch) (int, error) {
	if md.NumDelivered <= 1 {
		return 1, nil
	}
	e, err := s.attempts.Get(ctx, attemptKey(d))
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return 1, nil
	}
	if err != nil {
		return 0, err
	}
	var r attemptRecord
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return 1, nil //nolint:nilerr // a corrupt record restarts the count rather than blocking the run
	}
	return r.Attempts + 1, nil
}

// The count of a failed attempt is written only once its run event is
// stored, and before its dispatch is nakked (recordThenSettle), because
// that order is safe. Written before (as it once was), a run event the
// outbox could not store, or a crash between the two, left an attempt
// counted with no event on RUNS: the redelivery became the next attempt,
// the failed call was invisible, and maxAttempts came a call early. In
// this order, a crash between the event and the count only makes the
// redelivery repeat the attempt number (with the same Idempotency-Key),
// as a crash mid-call does: calls are at least once, and the count never
// runs ahead of the events.

// attemptRecordTimeout bounds the write of an attempt record.
const attemptRecordTimeout = 5 * time.Second

// recordThenSettle stores that attempt n of d failed, then settles m
// (kind and body: a nak). The outbox calls it once the run event of
// attempt n is stored; it works in the background, as the outbox must not
// wait on a round trip. If the count cannot be written, m is settled
// anyway and a warning logged: the redelivery then repeats attempt n
// rather than the dispatch waiting on the bookkeeping.
func (s *Service) recordThenSettle(m jetstream.Msg, d *events.Dispatch, n int, kind string, body []byte) {
	s.records.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), attemptRecordTimeout)
		defer cancel()
		b, err := json.Marshal(attemptRecord{Attempts: n, UpdatedAt: time.Now().UTC()})
		if err == nil {
			_, err = s.attempts.Put(ctx, attemptKey(d), b)
		}
		if err != nil {
			s.log.Warn("attempt count not written; the redelivery repeats this attempt", "dispatch", d.DispatchID, "attempt", n, "err", err)
		}
		s.settle(m, kind, body)
	})
}

// forgetAttempts drops the count once a dispatch is settled. Failure only
// leaves the entry to expire with the bucket's 24h TTL.
// It runs in the background: it is called from the outbox, which must not
// wait on a round trip per settled run.
func (s *Service) forgetAttempts(d *events.Dispatch, n int) {
	if n <= 1 {
		return
	}
	key := attemptKey(d)
	s.records.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.attempts.Purge(ctx, key); err != nil {
			s.log.Debug("attempt count not purged; it expires in 24h", "dispatch", d.DispatchID, "err", err)
		}
	})
}
