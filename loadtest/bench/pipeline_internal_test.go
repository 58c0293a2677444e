package bench

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/streams"
)

// TestPipelineCountsOnlyAPendingDispatchAsRefused: the pipeline's
// Refused count is DISPATCH refusing a task's second pending dispatch
// (10077), on flyball's own stream, and nothing else.
func TestPipelineCountsOnlyAPendingDispatchAsRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The server and connection every in-process system gets.
	r := &runner{cfg: Config{Stack: StackInProcess}, log: slog.New(slog.DiscardHandler)}
	env, err := r.startNATS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.close)
	js := env.js
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
	if !streams.IsSubjectFull(err) {
		t.Fatalf("a second pending dispatch: %v, want error 10077", err)
	}
	if _, err := js.Publish(ctx, "flyball.nowhere", nil); err == nil || streams.IsSubjectFull(err) {
		t.Fatalf("a publish no stream takes: %v, want an error other than 10077", err)
	}
}
