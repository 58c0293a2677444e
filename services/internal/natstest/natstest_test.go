package natstest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestSettleRetriesUntilTheCallSucceeds checks that Settle tries again
// after a failure, each try with its own deadline, and returns the value
// of the first success.
func TestSettleRetriesUntilTheCallSucceeds(t *testing.T) {
	t.Parallel()
	tries := 0
	got := Settle(t, time.Minute, "flaky call", func(ctx context.Context) (int, error) {
		tries++
		if _, ok := ctx.Deadline(); !ok {
			t.Error("a try without a deadline of its own")
		}
		if tries < 3 {
			return 0, errors.New("context deadline exceeded")
		}
		return 42, nil
	})
	if got != 42 || tries != 3 {
		t.Fatalf("Settle = %d after %d tries, want 42 after 3", got, tries)
	}
}

// TestCaughtUpWaitsForTheAckOfTheLastMatchingMessage checks CaughtUp on
// a filtered and an unfiltered consumer: false while a message is
// undelivered or unacked, true once acked, and not held back by a
// message the filter does not match.
func TestCaughtUpWaitsForTheAckOfTheLastMatchingMessage(t *testing.T) {
	t.Parallel()
	srv := Start(t)
	_, js := srv.Connect(t)
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []jetstream.ConsumerConfig{
		{Durable: "a", FilterSubject: "s.a", AckPolicy: jetstream.AckExplicitPolicy},
		{Durable: "all", AckPolicy: jetstream.AckExplicitPolicy},
	} {
		if _, err := js.CreateConsumer(ctx, "S", c); err != nil {
			t.Fatal(err)
		}
	}
	if !CaughtUp(ctx, js, "S", "a") || !CaughtUp(ctx, js, "S", "all") {
		t.Fatal("an empty stream is not caught up")
	}
	if CaughtUp(ctx, js, "S", "nope") {
		t.Fatal("a missing consumer is caught up")
	}
	if _, err := js.Publish(ctx, "s.a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if CaughtUp(ctx, js, "S", "a") {
		t.Fatal("caught up before the message was delivered")
	}
	take := func(durable string) {
		t.Helper()
		cons, err := js.Consumer(ctx, "S", durable)
		if err != nil {
			t.Fatal(err)
		}
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if CaughtUp(ctx, js, "S", durable) {
			t.Fatalf("%s caught up with %s delivered and not acked", durable, m.Subject())
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	take("a")
	if !CaughtUp(ctx, js, "S", "a") {
		t.Fatal("a is not caught up after acking its only message")
	}
	if _, err := js.Publish(ctx, "s.b", []byte("2")); err != nil {
		t.Fatal(err)
	}
	if !CaughtUp(ctx, js, "S", "a") {
		t.Fatal("a message a's filter does not match holds it back")
	}
	take("all")
	if CaughtUp(ctx, js, "S", "all") {
		t.Fatal("all caught up with s.b unread")
	}
	take("all")
	if !CaughtUp(ctx, js, "S", "all") {
		t.Fatal("all is not caught up after acking both messages")
	}
}
