package governor

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestAnswerSubjectsAreNeverAnswered: docs/events.md says messages on the
// governor's own verbs, accepted and rejected, are never answered. One
// that did not decode was rejected before its verb was looked at ({bad on
// flyball.task.accepted.x got a task.rejected and was counted in
// flyball_rejected_events_total), and so was one with a token too many;
// an answer to an answer could answer itself again. Each is acked with no
// answer and not counted: it is no command, and no rejection.
func TestAnswerSubjectsAreNeverAnswered(t *testing.T) {
	s, js := startGovernor(t)
	published := map[uint64]bool{}
	for _, subject := range []string{
		"flyball.task.accepted.x", "flyball.task.rejected.x", "flyball.task.rejected._invalid",
		"flyball.task.accepted.a.b", "flyball.task.rejected.a.b", "flyball.task.accepted.bad$id", "flyball.task.rejected",
	} {
		for _, body := range []string{`{bad`, `{}`, `{"specversion":"1.0","id":"c1","source":"test","type":"io.flyball.task.created"}`} {
			seq := publishRaw(t, js, subject, []byte(body))
			natstest.AwaitAcked(t, js, streams.StreamTasks, streams.ConsumerGovernor, seq)
			published[seq] = true
		}
	}
	for _, m := range natstest.Read(t, js, streams.StreamTasks, "flyball.task.>") {
		if md, err := m.Metadata(); err != nil || !published[md.Sequence.Stream] {
			t.Errorf("the governor answered an answer: %s %s", m.Subject(), m.Data())
		}
	}
	if n := testutil.CollectAndCount(s.cfg.Metrics.RejectedEvents); n != 0 {
		t.Fatalf("%d flyball_rejected_events_total series for messages on answer subjects, want none", n)
	}
}
