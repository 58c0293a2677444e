package governor

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/lifecycle"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// answers reads every task.accepted for task id on TASKS, in stream order:
// the answering instance (the CloudEvents source) and the command id.
func answers(t *testing.T, js jetstream.JetStream, id string) (sources, commands []string) {
	t.Helper()
	for _, e := range natstest.ReadEvents(t, js, streams.StreamTasks, events.TaskSubject(events.VerbAccepted, id)) {
		var acc events.TaskAccepted
		if err := events.DecodeData(e, &acc); err != nil {
			t.Fatal(err)
		}
		sources, commands = append(sources, e.Source()), append(commands, acc.CommandID)
	}
	return sources, commands
}

// hourly is a task spec that runs every hour.
func hourly(id string) events.TaskSpec {
	return events.TaskSpec{ID: id, Schedule: events.Schedule{Interval: events.Duration(time.Hour)}, Target: events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/"}}}
}

// publish stores a command on TASKS without waiting for the governor, and
// returns its stream sequence.
func publish(t *testing.T, js jetstream.JetStream, verb events.Verb, typ, id, eventID string, data any) uint64 {
	t.Helper()
	body, err := events.Marshal(typ, "test", id, data, time.Now(), eventID)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(t.Context(), events.TaskSubject(verb, id), body)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// appliedInOrder checks that g applied pauseThenResume's commands for id
// in the order published: answered in that order, and the task not
// paused.
func appliedInOrder(t *testing.T, js jetstream.JetStream, g *Service, id string) {
	t.Helper()
	if _, commands := answers(t, js, id); fmt.Sprint(commands) != "[create pause-1 resume-2]" {
		t.Fatalf("commands answered in the order %v, want [create pause-1 resume-2]", commands)
	}
	st, _, _, err := g.readState(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Paused {
		t.Fatal("the task is paused after pause then resume: the pause was applied last")
	}
}

// pauseThenResume publishes pause-1 then resume-2 for task id, back to
// back, and returns the second's stream sequence.
func pauseThenResume(t *testing.T, js jetstream.JetStream, id string) uint64 {
	t.Helper()
	publish(t, js, events.VerbPaused, events.TypeTaskPaused, id, "pause-1", events.TaskPause{ID: id})
	return publish(t, js, events.VerbResumed, events.TypeTaskResumed, id, "resume-2", events.TaskRef{ID: id})
}

// TestReplicasApplyCommandsInOrder: two governor replicas share
// TASKS/governor, whose pinned_client policy lets one of them read it at a
// time. A burst of pause and resume commands for one task is applied by
// that replica in the order published, so the task ends as the last
// command left it (two replicas each taking half would race). When that
// replica stops it hands the pin on, and the other answers the next
// command at once.
func TestReplicasApplyCommandsInOrder(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	replicas := map[string]*Service{}
	for _, name := range []string{"g1", "g2"} {
		s, err := New(Config{JS: srv.JS, Instance: name})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		replicas[s.source] = s
	}
	const id = "ordered"
	command(t, srv.JS, events.VerbCreated, events.TypeTaskCreated, id, "create", hourly(id))

	const n = 60
	want := []string{"create"}
	var last uint64
	for i := range n {
		verb, typ, eid := events.VerbPaused, events.TypeTaskPaused, fmt.Sprint("pause-", i)
		var data any = events.TaskPause{ID: id}
		if i%2 == 1 {
			verb, typ, eid, data = events.VerbResumed, events.TypeTaskResumed, fmt.Sprint("resume-", i), events.TaskRef{ID: id}
		}
		last = publish(t, srv.JS, verb, typ, id, eid, data)
		want = append(want, eid)
	}
	natstest.AwaitAcked(t, srv.JS, streams.StreamTasks, streams.ConsumerGovernor, last)

	sources, commands := answers(t, srv.JS, id)
	if fmt.Sprint(commands) != fmt.Sprint(want) {
		t.Fatalf("commands answered in the order\n%v\nwant the order published\n%v", commands, want)
	}
	pinned := sources[0]
	for i, src := range sources {
		if src != pinned {
			t.Fatalf("answer %d (%s) came from %s, answer 0 from %s: two replicas read TASKS/governor at once", i, commands[i], src, pinned)
		}
	}
	st, _, _, err := replicas[pinned].readState(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if wantPaused := (n-1)%2 == 0; st.Paused != wantPaused {
		t.Fatalf("paused = %v after %d alternating pause/resume commands starting with pause, want %v", st.Paused, n, wantPaused)
	}

	// The pinned replica stops; the other takes the next command well
	// inside TASKS/governor's 15 s priority timeout.
	replicas[pinned].Stop()
	start := time.Now()
	command(t, srv.JS, events.VerbResumed, events.TypeTaskResumed, id, "resume-after", events.TaskRef{ID: id})
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the other replica answered after %s: the pin was not handed on", took)
	}
	sources, commands = answers(t, srv.JS, id)
	if got := sources[len(sources)-1]; got == pinned || commands[len(commands)-1] != "resume-after" {
		t.Fatalf("last answer %s came from %s, want the other replica", commands[len(commands)-1], got)
	}
}

// TestTransientFailureKeepsCommandOrder: a command that meets a transient
// failure (NATS or KV trouble) is tried again before the commands behind
// it. Nakked instead, it came back after them: a pause that failed twice
// was applied after the resume published behind it, and the task ended
// paused.
func TestTransientFailureKeepsCommandOrder(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	m := metrics.New()
	s, err := New(Config{JS: srv.JS, Instance: "g1", Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	var failures atomic.Int32
	s.fault = func(step Step) error {
		if step.CommandID == "pause-1" && failures.Add(1) <= 2 {
			return errors.New("injected: nats: no responders available for request")
		}
		return nil
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	const id = "steady"
	command(t, srv.JS, events.VerbCreated, events.TypeTaskCreated, id, "create", hourly(id))

	last := pauseThenResume(t, srv.JS, id)
	natstest.AwaitAcked(t, srv.JS, streams.StreamTasks, streams.ConsumerGovernor, last)

	appliedInOrder(t, srv.JS, s, id)
	if got := testutil.ToFloat64(m.GovernorRetries.WithLabelValues(streams.StreamTasks)); got != 2 {
		t.Fatalf("flyball_governor_retries_total{stream=TASKS} = %v, want 2", got)
	}
}

// TestStopHandsBackAMessageThatKeepsFailing: Stop lets the messages in
// hand finish, but one that keeps meeting a transient failure (KV down)
// would be tried again for as long as it lasts: Stop waited on it and
// never returned. Stopping, the governor hands it back (nak) after one
// more try, and the messages of the same task behind it too, unapplied,
// so they do not overtake it; the next replica applies them in order.
func TestStopHandsBackAMessageThatKeepsFailing(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	m := metrics.New()
	s, err := New(Config{JS: srv.JS, Instance: "g1", Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	s.fault = func(step Step) error {
		if step.CommandID == "pause-1" {
			return errors.New("injected: nats: no responders available for request")
		}
		return nil
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	// No t.Cleanup(s.Stop): a second Stop waits for the first, and the
	// test is about whether the first returns.
	const id = "stuck"
	command(t, srv.JS, events.VerbCreated, events.TypeTaskCreated, id, "create", hourly(id))

	last := pauseThenResume(t, srv.JS, id)
	natstest.Eventually(t, 5*time.Second, "pause-1 tried again", func() bool {
		return testutil.ToFloat64(m.GovernorRetries.WithLabelValues(streams.StreamTasks)) >= 2
	})

	stopped := make(chan struct{})
	go func() { s.Stop(); close(stopped) }()
	bound := time.NewTimer(lifecycleBound)
	defer bound.Stop()
	select {
	case <-stopped:
	case <-bound.C:
		t.Fatalf("Stop has not returned after %s: it waits on a message that keeps failing", lifecycleBound)
	}
	if _, commands := answers(t, srv.JS, id); fmt.Sprint(commands) != "[create]" {
		t.Fatalf("commands answered before the stop %v, want [create] (resume-2 must not overtake pause-1)", commands)
	}

	g2, err := New(Config{JS: srv.JS, Instance: "g2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := g2.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g2.Stop)
	natstest.AwaitAcked(t, srv.JS, streams.StreamTasks, streams.ConsumerGovernor, last)
	appliedInOrder(t, srv.JS, g2, id)
}

// lifecycleBound is how long a Stop may take when NATS or KV is down: the
// drain timeout, a try in hand and a pause between tries, with room.
const lifecycleBound = lifecycle.DrainTimeout + 2*retryMax

// TestCommandRidesOutAFullBucket: a real KV refusal, not an injected one.
// flyball-pauses refuses every write (its stream is full: max_bytes 1,
// discard new), so the pause fails at the server; the governor takes it
// for transient and tries it again in place, and once the bucket takes
// writes again the pause is applied and answered, in order.
func TestCommandRidesOutAFullBucket(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	m := metrics.New()
	s, err := New(Config{JS: srv.JS, Instance: "g1", Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	const id = "full"
	command(t, srv.JS, events.VerbCreated, events.TypeTaskCreated, id, "create", hourly(id))

	stream, err := srv.JS.Stream(t.Context(), "KV_"+streams.BucketPauses)
	if err != nil {
		t.Fatal(err)
	}
	setMaxBytes := func(n int64) {
		t.Helper()
		cfg := stream.CachedInfo().Config
		cfg.MaxBytes = n
		if _, err := srv.JS.UpdateStream(t.Context(), cfg); err != nil {
			t.Fatal(err)
		}
	}
	setMaxBytes(1)
	last := publish(t, srv.JS, events.VerbPaused, events.TypeTaskPaused, id, "pause-1", events.TaskPause{ID: id})
	natstest.Eventually(t, 10*time.Second, "the pause tried again after the bucket refused it", func() bool {
		return testutil.ToFloat64(m.GovernorRetries.WithLabelValues(streams.StreamTasks)) >= 2
	})
	setMaxBytes(-1)
	natstest.AwaitAcked(t, srv.JS, streams.StreamTasks, streams.ConsumerGovernor, last)
	if _, commands := answers(t, srv.JS, id); fmt.Sprint(commands) != "[create pause-1]" {
		t.Fatalf("answers %v, want [create pause-1]: the refused pause must be applied, not rejected", commands)
	}
	st, _, _, err := s.readState(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Paused {
		t.Fatal("the task is not paused once the bucket took writes again")
	}
}
