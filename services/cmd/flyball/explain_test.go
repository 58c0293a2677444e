package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/query"
	"github.com/flyballhq/flyball/streams"
)

// TestCLIExplain drives one task through baseline, a clamp, failure
// backoff, an interval hint and a pause, then checks that explain names
// every source in order and that its replay agrees with the stored
// schedule.
func TestCLIExplain(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	tg := newCLITarget(t, http.StatusOK)
	task := `id: story
target:
  http:
    url: ` + tg.url + `
schedule:
  interval: 1s
bounds:
  min: 2s
  max: 5s
retry:
  maxAttempts: 1
`
	e.ok(t, "task", "create", "-f", e.file(t, "story.yaml", task))
	natstest.Eventually(t, 15*time.Second, "two successful runs", func() bool { return tg.calls.Load() >= 2 })
	tg.status.Store(http.StatusInternalServerError)
	failedAt := tg.calls.Load()
	natstest.Eventually(t, 15*time.Second, "a failed run", func() bool { return tg.calls.Load() > failedAt })
	natstest.Eventually(t, 10*time.Second, "the failure is applied", func() bool {
		return strings.Contains(e.ok(t, "task", "get", "story", "-o", "json"), `"failures": 1`)
	})
	tg.status.Store(http.StatusOK)
	recovered := tg.calls.Load()
	natstest.Eventually(t, 15*time.Second, "a successful run resets the failures", func() bool {
		return tg.calls.Load() > recovered && !strings.Contains(e.ok(t, "task", "get", "story", "-o", "json"), `"failures": 1`)
	})
	e.ok(t, "task", "hint", "story", "--interval", "4s", "--reason", "busy period")
	// A later hint applies from the next run: let one run happen under it.
	hinted := tg.calls.Load()
	natstest.Eventually(t, 15*time.Second, "a run after the hint", func() bool { return tg.calls.Load() > hinted })
	natstest.Eventually(t, 10*time.Second, "the hint chooses the next run", func() bool {
		return strings.Contains(e.ok(t, "task", "get", "story", "-o", "json"), `"source": "hint-interval"`)
	})
	e.ok(t, "task", "pause", "story", "--until", "1h", "--reason", "maintenance")

	out := e.ok(t, "explain", "story")
	// The failed run (maxAttempts 1: final, dead-lettered) holds the task
	// for its recheck, which bounds.max lowers to 5s.
	order := []string{"baseline-interval", "clamped-min", "clamped-max", "hint-interval", "paused"}
	rest := out
	for _, src := range order {
		i := strings.Index(rest, " "+src+" ")
		if i < 0 {
			t.Fatalf("explain output lacks %s after the earlier sources:\n%s", src, out)
		}
		rest = rest[i+len(src):]
	}
	// The dead letter that followed is listed, as the input that changed nothing.
	if !strings.Contains(out, "no change: the task was already held for this run's recheck") {
		t.Fatalf("explain output lacks the dead letter that changed nothing:\n%s", out)
	}
	if !strings.Contains(out, "the replay agrees") {
		t.Fatalf("explain does not agree with the stored schedule:\n%s", out)
	}
	var ex query.Explanation
	if err := json.Unmarshal([]byte(e.ok(t, "explain", "story", "-o", "json")), &ex); err != nil {
		t.Fatal(err)
	}
	if !ex.Agrees || ex.Stored == nil || ex.Replayed == nil || !ex.Stored.NextRunAt.Equal(ex.Replayed.NextRunAt) {
		t.Fatalf("explain -o json: agrees=%v stored=%+v replayed=%+v", ex.Agrees, ex.Stored, ex.Replayed)
	}
	held := false
	for _, st := range ex.Timeline {
		if strings.HasPrefix(st.Input, "run failed") {
			held = strings.Contains(strings.Join(st.Trail, "\n"), "dead-lettered (max-attempts)")
		}
	}
	if !held {
		t.Fatalf("explain: the final failure's trail does not say it was dead-lettered:\n%s", out)
	}
	if last := ex.Timeline[len(ex.Timeline)-1]; last.Source != "paused" || last.Stream != "TASKS" {
		t.Fatalf("last decision = %+v, want the pause from TASKS", last)
	}
	e.fails(t, []string{"explain", "bad.id"}, "id")
	e.fails(t, []string{"explain", "story", "--max-inputs", "0"}, "--max-inputs must be at least 1")
	// An id nothing was ever recorded for is a mistake, as for task get.
	e.fails(t, []string{"explain", "nosuch"}, `no task "nosuch": no decision recorded and no schedule stored`)
}

