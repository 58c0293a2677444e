package executor

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// flakyAck is a delivered message whose first fails DoubleAcks fail the
// way an ack does while the consumer has no leader.
type flakyAck struct {
	jetstream.Msg
	fails, tries int
}

func (m *flakyAck) Subject() string { return "flyball.dispatch.t" }

func (m *flakyAck) DoubleAck(context.Context) error {
	m.tries++
	if m.tries <= m.fails {
		return nats.ErrNoResponders
	}
	return nil
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestConfirmAckRetriesUntilTheServerReplies(t *testing.T) {
	defer func(d time.Duration) { ackRetry = d }(ackRetry)
	ackRetry = time.Millisecond
	m := &flakyAck{fails: 3}
	if err := confirmAck(make(chan struct{}), m, time.Now().Add(time.Minute), quietLog()); err != nil {
		t.Fatalf("confirmAck: %v", err)
	}
	if m.tries != 4 {
		t.Fatalf("DoubleAck tried %d times, want 4 (3 failures, then the reply)", m.tries)
	}
}

func TestConfirmAckGivesUpAtTheDeadline(t *testing.T) {
	defer func(d time.Duration) { ackRetry = d }(ackRetry)
	ackRetry = time.Millisecond
	m := &flakyAck{fails: 1 << 30}
	err := confirmAck(make(chan struct{}), m, time.Now().Add(20*time.Millisecond), quietLog())
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("confirmAck = %v, want the last DoubleAck error", err)
	}
	if m.tries < 2 {
		t.Fatalf("DoubleAck tried %d times before the deadline, want a retry", m.tries)
	}
}

func TestConfirmAckStopsRetryingAtShutdown(t *testing.T) {
	defer func(d time.Duration) { ackRetry = d }(ackRetry)
	ackRetry = time.Hour // only stop can end the wait
	stop := make(chan struct{})
	close(stop)
	m := &flakyAck{fails: 1 << 30}
	err := confirmAck(stop, m, time.Now().Add(24*time.Hour), quietLog())
	if err == nil || m.tries != 2 {
		t.Fatalf("confirmAck = %v after %d tries, want an error after one last try (2)", err, m.tries)
	}
}

func TestConfirmAckAcceptsAnAlreadyAckedMessage(t *testing.T) {
	m := &alreadyAcked{}
	if err := confirmAck(make(chan struct{}), m, time.Now().Add(time.Minute), quietLog()); err != nil {
		t.Fatalf("confirmAck = %v, want nil: the message is acked", err)
	}
}

type alreadyAcked struct{ jetstream.Msg }

func (alreadyAcked) Subject() string                 { return "flyball.dispatch.t" }
func (alreadyAcked) DoubleAck(context.Context) error { return jetstream.ErrMsgAlreadyAckd }
