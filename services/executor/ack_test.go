package executor

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/natstest"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// flaky is a confirmation whose first fails tries fail the way a request
// does while the consumer has no leader.
type flaky struct{ fails, tries int }

func (f *flaky) try(context.Context) error {
	f.tries++
	if f.tries <= f.fails {
		return nats.ErrNoResponders
	}
	return nil
}

func TestConfirmSettleRetriesUntilTheServerReplies(t *testing.T) {
	defer func(d time.Duration) { ackRetry = d }(ackRetry)
	ackRetry = time.Millisecond
	f := &flaky{fails: 3}
	if err := confirmSettle(make(chan struct{}), "d.t", "ack", time.Now().Add(time.Minute), quietLog(), f.try); err != nil {
		t.Fatalf("confirmSettle: %v", err)
	}
	if f.tries != 4 {
		t.Fatalf("tried %d times, want 4 (3 failures, then the reply)", f.tries)
	}
}

func TestConfirmSettleGivesUpAtTheDeadline(t *testing.T) {
	defer func(d time.Duration) { ackRetry = d }(ackRetry)
	ackRetry = time.Millisecond
	f := &flaky{fails: 1 << 30}
	err := confirmSettle(make(chan struct{}), "d.t", "ack", time.Now().Add(20*time.Millisecond), quietLog(), f.try)
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("confirmSettle = %v, want the last try's error", err)
	}
	if f.tries < 2 {
		t.Fatalf("tried %d times before the deadline, want a retry", f.tries)
	}
}

func TestConfirmSettleStopsRetryingAtShutdown(t *testing.T) {
	defer func(d time.Duration) { ackRetry = d }(ackRetry)
	ackRetry = time.Hour // only stop can end the wait
	stop := make(chan struct{})
	close(stop)
	f := &flaky{fails: 1 << 30}
	err := confirmSettle(stop, "d.t", "ack", time.Now().Add(24*time.Hour), quietLog(), f.try)
	if err == nil || f.tries != 2 {
		t.Fatalf("confirmSettle = %v after %d tries, want an error after one last try (2)", err, f.tries)
	}
}

func TestSettleBodiesMatchNATSGo(t *testing.T) {
	for got, want := range map[string]string{
		string(ackBody):                          "+ACK",
		string(nakBody(0)):                       "-NAK",
		string(nakBody(1500 * time.Millisecond)): `-NAK {"delay": 1500000000}`,
		string(termBody("")):                     "+TERM",
		string(termBody("final failure")):        "+TERM final failure",
	} {
		if got != want {
			t.Errorf("body %q, want %q", got, want)
		}
	}
}

// settleFixture is a work-queue stream with one delivered, unacked message
// and an executor Service with just what settle needs. AckWait is long, so
// a redelivery before it can only come from a nak that reached the server.
func settleFixture(t *testing.T) (*Service, jetstream.Consumer, jetstream.Msg) {
	t.Helper()
	srv := natstest.Start(t)
	ctx := t.Context()
	if _, err := srv.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "D", Subjects: []string{"d.>"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	cons, err := srv.JS.CreateOrUpdateConsumer(ctx, "D", jetstream.ConsumerConfig{Durable: "x", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.JS.Publish(ctx, "d.t", []byte("run")); err != nil {
		t.Fatal(err)
	}
	m := fetchOne(t, cons, 5*time.Second)
	if m == nil {
		t.Fatal("the message was not delivered")
	}
	s := &Service{cfg: Config{JS: srv.JS, AckWait: time.Minute}, log: quietLog(), ackStop: make(chan struct{})}
	return s, cons, m
}

func fetchOne(t *testing.T, cons jetstream.Consumer, wait time.Duration) jetstream.Msg {
	t.Helper()
	b, err := cons.Fetch(1, jetstream.FetchMaxWait(wait))
	if err != nil {
		t.Fatal(err)
	}
	for m := range b.Messages() {
		return m
	}
	return nil
}

func TestSettleNakRedeliversAfterTheDelay(t *testing.T) {
	s, cons, m := settleFixture(t)
	s.settle(m, "nak", nakBody(100*time.Millisecond))
	s.acks.Wait()
	again := fetchOne(t, cons, 10*time.Second)
	if again == nil {
		t.Fatal("not redelivered 10s after a 100ms nak (AckWait is 1m)")
	}
	if md, err := again.Metadata(); err != nil || md.NumDelivered != 2 {
		t.Fatalf("metadata %+v, %v; want the second delivery", md, err)
	}
}

func TestSettleTermRemovesTheMessage(t *testing.T) {
	s, cons, m := settleFixture(t)
	s.settle(m, "term", termBody("final failure after 3 attempt(s)"))
	s.acks.Wait()
	info, err := cons.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.NumRedelivered != 0 || info.NumPending != 0 {
		t.Fatalf("consumer after term: %d ack pending, %d redelivered, %d pending; want none", info.NumAckPending, info.NumRedelivered, info.NumPending)
	}
}

func TestSettleAckRemovesTheMessage(t *testing.T) {
	s, cons, m := settleFixture(t)
	s.ack(m)
	s.acks.Wait()
	info, err := cons.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.AckFloor.Stream != 1 {
		t.Fatalf("consumer after ack: %d ack pending, ack floor %d; want 0 and 1", info.NumAckPending, info.AckFloor.Stream)
	}
}

// TestConfirmSettleRetriesUntilAnswered: a request nobody answers (the
// consumer has no leader) is retried until a responder appears.
func TestConfirmSettleRetriesUntilAnswered(t *testing.T) {
	defer func(d time.Duration) { ackRetry = d }(ackRetry)
	ackRetry = 10 * time.Millisecond
	srv := natstest.Start(t)
	nc, _ := srv.Connect(t)
	var failed atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- confirmSettle(make(chan struct{}), "d.t", "nak", time.Now().Add(time.Minute), quietLog(), func(ctx context.Context) error {
			_, err := nc.RequestWithContext(ctx, "ack.reply", []byte("-NAK"))
			if err != nil {
				failed.Add(1)
			}
			return err
		})
	}()
	natstest.Eventually(t, 10*time.Second, "three unanswered tries", func() bool { return failed.Load() >= 3 })
	select {
	case err := <-done:
		t.Fatalf("returned while nobody answered: %v", err)
	default:
	}
	sub, err := nc.Subscribe("ack.reply", func(m *nats.Msg) { _ = m.Respond(nil) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("confirmSettle = %v after the responder appeared", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not confirmed 10s after a responder appeared")
	}
}
