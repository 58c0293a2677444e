package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/control"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestACommandWhoseAckWasLostIsNotReportedNotSent: a command whose ack
// never reaches the CLI (its connection may not subscribe to its
// inboxes) is stored in TASKS all the same. The CLI printed the bare
// publish error ("publish …: context deadline exceeded"), which reads as
// "not sent", so the command was sent again. It now says the command may
// have been stored, names it, and says how to look before sending it
// again.
func TestACommandWhoseAckWasLostIsNotReportedNotSent(t *testing.T) {
	t.Parallel()
	_, js, nc, lossy := natstest.LostAcks(t, 500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := streams.Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	s := &session{nc: nc, js: lossy, timeout: time.Second, ctl: &control.Client{NC: nc, JS: lossy, Source: "flyball/cli/test"}}

	_, err := s.command(t.Context(), events.VerbHinted, "web", events.TaskHint{ID: "web", Interval: events.Duration(time.Minute), TTL: events.Duration(time.Hour)})
	stored := natstest.Read(t, js, streams.StreamTasks, "flyball.task.hinted.web")
	if len(stored) != 1 {
		t.Fatalf("TASKS holds %d task.hinted, want 1", len(stored))
	}
	id := stored[0].Headers().Get(jetstream.MsgIDHeader)
	if err == nil || !strings.Contains(err.Error(), "may or may not have been stored (command "+id+")") ||
		!strings.Contains(err.Error(), "before sending it again") {
		t.Fatalf("command: %v; want it to say command %s may have been stored, and to look before sending it again", err, id)
	}
}
