package governor

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
)

// TestTranslateRun: an outcome becomes a KindOutcome input with the run's
// fields, and the timeline summary `flyball explain` prints.
func TestTranslateRun(t *testing.T) {
	slot := time.Date(2026, 11, 23, 10, 0, 1, 500_000_000, time.FixedZone("x", 3600))
	run := events.Run{
		DispatchID: events.DispatchID("t1", slot), TaskID: "t1", ScheduledAt: slot, Attempt: 2,
		FinishedAt: slot.Add(time.Second), Fingerprint: "f",
	}
	body, err := events.Marshal(events.OutcomeSucceeded.Type(), "test", "t1", run, slot, "ev")
	if err != nil {
		t.Fatal(err)
	}
	at := slot.Add(2 * time.Second)
	step, err := Translate(events.RunSubject(events.OutcomeSucceeded, "t1"), nil, body, at)
	if err != nil {
		t.Fatal(err)
	}
	want := gov.Outcome{DispatchID: run.DispatchID, ScheduledAt: slot, Result: "succeeded", FinishedAt: run.FinishedAt, Fingerprint: "f"}
	if step.Input.Kind != gov.KindOutcome || step.Input.Outcome == nil || !step.Input.Outcome.ScheduledAt.Equal(want.ScheduledAt) ||
		step.Input.Outcome.DispatchID != want.DispatchID || step.Input.Outcome.Result != want.Result || step.Input.Outcome.Fingerprint != "f" {
		t.Fatalf("input %+v, outcome %+v; want %+v", step.Input, step.Input.Outcome, want)
	}
	if s := "run succeeded (slot 2026-11-23T09:00:01.5Z, attempt 2)"; step.Summary != s {
		t.Fatalf("summary %q, want %q", step.Summary, s)
	}
	if step.TaskID != "t1" || !step.At.Equal(at) {
		t.Fatalf("task %q at %v", step.TaskID, step.At)
	}
}

