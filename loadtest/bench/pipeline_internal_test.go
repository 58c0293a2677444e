package bench

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/embedded"
	"github.com/flyballhq/flyball/streams"
)

// TestPipelineCountsOnlyAPendingDispatchAsRefused: the pipeline's
// Refused count is DISPATCH refusing a task's second pending dispatch
// (10077), on flyball's own stream, and nothing else.
func TestPipelineCountsOnlyAPendingDispatchAsRefused(t *testing.T) {
	t.Parallel()
	srv, err := embedded.Start(embedded.Config{StoreDir: t.TempDir(), DontListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := streams.Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	publish := func(slot time.Time) error {
		m := &nats.Msg{Subject: events.DispatchSubject("t1"), Header: nats.Header{}, Data: []byte("{}")}
		m.Header.Set(jetstream.MsgIDHeader, events.DispatchID("t1", slot))
		_, err := js.PublishMsg(ctx, m)
		return err
	}
	slot := time.Now().Truncate(time.Second)
	if err := publish(slot); err != nil {
		t.Fatal(err)
	}
	err = publish(slot.Add(time.Second))
	if !isSubjectFull(err) {
		t.Fatalf("a second pending dispatch: %v, want error 10077", err)
	}
	if _, err := js.Publish(ctx, "flyball.nowhere", nil); err == nil || isSubjectFull(err) {
		t.Fatalf("a publish no stream takes: %v, want an error other than 10077", err)
	}
}
