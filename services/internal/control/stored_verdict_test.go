package control_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/control"
	"github.com/flyballhq/flyball/services/internal/natstest"
)

// noAnswerReads is a JetStream on which reading the stored answers fails.
type noAnswerReads struct {
	jetstream.JetStream
}

func (n *noAnswerReads) OrderedConsumer(ctx context.Context, stream string, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	for _, s := range cfg.FilterSubjects {
		if strings.HasPrefix(s, "flyball.task.accepted.") {
			return nil, errors.New("injected: no consumer")
		}
	}
	return n.JetStream.OrderedConsumer(ctx, stream, cfg)
}

// TestAnErrorAfterTheAckSaysTheCommandIsStored: a command sent again
// with its id is not stored again, and its answer is read from TASKS.
// When that read failed, SendID returned the bare error, which its
// callers read as "not stored" (the API answered 503 "command not
// stored", with no command id). An error after the publish was acked
// now wraps ErrStored and comes with the command id, as does a wait
// whose context ended.
func TestAnErrorAfterTheAckSaysTheCommandIsStored(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	c := &control.Client{NC: srv.NC, JS: &noAnswerReads{JetStream: srv.JS}, Source: "test"}
	const id, cmdID = "web", "hint-web-1"
	hint := events.TaskHint{ID: id, Interval: events.Duration(time.Minute), TTL: events.Duration(time.Hour)}
	if _, _, err := c.SendID(t.Context(), events.VerbHinted, id, cmdID, hint, 0); err != nil {
		t.Fatal(err)
	}
	got, _, err := c.SendID(t.Context(), events.VerbHinted, id, cmdID, hint, time.Second)
	if !errors.Is(err, control.ErrStored) || got != cmdID {
		t.Fatalf("a repeated command whose answer could not be read: %q, %v; want %q and an error wrapping ErrStored", got, err, cmdID)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	got, _, err = c.SendID(ctx, events.VerbHinted, id, "hint-web-2", hint, time.Minute)
	if !errors.Is(err, control.ErrStored) || !errors.Is(err, context.DeadlineExceeded) || got != "hint-web-2" {
		t.Fatalf("a wait whose context ended: %q, %v; want the id and an error wrapping ErrStored and the context's", got, err)
	}
}
