package governor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/kvcache"
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

// TestHugeHintReasonIsRejected: a hint's reason was free text without a
// limit. With interval and at the schedule keeps it twice, so a ~600 KB
// reason (the command itself fits in NATS's 1 MB payload) made the
// schedule write fail, which was taken for a transient failure: the
// command was redelivered forever instead of being answered. A reason is
// now at most events.MaxReasonBytes, and the command is rejected naming it.
func TestHugeHintReasonIsRejected(t *testing.T) {
	_, js := startGovernor(t)
	command(t, js, events.VerbCreated, events.TypeTaskCreated, "h", "create-h", *minuteSpec("h"))
	at := time.Now().Add(time.Hour).UTC()
	reason := strings.Repeat("x", 600<<10)
	body, err := events.Marshal(events.TypeTaskHinted, "test", "h", events.TaskHint{ID: "h", Interval: events.Duration(time.Minute), At: &at, Reason: reason}, time.Now(), "hint-h")
	if err != nil {
		t.Fatal(err)
	}
	natstest.AwaitAcked(t, js, streams.StreamTasks, streams.ConsumerGovernor, publishRaw(t, js, events.TaskSubject(events.VerbHinted, "h"), body))
	if rs := lastRejection(t, js, "h"); len(rs) != 1 || rs[0].Field != "reason" {
		t.Fatalf("hint with a %d-byte reason: reasons %+v, want one naming reason", len(reason), rs)
	}
}

// TestLongReasonOfDeleteResumeRequeueIsRejected: the reason of a
// task.deleted, task.resumed or task.requeued was free text without a
// limit, kept in TASKS as history. It is now at most
// events.MaxReasonBytes, as for a pause or a hint, and a longer one is
// rejected naming it, without deleting, resuming or requeueing the task.
func TestLongReasonOfDeleteResumeRequeueIsRejected(t *testing.T) {
	s, js := startGovernor(t)
	long := strings.Repeat("x", events.MaxReasonBytes+1)
	for _, c := range []struct {
		id   string
		verb events.Verb
		data any
	}{
		{"d", events.VerbDeleted, events.TaskRef{ID: "d", Reason: long}},
		{"r", events.VerbResumed, events.TaskRef{ID: "r", Reason: long}},
		{"q", events.VerbRequeued, events.TaskRequeue{ID: "q", DeadLetterSeq: 1, Reason: long}},
	} {
		id := c.id
		command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-"+id, *minuteSpec(id))
		command(t, js, c.verb, c.verb.Type(), id, string(c.verb)+"-"+id, c.data)
		if rs := lastRejection(t, js, id); len(rs) != 1 || rs[0].Field != "reason" {
			t.Fatalf("task.%s with a %d-byte reason: reasons %+v, want one naming reason", c.verb, len(long), rs)
		}
		if _, err := s.tasks.Get(t.Context(), id); err != nil {
			t.Fatalf("task.%s with a %d-byte reason: spec: %v, want it kept", c.verb, len(long), err)
		}
	}
}

// TestSpecTooLargeToStoreIsRejected: a command whose write the server
// refuses for its size can never succeed. A task.created just under the
// server's max_payload grows past it once its defaults are filled in;
// storing the spec failed with "maximum payload exceeded", which was
// retried every second forever. The command is now rejected, saying why.
func TestSpecTooLargeToStoreIsRejected(t *testing.T) {
	_, js := startGovernor(t)
	body := specTooLargeToStore(t, js, "big")
	natstest.AwaitAcked(t, js, streams.StreamTasks, streams.ConsumerGovernor, publishRaw(t, js, events.TaskSubject(events.VerbCreated, "big"), body))
	if rs := lastRejection(t, js, "big"); len(rs) != 1 || !strings.Contains(rs[0].Rule, "too large") {
		t.Fatalf("spec of %d bytes: reasons %+v, want one saying it is too large to store", len(body), rs)
	}
}

