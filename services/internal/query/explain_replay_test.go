package query_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/query"
	"github.com/flyballhq/flyball/services/stack"
	"github.com/flyballhq/flyball/streams"
)

// governorOnly starts a governor alone on an embedded server: the tests
// publish its inputs by hand, with the ids and times they choose.
func governorOnly(t *testing.T) (jetstream.JetStream, *query.Reader) {
	t.Helper()
	srv := natstest.StartWithStreams(t)
	_, js := srv.Connect(t)
	st, err := stack.Start(context.Background(), stack.Config{JS: js, Services: []string{"governor"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	q, err := query.NewReader(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	return js, q
}

// publishEvent stores one event with CloudEvents id ceID and no
// Nats-Msg-Id, so a test can reuse an id as a careless sender would.
func publishEvent(t *testing.T, js jetstream.JetStream, subject, typ, taskID, ceID string, data any) {
	t.Helper()
	body, err := events.Marshal(typ, "test", taskID, data, time.Now(), ceID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jsutil.Publish(context.Background(), js, subject, "", body); err != nil {
		t.Fatal(err)
	}
}

// governorCaughtUp waits until the governor has settled every message of
// the streams it reads.
func governorCaughtUp(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	natstest.Eventually(t, 10*time.Second, "the governor settled every input", func() bool {
		for _, s := range []string{streams.StreamTasks, streams.StreamRuns, streams.StreamHealth, streams.StreamDeadLetter} {
			c, err := js.Consumer(ctx, s, streams.ConsumerGovernor)
			if err != nil {
				return false
			}
			in, err := c.Info(ctx)
			if err != nil || in.NumPending != 0 || in.NumAckPending != 0 {
				return false
			}
		}
		return true
	})
}

// explainMatchesStore runs Explain on id and fails unless the replayed
// state is exactly the stored one.
func explainMatchesStore(t *testing.T, q *query.Reader, id string) *query.Explanation {
	t.Helper()
	ex, err := q.Explain(context.Background(), id, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	replayed, _ := json.Marshal(ex.Replayed)
	stored, _ := json.Marshal(ex.Stored)
	if !ex.Agrees || string(replayed) != string(stored) {
		t.Errorf("explain %s: agrees=%v\nreplayed %s\nstored   %s\ntimeline %+v", id, ex.Agrees, replayed, stored, ex.Timeline)
	}
	return ex
}

const minuteSpec = `{"id":"%s","target":{"http":{"url":"http://127.0.0.1:1/x"}},"schedule":{"interval":"1m"}}`

// TestExplainSkipsARejectedCommandThatReusesAnAcceptedID: a sender that
// reuses a command id (a fixed id for "create this task", sent again after
// the duplicate window) gets the second command rejected. The governor
// did not apply it, so explain must not either: it took any task.accepted
// with the same id as proof, and replayed the rejected create, which reset
// the paused schedule.
func TestExplainSkipsARejectedCommandThatReusesAnAcceptedID(t *testing.T) {
	js, q := governorOnly(t)
	const id = "reused"
	spec := json.RawMessage(fmt.Sprintf(minuteSpec, id))
	publishEvent(t, js, events.TaskSubject(events.VerbCreated, id), events.TypeTaskCreated, id, "create-"+id, spec)
	publishEvent(t, js, events.TaskSubject(events.VerbPaused, id), events.TypeTaskPaused, id, "pause-1", events.TaskPause{ID: id, Reason: "maintenance"})
	publishEvent(t, js, events.TaskSubject(events.VerbCreated, id), events.TypeTaskCreated, id, "create-"+id, spec)
	governorCaughtUp(t, js)
	explainMatchesStore(t, q, id)
}

// TestExplainMatchesAnswersToCommandsTheGovernorCouldNotRead: a command
// the governor cannot read (here a pause with an unknown field) is
// answered with task.rejected under its id too; a valid command sent next
// with the same id must still count as accepted.
func TestExplainMatchesAnswersToCommandsTheGovernorCouldNotRead(t *testing.T) {
	js, q := governorOnly(t)
	const id = "unread"
	publishEvent(t, js, events.TaskSubject(events.VerbCreated, id), events.TypeTaskCreated, id, "create-"+id, json.RawMessage(fmt.Sprintf(minuteSpec, id)))
	publishEvent(t, js, events.TaskSubject(events.VerbPaused, id), events.TypeTaskPaused, id, "pause", json.RawMessage(`{"id":"`+id+`","untill":"soon"}`))
	publishEvent(t, js, events.TaskSubject(events.VerbPaused, id), events.TypeTaskPaused, id, "pause", events.TaskPause{ID: id, Reason: "maintenance"})
	governorCaughtUp(t, js)
	explainMatchesStore(t, q, id)
}
