package query_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/control"
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
	st, err := stack.Start(context.Background(), stack.Config{JS: js, Services: []string{"governor"}, Guard: executor.Guard{AllowLoopback: true}})
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
			if !natstest.CaughtUp(ctx, js, s, streams.ConsumerGovernor) {
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
	publishEvent(t, js, events.TaskSubject(events.VerbPaused, id), events.TypeTaskPaused, id, "pause", json.RawMessage(`{"id":"`+id+`","when":"soon"}`))
	publishEvent(t, js, events.TaskSubject(events.VerbPaused, id), events.TypeTaskPaused, id, "pause", events.TaskPause{ID: id, Reason: "maintenance"})
	governorCaughtUp(t, js)
	explainMatchesStore(t, q, id)
}

// TestExplainReplaysEveryKindOfInput drives a governor through every
// kind of input it applies, one at a time, and checks after each that
// explain rebuilds exactly the stored schedule.
func TestExplainReplaysEveryKindOfInput(t *testing.T) {
	js, q := governorOnly(t)
	const id = "every"
	now := time.Now().UTC().Truncate(time.Millisecond)
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	spec := func(interval string) json.RawMessage {
		return json.RawMessage(`{"id":"` + id + `","target":{"http":{"url":"http://h.example:8080/x"}},"schedule":{"interval":"` + interval + `"},` +
			`"breaker":{"scope":"host"},"retry":{"maxAttempts":2}}`)
	}
	var hostSpec events.TaskSpec
	if err := json.Unmarshal(spec("1m"), &hostSpec); err != nil {
		t.Fatal(err)
	}
	hostKey := executor.BreakerKey(&hostSpec) // the host's breaker, as the executor keys it
	cmd := func(verb events.Verb, ceID string, data any) func() {
		return func() { publishEvent(t, js, events.TaskSubject(verb, id), verb.Type(), id, ceID, data) }
	}
	run := func(o events.Outcome, typ, taskID, dispatch string, slot, finished time.Duration) func() {
		return func() {
			publishEvent(t, js, events.RunSubject(o, id), typ, id, "run-"+dispatch+string(o), events.Run{
				DispatchID: dispatch, TaskID: taskID, ScheduledAt: now.Add(slot), FinishedAt: now.Add(finished), Attempt: 1, Final: true,
			})
		}
	}
	breaker := func(key string, to events.BreakerState, retryAt *time.Time) func() {
		return func() {
			publishEvent(t, js, events.BreakerSubject(to, key), "io.flyball.breaker."+string(to), key, "br-"+string(to)+time.Now().String(), events.BreakerTransition{
				Key: key, TaskID: id, From: events.BreakerClosed, To: to, RetryAt: retryAt, At: time.Now(),
			})
		}
	}
	steps := []struct {
		name string
		do   func()
	}{
		{"create", cmd(events.VerbCreated, "c1", spec("1m"))},
		{"success", run(events.OutcomeSucceeded, events.TypeRunSucceeded, id, "d1", 0, time.Second)},
		{"the same success again", run(events.OutcomeSucceeded, events.TypeRunSucceeded, id, "d1", 0, time.Second)},
		{"final failure", run(events.OutcomeFailed, events.TypeRunFailed, id, "d2", time.Minute, time.Minute+time.Second)},
		{"an older success, out of order", run(events.OutcomeSucceeded, events.TypeRunSucceeded, id, "d0", -time.Minute, -59*time.Second)},
		{"wrong type for the subject", run(events.OutcomeSucceeded, events.TypeRunFailed, id, "d3", 2*time.Minute, 2*time.Minute)},
		{"another task's id", run(events.OutcomeSucceeded, events.TypeRunSucceeded, "other", "d4", 2*time.Minute, 2*time.Minute)},
		{"slot far ahead", run(events.OutcomeSucceeded, events.TypeRunSucceeded, id, "d5", time.Hour, time.Hour)},
		{"host breaker opens", breaker(hostKey, events.BreakerOpen, at(10*time.Minute))},
		{"another task's host breaker opens", func() {
			publishEvent(t, js, events.BreakerSubject(events.BreakerOpen, hostKey), events.TypeBreakerOpen, hostKey, "br-other", events.BreakerTransition{
				Key: hostKey, TaskID: "other", From: events.BreakerClosed, To: events.BreakerOpen, RetryAt: at(20 * time.Minute), At: time.Now(),
			})
		}},
		{"host breaker opens far ahead", breaker(hostKey, events.BreakerOpen, at(48*time.Hour))},
		{"host breaker closes", breaker(hostKey, events.BreakerClosed, nil)},
		{"task breaker opens", breaker(id, events.BreakerOpen, at(5*time.Minute))},
		{"task breaker half-open", breaker(id, events.BreakerHalfOpen, nil)},
		{"dead letter", func() {
			publishEvent(t, js, events.DeadLetterSubject(id), events.TypeDeadLettered, id, "dl-1", events.DeadLetter{
				TaskID: id, Reason: "permanent", Dispatch: events.Dispatch{DispatchID: "d2", TaskID: id, ScheduledAt: now.Add(time.Minute)}, Attempts: 2, DeadLetteredAt: now.Add(time.Minute + 2*time.Second),
			})
		}},
		{"requeue", cmd(events.VerbRequeued, "rq", events.TaskRequeue{ID: id})},
		{"interval hint", cmd(events.VerbHinted, "h1", events.TaskHint{ID: id, Interval: events.Duration(5 * time.Minute)})},
		{"one-shot hint", cmd(events.VerbHinted, "h2", events.TaskHint{ID: id, At: at(2 * time.Minute)})},
		{"run now", cmd(events.VerbHinted, "h3", events.TaskHint{ID: id, At: at(0)})},
		{"timed pause", cmd(events.VerbPaused, "p1", events.TaskPause{ID: id, Until: at(30 * time.Minute), Reason: "deploy"})},
		{"resume", cmd(events.VerbResumed, "r1", events.TaskRef{ID: id})},
		{"indefinite pause", cmd(events.VerbPaused, "p2", events.TaskPause{ID: id})},
		{"update while paused", cmd(events.VerbUpdated, "u1", spec("2m"))},
		{"resume again", cmd(events.VerbResumed, "r2", events.TaskRef{ID: id})},
		{"delete", cmd(events.VerbDeleted, "del", events.TaskRef{ID: id})},
		{"an outcome after the delete", run(events.OutcomeSucceeded, events.TypeRunSucceeded, id, "d6", 3*time.Minute, 3*time.Minute+time.Second)},
		{"create again", cmd(events.VerbCreated, "c2", spec("1m"))},
		{"success after the re-create", run(events.OutcomeSucceeded, events.TypeRunSucceeded, id, "d7", 4*time.Minute, 4*time.Minute+time.Second)},
	}
	var ex *query.Explanation
	for _, s := range steps {
		s.do()
		governorCaughtUp(t, js)
		if ex = explainMatchesStore(t, q, id); t.Failed() {
			t.Fatalf("after %s (%d timeline lines)", s.name, len(ex.Timeline))
		}
	}
	if len(ex.Warnings) > 0 {
		t.Errorf("warnings for a complete history: %q", ex.Warnings)
	}
	perStream, noChange := map[string]int{}, map[string]int{}
	for _, s := range ex.Timeline {
		perStream[s.Stream]++
		if s.NoChange != "" {
			noChange[s.Stream]++
			if s.Stream == streams.StreamHealth && !strings.Contains(s.NoChange, `a transition of breaker "every", which the task does not use (its spec keys its breaker "`+hostKey+`")`) {
				t.Errorf("the task breaker's transition changed nothing, said as %q", s.NoChange)
			}
		}
	}
	// 12 commands; 5 outcomes (d1, d1 again, d2, d0, d7: d6 came for the
	// deleted task), of which the second d1 and d0 changed nothing; the
	// host breaker's open and close, the task breaker's open and
	// half-open, which changed nothing: the task is host-scoped, so its
	// calls are deferred by the host's breaker, not by a breaker keyed by
	// its ID (gov.OtherBreaker); the dead letter, which changed nothing
	// either: d2's final failure had held the task for its recheck.
	if want := map[string]int{streams.StreamTasks: 12, streams.StreamRuns: 5, streams.StreamHealth: 4, streams.StreamDeadLetter: 1}; !maps.Equal(perStream, want) {
		t.Errorf("timeline lines per stream = %v, want %v", perStream, want)
	}
	if want := map[string]int{streams.StreamRuns: 2, streams.StreamHealth: 2, streams.StreamDeadLetter: 1}; !maps.Equal(noChange, want) {
		t.Errorf("timeline lines that changed nothing, per stream = %v, want %v", noChange, want)
	}
}