// specTooLargeToStore is a task.created of task id (event id "create-"
// + id) that fits in js's max_payload with 16 bytes to spare, and whose
// spec, once its defaults are filled in, does not.
func specTooLargeToStore(t *testing.T, js jetstream.JetStream, id string) []byte {
	t.Helper()
	limit := int(js.Conn().MaxPayload())
	spec := events.TaskSpec{ID: id, Schedule: events.Schedule{Interval: events.Duration(time.Minute)}, Target: events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/", Method: "POST"}}}
	size := func() int {
		b, err := events.Marshal(events.TypeTaskCreated, "test", id, spec, time.Now(), "create-"+id)
		if err != nil {
			t.Fatal(err)
		}
		return len(b)
	}
	spec.Target.HTTP.Body = strings.Repeat("x", limit-size()-16) // the command fits, with 16 bytes to spare
	stored := spec
	h := *spec.Target.HTTP
	stored.Target.HTTP = &h
	stored.Normalize()
	if b, _ := json.Marshal(stored); len(b) <= limit {
		t.Fatalf("normalized spec is %d bytes, want more than max_payload %d: the test needs a larger spec", len(b), limit)
	}
	body, err := events.Marshal(events.TypeTaskCreated, "test", id, spec, time.Now(), "create-"+id)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// TestADeadLetterWithAnOverlongReasonIsTerminated: the same on the
// signal path. The dead-letter service writes one of three short
// reasons, and the schedule holds the reason twice (the hold, its trail
// line). A ~600 KB one made the schedule write fail for its size, and the
// entry was nak'd forever; one just over events.MaxReasonBytes was
// applied, and every later write of the task carried it. Any reason over
// the bound is terminated as malformed and counted, and the task is not
// held. (A reason within the bound that the bucket's maximum value size
// refuses: TestMessageNoRetryMendsDoesNotHoldUpItsWorker.)
func TestADeadLetterWithAnOverlongReasonIsTerminated(t *testing.T) {
	s, js := startGovernor(t)
	command(t, js, events.VerbCreated, events.TypeTaskCreated, "d", "create-d", *minuteSpec("d"))
	for i, n := range []int{events.MaxReasonBytes + 1, 600 << 10} {
		now := time.Now().UTC()
		dl := events.DeadLetter{
			TaskID: "d", Reason: strings.Repeat("r", n), Attempts: 1, DeadLetteredAt: now,
			Dispatch: events.Dispatch{DispatchID: events.DispatchID("d", now), TaskID: "d", ScheduledAt: now},
		}
		body, err := events.Marshal(events.TypeDeadLettered, "test", "d", dl, now, fmt.Sprintf("dl-d-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		natstest.AwaitAcked(t, js, streams.StreamDeadLetter, streams.ConsumerGovernor, publishRaw(t, js, events.DeadLetterSubject("d"), body))
		if got := testutil.ToFloat64(s.cfg.Metrics.RejectedEvents.WithLabelValues(events.ErrMalformed.Error())); got != float64(i+1) {
			t.Fatalf("dead letter with a %d-byte reason: %v messages terminated as malformed, want %d", n, got, i+1)
		}
		if st := storedState(t, s, "d"); st.DeadLetter != nil {
			t.Fatalf("dead letter with a %d-byte reason held the task: %+v", n, st.DeadLetter)
		}
	}
}

// TestADeadLetterWithoutItsDispatchIsTerminated: an entry without its
// dispatch (the repro: {"taskId":"dlt","reason":"permanent"}) was
// applied, and a healthy task went to deadletter-recheck for 30 minutes,
// counted nowhere. The dead-letter service writes every entry with the
// dispatch it gave up on, so one without it is terminated as malformed
// and counted, and the task is not held.
func TestADeadLetterWithoutItsDispatchIsTerminated(t *testing.T) {
	s, js := startGovernor(t)
	command(t, js, events.VerbCreated, events.TypeTaskCreated, "dlt", "create-dlt", *minuteSpec("dlt"))
	body := []byte(`{"specversion":"1.0","source":"x","type":"io.flyball.deadlettered","id":"dlx1","data":{"taskId":"dlt","reason":"permanent"}}`)
	natstest.AwaitAcked(t, js, streams.StreamDeadLetter, streams.ConsumerGovernor, publishRaw(t, js, events.DeadLetterSubject("dlt"), body))
	if got := testutil.ToFloat64(s.cfg.Metrics.RejectedEvents.WithLabelValues(events.ErrMalformed.Error())); got != 1 {
		t.Fatalf("dead letter without its dispatch: %v messages terminated as malformed, want 1", got)
	}
	if st := storedState(t, s, "dlt"); st.DeadLetter != nil || st.Source == "deadletter-recheck" {
		t.Fatalf("dead letter without its dispatch held the task: source %s, hold %+v", st.Source, st.DeadLetter)
	}
}

// TestUnreadableStoredSpecIsNotRetriedForever: a flyball-tasks value that
// does not decode (written by hand, or by another version) cannot be
// mended by a retry. An outcome for the task is terminated and counted
// (it was nakked every second forever), a pause is rejected naming the
// way out, and task.updated, which used to be retried forever too,
// replaces the value and schedules the task again.
func TestUnreadableStoredSpecIsNotRetriedForever(t *testing.T) {
	s, js := startGovernor(t)
	if _, err := s.tasks.Put(t.Context(), "garbled", []byte(`{"id":"garbled","schedule":`)); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, "the spec view sees the garbled value", func() bool { return s.specs.Lookup("garbled").Found })

	succeeded(t, js, "garbled", time.Now().UTC().Truncate(time.Second))
	if n := testutil.ToFloat64(s.cfg.Metrics.RejectedEvents.WithLabelValues("cannot be applied")); n != 1 {
		t.Fatalf("outcome of a task with an unreadable spec: %v messages terminated, want 1", n)
	}

	command(t, js, events.VerbPaused, events.TypeTaskPaused, "garbled", "pause-garbled", events.TaskPause{ID: "garbled"})
	reasons := lastRejection(t, js, "garbled")
	if len(reasons) != 1 || reasons[0].Field != "id" || !strings.Contains(reasons[0].Rule, "unreadable") || !strings.Contains(reasons[0].Rule, "task.updated") {
		t.Fatalf("pause of a task with an unreadable spec: rejected with %+v, want field id naming the spec and task.updated", reasons)
	}

	command(t, js, events.VerbUpdated, events.TypeTaskUpdated, "garbled", "update-garbled", *minuteSpec("garbled"))
	st, _, _, err := s.readState(t.Context(), "garbled")
	if err != nil {
		t.Fatal(err)
	}
	if st.NextRunAt.IsZero() || st.LastCommandID != "update-garbled" {
		t.Fatalf("after task.updated: state %+v, want the update applied and a next run", st)
	}
}

// TestUpdateOfUnreadableSpecDoesNotWaitForALostOutcome: the outcome of
// a slot dispatched while the task's spec did not decode is terminated
// (cannot be applied), so that slot's outcome never comes. The
// task.updated that replaces the spec kept the slot as in flight (its
// outcome is not in yet), and the task did not run until the sweeper's
// lost-write repair 5 minutes later. The update now plans after it.
func TestUpdateOfUnreadableSpecDoesNotWaitForALostOutcome(t *testing.T) {
	s, js := startGovernor(t)
	slot := storeTask(t, s, "okt", 2*time.Second)
	if _, err := s.tasks.Put(t.Context(), "okt", []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, "the spec view sees the garbled value", func() bool {
		_, _, err := s.specs.Get(t.Context(), "okt")
		return errors.Is(err, kvcache.ErrUnreadable)
	})
	succeeded(t, js, "okt", slot)
	if n := testutil.ToFloat64(s.cfg.Metrics.RejectedEvents.WithLabelValues("cannot be applied")); n != 1 {
		t.Fatalf("outcome of a task with an unreadable spec: %v messages terminated, want 1", n)
	}

	spec := *minuteSpec("okt")
	spec.Schedule.Interval = events.Duration(2 * time.Second)
	command(t, js, events.VerbUpdated, events.TypeTaskUpdated, "okt", "update-okt", spec)
	st := storedState(t, s, "okt")
	if st.LastCommandID != "update-okt" || !st.NextRunAt.After(slot) || st.NextRunAt.After(time.Now().Add(5*time.Second)) {
		t.Fatalf("after task.updated replaced the unreadable spec: next run %s (%s), want one after the slot %s whose outcome was terminated, within seconds; trail %q",
			st.NextRunAt, st.Source, slot, st.Trail)
	}
	succeeded(t, js, "okt", st.NextRunAt)
	if got := storedState(t, s, "okt"); !got.LastScheduledAt.Equal(st.NextRunAt) || !got.NextRunAt.After(st.NextRunAt) {
		t.Fatalf("the run planned by the update: state %+v, want its outcome applied and the next run after it", got)
	}
}

// TestHugeCommandIDIsRejected: a command's id is echoed twice in its
// answer (the answer's Nats-Msg-Id and its commandId), and a type or
// subject that does not match is quoted in the reason next to the type
// echoed as command. With a ~600 KB id or type (the command itself fits
// in NATS's 1 MB payload) the answer could not be published; the failure
// was taken for a transient one and the command retried in place
// forever, holding its worker (and every task behind it) and never
// answered. Such a command is now rejected, naming the attribute, with
// an answer that echoes at most 256 bytes of it.
func TestHugeCommandIDIsRejected(t *testing.T) {
	_, js := startGovernor(t)
	huge := strings.Repeat("x", 600<<10)
	for _, c := range []struct {
		field, typ, id string
	}{
		{"id", events.TypeTaskCreated, huge},
		{"type", events.TypeTaskCreated + huge, "c-type"},
	} {
		body, err := events.Marshal(c.typ, "test", "big", *minuteSpec("big"), time.Now(), c.id)
		if err != nil {
			t.Fatal(err)
		}
		natstest.AwaitAcked(t, js, streams.StreamTasks, streams.ConsumerGovernor, publishRaw(t, js, events.TaskSubject(events.VerbCreated, "big"), body))
		if rs := lastRejection(t, js, "big"); len(rs) != 1 || rs[0].Field != c.field || len(rs[0].Rule) > 1024 {
			t.Fatalf("a command with a %d-byte %s: reasons %.300v, want one naming %s", len(huge), c.field, rs, c.field)
		}
	}
}

// TestRunAheadOfItsSlotIsTerminated: an outcome stored long before its
// scheduledAt cannot be a run's (the executor holds a dispatch until its
// slot and refuses one due more than 5 minutes ahead). A run.succeeded
// with a scheduledAt a year ahead was applied: the task's last slot moved
// a year on, its next run with it, and every real outcome after it was
// ignored as outdated (it finished before that slot), so the task never
// ran again. It is now terminated and counted as malformed.
func TestRunAheadOfItsSlotIsTerminated(t *testing.T) {
	s, js := startGovernor(t)
	command(t, js, events.VerbCreated, events.TypeTaskCreated, "a", "create-a", *minuteSpec("a"))
	before, _, _, err := s.readState(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	slot := time.Now().Add(365 * 24 * time.Hour).UTC().Truncate(time.Minute)
	run := events.Run{DispatchID: events.DispatchID("a", slot), TaskID: "a", ScheduledAt: slot, Attempt: 1, FinishedAt: time.Now().UTC(), Status: 200}
	body, err := events.Marshal(events.OutcomeSucceeded.Type(), "test", "a", run, time.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	natstest.AwaitAcked(t, js, streams.StreamRuns, streams.ConsumerGovernor, publishRaw(t, js, events.RunSubject(events.OutcomeSucceeded, "a"), body))
	after, _, _, err := s.readState(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if !after.NextRunAt.Equal(before.NextRunAt) || !after.LastScheduledAt.Equal(before.LastScheduledAt) {
		t.Fatalf("a run.succeeded for the slot %s moved the schedule: next run %s → %s, last slot %s → %s",
			slot.Format(time.RFC3339), before.NextRunAt.Format(time.RFC3339), after.NextRunAt.Format(time.RFC3339),
			before.LastScheduledAt.Format(time.RFC3339), after.LastScheduledAt.Format(time.RFC3339))
	}
	if n := testutil.ToFloat64(s.cfg.Metrics.RejectedEvents.WithLabelValues("malformed event")); n != 1 {
		t.Fatalf("%v messages terminated as malformed, want 1", n)
	}
}

// TestSpecWithCountlessProblemsIsRejected: Validate reports every problem,
// and a spec can hold a great many in little space: each of 200,000
// expectStatus entries "x" (4 bytes in an 800 KB command) is one reason
// of about 100 bytes. The task.rejected listing them all was too large
// to publish; the failure was taken for a transient one and the command
// retried in place forever, never answered. The answer now lists the
// first problems and says how many more there are.
func TestSpecWithCountlessProblemsIsRejected(t *testing.T) {
	_, js := startGovernor(t)
	spec := *minuteSpec("many")
	spec.Target.HTTP.ExpectStatus = make([]string, 200_000)
	for i := range spec.Target.HTTP.ExpectStatus {
		spec.Target.HTTP.ExpectStatus[i] = "x"
	}
	body, err := events.Marshal(events.TypeTaskCreated, "test", "many", spec, time.Now(), "create-many")
	if err != nil {
		t.Fatal(err)
	}
	natstest.AwaitAcked(t, js, streams.StreamTasks, streams.ConsumerGovernor, publishRaw(t, js, events.TaskSubject(events.VerbCreated, "many"), body))
	rs := lastRejection(t, js, "many")
	if len(rs) == 0 || len(rs) > 101 || rs[0].Field != "target.http.expectStatus[0]" || !strings.Contains(rs[len(rs)-1].Rule, "more") {
		t.Fatalf("%d reasons (first %+v, last %+v), want at most 101: the first problems, then how many more", len(rs), rs[0], rs[len(rs)-1])
	}
}

// TestProblemWithHugeTextIsRejected: a reason can quote what it refuses,
// and JSON can make it longer than it came: a data key of 300,000 U+2028
// characters (900 KB as sent) is an unknown field whose name is 1.8 MB
// once escaped in the answer. That answer could not be published and the
// command was retried in place forever. The answer now cuts every field
// and reason to events.MaxReasonBytes.
func TestProblemWithHugeTextIsRejected(t *testing.T) {
	_, js := startGovernor(t)
	key := strings.Repeat("\u2028", 300_000)
	body := []byte(`{"specversion":"1.0","type":"io.flyball.task.created","source":"test","id":"create-long","data":{"id":"long","` + key + `":1}}`)
	natstest.AwaitAcked(t, js, streams.StreamTasks, streams.ConsumerGovernor, publishRaw(t, js, events.TaskSubject(events.VerbCreated, "long"), body))
	rs := lastRejection(t, js, "long")
	if len(rs) != 1 || !strings.HasPrefix(rs[0].Field, "\u2028") || len(rs[0].Field) > events.MaxReasonBytes+len("…") || rs[0].Rule != "unknown field" {
		t.Fatalf("%d reasons (first field %d bytes, rule %.100q), want one unknown field, cut to %d bytes", len(rs), len(rs[0].Field), rs[0].Rule, events.MaxReasonBytes)
	}
}

// TestSpecNotUTF8IsRejected: a task.created whose data held bytes that
// are not UTF-8 was accepted, and stored with each such byte replaced by
// U+FFFD (a header "\xe9" became "\ufffd", a body "\xff\xfe" became
// "\ufffd\ufffd"). The HTTP API and the CLI refused it; sent over NATS it
// is now rejected too, naming the field, and nothing is stored.
func TestSpecNotUTF8IsRejected(t *testing.T) {
	s, js := startGovernor(t)
	body := []byte("{\"specversion\":\"1.0\",\"id\":\"c1\",\"source\":\"cli\",\"type\":\"io.flyball.task.created\",\"data\":{\"id\":\"u\",\"target\":{\"http\":{\"method\":\"POST\",\"url\":\"https://e.com\",\"headers\":{\"X-Sig\":\"\xe9\"},\"body\":\"\xff\xfe\"}},\"schedule\":{\"interval\":\"30s\"}}}")
	natstest.AwaitAcked(t, js, streams.StreamTasks, streams.ConsumerGovernor, publishRaw(t, js, events.TaskSubject(events.VerbCreated, "u"), body))
	rs := lastRejection(t, js, "u")
	if len(rs) != 2 || rs[0].Field != "target.http.headers.X-Sig" || rs[1].Field != "target.http.body" || !strings.Contains(rs[1].Rule, "UTF-8") {
		t.Fatalf("reasons %+v, want target.http.headers.X-Sig and target.http.body refused as not UTF-8", rs)
	}
	if _, err := s.loadSpec(t.Context(), "u"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the rejected spec was stored (err %v)", err)
	}
	if _, rev, _, err := s.readState(t.Context(), "u"); err != nil || rev != 0 {
		t.Fatalf("the rejected task has a schedule: rev %d, err %v", rev, err)
	}
}

// TestRejectedLabelsAreBounded: flyball_rejected_events_total's reason
// label named the first field a rejection names, and that can be any key
// a sender invents (an unknown field, a label): every new key was a new
// series. Unknown fields share one label, and a problem under a map
// (labels, headers) is labelled with the map.
func TestRejectedLabelsAreBounded(t *testing.T) {
	s, js := startGovernor(t)
	for i, data := range []string{
		`{"id":"lb","aaa":1}`,
		`{"id":"lb","bbb":1}`,
		`{"id":"lb","target":{"http":{"url":"https://e.com","timeut":"1s"}}}`,
		`{"id":"lb","labels":{"k1":1}}`,
		`{"id":"lb","labels":{"k2":1}}`,
		`{"id":"lb","target":{"http":{"url":"https://e.com","headers":{"X-A":1}}},"schedule":{"interval":"1m"}}`,
		`{"id":"lb","target":{"http":{"url":"https://e.com","headers":{"X-B":1}}},"schedule":{"interval":"1m"}}`,
	} {
		body, err := events.Marshal(events.TypeTaskCreated, "test", "lb", json.RawMessage(data), time.Now(), "c-"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		natstest.AwaitAcked(t, js, streams.StreamTasks, streams.ConsumerGovernor, publishRaw(t, js, events.TaskSubject(events.VerbCreated, "lb"), body))
	}
	for _, label := range []string{"unknown field", "field:labels", "field:target.http.headers"} {
		if n := testutil.ToFloat64(s.cfg.Metrics.RejectedEvents.WithLabelValues(label)); n < 2 {
			t.Errorf("flyball_rejected_events_total{reason=%q} = %v, want at least 2", label, n)
		}
	}
	if n := testutil.CollectAndCount(s.cfg.Metrics.RejectedEvents); n != 3 {
		t.Fatalf("%d series of flyball_rejected_events_total after rejecting 7 commands with 3 kinds of problem, want 3", n)
	}
}

// TestRejectedExtensionLabelsAreBounded: a structured command whose
// extension attribute was an object ("<name>":{}) or had a bad name
// ("x-foo":"v") was refused naming the attribute, and
// flyball_rejected_events_total got reason="field:<that name>": any name
// a sender chose (5000 bytes long, too) was a new series. Every attribute
// that is not a CloudEvents context attribute now shares one label.
func TestRejectedExtensionLabelsAreBounded(t *testing.T) {
	s, js := startGovernor(t)
	for i, attr := range []string{
		`"x-foo":"v"`,
		`"x-bar":"v"`,
		`"` + strings.Repeat("a", 5000) + `":{}`,
		`"bbbb":[]`,
		`"ID":"c"`,
	} {
		body, err := events.Marshal(events.TypeTaskCreated, "test", "ext", json.RawMessage(`{"id":"ext"}`), time.Now(), "c-"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		body = append(append(body[:len(body)-1:len(body)-1], ","+attr...), '}')
		natstest.AwaitAcked(t, js, streams.StreamTasks, streams.ConsumerGovernor, publishRaw(t, js, events.TaskSubject(events.VerbCreated, "ext"), body))
	}
	if n := testutil.CollectAndCount(s.cfg.Metrics.RejectedEvents); n != 1 {
		t.Fatalf("%d series of flyball_rejected_events_total after rejecting 5 commands for their extension attributes, want 1", n)
	}
	if n := testutil.ToFloat64(s.cfg.Metrics.RejectedEvents.WithLabelValues("field:extension")); n != 5 {
		t.Fatalf("flyball_rejected_events_total{reason=\"field:extension\"} = %v, want 5", n)
	}
}

// TestBreakerOpenFarAheadIsTerminated: a breaker opens for at most 24h
// (breaker.maxOpenDelay), so a breaker.open whose retryAt lies a year
// after it was stored is no breaker's. It was applied: the task's next
// run waited a year, and nothing lifted the hold (its successes do not,
// and the breaker service, whose breaker is closed, never publishes
// breaker.closed). It is now terminated and counted as malformed.
func TestBreakerOpenFarAheadIsTerminated(t *testing.T) {
	s, js := startGovernor(t)
	command(t, js, events.VerbCreated, events.TypeTaskCreated, "b", "create-b", *minuteSpec("b"))
	before, _, _, err := s.readState(t.Context(), "b")
	if err != nil {
		t.Fatal(err)
	}
	retryAt := time.Now().Add(365 * 24 * time.Hour).UTC()
	tr := events.BreakerTransition{Key: "b", TaskID: "b", From: events.BreakerClosed, To: events.BreakerOpen, Failures: 3, RetryAt: &retryAt, At: time.Now().UTC()}
	body, err := events.Marshal(events.TypeBreakerOpen, "test", "b", tr, time.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	natstest.AwaitAcked(t, js, streams.StreamHealth, streams.ConsumerGovernor, publishRaw(t, js, events.BreakerSubject(events.BreakerOpen, "b"), body))
	after, _, _, err := s.readState(t.Context(), "b")
	if err != nil {
		t.Fatal(err)
	}
	if !after.NextRunAt.Equal(before.NextRunAt) || !after.BreakerOpenUntil.Equal(before.BreakerOpenUntil) {
		t.Fatalf("a breaker.open with retryAt %s was applied: next run %s → %s (%s), runs held until %s", retryAt.Format(time.RFC3339),
			before.NextRunAt.Format(time.RFC3339), after.NextRunAt.Format(time.RFC3339), after.Source, after.BreakerOpenUntil.Format(time.RFC3339))
	}
	if n := testutil.ToFloat64(s.cfg.Metrics.RejectedEvents.WithLabelValues("malformed event")); n != 1 {
		t.Fatalf("%v messages terminated as malformed, want 1", n)
	}
}

// TestBreakerTransitionForAnotherTaskIsTerminated: a task's own breaker
// key is its task ID, so flyball.breaker.open.a carrying taskId "b" is no
// breaker's transition. It was applied to task b (held until its
// retryAt); it is now terminated and counted as malformed, as the docs
// said. A host breaker's transition names the task whose call moved it,
// and still applies to that task, host-scoped on the host.
func TestBreakerTransitionForAnotherTaskIsTerminated(t *testing.T) {
	s, js := startGovernor(t)
	command(t, js, events.VerbCreated, events.TypeTaskCreated, "a", "create-a", *minuteSpec("a"))
	b := minuteSpec("b")
	b.Breaker.Scope = "host"
	command(t, js, events.VerbCreated, events.TypeTaskCreated, "b", "create-b", *b)
	before, _, _, err := s.readState(t.Context(), "b")
	if err != nil {
		t.Fatal(err)
	}
	retryAt := time.Now().Add(time.Hour).UTC()
	open := func(key string) {
		t.Helper()
		tr := events.BreakerTransition{Key: key, TaskID: "b", From: events.BreakerClosed, To: events.BreakerOpen, Failures: 3, RetryAt: &retryAt, At: time.Now().UTC()}
		body, err := events.Marshal(events.TypeBreakerOpen, "test", key, tr, time.Now(), "")
		if err != nil {
			t.Fatal(err)
		}
		natstest.AwaitAcked(t, js, streams.StreamHealth, streams.ConsumerGovernor, publishRaw(t, js, events.BreakerSubject(events.BreakerOpen, key), body))
	}
	open("a")
	after, _, _, err := s.readState(t.Context(), "b")
	if err != nil {
		t.Fatal(err)
	}
	if !after.BreakerOpenUntil.Equal(before.BreakerOpenUntil) || !after.NextRunAt.Equal(before.NextRunAt) {
		t.Fatalf("flyball.breaker.open.a with taskId b was applied to b: runs held until %s, next run %s → %s (%s)",
			after.BreakerOpenUntil.Format(time.RFC3339), before.NextRunAt.Format(time.RFC3339), after.NextRunAt.Format(time.RFC3339), after.Source)
	}
	if n := testutil.ToFloat64(s.cfg.Metrics.RejectedEvents.WithLabelValues("malformed event")); n != 1 {
		t.Fatalf("%v messages terminated as malformed, want 1", n)
	}
	open(executor.BreakerKey(b))
	host, _, _, err := s.readState(t.Context(), "b")
	if err != nil {
		t.Fatal(err)
	}
	if !host.BreakerOpenUntil.Equal(retryAt.Truncate(time.Millisecond)) && !host.BreakerOpenUntil.Equal(retryAt) {
		t.Fatalf("a host breaker's open naming task b held b's runs until %s, want %s", host.BreakerOpenUntil.Format(time.RFC3339Nano), retryAt.Format(time.RFC3339Nano))
	}
}

// failingScheduleReads is a JetStream whose flyball-schedules bucket
// answers one read of key with a timeout, as a KV read in a leader
// election does: the failAt-th read after failAt is stored. With
// failUpdate set, the next Update of key fails so too (updateFailed).
type failingScheduleReads struct {
	jetstream.JetStream
	key    string
	reads  atomic.Int32
	failAt atomic.Int32
	failed atomic.Bool

	failUpdate, updateFailed atomic.Bool
	failCreate, createFailed atomic.Bool
}

func (j *failingScheduleReads) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := j.JetStream.KeyValue(ctx, bucket)
	if err != nil || bucket != streams.BucketSchedules {
		return kv, err
	}
	return &failingGet{KeyValue: kv, j: j}, nil
}

type failingGet struct {
	jetstream.KeyValue
	j *failingScheduleReads
}

func (f *failingGet) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if key == f.j.key && f.j.failAt.Load() > 0 && f.j.reads.Add(1) == f.j.failAt.Load() {
		f.j.failed.Store(true)
		return nil, nats.ErrTimeout
	}
	return f.KeyValue.Get(ctx, key)
}

func (f *failingGet) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	if key == f.j.key && f.j.failUpdate.CompareAndSwap(true, false) {
		f.j.updateFailed.Store(true)
		return 0, nats.ErrTimeout
	}
	return f.KeyValue.Update(ctx, key, value, last)
}

func (f *failingGet) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if key == f.j.key && f.j.failCreate.CompareAndSwap(true, false) {
		f.j.createFailed.Store(true)
		return 0, nats.ErrTimeout
	}
	return f.KeyValue.Create(ctx, key, value, opts...)
}

// TestSecondCreationIsRejectedWhenAScheduleReadFails: a task.created for
// a task that exists is rejected ("already exists"). The check read the
// task's schedule and took a read that failed for a missing schedule (a
// creation interrupted between its two writes, to be finished): one KV
// timeout at that moment accepted the second creation, which replaced
// the spec and reset the task's state (its runs, failures, holds and
// budget). The failed read is now retried, and the creation rejected.
func TestSecondCreationIsRejectedWhenAScheduleReadFails(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	js := &failingScheduleReads{JetStream: srv.JS, key: "a"}
	s := runGovernorWith(t, Config{JS: js})
	command(t, srv.JS, events.VerbCreated, events.TypeTaskCreated, "a", "create-a", *minuteSpec("a"))
	first := storedState(t, s, "a")

	// The creation reads the schedule twice before it is applied: to see
	// whether it repeats the last command, then to see whether the task
	// exists. The second read fails.
	js.failAt.Store(2)
	again := minuteSpec("a")
	again.Schedule.Interval = events.Duration(2 * time.Minute)
	command(t, srv.JS, events.VerbCreated, events.TypeTaskCreated, "a", "create-a-again", *again)
	if !js.failed.Load() {
		t.Fatal("no schedule read failed: the test did not reach the check")
	}
	reasons := lastRejection(t, srv.JS, "a")
	if len(reasons) != 1 || !strings.Contains(reasons[0].Rule, "already exists") {
		t.Fatalf("second creation answered with rejection reasons %+v; want one saying the task already exists", reasons)
	}
	if st := storedState(t, s, "a"); !st.CreatedAt.Equal(first.CreatedAt) || st.LastCommandID != "create-a" {
		t.Fatalf("state after the second creation: createdAt %s, last command %q; want the first creation's (%s, create-a)", st.CreatedAt, st.LastCommandID, first.CreatedAt)
	}
}

// TestRejectedAnswerIDIsTheCommandID: a task.rejected's Nats-Msg-Id is
// rejected:<command id>, so that a command sent again is answered once.
// A command refused for its envelope (an "x-foo" attribute, a text/plain
// Content-Type, source "::", a binary-mode body "{bad") was answered
// rejected:TASKS:<stream sequence> although its id was readable: each
// copy got an answer of its own. What cannot be read without doubt (an
// id given twice) still takes the stream sequence: another command's id
// must not be taken for it.
func TestRejectedAnswerIDIsTheCommandID(t *testing.T) {
	_, js := startGovernor(t)
	subject := events.TaskSubject(events.VerbCreated, "env")
	structured := func(id, extra string) []byte {
		return []byte(`{"specversion":"1.0","id":"` + id + `","source":"test","type":"io.flyball.task.created"` + extra + `,"data":{"id":"env"}}`)
	}
	for _, c := range []struct {
		name   string
		header nats.Header
		body   []byte
		want   string // "" for rejected:TASKS:<seq>
	}{
		{"extension x-foo", nil, structured("c-xfoo", `,"x-foo":"v"`), "rejected:c-xfoo"},
		{"text/plain", nats.Header{"Content-Type": {"text/plain"}}, structured("c-ct", ""), "rejected:c-ct"},
		{"source ::", nil, []byte(`{"specversion":"1.0","id":"c-src","source":"::","type":"io.flyball.task.created"}`), "rejected:c-src"},
		{"binary {bad", nats.Header{"ce-specversion": {"1.0"}, "ce-id": {"c-bin"}, "ce-source": {"test"}, "ce-type": {events.TypeTaskCreated}}, []byte(`{bad`), "rejected:c-bin"},
		{"id given twice", nil, structured("d1", `,"id":"d2"`), ""},
		{"id with a newline", nil, structured(`c\nx`, `,"x-foo":"v"`), ""},
		// The id and the Nats-Msg-Id would both lose the space, and the
		// answer be taken for command "c-sp"'s.
		{"id ending in a space", nil, structured(`c-sp `, `,"x-foo":"v"`), ""},
		{"id ending in a no-break space", nil, structured("c-sp\u00a0", `,"x-foo":"v"`), ""},
		{"no id", nil, []byte(`{bad`), ""},
	} {
		ack, err := js.PublishMsg(t.Context(), &nats.Msg{Subject: subject, Header: c.header, Data: c.body})
		if err != nil {
			t.Fatal(err)
		}
		natstest.AwaitAcked(t, js, streams.StreamTasks, streams.ConsumerGovernor, ack.Sequence)
		want := c.want
		if want == "" {
			want = fmt.Sprintf("rejected:%s:%d", streams.StreamTasks, ack.Sequence)
		}
		if got := lastRejectionID(t, js, "env"); got != want {
			t.Errorf("%s: answered with id %q, want %q", c.name, got, want)
		}
	}
}

// lastRejectionID returns the Nats-Msg-Id of the last task.rejected for
// task id, after checking that its CloudEvents id is the same.
func lastRejectionID(t *testing.T, js jetstream.JetStream, id string) string {
	t.Helper()
	stream, err := js.Stream(t.Context(), streams.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	m, err := stream.GetLastMsgForSubject(t.Context(), events.TaskSubject(events.VerbRejected, id))
	if err != nil {
		t.Fatalf("no task.rejected for %s: %v", id, err)
	}
	e, err := events.Decode(m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if msgID := m.Header.Get(jetstream.MsgIDHeader); msgID != e.ID() {
		t.Fatalf("task.rejected with Nats-Msg-Id %q and id %q", msgID, e.ID())
	}
	return e.ID()
}
