package control_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/control"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestARepeatedCommandGetsItsAnswerOnABusyTask: a command is sent again
// with its id (the duplicate path) while its answer is still on its
// way, and while other clients send the task many commands. The client
// subscribed to every command of the task in a channel of 16, and read
// it only after looking for the stored answer: the other commands
// filled it meanwhile, nats.go dropped the rest, the answer with them,
// and the client reported a timeout for a command that was answered. It
// now subscribes to the task's answers only, in a larger channel, and
// reads the stored answer again if the subscription dropped any.
func TestARepeatedCommandGetsItsAnswerOnABusyTask(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	const task = "web"
	accepted := func(cmdID string) events.TaskAccepted {
		return events.TaskAccepted{ID: task, Command: events.VerbHinted.Type(), CommandID: cmdID}
	}
	// Earlier answers of the task, so that looking for the stored answer
	// takes a few fetches.
	for i := range 3000 {
		body, err := events.Marshal(events.TypeTaskAccepted, "flyball/governor", task, accepted(fmt.Sprintf("old-%d", i)), time.Now().UTC(), "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := srv.JS.PublishAsync(events.TaskSubject(events.VerbAccepted, task), body); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-srv.JS.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("storing the earlier answers did not complete")
	}
	nc, js := srv.Connect(t)
	c := &control.Client{NC: nc, JS: js, Source: "flyball/cli/test"}
	hint := events.TaskHint{ID: task, Interval: events.Duration(time.Minute), TTL: events.Duration(time.Hour)}
	const cmdID = "cmd-1"
	if _, _, err := c.SendID(ctx, events.VerbHinted, task, cmdID, hint, 0); err != nil {
		t.Fatal(err)
	}

	// The busy task: once the repeated command looks for its stored
	// answer (it creates a consumer on TASKS), another client sends
	// many commands and answers of the task, then the governor answers
	// the repeated command.
	other, otherJS := srv.Connect(t)
	creates, err := other.SubscribeSync("$JS.API.CONSUMER.CREATE." + streams.StreamTasks + ".>")
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Flush(); err != nil {
		t.Fatal(err)
	}
	flooded := make(chan error, 1)
	go func() {
		flooded <- func() error {
			if _, err := creates.NextMsg(10 * time.Second); err != nil {
				return fmt.Errorf("the repeated command did not look for its stored answer: %w", err)
			}
			hintBody, err := json.Marshal(hint)
			if err != nil {
				return err
			}
			for i := range 500 {
				if err := other.Publish(events.TaskSubject(events.VerbHinted, task), hintBody); err != nil {
					return err
				}
				body, err := events.Marshal(events.TypeTaskAccepted, "flyball/governor", task, accepted(fmt.Sprintf("busy-%d", i)), time.Now().UTC(), "")
				if err != nil {
					return err
				}
				if err := other.PublishMsg(&nats.Msg{Subject: events.TaskSubject(events.VerbAccepted, task), Data: body, Header: nats.Header{}}); err != nil {
					return err
				}
			}
			return jsutil.PublishEvent(ctx, otherJS, events.TaskSubject(events.VerbAccepted, task), "", events.TypeTaskAccepted, "flyball/governor", task, accepted(cmdID), time.Now().UTC())
		}()
	}()
	_, a, err := c.SendID(ctx, events.VerbHinted, task, cmdID, hint, 5*time.Second)
	if ferr := <-flooded; ferr != nil {
		t.Fatal(ferr)
	}
	if err != nil || a == nil || a.Accepted == nil || a.Accepted.CommandID != cmdID {
		t.Fatalf("repeated command on a busy task: answer %+v, %v; want its task.accepted", a, err)
	}
}

// TestARepeatedCommandLeavesNoConsumer: a command sent again reads its
// stored answer from TASKS through an ordered consumer, which stayed on
// TASKS for its 30 s inactive threshold after the answer was read. It
// is now deleted once read.
func TestARepeatedCommandLeavesNoConsumer(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	const task, cmdID = "web", "cmd-1"
	c := &control.Client{NC: srv.NC, JS: srv.JS, Source: "flyball/cli/test"}
	hint := events.TaskHint{ID: task, Interval: events.Duration(time.Minute), TTL: events.Duration(time.Hour)}
	if _, _, err := c.SendID(ctx, events.VerbHinted, task, cmdID, hint, 0); err != nil {
		t.Fatal(err)
	}
	answer := events.TaskAccepted{ID: task, Command: events.VerbHinted.Type(), CommandID: cmdID}
	if err := jsutil.PublishEvent(ctx, srv.JS, events.TaskSubject(events.VerbAccepted, task), "", events.TypeTaskAccepted, "flyball/governor", task, answer, time.Now().UTC()); err != nil {
		t.Fatal(err)
	}
	st, err := srv.JS.Stream(ctx, streams.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	consumers := func() int {
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Consumers
	}
	base := consumers()
	const n = 5
	for range n {
		_, a, err := c.SendID(ctx, events.VerbHinted, task, cmdID, hint, 5*time.Second)
		if err != nil || a == nil || a.Accepted == nil {
			t.Fatalf("repeated command: %+v, %v; want its stored task.accepted", a, err)
		}
	}
	if got := consumers(); got != base {
		t.Fatalf("%d consumers on TASKS after %d repeated commands; want the %d there were before", got, n, base)
	}
}