// TestExplainWarnsWhenRunsHistoryIsGone: RUNS keeps 7 days and 1000
// events per subject (17 hours of a 1-minute task's successes), TASKS a
// year, so the usual aged-out history is a task whose creation is still
// there and whose older outcomes are not. The replay then starts at the
// creation but misses outcomes; it must say so rather than present its
// decisions as the ones taken.
func TestExplainWarnsWhenRunsHistoryIsGone(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		lose func(t *testing.T, js jetstream.JetStream, runs jetstream.Stream)
	}{
		{"max age", func(t *testing.T, js jetstream.JetStream, runs jetstream.Stream) {
			cfg := runs.CachedInfo().Config
			cfg.MaxAge, cfg.Duplicates = time.Second, time.Second
			if _, err := js.UpdateStream(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			natstest.Eventually(t, 10*time.Second, "RUNS' messages aged out", func() bool {
				info, err := runs.Info(ctx)
				return err == nil && info.State.Msgs == 0
			})
			// the last outcome again, as a newer run's: the replay keeps one
			now := time.Now().UTC()
			publishEvent(t, js, events.RunSubject(events.OutcomeSucceeded, "aged"), events.TypeRunSucceeded, "aged", "run-3",
				events.Run{DispatchID: "d3", TaskID: "aged", ScheduledAt: now, FinishedAt: now})
			governorCaughtUp(t, js)
		}},
		{"per-subject limit", func(t *testing.T, js jetstream.JetStream, runs jetstream.Stream) {
			cfg := runs.CachedInfo().Config
			cfg.MaxMsgsPerSubject = 2
			if _, err := js.UpdateStream(ctx, cfg); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			js, q := governorOnly(t)
			const id = "aged"
			now := time.Now().UTC()
			// another task's outcome first: RUNS' first message outlives the task's
			publishEvent(t, js, events.RunSubject(events.OutcomeSucceeded, "other"), events.TypeRunSucceeded, "other", "other-1",
				events.Run{DispatchID: "o1", TaskID: "other", ScheduledAt: now, FinishedAt: now})
			publishEvent(t, js, events.TaskSubject(events.VerbCreated, id), events.TypeTaskCreated, id, "c1", json.RawMessage(fmt.Sprintf(minuteSpec, id)))
			governorCaughtUp(t, js)
			for i := range 3 {
				slot := now.Add(time.Duration(i) * time.Minute)
				publishEvent(t, js, events.RunSubject(events.OutcomeSucceeded, id), events.TypeRunSucceeded, id, fmt.Sprint("run-", i),
					events.Run{DispatchID: fmt.Sprint("d", i), TaskID: id, ScheduledAt: slot, FinishedAt: slot.Add(time.Second)})
				governorCaughtUp(t, js)
			}
			runs, err := js.Stream(ctx, streams.StreamRuns)
			if err != nil {
				t.Fatal(err)
			}
			c.lose(t, js, runs)
			ex, err := q.Explain(ctx, id, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if ex.Replayed == nil || ex.Stored == nil || ex.Replayed.Runs == ex.Stored.Runs {
				t.Fatalf("the replay lost no outcome: replayed %d runs, stored %d; timeline:\n%s", ex.Replayed.Runs, ex.Stored.Runs, timelineText(ex))
			}
			found := false
			for _, w := range ex.Warnings {
				found = found || strings.Contains(w, streams.StreamRuns)
			}
			if !found {
				t.Errorf("RUNS lost outcomes of %s (replayed %d runs, stored %d), but explain warns only %q", id, ex.Replayed.Runs, ex.Stored.Runs, ex.Warnings)
			}
		})
	}
}

// TestExplainAgreesWithALiveStack runs a flapping task through the whole
// stack (timer, executor, breaker, dead letters) with commands sent while
// its runs go on, then pauses it and compares explain with the store.
func TestExplainAgreesWithALiveStack(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	nc, js := srv.Connect(t)
	var calls atomic.Int64
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		switch n := calls.Add(1); {
		case n%5 == 0:
			w.WriteHeader(http.StatusNotFound) // permanent: dead-lettered
		case n%3 == 0:
			w.WriteHeader(http.StatusOK)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(tg.Close)
	ctl := startRunStack(t, nc, js)
	ctx := context.Background()
	const id = "flapping"
	spec, err := control.DecodeSpec([]byte(`{"id":"` + id + `","target":{"http":{"url":"` + tg.URL + `"}},"schedule":{"interval":"1s"},` +
		`"retry":{"maxAttempts":2,"initialDelay":"100ms","maxDelay":"100ms"},"breaker":{"failureThreshold":3,"openDelay":"1s","maxOpenDelay":"1s"},"deadLetter":{"recheckAfter":"1s"}}`))
	if err != nil {
		t.Fatal(err)
	}
	send := func(verb events.Verb, data any) {
		t.Helper()
		if _, ans, err := ctl.Send(ctx, verb, id, data, 5*time.Second); err != nil || ans.Accepted == nil {
			t.Fatalf("%s: %v %+v", verb, err, ans)
		}
	}
	send(events.VerbCreated, spec)
	natstest.Eventually(t, 30*time.Second, "ten calls", func() bool { return calls.Load() >= 10 })
	send(events.VerbHinted, control.RunNow(id, 0, "test"))
	send(events.VerbRequeued, events.TaskRequeue{ID: id})
	natstest.Eventually(t, 30*time.Second, "twenty calls", func() bool { return calls.Load() >= 20 })
	send(events.VerbPaused, events.TaskPause{ID: id, Reason: "check"})
	q, err := query.NewReader(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	// Runs in flight when the pause came end and are applied; then nothing moves.
	var last string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last explain:\n%s", last)
		}
	})
	natstest.Eventually(t, 30*time.Second, "explain agrees with the paused schedule", func() bool {
		governorCaughtUp(t, js)
		ex, err := q.Explain(ctx, id, time.Time{})
		if err != nil || ex.Replayed == nil || ex.Stored == nil {
			return false
		}
		// The governor reads each stream on its own: a dead letter stored
		// just after the pause may have been applied just before it. Which
		// input came last (input, decidedAt) may then differ; the rest of
		// the schedule may not.
		rp, sp := *ex.Replayed, *ex.Stored
		rp.Input, rp.DecidedAt, sp.Input, sp.DecidedAt = "", time.Time{}, "", time.Time{}
		replayed, _ := json.Marshal(rp)
		stored, _ := json.Marshal(sp)
		if string(replayed) != string(stored) {
			last = fmt.Sprintf("replayed %s\nstored   %s", replayed, stored)
			return false
		}
		return true
	})
}