// TestExplainJSONExitsOneOnAMismatch: a mismatch between the replay and
// the stored schedule exits 1 with -o json too, after printing the JSON,
// as it does with the table (docs/operations.md, "Explain a schedule").
// With -o json it exited 0, so a script checking explain's exit code
// never saw a mismatch.
func TestExplainJSONExitsOneOnAMismatch(t *testing.T) {
	t.Parallel()
	srv, url := natstest.StartListening(t)
	e := &cliEnv{url: url, srv: srv, dir: t.TempDir()}
	// A creation in TASKS, and a stored schedule decided after it that
	// the replay of that creation does not lead to. (A stored schedule
	// with no input behind it at all is no mismatch: nothing is replayed,
	// TestExplainOfALiveTaskWhoseHistoryAgedOut.)
	spec := events.TaskSpec{
		ID: "ghost", Schedule: events.Schedule{Interval: events.Duration(time.Hour)},
		Target: events.Target{HTTP: &events.HTTPTarget{URL: "http://127.0.0.1:1/x"}},
	}
	body, err := events.Marshal(events.TypeTaskCreated, "test", "ghost", spec, time.Now(), "create-ghost")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jsutil.Publish(t.Context(), srv.JS, events.TaskSubject(events.VerbCreated, "ghost"), "", body); err != nil {
		t.Fatal(err)
	}
	kv, err := srv.JS.KeyValue(t.Context(), streams.BucketSchedules)
	if err != nil {
		t.Fatal(err)
	}
	st := gov.State{
		TaskID: "ghost", NextRunAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Source: gov.SourceBaselineInterval,
		DecidedAt: time.Now().Add(time.Minute),
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), "ghost", b); err != nil {
		t.Fatal(err)
	}
	e.fails(t, []string{"explain", "ghost"}, "the replay does not match the stored schedule of ghost")
	r := e.fails(t, []string{"explain", "ghost", "-o", "json"}, "the replay does not match the stored schedule of ghost")
	var ex query.Explanation
	if err := json.Unmarshal([]byte(r.stdout), &ex); err != nil || ex.Agrees || ex.Stored == nil {
		t.Fatalf("explain -o json printed %q (%v); want the explanation, agrees false", r.stdout, err)
	}
}

// TestExplainSaysWhatSinceHides: when --since is later than every
// decision, explain said "no decisions recorded", as for a task with
// none, though the task has them: it says how many --since hides.
func TestExplainSaysWhatSinceHides(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	e.ok(t, "task", "create", "-f", e.file(t, "quiet.yaml", "id: quiet\ntarget:\n  http:\n    url: http://127.0.0.1:1/x\nschedule:\n  interval: 1h\n"))
	e.ok(t, "task", "pause", "quiet", "--reason", "maintenance")
	// Both were answered, so stored before now.
	since := time.Now().UTC().Format(time.RFC3339Nano)
	out := e.ok(t, "explain", "quiet", "--since", since)
	// It names the time, not the flag: "since --since" read as a typo.
	at, err := time.Parse(time.RFC3339Nano, since)
	if err != nil {
		t.Fatal(err)
	}
	if want := "no decisions for quiet since " + at.Format(tsFormat) + ": 2 were recorded before it (a wider --since shows them)"; !strings.Contains(out, want) {
		t.Fatalf("explain --since %s:\n%s\nwant %q", since, out, want)
	}
	raw := e.ok(t, "explain", "quiet", "--since", since, "-o", "json")
	// Every line hidden, the timeline is empty, not null.
	if !strings.Contains(raw, `"timeline": []`) {
		t.Errorf("explain --since -o json:\n%s\nwant \"timeline\": []", raw)
	}
	var ex query.Explanation
	if err := json.Unmarshal([]byte(raw), &ex); err != nil {
		t.Fatal(err)
	}
	if ex.Hidden != 2 || len(ex.Timeline) != 0 || !ex.Agrees {
		t.Fatalf("explain --since -o json: hidden %d, timeline %+v, agrees %v; want 2 hidden, none listed, agreeing", ex.Hidden, ex.Timeline, ex.Agrees)
	}
}

