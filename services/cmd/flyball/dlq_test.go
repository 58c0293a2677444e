package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestDLQListTimeIsDeadLetteredAt: the TIME column of `dlq list` is when
// the run was dead-lettered (the entry's deadLetteredAt, as in `status`,
// the JSON and the docs), not when DEADLETTER stored the message; an entry
// that does not decode falls back to the stored time.
func TestDLQListTimeIsDeadLetteredAt(t *testing.T) {
	t.Parallel()
	srv, url := natstest.StartListening(t)
	e := &cliEnv{url: url, srv: srv, dir: t.TempDir()}
	at := time.Date(2020, 1, 2, 3, 4, 5, 600e6, time.UTC)
	entry := events.DeadLetter{
		TaskID: "old", Reason: events.DeadLetterPermanent, Attempts: 1,
		Errors:         []events.AttemptError{{Attempt: 1, At: at, Status: 404, Error: "HTTP 404"}},
		DeadLetteredAt: at,
	}
	data, err := events.Marshal(events.TypeDeadLettered, "test", "old", entry, at, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.JS.Publish(t.Context(), events.DeadLetterSubject("old"), data); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.JS.Publish(t.Context(), events.DeadLetterSubject("garbled"), []byte("not an event")); err != nil {
		t.Fatal(err)
	}

	rows := strings.Split(strings.TrimSpace(e.ok(t, "dlq", "list")), "\n")
	if len(rows) != 3 {
		t.Fatalf("dlq list printed %d lines, want a header and 2 rows:\n%s", len(rows), strings.Join(rows, "\n"))
	}
	if f := strings.Fields(rows[1]); len(f) < 3 || f[1] != "2020-01-02T03:04:05.600Z" || f[2] != "old" {
		t.Fatalf("dlq list row %q: want TIME 2020-01-02T03:04:05.600Z (deadLetteredAt), not when it was stored", rows[1])
	}
	f := strings.Fields(rows[2])
	if len(f) < 3 || f[2] != "garbled" {
		t.Fatalf("dlq list row %q: want the garbled entry", rows[2])
	}
	if stored, err := time.Parse(tsFormat, f[1]); err != nil || time.Since(stored).Abs() > time.Minute {
		t.Fatalf("dlq list row %q: want TIME the stored time (just now) of an entry that does not decode", rows[2])
	}
}

// TestDLQRetryAllRequeuesOnce: `dlq retry --all --task` over several
// entries of one task publishes one task.requeued and runs the task once.
// It published one per entry; each after the first asks for a run at or
// after its own time, so when the first requeue's run was still pending
// (held by an open breaker, or a slow call) the fixed target was called a
// second time as soon as it ended.
func TestDLQRetryAllRequeuesOnce(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	tg := newCLITarget(t, http.StatusNotFound) // permanent: dead-lettered at every run
	spec := taskYAML("twice", tg.url, "1h") + "breaker:\n  failureThreshold: 1000\ndeadLetter:\n  recheckAfter: 1s\n"
	e.ok(t, "task", "create", "-f", e.file(t, "twice.yaml", spec))
	entries := func() int {
		return strings.Count(e.ok(t, "dlq", "list", "--task", "twice"), " twice ")
	}
	natstest.Eventually(t, 30*time.Second, "two dead letters of twice (rechecked every second)", func() bool { return entries() >= 2 })

	// The target is fixed; wait for a recheck to succeed, so that nothing
	// runs until the requeue below (the next run is an hour out).
	tg.status.Store(http.StatusOK)
	type state struct {
		Schedule struct {
			NextRunAt   time.Time `json:"nextRunAt"`
			LastOutcome string    `json:"lastOutcome"`
			RequeuedAt  time.Time `json:"requeuedAt"`
		} `json:"schedule"`
	}
	settled := func() bool {
		var v state
		if err := json.Unmarshal([]byte(e.ok(t, "task", "get", "twice", "-o", "json")), &v); err != nil {
			t.Fatal(err)
		}
		return v.Schedule.LastOutcome == "succeeded" && v.Schedule.RequeuedAt.IsZero() && time.Until(v.Schedule.NextRunAt) > 30*time.Minute
	}
	natstest.Eventually(t, 30*time.Second, "a successful recheck of twice", settled)
	n, before := entries(), tg.calls.Load()

	out := e.ok(t, "dlq", "retry", "--all", "--task", "twice")
	if strings.Count(out, "requeued twice") != 1 || !strings.Contains(out, "the newest of ") {
		t.Fatalf("dlq retry --all over %d entries printed %q, want one requeue naming the newest entry", n, out)
	}
	natstest.Eventually(t, 30*time.Second, "the requeued run of twice", settled)
	if calls := tg.calls.Load() - before; calls != 1 {
		t.Fatalf("dlq retry --all over %d entries called the target %d times, want 1", n, calls)
	}
	replayed := e.ok(t, "replay", "--stream", "TASKS", "--subject", "flyball.task.requeued.twice", "-o", "json")
	if got := strings.Count(strings.TrimSpace(replayed), "\n") + 1; got != 1 {
		t.Fatalf("%d task.requeued on TASKS, want 1:\n%s", got, replayed)
	}
}

// TestDLQRetryInterruptedSaysTheRequeueWasStored: a retry interrupted
// (Ctrl-C) while it waits for the governor's answer has stored its
// task.requeued, which the governor applies when it reads it, and the
// error says so. It said only "context canceled", so the operator retried
// again and the task ran twice once the governor caught up.
func TestDLQRetryInterruptedSaysTheRequeueWasStored(t *testing.T) {
	t.Parallel()
	srv, url := natstest.StartListening(t) // no governor: nothing answers
	e := &cliEnv{url: url, srv: srv, dir: t.TempDir()}
	at := time.Now().UTC()
	entry := events.DeadLetter{TaskID: "web", Reason: events.DeadLetterPermanent, Attempts: 1, DeadLetteredAt: at}
	data, err := events.Marshal(events.TypeDeadLettered, "test", "web", entry, at, "")
	if err != nil {
		t.Fatal(err)
	}
	ack, err := srv.JS.Publish(t.Context(), events.DeadLetterSubject("web"), data)
	if err != nil {
		t.Fatal(err)
	}
	// The task exists: the retry of a deleted task's entry sends nothing.
	natstest.PutJSON(t, srv.JS, streams.BucketTasks, "web", events.TaskSpec{ID: "web", Schedule: events.Schedule{Interval: events.Duration(time.Hour)}})
	requeues := make(chan *nats.Msg, 1)
	natstest.ChanSubscribe(t, srv.NC, events.TaskSubject(events.VerbRequeued, "web"), requeues)

	var out, errOut bytes.Buffer
	cmd := e.command(t.Context(), "dlq", "retry", fmt.Sprint(ack.Sequence), "--timeout", "1m")
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-requeues: // stored; the CLI now waits for an answer
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("no task.requeued published; stderr %q", errOut.String())
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("interrupted retry: %v, want exit 1; stderr %q", err, errOut.String())
	}
	msg := errOut.String()
	// Interrupted before or after JetStream's ack reached the CLI: either
	// way the requeue is (or may be) stored, and the error says so.
	if !strings.HasPrefix(msg, "flyball: ") || strings.Count(msg, "\n") != 1 ||
		!strings.Contains(msg, `task.requeued for "web"`) || !strings.Contains(msg, "applied when the governor reads it") {
		t.Fatalf("interrupted retry printed %q; want one line saying the requeue is stored, or may be", msg)
	}
}