// TestExplainIgnoresCommandsAnsweredElsewhere: a command on an unknown
// verb is answered on flyball.task.rejected._invalid, not under the task,
// so it must not take the place of a later command with its id in the
// queue of commands waiting for their answers. Its answer's Nats-Msg-Id
// (rejected:p) also makes JetStream drop the answer to the last create
// as a duplicate: explain must judge that create as the governor did.
func TestExplainIgnoresCommandsAnsweredElsewhere(t *testing.T) {
	js, q := governorOnly(t)
	const id = "elsewhere"
	publishEvent(t, js, events.TaskSubject(events.VerbCreated, id), events.TypeTaskCreated, id, "create-"+id, json.RawMessage(fmt.Sprintf(minuteSpec, id)))
	publishEvent(t, js, "flyball.task.frozen."+id, "io.flyball.task.frozen", id, "p", events.TaskPause{ID: id})
	publishEvent(t, js, events.TaskSubject(events.VerbPaused, id), events.TypeTaskPaused, id, "p", events.TaskPause{ID: id, Reason: "first"})
	publishEvent(t, js, events.TaskSubject(events.VerbResumed, id), events.TypeTaskResumed, id, "r", events.TaskRef{ID: id})
	publishEvent(t, js, events.TaskSubject(events.VerbCreated, id), events.TypeTaskCreated, id, "p", json.RawMessage(fmt.Sprintf(minuteSpec, id)))
	governorCaughtUp(t, js)
	explainMatchesStore(t, q, id)
}

