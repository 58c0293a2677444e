package executor

import (
	"context"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
)

// TestDispatchOfAnotherTypeIsTerminated: a message on DISPATCH whose type
// is not run.due (a command published on the wrong subject, with data
// that happens to read as a dispatch) is terminated as malformed, not
// run.
func TestDispatchOfAnotherTypeIsTerminated(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	logs := newLogLines()
	const id = "wrongtype"
	startExecutor(t, srv, logs, events.TaskSpec{
		ID:       id,
		Target:   events.Target{NATS: &events.NATSTarget{Subject: "nobody.listens"}},
		Schedule: events.Schedule{Interval: events.Duration(time.Hour)},
	})
	slot := time.Now().UTC()
	d := events.Dispatch{DispatchID: events.DispatchID(id, slot), TaskID: id, ScheduledAt: slot, FiredAt: slot}
	body, err := events.Marshal(events.TypeTaskCreated, "test", id, d, slot, d.DispatchID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.JS.Publish(context.Background(), events.DispatchSubject(id), body); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "the dispatch is terminated as malformed", func() bool {
		return logs.count("terminating malformed message") == 1
	})
}
