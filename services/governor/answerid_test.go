package governor

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestAcceptedAnswerIDIsItsNatsMsgID: every event's Nats-Msg-Id is its
// id (docs/events.md). A task.accepted is accepted:<command id>, but
// nats.go writes a header value with each CR or LF replaced by a space:
// for the command id "a\nb" TASKS stored Nats-Msg-Id "accepted:a b"
// under the id "accepted:a\nb", and the command "a b" that followed
// shared its dedup key, its answer dropped as a duplicate. events.Marshal
// trims the id, so "c " was answered "accepted:c", and "c" after it not at
// all. Such an id is answered as the rejection path answers one with a
// control character, accepted:TASKS:<stream sequence>; the rejection path
// now takes an id ending in white space so too.
func TestAcceptedAnswerIDIsItsNatsMsgID(t *testing.T) {
	_, js := startGovernor(t)
	const id = "ids"
	seqs := map[string]uint64{}
	seqs["create"] = publish(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-ids", hourly(id))
	for _, cmdID := range []string{"a\nb", "a b", "c ", "c", "d\te"} {
		// Raw: events.Marshal trims the id's spaces.
		quoted, err := json.Marshal(cmdID)
		if err != nil {
			t.Fatal(err)
		}
		body := `{"specversion":"1.0","id":` + string(quoted) + `,"source":"test","type":"` + events.TypeTaskPaused + `","data":{"id":"` + id + `"}}`
		seqs[cmdID] = publishRaw(t, js, events.TaskSubject(events.VerbPaused, id), []byte(body))
	}
	for _, seq := range seqs {
		natstest.AwaitAcked(t, js, streams.StreamTasks, streams.ConsumerGovernor, seq)
	}
	want := map[string]string{
		"create-ids": "accepted:create-ids",
		"a\nb":       fmt.Sprintf("accepted:%s:%d", streams.StreamTasks, seqs["a\nb"]),
		"a b":        "accepted:a b",
		"c ":         fmt.Sprintf("accepted:%s:%d", streams.StreamTasks, seqs["c "]),
		"c":          "accepted:c",
		"d\te":       fmt.Sprintf("accepted:%s:%d", streams.StreamTasks, seqs["d\te"]),
	}
	got := map[string]string{}
	for _, m := range natstest.Read(t, js, streams.StreamTasks, events.TaskSubject(events.VerbAccepted, id)) {
		e, err := events.Decode(m.Headers(), m.Data())
		if err != nil {
			t.Fatal(err)
		}
		var acc events.TaskAccepted
		if err := events.DecodeData(e, &acc); err != nil {
			t.Fatal(err)
		}
		if msgID := m.Headers().Get(jetstream.MsgIDHeader); msgID != e.ID() {
			t.Errorf("task.accepted for command %q: Nats-Msg-Id %q, id %q", acc.CommandID, msgID, e.ID())
		}
		got[acc.CommandID] = e.ID()
	}
	for cmdID, w := range want {
		if g, ok := got[cmdID]; !ok {
			t.Errorf("command %q: no task.accepted stored (dropped as a duplicate?)", cmdID)
		} else if g != w {
			t.Errorf("command %q: answered with id %q, want %q", cmdID, g, w)
		}
	}
}