func timelineText(ex *query.Explanation) string {
	var b strings.Builder
	for _, s := range ex.Timeline {
		fmt.Fprintf(&b, "%s %s#%d %s next=%s src=%s nochange=%q pending=%v\n", s.At.Format(time.RFC3339Nano), s.Stream, s.Seq, s.Input, s.NextRunAt.Format(time.RFC3339Nano), s.Source, s.NoChange, s.Pending)
	}
	st, _ := json.Marshal(ex.Stored)
	fmt.Fprintf(&b, "stored %s\n", st)
	return b.String()
}

// TestExplainCountsAnInputOnItsWayAsPending: an outcome stored a moment
// ago that the governor has not applied (here it is stopped) is pending,
// not a mismatch: explain compares the stored schedule with the replay
// before it and says where the outcome leads. A live task always has one
// such input now and then, and explain called it a MISMATCH (exit 1).
//
// Subtest "reader-ahead": the reader's clock runs 30 s ahead of the NATS
// server's, more than InFlight (10 s). "A moment ago" was judged by the
// reader's clock against the inputs' stored times, and the outcome was
// called a mismatch; it is judged by the server's clock now.
func TestExplainCountsAnInputOnItsWayAsPending(t *testing.T) {
	for _, c := range []struct {
		name  string
		ahead time.Duration
	}{{"in-sync", 0}, {"reader-ahead", 30 * time.Second}} {
		t.Run(c.name, func(t *testing.T) { explainCountsAnInputOnItsWayAsPending(t, c.ahead) })
	}
}

