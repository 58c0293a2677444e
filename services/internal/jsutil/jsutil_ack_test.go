package jsutil

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/natstest"
)

// TestAckDeadlineSettlesTheRestOfABatchAtOnce: an ack that never comes
// (the reply swallowed, as with a stream leader that died) times out at
// the deadline; after it, acks that have arrived are still taken and the
// missing ones time out without another wait.
func TestAckDeadlineSettlesTheRestOfABatchAtOnce(t *testing.T) {
	srv := natstest.Start(t)
	ctx := t.Context()
	if _, err := srv.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	natstest.Subscribe(t, srv.NC, "lost.>", func(*nats.Msg) {}) // answers nothing
	_, js := srv.Connect(t)
	publish := func(subject string) jetstream.PubAckFuture {
		f, err := js.PublishAsync(subject, []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	lost, stored := publish("lost.1"), publish("s.1")
	timer := time.NewTimer(200 * time.Millisecond)
	defer timer.Stop()
	d := NewAckDeadline(timer.C)
	start := time.Now()
	if _, err := d.Await(ctx, lost); !errors.Is(err, ErrAckTimeout) {
		t.Fatalf("lost ack: %v, want ErrAckTimeout", err)
	}
	if waited := time.Since(start); waited < 150*time.Millisecond {
		t.Fatalf("timed out after %s, before the deadline", waited)
	}
	if ack, err := d.Await(ctx, stored); err != nil || ack.Stream != "S" {
		t.Fatalf("stored: %+v, %v; want its ack after the deadline", ack, err)
	}
	if _, err := d.Await(ctx, publish("lost.2")); !errors.Is(err, ErrAckTimeout) {
		t.Fatalf("after the deadline: %v, want ErrAckTimeout at once", err)
	}
}