// TestExplainJSONOfAnIDOnlyDeleted: explain -o json of an id whose only
// input is a task.deleted (deleted without ever being created: a delete
// always succeeds) has nothing to replay: it says so with
// "nothingReplayed": true and exits 0, as docs/operations.md says, since
// there is no mismatch either. (flyball task delete refuses an unknown
// id; a delete published directly is applied.)
func TestExplainJSONOfAnIDOnlyDeleted(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	body, err := events.Marshal(events.TypeTaskDeleted, "test", "never", events.TaskRef{ID: "never", Reason: "no such task"}, time.Now(), "delete-never")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jsutil.Publish(t.Context(), e.srv.JS, events.TaskSubject(events.VerbDeleted, "never"), "", body); err != nil {
		t.Fatal(err)
	}
	r := e.run(t, "explain", "never", "-o", "json")
	if r.code != 0 || !strings.Contains(r.stdout, `"nothingReplayed": true`) {
		t.Fatalf("explain never -o json: exit %d\n%s%s\nwant exit 0 and \"nothingReplayed\": true", r.code, r.stdout, r.stderr)
	}
	var ex query.Explanation
	if err := json.Unmarshal([]byte(r.stdout), &ex); err != nil {
		t.Fatal(err)
	}
	if !ex.NothingReplayed || ex.Stored != nil || ex.Replayed != nil {
		t.Fatalf("explain never -o json: nothingReplayed %v, stored %+v, replayed %+v; want nothing replayed or stored", ex.NothingReplayed, ex.Stored, ex.Replayed)
	}
}

// TestExplainSaysWhenATaskWasDeleted: explain of a deleted task says when
// it was deleted. Its creation aged out of TASKS (a year) and only its
// delete left, explain failed with `no task`, as for an id never used.
func TestExplainSaysWhenATaskWasDeleted(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	e.ok(t, "task", "create", "-f", e.file(t, "brief.yaml", "id: brief\ntarget:\n  http:\n    url: http://127.0.0.1:1/x\nschedule:\n  interval: 1h\n"))
	e.ok(t, "task", "delete", "brief", "--reason", "retired")
	var ex query.Explanation
	if err := json.Unmarshal([]byte(e.ok(t, "explain", "brief", "-o", "json")), &ex); err != nil {
		t.Fatal(err)
	}
	if n := len(ex.Timeline); n != 2 || ex.Timeline[1].Input != "task.deleted" || !ex.DeletedAt.Equal(ex.Timeline[1].At) {
		t.Fatalf("explain -o json of a deleted task: deletedAt %s, timeline %+v; want the creation, then the delete at deletedAt", ex.DeletedAt, ex.Timeline)
	}
	want := "stored: no schedule: the task was deleted at " + ex.DeletedAt.UTC().Format("2006-01-02T15:04:05.000Z") + "; the replay agrees"
	if out := e.ok(t, "explain", "brief"); !strings.Contains(out, want) {
		t.Errorf("explain of a deleted task:\n%s\nwant %q", out, want)
	}

	// Only the delete left in TASKS, its creation aged out.
	body, err := events.Marshal(events.TypeTaskDeleted, "test", "old", events.TaskRef{ID: "old", Reason: "retired"}, time.Now(), "delete-old")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jsutil.Publish(t.Context(), e.srv.JS, events.TaskSubject(events.VerbDeleted, "old"), "", body); err != nil {
		t.Fatal(err)
	}
	out := e.ok(t, "explain", "old")
	for _, want := range []string{"stored: no schedule: the task was deleted at ", "flyball replay --stream TASKS --subject 'flyball.task.*.old'", "nothing was replayed"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain of a deleted task whose creation aged out:\n%s\nwant %q", out, want)
		}
	}
	// Nothing replayed, nothing agrees: it said "the replay agrees".
	if strings.Contains(out, "the replay agrees") {
		t.Errorf("explain of a task with nothing to replay claims agreement:\n%s", out)
	}
}

