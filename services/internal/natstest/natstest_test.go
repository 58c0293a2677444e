package natstest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
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

// hasInterest fails t unless the server already routes subject to a
// subscription: read at once, with no wait, so a Subscribe that returned
// before the server took its SUB (no flush) fails here.
func hasInterest(t *testing.T, srv *Server, subject string) {
	t.Helper()
	if !srv.Server.GlobalAccount().SubscriptionInterest(subject) {
		t.Fatalf("the server has no interest in %s when the subscribe returns", subject)
	}
}

// TestSubscribeHasTheInterestWhenItReturns checks that a message
// published from another connection right after Subscribe and
// ChanSubscribe return reaches them (the flush made the interest the
// server's), and that both subscriptions end with their test.
func TestSubscribeHasTheInterestWhenItReturns(t *testing.T) {
	t.Parallel()
	srv := Start(t)
	pub, _ := srv.Connect(t)
	var subs []*nats.Subscription
	t.Run("subscribe", func(t *testing.T) {
		got := make(chan string, 1)
		subs = append(subs, Subscribe(t, srv.NC, "cb.x", func(m *nats.Msg) { got <- string(m.Data) }))
		hasInterest(t, srv, "cb.x")
		if err := pub.Publish("cb.x", []byte("1")); err != nil {
			t.Fatal(err)
		}
		select {
		case d := <-got:
			if d != "1" {
				t.Fatalf("callback got %q, want 1", d)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the callback saw nothing within 5s")
		}
	})
	t.Run("chan", func(t *testing.T) {
		ch := make(chan *nats.Msg, 1)
		subs = append(subs, ChanSubscribe(t, srv.NC, "ch.x", ch))
		hasInterest(t, srv, "ch.x")
		if err := pub.Publish("ch.x", []byte("2")); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-ch:
			if string(m.Data) != "2" {
				t.Fatalf("channel got %q, want 2", m.Data)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the channel received nothing within 5s")
		}
	})
	for _, sub := range subs {
		if sub.IsValid() {
			t.Errorf("the subscription to %s outlived its test", sub.Subject)
		}
	}
}

// fatalTB records the message of a Fatal call and ends the goroutine, as
// testing's own does, so a test can check that a helper fails the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatal(args ...any) { f.msg = fmt.Sprint(args...); runtime.Goexit() }

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestReadEventsFailsOnAMessageThatIsNotACloudEvent checks that
// ReadEvents decodes the events of a subject in stream order, and fails
// the test naming the stream sequence and subject of a message that is
// not a CloudEvent.
func TestReadEventsFailsOnAMessageThatIsNotACloudEvent(t *testing.T) {
	t.Parallel()
	srv := Start(t)
	ctx := t.Context()
	if _, err := srv.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"e1", "e2"} {
		b, err := events.Marshal("io.flyball.test", "natstest", "", map[string]string{"id": id}, time.Now(), id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := srv.JS.Publish(ctx, "s.good", b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := srv.JS.Publish(ctx, "s.bad", []byte("not an event")); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range ReadEvents(t, srv.JS, "S", "s.good") {
		ids = append(ids, e.ID())
	}
	if strings.Join(ids, ",") != "e1,e2" {
		t.Fatalf("ReadEvents of s.good = %v, want e1,e2", ids)
	}

	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ReadEvents(f, srv.JS, "S", "s.>")
	}()
	<-done
	if !strings.Contains(f.msg, "S sequence 3 (s.bad): not a CloudEvent") {
		t.Fatalf("ReadEvents of a message that is not a CloudEvent failed with %q, want it to name S sequence 3 (s.bad)", f.msg)
	}
}
