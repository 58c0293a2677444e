package executor

import (
	"context"
	"errors"
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
// finished during the election. So the executor acks with DoubleAck, which
// waits for the consumer leader's reply, and retries until the reply comes.
//
// A nak or a term is lost the same way, with worse effects: a lost
// NakWithDelay turns a retry due in a second into one after AckWait, and
// a lost term redelivers a run that already failed for good after
// AckWait, so its target is called again. nats.go has no double nak or
// term, but the server confirms any ack kind sent with a reply subject,
// so the executor sends them as requests and retries them the same way.

// ackTry bounds one DoubleAck round trip.
const ackTry = 2 * time.Second

// ackRetry is the first pause between tries; it doubles up to ackTry.
var ackRetry = 250 * time.Millisecond

// confirmAck acks m and retries until the server confirms it (see
// confirmSettle).
func confirmAck(stop <-chan struct{}, m jetstream.Msg, deadline time.Time, log *slog.Logger) error {
	return confirmSettle(stop, m.Subject(), "ack", deadline, log, func(ctx context.Context) error {
		if err := m.DoubleAck(ctx); !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			return err
		}
		return nil
	})
}

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

// settleBody is what a nak or term sends to a message's reply subject, in
// nats.go's format: "-NAK", `-NAK {"delay": <ns>}`, "+TERM <reason>".
func settleBody(kind string, delay time.Duration, reason string) []byte {
	switch {
	case kind == "nak" && delay > 0:
		return fmt.Appendf(nil, `-NAK {"delay": %d}`, delay.Nanoseconds())
	case kind == "nak":
		return []byte("-NAK")
	case reason != "":
		return []byte("+TERM " + reason)
	default:
		return []byte("+TERM")
	}
}

// settle naks (kind "nak", after delay) or terminates (kind "term", with
// reason) m in the background, as a request the server confirms, retried
// like an ack.
func (s *Service) settle(m jetstream.Msg, kind string, delay time.Duration, reason string) {
	body := settleBody(kind, delay, reason)
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
