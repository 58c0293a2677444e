package executor

import (
	"context"
	"fmt"
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
// finished during the election. A nak or a term is lost the same way, with
// worse effects: a lost NakWithDelay turns a retry due in a second into one
// after AckWait, and a lost term redelivers a run that already failed for
// good after AckWait, so its target is called again.
//
// The server confirms any ack kind sent with a reply subject (DoubleAck is
// that request for +ACK; nats.go has no such call for naks and terms). So
// the executor sends every ack, nak and term as a request, and retries it
// until the consumer leader's reply comes.

// ackTry bounds one confirmed round trip.
const ackTry = 2 * time.Second

// ackRetry is the first pause between tries; it doubles up to ackTry.
var ackRetry = 250 * time.Millisecond

// confirmSettle calls try (one confirmed ack, nak or term) until it
// succeeds, stop ends (after one more try), or giving up is moot: past
// deadline the dispatch is being redelivered anyway.
func confirmSettle(stop <-chan struct{}, subject, kind string, deadline time.Time, log *slog.Logger, try func(context.Context) error) error {
	wait := ackRetry
	for tries := 1; ; tries++ {
		ctx, cancel := context.WithTimeout(context.Background(), ackTry)
		err := try(ctx)
		cancel()
		if err == nil {
			if tries > 1 {
				log.Info(kind+" confirmed after retries", "subject", subject, "tries", tries)
			}
			return nil
		}
		if !time.Now().Add(wait).Before(deadline) {
			return err
		}
		log.Debug(kind+" not confirmed; retrying", "subject", subject, "err", err, "in", wait)
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

// Ack bodies, in nats.go's wire format.
var ackBody = []byte("+ACK")

// nakBody asks for a redelivery after delay (at once when it is 0).
func nakBody(delay time.Duration) []byte {
	if delay > 0 {
		return fmt.Appendf(nil, `-NAK {"delay": %d}`, delay.Nanoseconds())
	}
	return []byte("-NAK")
}

// termBody ends the delivery for good, with a reason for the advisory.
func termBody(reason string) []byte {
	if reason == "" {
		return []byte("+TERM")
	}
	return []byte("+TERM " + reason)
}

// ack acknowledges a settled dispatch (see settle).
func (s *Service) ack(m jetstream.Msg) { s.settle(m, "ack", ackBody) }

// settle sends body (an ack, nak or term) to m's reply subject in the
// background, as a request the server confirms, and retries it until the
// confirmation comes (confirmSettle). It is called from the outbox, which
// must not wait on a round trip.
func (s *Service) settle(m jetstream.Msg, kind string, body []byte) {
	nc, reply := s.cfg.JS.Conn(), m.Reply()
	deadline := time.Now().Add(s.cfg.AckWait)
	s.acks.Go(func() {
		err := confirmSettle(s.ackStop, m.Subject(), kind, deadline, s.log, func(ctx context.Context) error {
			_, err := nc.RequestWithContext(ctx, reply, body)
			return err
		})
		if err != nil {
			s.log.Warn(kind+" not confirmed; the dispatch is redelivered after AckWait", "subject", m.Subject(), "err", err)
		}
	})
}