// TestExplainKeepsTheSpecOfACommandAppliedAlready: a task.created stored
// again with the id of the task's last applied command (nats pub run twice
// without a Nats-Msg-Id) changes nothing (docs/events.md), but explain
// replayed the later runs with the copy's spec: "1m0s after the slot" for
// a task that ran every second, then a MISMATCH, exit 1.
func TestExplainKeepsTheSpecOfACommandAppliedAlready(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	tg := newCLITarget(t, http.StatusOK)
	publish := func(interval time.Duration) {
		t.Helper()
		spec := events.TaskSpec{ID: "dup1", Target: events.Target{HTTP: &events.HTTPTarget{URL: tg.url}}, Schedule: events.Schedule{Interval: events.Duration(interval)}}
		body, err := events.Marshal(events.TypeTaskCreated, "cli/me", "dup1", spec, time.Now(), "d-1")
		if err != nil {
			t.Fatal(err)
		}
		// No Nats-Msg-Id: TASKS stores both copies.
		if _, err := jsutil.Publish(t.Context(), e.srv.JS, events.TaskSubject(events.VerbCreated, "dup1"), "", body); err != nil {
			t.Fatal(err)
		}
	}
	publish(time.Second)
	natstest.Eventually(t, 15*time.Second, "a run", func() bool { return tg.calls.Load() >= 1 })
	publish(time.Minute)
	resent := tg.calls.Load()
	natstest.Eventually(t, 15*time.Second, "runs after the copy", func() bool { return tg.calls.Load() > resent+2 })
	// Stop the inputs before explain reads them: runs landing every second
	// while it reads TASKS, RUNS and the stored schedule could make it
	// disagree for that alone. Paused, no slot is dispatched again; the
	// one dispatched before the pause has run (or been skipped) and its
	// outcome is applied once DISPATCH's executor and the governor's
	// consumers have nothing left to settle.
	e.ok(t, "task", "pause", "dup1", "--reason", "explain reads a still history")
	ctx := t.Context()
	natstest.Eventually(t, 15*time.Second, "the runs dispatched before the pause are applied", func() bool {
		for _, c := range []struct{ stream, durable string }{
			{streams.StreamDispatch, streams.ConsumerExecutor},
			{streams.StreamRuns, streams.ConsumerGovernor},
			{streams.StreamTasks, streams.ConsumerGovernor},
		} {
			cons, err := e.srv.JS.Consumer(ctx, c.stream, c.durable)
			if err != nil {
				return false
			}
			info, err := cons.Info(ctx)
			if err != nil || info.NumPending != 0 || info.NumAckPending != 0 {
				return false
			}
		}
		return true
	})
	r := e.run(t, "explain", "dup1")
	if r.code != 0 || !strings.Contains(r.stdout, "the replay agrees") || strings.Contains(r.stdout, "1m0s") {
		t.Fatalf("explain dup1: exit %d\n%s%s\nwant the replay to agree, every run 1s apart", r.code, r.stdout, r.stderr)
	}
	if want := `no change: command "d-1" was applied already`; !strings.Contains(r.stdout, want) {
		t.Fatalf("explain dup1:\n%s\nwant the copy's line to say %q", r.stdout, want)
	}
}

// TestExplainOfALiveTaskWhoseHistoryAgedOut: a task whose creation and
// updates are no longer in TASKS (a year by default, sooner with a lower
// MaxAge, or TASKS re-created or restored) still has its schedule
// stored. explain replays nothing and warns so; it printed "MISMATCH:
// stored …, replayed no schedule" and exited 1, as if the schedule were
// wrong, while docs/operations.md says it ends "nothing was replayed to
// compare with" and exits 0.
func TestExplainOfALiveTaskWhoseHistoryAgedOut(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	e.ok(t, "task", "create", "-f", e.file(t, "aged.yaml", "id: aged\ntarget:\n  http:\n    url: http://127.0.0.1:1/x\nschedule:\n  interval: 1h\n"))
	schedules, err := e.srv.JS.KeyValue(t.Context(), streams.BucketSchedules)
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "the governor stores aged's schedule", func() bool {
		_, err := schedules.Get(t.Context(), "aged")
		return err == nil
	})
	tasks, err := e.srv.JS.Stream(t.Context(), streams.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	if err := tasks.Purge(t.Context(), jetstream.WithPurgeSubject("flyball.task.*.aged")); err != nil {
		t.Fatal(err)
	}
	r := e.run(t, "explain", "aged")
	if r.code != 0 || !strings.Contains(r.stdout, "; nothing was replayed to compare with") || strings.Contains(r.stdout, "MISMATCH") {
		t.Fatalf("explain of a task whose history aged out: exit %d\n%s%s\nwant exit 0, \"nothing was replayed to compare with\", no MISMATCH", r.code, r.stdout, r.stderr)
	}
	r = e.run(t, "explain", "aged", "-o", "json")
	var ex query.Explanation
	if err := json.Unmarshal([]byte(r.stdout), &ex); err != nil {
		t.Fatalf("explain aged -o json: %v\n%s%s", err, r.stdout, r.stderr)
	}
	if r.code != 0 || !ex.NothingReplayed || ex.Stored == nil || !ex.Agrees {
		t.Fatalf("explain aged -o json: exit %d, nothingReplayed %v, stored %+v, agrees %v; want exit 0, nothing replayed, the schedule stored, no mismatch", r.code, ex.NothingReplayed, ex.Stored, ex.Agrees)
	}
}