// TestDLQRetryOfARecreatedTaskIsRefused: a dead letter of a task deleted
// and created again under the same ID since is not the new task's. Its
// retry requeued the new task, which ran once; it is now refused in one
// line naming the recreation, and nothing is sent, unless --force.
func TestDLQRetryOfARecreatedTaskIsRefused(t *testing.T) {
	t.Parallel()
	srv, url := natstest.StartListening(t) // no governor: nothing answers
	e := &cliEnv{url: url, srv: srv, dir: t.TempDir()}
	ctx := t.Context()
	was := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	now := was.Add(time.Hour)
	entry := events.DeadLetter{
		TaskID: "web", Reason: events.DeadLetterPermanent, Attempts: 1, DeadLetteredAt: was.Add(time.Minute),
		Dispatch: events.Dispatch{DispatchID: "web:1", TaskID: "web", ScheduledAt: was, TaskCreatedAt: was},
	}
	data, err := events.Marshal(events.TypeDeadLettered, "test", "web", entry, was, "")
	if err != nil {
		t.Fatal(err)
	}
	ack, err := srv.JS.Publish(ctx, events.DeadLetterSubject("web"), data)
	if err != nil {
		t.Fatal(err)
	}
	spec := events.TaskSpec{ID: "web", Schedule: events.Schedule{Interval: events.Duration(time.Hour)}, Target: events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/"}}}
	natstest.PutJSON(t, srv.JS, streams.BucketTasks, "web", spec)
	natstest.PutJSON(t, srv.JS, streams.BucketSchedules, "web", gov.State{TaskID: "web", CreatedAt: now, NextRunAt: now.Add(time.Hour)})
	requeues := func() uint64 {
		st, err := srv.JS.Stream(ctx, streams.StreamTasks)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(events.TaskSubject(events.VerbRequeued, "web")))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}

	r := e.run(t, "dlq", "retry", fmt.Sprint(ack.Sequence))
	if r.code != 1 || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "created again at "+now.Format(time.RFC3339Nano)) || !strings.Contains(r.stderr, "--force") {
		t.Fatalf("dlq retry of a recreated task's entry: exit %d, stderr %q; want exit 1 and one line naming the recreation and --force", r.code, r.stderr)
	}
	if n := requeues(); n != 0 {
		t.Fatalf("refused retry: %d task.requeued on TASKS, want 0", n)
	}
	e.run(t, "dlq", "retry", fmt.Sprint(ack.Sequence), "--force", "--timeout", "1s") // no governor answers
	if n := requeues(); n != 1 {
		t.Fatalf("forced retry: %d task.requeued on TASKS, want 1", n)
	}
	// It names no task creation: it runs the task of this ID now.
	if rq, raw := lastRequeue(t, srv.JS, "web"); rq.DeadLetterSeq != ack.Sequence || !rq.TaskCreatedAt.IsZero() || strings.Contains(raw, "taskCreatedAt") {
		t.Fatalf("forced retry stored %s, want deadLetterSeq %d and no taskCreatedAt", raw, ack.Sequence)
	}
}