// TestTranslateSkipReadsItsReason: a run.skipped carries what its reason
// says of the slot, which a requeue pending at it needs: a slot that ran
// already serves it, one skipped in a pause or otherwise does not.
func TestTranslateSkipReadsItsReason(t *testing.T) {
	slot := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	for reason, want := range map[string]gov.Skip{
		events.SkipReasonPaused: gov.SkipPaused,
		events.SkipReasonAlreadyRan + "the outcome of this slot is stored; it was dispatched again at …": gov.SkipRan,
		"breaker open until 2026-11-23T10:05:00Z (key t1): not kept waiting, as …":                       gov.SkipNotRun,
		"invalid stored spec: target: must set exactly one of http or nats":                              gov.SkipNotRun,
		"": gov.SkipNotRun,
	} {
		run := events.Run{DispatchID: events.DispatchID("t1", slot), TaskID: "t1", ScheduledAt: slot, FinishedAt: slot, Reason: reason}
		body, err := events.Marshal(events.OutcomeSkipped.Type(), "test", "t1", run, slot, "ev")
		if err != nil {
			t.Fatal(err)
		}
		step, err := Translate(events.RunSubject(events.OutcomeSkipped, "t1"), nil, body, slot.Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if o := step.Input.Outcome; o == nil || o.Result != "skipped" || o.Skip != want {
			t.Errorf("reason %q: outcome %+v, want a skip %q", reason, o, want)
		}
	}
}

// minuteSpec is a normalized 1-minute interval task.
func minuteSpec(id string) *events.TaskSpec {
	s := &events.TaskSpec{ID: id, Schedule: events.Schedule{Interval: events.Duration(time.Minute)}, Target: events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/"}}}
	s.Normalize()
	return s
}

// ranAt is the state of a 1-minute task whose last slot was last.
func ranAt(last time.Time) gov.State {
	return gov.State{TaskID: "t", LastScheduledAt: last, Runs: 1, NextRunAt: last.Add(time.Minute), Source: gov.SourceBaselineInterval}
}

// TestTranslatePauseUntilZeroTimeEndsAtOnce: docs/events.md, TaskPause.until:
// "A time in the past ends the pause at once." 0001-01-01T00:00:00Z is what
// a Go client sends for an unset time.Time; it used to reach the governor
// as a zero Pause.Until, which means "indefinitely".
func TestTranslatePauseUntilZeroTimeEndsAtOnce(t *testing.T) {
	now := time.Date(2026, 3, 2, 10, 0, 30, 0, time.UTC)
	var zero time.Time
	body, err := events.Marshal(events.TypeTaskPaused, "test", "t", events.TaskPause{ID: "t", Until: &zero}, now, "c1")
	if err != nil {
		t.Fatal(err)
	}
	step, err := Translate(events.TaskSubject(events.VerbPaused, "t"), nil, body, now)
	if err != nil {
		t.Fatalf("rejected: %v", err)
	}
	d := Apply(minuteSpec("t"), ranAt(now.Add(-30*time.Second)), step)
	if d.State.Paused || d.NextRunAt.IsZero() {
		t.Fatalf("pause until 0001-01-01 (past): paused=%v next=%v source=%s; want the pause ended at once\ntrail %q", d.State.Paused, d.NextRunAt, d.Source, d.Trail)
	}
}

// TestTranslateHintAtZeroTimeRunsNow: docs/events.md, TaskHint.at: "A time
// in the past means now." An at of 0001-01-01T00:00:00Z was accepted but
// reached the governor as "no one-shot", so nothing ran.
func TestTranslateHintAtZeroTimeRunsNow(t *testing.T) {
	now := time.Date(2026, 3, 2, 10, 0, 30, 0, time.UTC)
	var zero time.Time
	body, err := events.Marshal(events.TypeTaskHinted, "test", "t", events.TaskHint{ID: "t", At: &zero}, now, "c1")
	if err != nil {
		t.Fatal(err)
	}
	step, err := Translate(events.TaskSubject(events.VerbHinted, "t"), nil, body, now)
	if err != nil {
		t.Fatalf("rejected: %v", err)
	}
	spec := minuteSpec("t")
	spec.Schedule.Interval = events.Duration(time.Hour)
	st := ranAt(now.Add(-30 * time.Second))
	st.NextRunAt = st.LastScheduledAt.Add(time.Hour)
	d := Apply(spec, st, step)
	if !d.NextRunAt.Equal(now) || d.Source != gov.SourceHintOneShot {
		t.Fatalf("hint at 0001-01-01 (past): next=%v source=%s, want %v hint-oneshot\ntrail %q", d.NextRunAt, d.Source, now, d.Trail)
	}
}

// TestTranslateHintAfterItsExpiryIsRejected: a one-shot hint whose time
// comes at or after its TTL (30 min by default) never runs: it expires
// unused. It was accepted, so `flyball task hint x --at <in 4 h>` answered
// "accepted" and nothing ever ran. It is rejected now, naming at and the
// ttl it would need; a ttl that outlasts it is accepted.
func TestTranslateHintAfterItsExpiryIsRejected(t *testing.T) {
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	translate := func(h events.TaskHint) error {
		t.Helper()
		body, err := events.Marshal(events.TypeTaskHinted, "test", "t", h, now, "c1")
		if err != nil {
			t.Fatal(err)
		}
		_, err = Translate(events.TaskSubject(events.VerbHinted, "t"), nil, body, now)
		return err
	}
	later := now.Add(4 * time.Hour)
	err := translate(events.TaskHint{ID: "t", At: &later})
	var rej *rejection
	if !errors.As(err, &rej) || len(rej.reasons) != 1 || rej.reasons[0].Field != "at" || !strings.Contains(rej.reasons[0].Rule, "ttl") {
		t.Fatalf("a one-shot 4h ahead with the default 30m ttl: %v, want a rejection of at that names ttl", err)
	}
	edge := now.Add(30 * time.Minute)
	if err := translate(events.TaskHint{ID: "t", At: &edge}); err == nil {
		t.Fatal("a one-shot exactly at its expiry was accepted; it would never run")
	}
	if err := translate(events.TaskHint{ID: "t", At: &later, TTL: events.Duration(5 * time.Hour)}); err != nil {
		t.Fatalf("a one-shot 4h ahead with a 5h ttl was rejected: %v", err)
	}
	soon := now.Add(10 * time.Minute)
	if err := translate(events.TaskHint{ID: "t", At: &soon}); err != nil {
		t.Fatalf("a one-shot 10m ahead with the default ttl was rejected: %v", err)
	}
}

// TestTranslateSignalTypeMustMatchSubject: a signal whose type, subject
// and data disagree is malformed, as a command whose type disagrees with
// its verb is rejected. A run.failed stored on flyball.run.succeeded.t1
// was applied as a success, and a breaker.open with "to": "closed" lifted
// the breaker hold; the breaker service read the first as a success too.
func TestTranslateSignalTypeMustMatchSubject(t *testing.T) {
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	run := events.Run{DispatchID: events.DispatchID("t1", now), TaskID: "t1", ScheduledAt: now, Attempt: 1, Final: true}
	retry := now.Add(time.Minute)
	open := events.BreakerTransition{Key: "t1", TaskID: "t1", From: events.BreakerClosed, To: events.BreakerOpen, RetryAt: &retry, At: now}
	closed := open
	closed.From, closed.To, closed.RetryAt = events.BreakerOpen, events.BreakerClosed, nil
	dl := events.DeadLetter{TaskID: "t1", Reason: events.DeadLetterMaxAttempts, Dispatch: events.Dispatch{DispatchID: run.DispatchID, TaskID: "t1"}, DeadLetteredAt: now}
	for _, c := range []struct {
		name, subject, typ string
		data               any
		want               string
	}{
		{"run.failed on succeeded", events.RunSubject(events.OutcomeSucceeded, "t1"), events.TypeRunFailed, run, `type: must be "io.flyball.run.succeeded" on subject flyball.run.succeeded.t1, got "io.flyball.run.failed"`},
		{"run.succeeded on failed", events.RunSubject(events.OutcomeFailed, "t1"), events.TypeRunSucceeded, run, `type: must be "io.flyball.run.failed" on subject flyball.run.failed.t1, got "io.flyball.run.succeeded"`},
		{"breaker.closed on open", events.BreakerSubject(events.BreakerOpen, "t1"), events.TypeBreakerClosed, closed, `type: must be "io.flyball.breaker.open" on subject flyball.breaker.open.t1, got "io.flyball.breaker.closed"`},
		{"data to closed on open", events.BreakerSubject(events.BreakerOpen, "t1"), events.TypeBreakerOpen, closed, `to: must be "open" on subject flyball.breaker.open.t1, got "closed"`},
		{"run.failed on deadletter", events.DeadLetterSubject("t1"), events.TypeRunFailed, dl, `type: must be "io.flyball.deadlettered" on subject flyball.deadletter.t1, got "io.flyball.run.failed"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			body, err := events.Marshal(c.typ, "test", "t1", c.data, now, "ev")
			if err != nil {
				t.Fatal(err)
			}
			step, err := Translate(c.subject, nil, body, now)
			if !errors.Is(err, events.ErrMalformed) || err.Error() != c.want {
				t.Fatalf("Translate = %+v, %v; want malformed: %s", step.Input, err, c.want)
			}
		})
	}
}

// TestTranslateDeadLetterNeedsItsDispatch: the dead-letter service
// writes every entry with the dispatch it gave up on. An entry without
// its dispatch (or whose dispatch names another task, or no slot) was
// applied: a healthy task was held for a recheck. It is malformed.
func TestTranslateDeadLetterNeedsItsDispatch(t *testing.T) {
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	slot := now.Add(-time.Minute)
	ok := events.Dispatch{DispatchID: events.DispatchID("dlt", slot), TaskID: "dlt", ScheduledAt: slot}
	noID, otherTask, noSlot := ok, ok, ok
	noID.DispatchID, otherTask.TaskID, noSlot.ScheduledAt = "", "other", time.Time{}
	for _, c := range []struct {
		name string
		data any
		want string // "" for a valid entry
	}{
		{"the repro", json.RawMessage(`{"taskId":"dlt","reason":"permanent"}`), `dispatch.dispatchId: required: an entry names the dispatch whose run failed; dispatch.taskId: must be the entry's task "dlt", got ""; dispatch.scheduledAt: required: an entry names the slot whose run failed`},
		{"no dispatchId", events.DeadLetter{TaskID: "dlt", Reason: events.DeadLetterPermanent, Dispatch: noID}, `dispatch.dispatchId: required: an entry names the dispatch whose run failed`},
		{"another task's dispatch", events.DeadLetter{TaskID: "dlt", Reason: events.DeadLetterPermanent, Dispatch: otherTask}, `dispatch.taskId: must be the entry's task "dlt", got "other"`},
		{"no scheduledAt", events.DeadLetter{TaskID: "dlt", Reason: events.DeadLetterMaxDeliveries, Dispatch: noSlot}, `dispatch.scheduledAt: required: an entry names the slot whose run failed`},
		{"the dead-letter service's", events.DeadLetter{TaskID: "dlt", Reason: events.DeadLetterMaxDeliveries, Dispatch: ok, Attempts: 3, DeadLetteredAt: now}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			body, err := events.Marshal(events.TypeDeadLettered, "test", "dlt", c.data, now, "dlx1")
			if err != nil {
				t.Fatal(err)
			}
			step, err := Translate(events.DeadLetterSubject("dlt"), nil, body, now)
			if c.want == "" {
				if err != nil || step.Input.DeadLetter == nil || step.Input.DeadLetter.DispatchID != ok.DispatchID {
					t.Fatalf("Translate = %+v, %v; want the entry applied", step.Input, err)
				}
				return
			}
			if !errors.Is(err, events.ErrMalformed) || err.Error() != c.want {
				t.Fatalf("Translate = %+v, %v; want malformed: %s", step.Input, err, c.want)
			}
		})
	}
}

// TestTranslateBreakerKeyAndTaskMustAgree: a transition's key is its
// subject's, and only a host breaker's half-open names no task. A
// half-open on flyball.breaker.half-open.t1 with key "zzz" and no taskId
// was acked without effect and counted nowhere; such transitions are
// malformed. The breaker service's own transitions still apply.
func TestTranslateBreakerKeyAndTaskMustAgree(t *testing.T) {
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	retry := now.Add(time.Minute)
	const host = events.HostKeyPrefix + "api_example_com"
	tr := func(key, task string, to events.BreakerState) events.BreakerTransition {
		from := events.BreakerOpen
		var r *time.Time
		if to == events.BreakerOpen {
			from, r = events.BreakerClosed, &retry
		}
		return events.BreakerTransition{Key: key, TaskID: task, From: from, To: to, RetryAt: r, At: now}
	}
	for _, c := range []struct {
		name, key string
		data      events.BreakerTransition
		want      string // "" applied, "none" no effect
	}{
		{"the repro", "t1", tr("zzz", "", events.BreakerHalfOpen), `key: must be the breaker key "t1" of subject flyball.breaker.half-open.t1, got "zzz"`},
		{"another key", "t1", tr("t2", "t1", events.BreakerOpen), `key: must be the breaker key "t1" of subject flyball.breaker.open.t1, got "t2"`},
		{"no key", host, tr("", "t1", events.BreakerClosed), `key: must be the breaker key "host_api_example_com" of subject flyball.breaker.closed.host_api_example_com, got ""`},
		{"task half-open without taskId", "t1", tr("t1", "", events.BreakerHalfOpen), `taskId: must be a task ID on subject flyball.breaker.half-open.t1 (only a host breaker's half-open names none), got ""`},
		{"task open without taskId", "t1", tr("t1", "", events.BreakerOpen), `taskId: must be a task ID on subject flyball.breaker.open.t1 (only a host breaker's half-open names none), got ""`},
		{"host open without taskId", host, tr(host, "", events.BreakerOpen), `taskId: must be a task ID on subject flyball.breaker.open.host_api_example_com (only a host breaker's half-open names none), got ""`},
		{"host closed naming no task ID", host, tr(host, "a b", events.BreakerClosed), `taskId: must be a task ID on subject flyball.breaker.closed.host_api_example_com (only a host breaker's half-open names none), got "a b"`},
		{"host half-open", host, tr(host, "", events.BreakerHalfOpen), "none"},
		{"host open", host, tr(host, "t1", events.BreakerOpen), ""},
		{"task half-open", "t1", tr("t1", "t1", events.BreakerHalfOpen), ""},
		{"task closed", "t1", tr("t1", "t1", events.BreakerClosed), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			body, err := events.Marshal("io.flyball.breaker."+string(c.data.To), "test", c.key, c.data, now, "br1")
			if err != nil {
				t.Fatal(err)
			}
			step, err := Translate(events.BreakerSubject(c.data.To, c.key), nil, body, now)
			switch c.want {
			case "":
				if err != nil || step.TaskID != "t1" || step.Input.Breaker == nil || step.Input.Breaker.Key != c.key {
					t.Fatalf("Translate = %+v, %v; want the transition applied to t1", step, err)
				}
			case "none":
				if !errors.Is(err, ErrNoEffect) {
					t.Fatalf("Translate = %+v, %v; want no effect", step.Input, err)
				}
			default:
				if !errors.Is(err, events.ErrMalformed) || err.Error() != c.want {
					t.Fatalf("Translate = %+v, %v; want malformed: %s", step.Input, err, c.want)
				}
			}
		})
	}
}

// TestTranslateReadsTheRequeuesTaskCreatedAt: taskCreatedAt is decoded
// strictly (a malformed one is rejected naming it), and explain's replay
// judges a requeue whose answer is not known as the governor does.
func TestTranslateReadsTheRequeuesTaskCreatedAt(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	translate := func(data string) (Step, error) {
		body, err := events.Marshal(events.TypeTaskRequeued, "test", "t", json.RawMessage(data), now, "rq")
		if err != nil {
			t.Fatal(err)
		}
		return Translate(events.TaskSubject(events.VerbRequeued, "t"), nil, body, now)
	}
	created := time.Date(2026, 11, 29, 9, 0, 0, 123456789, time.UTC)
	step, err := translate(`{"id":"t","taskCreatedAt":"2026-11-29T10:00:00.123456789+01:00"}`)
	if err != nil || !step.RequeueFor.Equal(created) || !step.TaskCreatedAt().Equal(created) {
		t.Fatalf("Translate: requeue for %v (TaskCreatedAt %v), err %v; want %v", step.RequeueFor, step.TaskCreatedAt(), err, created)
	}
	if step, err := translate(`{"id":"t"}`); err != nil || !step.RequeueFor.IsZero() {
		t.Fatalf("Translate without taskCreatedAt: requeue for %v, err %v; want zero", step.RequeueFor, err)
	}
	for _, data := range []string{
		`{"id":"t","taskCreatedAt":"yesterday"}`,
		`{"id":"t","taskCreatedAt":1764406800}`,
		`{"id":"t","taskCreatedAt":"9999-12-31T23:30:00-01:00"}`,
	} {
		_, err := translate(data)
		var rej *rejection
		if !errors.As(err, &rej) || len(rej.reasons) != 1 || rej.reasons[0].Field != "taskCreatedAt" {
			t.Errorf("Translate(%s) = %v, want a rejection naming taskCreatedAt", data, err)
		}
	}

	// Replayed: create, delete, create again, then two requeues whose
	// answers are not stored: the one meant for the deleted task is
	// skipped, the one meant for the new task applies.
	t1, t2 := now, now.Add(time.Minute)
	spec := minuteSpec("t")
	requeue := func(at, forTask time.Time, id string) Step {
		return Step{TaskID: "t", At: at, CommandID: id, CommandType: events.TypeTaskRequeued, Input: gov.Input{Kind: gov.KindRequeued}, RequeueFor: forTask}
	}
	steps := []Step{
		{TaskID: "t", At: t1, Spec: spec, CommandID: "c1", CommandType: events.TypeTaskCreated, Input: gov.Input{Kind: gov.KindAccepted}},
		{TaskID: "t", At: t1.Add(time.Second), CommandID: "d1", CommandType: events.TypeTaskDeleted, Input: gov.Input{Kind: gov.KindDeleted}},
		{TaskID: "t", At: t2, Spec: spec, CommandID: "c2", CommandType: events.TypeTaskCreated, Input: gov.Input{Kind: gov.KindAccepted}},
		requeue(t2.Add(time.Second), gov.CreatedAt(t1), "rq-old"),
		requeue(t2.Add(2*time.Second), gov.CreatedAt(t2), "rq-new"),
	}
	var applied []string
	for _, e := range ReplayAnswers(steps, func(int) Answer { return Answer{Accepted: false, Known: false} }) {
		applied = append(applied, e.Step.CommandID)
	}
	if fmt.Sprint(applied) != "[c1 d1 c2 rq-new]" {
		t.Fatalf("replayed %v, want [c1 d1 c2 rq-new]", applied)
	}
}

// TestRepeatsApplied: the one rule repeatedCommand and ReplayAnswers share
// for another stored copy of the last command applied.
func TestRepeatsApplied(t *testing.T) {
	st := gov.State{LastCommandID: "c1", LastCommandSeq: 7}
	for _, c := range []struct {
		name string
		step Step
		want bool
	}{
		{"copy at another sequence", Step{CommandID: "c1", Seq: 9, Input: gov.Input{Kind: gov.KindUpdated}}, true},
		{"the applied message again", Step{CommandID: "c1", Seq: 7, Input: gov.Input{Kind: gov.KindUpdated}}, false},
		{"another id", Step{CommandID: "c2", Seq: 9, Input: gov.Input{Kind: gov.KindUpdated}}, false},
		{"a delete", Step{CommandID: "c1", Seq: 9, Input: gov.Input{Kind: gov.KindDeleted}}, false},
		{"no stream sequence", Step{CommandID: "c1", Input: gov.Input{Kind: gov.KindUpdated}}, false},
		{"no command", Step{Seq: 9, Input: gov.Input{Kind: gov.KindOutcome}}, false},
	} {
		if got := c.step.repeatsApplied(&st); got != c.want {
			t.Errorf("%s: repeatsApplied %v, want %v", c.name, got, c.want)
		}
	}
}
