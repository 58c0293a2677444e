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
// delivery is always attempt 1 and costs no KV read; a redelivery reads the
// count recorded after the last failed call. A delivery whose predecessor
// crashed mid-call repeats that attempt number: the crash is not the
// target's failure.
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

// recordAttempt stores that attempt n of d failed and will be retried.
func (s *Service) recordAttempt(ctx context.Context, d *events.Dispatch, n int) error {
	b, err := json.Marshal(attemptRecord{Attempts: n, UpdatedAt: time.Now().UTC()})
	if err != nil {
		return err
	}
	_, err = s.attempts.Put(ctx, attemptKey(d), b)
	return err
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
	s.purges.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.attempts.Purge(ctx, key); err != nil {
			s.log.Debug("attempt count not purged; it expires in 24h", "dispatch", d.DispatchID, "err", err)
		}
	})
}