// lastRequeue is the data of the last task.requeued of task id on TASKS,
// decoded and as stored.
func lastRequeue(t *testing.T, js jetstream.JetStream, id string) (events.TaskRequeue, string) {
	t.Helper()
	var rq events.TaskRequeue
	raw := natstest.LastData(t, js, streams.StreamTasks, events.TaskSubject(events.VerbRequeued, id), &rq)
	return rq, raw
}

// TestDLQRetryNamesTheDeadLettersTask: the requeue `dlq retry` publishes
// names the task creation the entry is of (its dispatch's taskCreatedAt),
// so the governor rejects it if the task is deleted and created again
// after the CLI's check. --all names its newest entry's; --force names
// none, and runs the task of the ID then.
func TestDLQRetryNamesTheDeadLettersTask(t *testing.T) {
	t.Parallel()
	srv, url := natstest.StartListening(t) // no governor: nothing answers
	e := &cliEnv{url: url, srv: srv, dir: t.TempDir()}
	created := time.Date(2026, 11, 29, 9, 0, 0, 123456789, time.UTC)
	var seq uint64
	for i := range 2 {
		slot := created.Add(time.Duration(i) * time.Hour)
		entry := events.DeadLetter{
			TaskID: "web", Reason: events.DeadLetterPermanent, Attempts: 1, DeadLetteredAt: slot.Add(time.Minute),
			Dispatch: events.Dispatch{DispatchID: events.DispatchID("web", slot), TaskID: "web", ScheduledAt: slot, TaskCreatedAt: created},
		}
		data, err := events.Marshal(events.TypeDeadLettered, "test", "web", entry, slot, "")
		if err != nil {
			t.Fatal(err)
		}
		ack, err := srv.JS.Publish(t.Context(), events.DeadLetterSubject("web"), data)
		if err != nil {
			t.Fatal(err)
		}
		seq = ack.Sequence
	}
	spec := events.TaskSpec{ID: "web", Schedule: events.Schedule{Interval: events.Duration(time.Hour)}, Target: events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/"}}}
	natstest.PutJSON(t, srv.JS, streams.BucketTasks, "web", spec)
	natstest.PutJSON(t, srv.JS, streams.BucketSchedules, "web", gov.State{TaskID: "web", CreatedAt: created, NextRunAt: created.Add(time.Hour)})

	for i, c := range []struct {
		args  []string
		named bool
	}{
		{[]string{"dlq", "retry", fmt.Sprint(seq), "--reason", "fixed"}, true},
		{[]string{"dlq", "retry", "--all", "--task", "web"}, true},
		{[]string{"dlq", "retry", fmt.Sprint(seq), "--force"}, false},
		{[]string{"dlq", "retry", "--all", "--task", "web", "--force"}, false},
	} {
		e.run(t, append(c.args, "--timeout", "1s")...) // no governor answers: pending
		if n := len(natstest.Read(t, srv.JS, streams.StreamTasks, events.TaskSubject(events.VerbRequeued, "web"))); n != i+1 {
			t.Fatalf("flyball %s: %d task.requeued on TASKS, want %d", strings.Join(c.args, " "), n, i+1)
		}
		rq, raw := lastRequeue(t, srv.JS, "web")
		switch {
		case rq.DeadLetterSeq != seq:
			t.Errorf("flyball %s stored %s, want deadLetterSeq %d", strings.Join(c.args, " "), raw, seq)
		case c.named && !rq.TaskCreatedAt.Equal(created):
			t.Errorf("flyball %s stored %s, want taskCreatedAt %s", strings.Join(c.args, " "), raw, created.Format(time.RFC3339Nano))
		case !c.named && strings.Contains(raw, "taskCreatedAt"):
			t.Errorf("flyball %s stored %s, want no taskCreatedAt", strings.Join(c.args, " "), raw)
		}
	}
}

// TestDLQEmptyTaskIsRefused: an empty --task (a script's unset variable,
// "--task $T") is a mistake, not "every task". It read as no filter, so
// `dlq purge --task "" --yes` purged every task's dead letters.
func TestDLQEmptyTaskIsRefused(t *testing.T) {
	t.Parallel()
	srv, url := natstest.StartListening(t)
	e := &cliEnv{url: url, srv: srv, dir: t.TempDir()}
	for _, id := range []string{"keep", "other"} {
		data, err := events.Marshal(events.TypeDeadLettered, "test", id, events.DeadLetter{TaskID: id, Reason: events.DeadLetterPermanent, Attempts: 1}, time.Now(), "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := srv.JS.Publish(t.Context(), events.DeadLetterSubject(id), data); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"dlq", "purge", "--task", "", "--yes"},
		{"dlq", "list", "--task", ""},
		{"dlq", "tail", "--task", ""},
		{"dlq", "retry", "1", "--task", ""},
	} {
		r := e.run(t, args...)
		if r.code != 1 || !strings.HasPrefix(r.stderr, "flyball: --task: ") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("flyball %q: exit %d, stdout %q, stderr %q; want exit 1 and one line naming --task", args, r.code, r.stdout, r.stderr)
		}
	}
	if rows := strings.Split(strings.TrimSpace(e.ok(t, "dlq", "list")), "\n"); len(rows) != 3 {
		t.Fatalf("dlq list after the refused purge printed %d lines, want a header and 2 rows:\n%s", len(rows), strings.Join(rows, "\n"))
	}
}

// TestDLQRetryAllRunsATaskWhoseDeadLettersWerePurged: a task held for its
// dead-letter recheck whose entries were purged still runs with `dlq retry
// --all --task`, the command run-now advises; and the purge warns that it
// leaves the task held. The retry printed `no dead letters of "gone" to
// retry`, exit 0, and the task waited for its recheck (30 min by default).
func TestDLQRetryAllRunsATaskWhoseDeadLettersWerePurged(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	tg := newCLITarget(t, http.StatusNotFound) // permanent: dead-lettered at the first run
	spec := taskYAML("gone", tg.url, "1h") + "deadLetter:\n  recheckAfter: 1h\n"
	e.ok(t, "task", "create", "-f", e.file(t, "gone.yaml", spec))
	type state struct {
		Schedule struct {
			Source     string    `json:"source"`
			RequeuedAt time.Time `json:"requeuedAt"`
			CreatedAt  time.Time `json:"createdAt"`
			DeadLetter *struct{} `json:"deadLetter"`
		} `json:"schedule"`
	}
	get := func() state {
		var v state
		if err := json.Unmarshal([]byte(e.ok(t, "task", "get", "gone", "-o", "json")), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	var held state
	natstest.Eventually(t, 30*time.Second, "gone held for its dead-letter recheck", func() bool {
		held = get()
		return held.Schedule.Source == string(gov.SourceDeadLetterRecheck)
	})
	tg.status.Store(http.StatusOK)
	before := tg.calls.Load()

	r := e.run(t, "dlq", "purge", "--task", "gone", "--yes")
	if r.code != 0 || !strings.Contains(r.stdout, "purged 1 dead letter(s)") {
		t.Fatalf("dlq purge: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if w := strings.TrimSpace(r.stderr); strings.Count(w, "\n") != 0 || !strings.Contains(w, "held for its dead-letter recheck") ||
		!strings.Contains(w, "flyball dlq retry --all --task gone") {
		t.Fatalf("dlq purge of a held task: stderr %q, want one line naming the recheck and the retry", r.stderr)
	}

	out := e.ok(t, "dlq", "retry", "--all", "--task", "gone")
	if !strings.Contains(out, "purged") || !strings.Contains(out, "requeued gone") {
		t.Fatalf("dlq retry --all after the purge printed %q, want the requeue of the held task", out)
	}
	// The requeue names the task it is for (its createdAt), so a task
	// deleted and created again before it applies is not run by it, and
	// no dead letter (there is none left).
	if rq, _ := lastRequeue(t, e.srv.JS, "gone"); !rq.TaskCreatedAt.Equal(held.Schedule.CreatedAt) || rq.TaskCreatedAt.IsZero() || rq.DeadLetterSeq != 0 {
		t.Fatalf("requeue after the purge: taskCreatedAt %v, deadLetterSeq %d; want the task's createdAt %v and no sequence", rq.TaskCreatedAt, rq.DeadLetterSeq, held.Schedule.CreatedAt)
	}
	natstest.Eventually(t, 30*time.Second, "the requeued run of gone", func() bool {
		v := get()
		return tg.calls.Load() > before && v.Schedule.Source != string(gov.SourceDeadLetterRecheck) && v.Schedule.DeadLetter == nil
	})

	// Not held any more: nothing to retry, exit 0, as before.
	if out := e.ok(t, "dlq", "retry", "--all", "--task", "gone"); !strings.Contains(out, `no dead letters of "gone" to retry`) {
		t.Fatalf("dlq retry --all of a task not held printed %q", out)
	}
	if r := e.run(t, "dlq", "purge", "--task", "gone", "--yes"); r.code != 0 || r.stderr != "" {
		t.Fatalf("dlq purge of a task not held: exit %d, stderr %q, want no warning", r.code, r.stderr)
	}
	// An unknown task with no dead letters is an error, as for task get.
	e.fails(t, []string{"dlq", "retry", "--all", "--task", "ghost"}, `no task "ghost"`)
}

// TestDLQPurgeOfNothingReadsNaturally: a purge with nothing stored said
// "no dead letters of every task: nothing to purge".
func TestDLQPurgeOfNothingReadsNaturally(t *testing.T) {
	t.Parallel()
	srv, url := natstest.StartListening(t)
	e := &cliEnv{url: url, srv: srv, dir: t.TempDir()}
	for _, yes := range []bool{false, true} {
		args := []string{"dlq", "purge"}
		if yes {
			args = append(args, "--yes")
		}
		if out := e.ok(t, args...); out != "no dead letters stored: nothing to purge\n" {
			t.Errorf("flyball %s printed %q", strings.Join(args, " "), out)
		}
	}
	if out := e.ok(t, "dlq", "purge", "--task", "gone"); out != "no dead letters of task \"gone\": nothing to purge\n" {
		t.Errorf("dlq purge --task gone printed %q", out)
	}
}

// TestDLQRetryOfADeletedTasksEntryIsOneLine: the entry of a task deleted
// since (and not created again) has nothing to retry. The requeue was
// sent, and the governor's rejection printed over two lines ("rejected
// by the governor (1 reason):" and the reason below); it is now refused
// in one line, as `dlq retry --all --task` of a task with no entries
// left is, and nothing is sent.
func TestDLQRetryOfADeletedTasksEntryIsOneLine(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	entry := events.DeadLetter{
		TaskID: "gone", Reason: events.DeadLetterPermanent, Attempts: 1, DeadLetteredAt: time.Now().UTC(),
		Dispatch: events.Dispatch{DispatchID: "gone:1", TaskID: "gone"},
	}
	data, err := events.Marshal(events.TypeDeadLettered, "test", "gone", entry, entry.DeadLetteredAt, "")
	if err != nil {
		t.Fatal(err)
	}
	ack, err := e.srv.JS.Publish(t.Context(), events.DeadLetterSubject("gone"), data)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"dlq", "retry", fmt.Sprint(ack.Sequence)},
		{"dlq", "retry", "--all", "--task", "gone"},
		{"dlq", "retry", fmt.Sprint(ack.Sequence), "--force"},
	} {
		r := e.fails(t, args, fmt.Sprintf(`no task "gone": dead letter %d is of a task deleted since`, ack.Sequence))
		if strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("flyball %s: stderr %q, want one line", strings.Join(args, " "), r.stderr)
		}
	}
	st, err := e.srv.JS.Stream(t.Context(), streams.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(t.Context(), jetstream.WithSubjectFilter(events.TaskSubject(events.VerbRequeued, "gone"))); err != nil || len(info.State.Subjects) != 0 {
		t.Fatalf("task.requeued stored for the deleted task: %v, %v; want none", info.State.Subjects, err)
	}
}
