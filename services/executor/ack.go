package executor

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A plain Ack is fire-and-forget, and one that reaches the cluster while
// the DISPATCH consumer is electing a leader (a NATS node died, say) is
// dropped. The dispatch then stays in DISPATCH until AckWait (60s by
// default) and redelivers a run that already happened, and because
// DISPATCH keeps one message per task, the task's next run cannot be
// dispatched until then: a node loss would hold back every task whose run
// finished during the election. So the executor acks with DoubleAck, which
// waits for the consumer leader's reply, and retries until the reply comes.

// ackTry bounds one DoubleAck round trip.
const ackTry = 2 * time.Second

// ackRetry is the first pause between tries; it doubles up to ackTry.
var ackRetry = 250 * time.Millisecond

// confirmAck acks m and retries until the server confirms it, stop ends
// (after one more try), or giving up is moot: past deadline the dispatch
// is being redelivered anyway.
func confirmAck(stop <-chan struct{}, m jetstream.Msg, deadline time.Time, log *slog.Logger) error {
	wait := ackRetry
	for tries := 1; ; tries++ {
		ctx, cancel := context.WithTimeout(context.Background(), ackTry)
		err := m.DoubleAck(ctx)
		cancel()
		if err == nil || errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			if tries > 1 {
				log.Info("ack confirmed after retries", "subject", m.Subject(), "tries", tries)
			}
			return nil
		}
		if !time.Now().Add(wait).Before(deadline) {
			return err
		}
		log.Debug("ack not confirmed; retrying", "subject", m.Subject(), "err", err, "in", wait)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
			deadline = time.Now() // one last try, then give up
		}
		wait = min(2*wait, ackTry)
	}
}

// ack acknowledges a settled dispatch in the background (see confirmAck).
// It is called from the outbox, which must not wait on a round trip.
func (s *Service) ack(m jetstream.Msg) {
	deadline := time.Now().Add(s.cfg.AckWait)
	s.acks.Go(func() {
		if err := confirmAck(s.ackStop, m, deadline, s.log); err != nil {
			s.log.Warn("ack not confirmed; the run may be redelivered", "subject", m.Subject(), "err", err)
		}
	})
}
