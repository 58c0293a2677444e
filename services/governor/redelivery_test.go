package governor

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// redeliver returns a second delivery (NumDelivered 2) of the last
// message on subject of stream, read through a durable of the test's
// own: what the governor's durable hands out after a lost ack, or after
// AckWait. Acking it settles only that durable.
func redeliver(t *testing.T, js jetstream.JetStream, stream, subject string) jetstream.Msg {
	t.Helper()
	ctx := t.Context()
	cons, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: "copy", FilterSubject: subject, AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	for delivery := 1; ; delivery++ {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if delivery == 2 {
			return m
		}
		if err := m.Nak(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRedeliveredCommandOlderThanTheLastAppliedIsIgnored: pause-1 and
// resume-2 are applied in order; then pause-1 comes again (its ack was
// lost, or it waited past AckWait). lastCommandId (resume-2) does not name
// it, but its TASKS sequence is below the schedule's lastCommandSeq: it is
// acknowledged without effect, and the task stays resumed. Before, it was
// applied again and the task ended paused.
func TestRedeliveredCommandOlderThanTheLastAppliedIsIgnored(t *testing.T) {
	s, js := startGovernor(t)
	const id = "copied"
	command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create", hourly(id))
	command(t, js, events.VerbPaused, events.TypeTaskPaused, id, "pause-1", events.TaskPause{ID: id})
	command(t, js, events.VerbResumed, events.TypeTaskResumed, id, "resume-2", events.TaskRef{ID: id})
	before, _, _, err := s.readState(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if before.LastCommandSeq == 0 {
		t.Fatalf("lastCommandSeq not stored: %+v", before)
	}

	s.handleCommand(t.Context(), redeliver(t, js, streams.StreamTasks, events.TaskSubject(events.VerbPaused, id)))
	after, _, _, err := s.readState(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if after.Paused || after.LastCommandID != "resume-2" || after.LastCommandSeq != before.LastCommandSeq {
		t.Fatalf("pause-1 redelivered after resume-2 was applied: paused=%v lastCommandId=%s lastCommandSeq=%d (was %d)",
			after.Paused, after.LastCommandID, after.LastCommandSeq, before.LastCommandSeq)
	}
}

// TestRedeliveredDeleteDoesNotDeleteATaskCreatedAgain: a delete applied,
// the task created again, then the delete comes again: it was stored
// before the new task's creation, so it is not applied to it.
func TestRedeliveredDeleteDoesNotDeleteATaskCreatedAgain(t *testing.T) {
	s, js := startGovernor(t)
	const id = "reborn"
	command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-1", hourly(id))
	command(t, js, events.VerbDeleted, events.TypeTaskDeleted, id, "delete-1", events.TaskRef{ID: id})
	command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create-2", hourly(id))

	s.handleCommand(t.Context(), redeliver(t, js, streams.StreamTasks, events.TaskSubject(events.VerbDeleted, id)))
	if _, err := s.loadSpec(t.Context(), id); err != nil {
		t.Fatalf("the task created again was deleted by the first delete's copy: %v", err)
	}
	st, rev, _, err := s.readState(t.Context(), id)
	if err != nil || rev == 0 || st.LastCommandID != "create-2" {
		t.Fatalf("schedule after the copy: rev %d, lastCommandId %q, err %v", rev, st.LastCommandID, err)
	}
}

// TestRedeliveredBreakerTransitionOlderThanTheLastAppliedIsIgnored: a
// breaker.open applied, then breaker.closed; the open comes again. Its
// HEALTH sequence is at or below lastBreakerSeq, so the runs are not held
// again until its retryAt.
func TestRedeliveredBreakerTransitionOlderThanTheLastAppliedIsIgnored(t *testing.T) {
	s, js := startGovernor(t)
	const id = "flaky"
	command(t, js, events.VerbCreated, events.TypeTaskCreated, id, "create", hourly(id))
	now := time.Now().UTC()
	retryAt := now.Add(10 * time.Minute)
	for _, tr := range []events.BreakerTransition{
		{Key: id, TaskID: id, From: events.BreakerClosed, To: events.BreakerOpen, Failures: 3, RetryAt: &retryAt, At: now},
		{Key: id, TaskID: id, From: events.BreakerOpen, To: events.BreakerClosed, At: now},
	} {
		typ := events.TypeBreakerOpen
		if tr.To == events.BreakerClosed {
			typ = events.TypeBreakerClosed
		}
		body, err := events.Marshal(typ, "test", id, tr, now, "")
		if err != nil {
			t.Fatal(err)
		}
		natstest.AwaitAcked(t, js, streams.StreamHealth, streams.ConsumerGovernor, publishRaw(t, js, events.BreakerSubject(tr.To, id), body))
	}
	before, _, _, err := s.readState(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if before.LastBreakerSeq == 0 || !before.BreakerOpenUntil.IsZero() {
		t.Fatalf("after breaker.closed: lastBreakerSeq %d, breakerOpenUntil %s", before.LastBreakerSeq, before.BreakerOpenUntil)
	}

	s.handleSignal(t.Context(), redeliver(t, js, streams.StreamHealth, events.BreakerSubject(events.BreakerOpen, id)))
	after, _, _, err := s.readState(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if !after.BreakerOpenUntil.IsZero() || !after.NextRunAt.Equal(before.NextRunAt) {
		t.Fatalf("breaker.open redelivered after breaker.closed was applied: runs held until %s, next run %s (was %s)",
			after.BreakerOpenUntil, after.NextRunAt, before.NextRunAt)
	}
}

// TestCommandsWaitingBehindARetryAreNotRedelivered: hint-0 meets a
// transient failure for longer than AckWait (cut to 1 s here; 30 s in
// streams/defs) and is tried again in place; pause-1 and resume-2 wait in
// its shard's queue. They are marked in progress while they wait, so the
// server does not redeliver them: before, their copies queued behind the
// commands published since, and pause-1's copy, applied after resume-2,
// left the task paused.
func TestCommandsWaitingBehindARetryAreNotRedelivered(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	cons, err := srv.JS.Consumer(ctx, streams.StreamTasks, streams.ConsumerGovernor)
	if err != nil {
		t.Fatal(err)
	}
	cfg := cons.CachedInfo().Config
	cfg.AckWait = time.Second
	if _, err := srv.JS.UpdateConsumer(ctx, streams.StreamTasks, cfg); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{JS: srv.JS, Instance: "g1"})
	if err != nil {
		t.Fatal(err)
	}
	var (
		broken    atomic.Bool
		failures  = make(chan struct{}, 100)
		mu        sync.Mutex
		redelived []string
	)
	s.fault = func(step Step) error {
		// hint-0 itself is marked in progress at each try, but with the
		// 1 s AckWait here its 2 s pause between tries lets the server
		// redeliver it (the 5 s longest pause is well inside the real
		// 30 s); its copy comes after resume-2, and is ignored as older.
		if step.Redelivered && step.CommandID != "hint-0" {
			mu.Lock()
			redelived = append(redelived, step.CommandID)
			mu.Unlock()
		}
		if step.CommandID == "hint-0" && broken.Load() {
			failures <- struct{}{}
			return errors.New("injected: nats: no responders available for request")
		}
		return nil
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	const id = "queued"
	command(t, srv.JS, events.VerbCreated, events.TypeTaskCreated, id, "create", hourly(id))

	broken.Store(true)
	publish(t, srv.JS, events.VerbHinted, events.TypeTaskHinted, id, "hint-0", events.TaskHint{ID: id, Interval: events.Duration(2 * time.Hour)})
	publish(t, srv.JS, events.VerbPaused, events.TypeTaskPaused, id, "pause-1", events.TaskPause{ID: id})
	publish(t, srv.JS, events.VerbResumed, events.TypeTaskResumed, id, "resume-2", events.TaskRef{ID: id})
	// The 4th try comes 1.75 s after the first (0.25, 0.5, 1 s apart):
	// pause-1 and resume-2 have waited longer than AckWait.
	for range 4 {
		<-failures
	}
	broken.Store(false)
	// A command behind them: once it is applied, so is any copy queued
	// before it.
	command(t, srv.JS, events.VerbHinted, events.TypeTaskHinted, id, "hint-3", events.TaskHint{ID: id, Interval: events.Duration(3 * time.Hour)})

	st, _, _, err := s.readState(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	_, commands := answers(t, srv.JS, id)
	if st.Paused || st.LastCommandID != "hint-3" {
		t.Fatalf("after hint-0, pause-1, resume-2, hint-3 (answers %v): paused=%v lastCommandId=%s", commands, st.Paused, st.LastCommandID)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(redelived) > 0 {
		t.Fatalf("commands redelivered while they waited behind hint-0's retries: %v", redelived)
	}
}