func explainCountsAnInputOnItsWayAsPending(t *testing.T, ahead time.Duration) {
	ctx := context.Background()
	srv := natstest.StartWithStreams(t)
	_, js := srv.Connect(t)
	st, err := stack.Start(ctx, stack.Config{JS: js, Services: []string{"governor"}, Guard: executor.Guard{AllowLoopback: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	q, err := query.NewReader(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	q.Now = func() time.Time { return time.Now().Add(ahead) }
	const id = "onitsway"
	publishEvent(t, js, events.TaskSubject(events.VerbCreated, id), events.TypeTaskCreated, id, "c1", json.RawMessage(fmt.Sprintf(minuteSpec, id)))
	governorCaughtUp(t, js)
	v, err := q.Task(ctx, id)
	if err != nil || v.Schedule == nil {
		t.Fatalf("task view %+v, %v", v, err)
	}
	slot := v.Schedule.NextRunAt
	st.Stop()
	publishEvent(t, js, events.RunSubject(events.OutcomeSucceeded, id), events.TypeRunSucceeded, id, "run-1",
		events.Run{DispatchID: "d1", TaskID: id, ScheduledAt: slot, FinishedAt: slot})

	ex, err := q.Explain(ctx, id, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if !ex.Agrees || ex.Pending != 1 {
		t.Fatalf("explain with an outcome on its way: agrees=%v pending=%d, want true and 1; timeline:\n%s", ex.Agrees, ex.Pending, timelineText(ex))
	}
	if ex.Stored == nil || ex.Replayed == nil || !ex.Stored.NextRunAt.Equal(slot) || !ex.Replayed.NextRunAt.Equal(slot.Add(time.Minute)) {
		t.Fatalf("stored %+v, replayed %+v; want the slot %s stored and the next minute replayed", ex.Stored, ex.Replayed, slot)
	}
	if n := len(ex.Timeline); n != 2 || ex.Timeline[0].Pending || !ex.Timeline[1].Pending {
		t.Fatalf("timeline: want the creation applied and the outcome pending:\n%s", timelineText(ex))
	}
}
