package governor

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// lastRejection returns the reasons of the last task.rejected answer for
// task id.
func lastRejection(t *testing.T, js jetstream.JetStream, id string) []events.FieldError {
	t.Helper()
	cons, err := js.OrderedConsumer(t.Context(), streams.StreamTasks, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.TaskSubject(events.VerbRejected, id)},
		DeliverPolicy:  jetstream.DeliverLastPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatalf("no task.rejected for %s: %v", id, err)
	}
	e, err := events.Decode(m.Headers(), m.Data())
	if err != nil {
		t.Fatal(err)
	}
	var rej events.TaskRejected
	if err := events.DecodeData(e, &rej); err != nil {
		t.Fatal(err)
	}
	return rej.Reasons
}

// publishRaw publishes body on subject and returns its stream sequence.
func publishRaw(t *testing.T, js jetstream.JetStream, subject string, body []byte) uint64 {
	t.Helper()
	ack, err := js.Publish(t.Context(), subject, body)
	if err != nil {
		t.Fatalf("publish %s (%d bytes): %v", subject, len(body), err)
	}
	return ack.Sequence
}

// TestPauseBeyondYear9999IsRejected: "9999-12-31T23:30:00-01:00" is valid
// RFC 3339 but 10000-01-01T00:30Z in UTC. The pause was accepted by the
// decoder, its decision could not be encoded, and the error was taken for
// a transient one: the command was redelivered forever (max_deliver -1)
// and never answered. It is now rejected, naming until.
func TestPauseBeyondYear9999IsRejected(t *testing.T) {
	_, js := startGovernor(t)
	command(t, js, events.VerbCreated, events.TypeTaskCreated, "y", "create-y", *minuteSpec("y"))
	until := time.Date(9999, 12, 31, 23, 30, 0, 0, time.FixedZone("", -3600))
	body, err := events.Marshal(events.TypeTaskPaused, "test", "y", events.TaskPause{ID: "y", Until: &until}, time.Now(), "pause-y")
	if err != nil {
		t.Fatal(err)
	}
	natstest.AwaitAcked(t, js, streams.StreamTasks, streams.ConsumerGovernor, publishRaw(t, js, events.TaskSubject(events.VerbPaused, "y"), body))
	if rs := lastRejection(t, js, "y"); len(rs) != 1 || rs[0].Field != "until" {
		t.Fatalf("pause until %s: reasons %+v, want one naming until", until.Format(time.RFC3339), rs)
	}
}

// TestRunBeyondYear9999IsTerminated: the same through RUNS. A run.succeeded
// whose scheduledAt is past 9999 in UTC was nak'd forever instead of
// being terminated and counted as malformed.
func TestRunBeyondYear9999IsTerminated(t *testing.T) {
	s, js := startGovernor(t)
	command(t, js, events.VerbCreated, events.TypeTaskCreated, "r", "create-r", *minuteSpec("r"))
	slot := time.Date(9999, 12, 31, 23, 30, 0, 0, time.FixedZone("", -3600))
	run := events.Run{DispatchID: "r:1", TaskID: "r", ScheduledAt: slot, Attempt: 1, FinishedAt: time.Now().UTC(), Status: 200}
	body, err := events.Marshal(events.OutcomeSucceeded.Type(), "test", "r", run, time.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	natstest.AwaitAcked(t, js, streams.StreamRuns, streams.ConsumerGovernor, publishRaw(t, js, events.RunSubject(events.OutcomeSucceeded, "r"), body))
	if n := testutil.ToFloat64(s.cfg.Metrics.RejectedEvents.WithLabelValues("malformed event")); n != 1 {
		t.Fatalf("run with scheduledAt %s: %v messages terminated as malformed, want 1", slot.Format(time.RFC3339), n)
	}
}
