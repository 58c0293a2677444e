package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
)

// TestOneShotOverruled: a one-shot's answer gets a note only when its run
// does not come at its time, and the note says what to do where there is
// something to do.
func TestOneShotOverruled(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	in := func(d time.Duration) *time.Time { x := at.Add(d); return &x }
	for _, c := range []struct {
		name string
		acc  *events.TaskAccepted
		want []string // empty: no note
	}{
		{"runs at its time", &events.TaskAccepted{NextRunAt: in(0), Source: "hint-oneshot"}, nil},
		{"an earlier baseline slot comes first", &events.TaskAccepted{NextRunAt: in(-time.Minute), Source: "baseline-interval"}, nil},
		{"kept slot in flight, a moment later", &events.TaskAccepted{NextRunAt: in(500 * time.Millisecond), Source: "baseline-interval"}, nil},
		{
			"dead-lettered", &events.TaskAccepted{NextRunAt: in(30 * time.Minute), Source: "deadletter-recheck", Trail: []string{"deadletter-recheck: recheck at 10:30"}},
			[]string{"note: the one-shot does not run at its time: deadletter-recheck: recheck at 10:30", "'flyball dlq retry --all --task web' runs it now"},
		},
		{"paused indefinitely", &events.TaskAccepted{Source: "paused"}, []string{"does not run at its time", "'flyball task resume web' runs it"}},
		{
			"breaker open", &events.TaskAccepted{NextRunAt: in(time.Minute), Source: "breaker-open", Trail: []string{"breaker-open: open until 10:01"}},
			[]string{"does not run at its time: breaker-open: open until 10:01"},
		},
	} {
		got := oneShotOverruled("web", at, at, c.acc, nil)
		if len(c.want) == 0 && got != "" {
			t.Errorf("%s: note %q, want none", c.name, got)
		}
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: note %q lacks %q", c.name, got, w)
			}
		}
	}
}

// TestOneShotOverruledByAPauseOverADeadLetterHold: a run-now on a task
// paused while held for its dead-letter recheck is overruled by the
// pause, and the note names the dead-letter retry as well as the resume,
// which alone waits for the recheck. It said "the task is paused:
// 'flyball task resume web' runs it", and the resume answered "next run
// in 30m (deadletter-recheck)". The governor checks the advice: resume
// alone waits for the recheck, resume and retry (either order) run it.
func TestOneShotOverruledByAPauseOverADeadLetterHold(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	spec := &events.TaskSpec{ID: "web", Schedule: events.Schedule{Interval: events.Duration(time.Minute)}}
	recheck := now.Add(29 * time.Minute)
	held := gov.State{
		TaskID: "web", CreatedAt: now.Add(-time.Hour), LastScheduledAt: now.Add(-time.Minute), LastFailureAt: now.Add(-time.Minute),
		NextRunAt: recheck, Source: gov.SourceDeadLetterRecheck,
		DeadLetter: &gov.DeadLetterHold{At: now.Add(-time.Minute), RecheckAt: recheck},
	}
	decide := func(st gov.State, in gov.Input) gov.Decision {
		t.Helper()
		d := gov.Decide(now, spec, st, in)
		if d.Ignored {
			t.Fatalf("%s ignored", in.Kind)
		}
		return d
	}
	resume, requeue := gov.Input{Kind: gov.KindResumed}, gov.Input{Kind: gov.KindRequeued}
	paused := decide(held, gov.Input{Kind: gov.KindPaused, Pause: &gov.Pause{Until: now.Add(30 * time.Second)}}).State
	d := decide(paused, gov.Input{Kind: gov.KindHinted, Hint: &gov.Hint{At: now}})
	acc := &events.TaskAccepted{NextRunAt: &d.NextRunAt, Source: string(d.Source), Trail: d.Trail}
	note := oneShotOverruled("web", time.Time{}, now, acc, &d.State)
	for _, want := range []string{"does not run at its time", "'flyball task resume web' and 'flyball dlq retry --all --task web' run it now", fmtTime(recheck)} {
		if !strings.Contains(note, want) {
			t.Errorf("run-now on a task paused over a dead-letter hold: note %q lacks %q", note, want)
		}
	}
	if strings.Contains(note, "'flyball task resume web' runs it") {
		t.Errorf("run-now on a task paused over a dead-letter hold: note %q says a resume alone runs it", note)
	}
	if r := decide(d.State, resume); r.Source != gov.SourceDeadLetterRecheck || !r.NextRunAt.Equal(recheck) {
		t.Errorf("resume alone: next run %s (%s), want the recheck at %s", r.NextRunAt, r.Source, recheck)
	}
	for _, order := range [][2]gov.Input{{resume, requeue}, {requeue, resume}} {
		if r := decide(decide(d.State, order[0]).State, order[1]); r.NextRunAt.After(now) {
			t.Errorf("%s then %s: next run %s (%s), want now", order[0].Kind, order[1].Kind, r.NextRunAt, r.Source)
		}
	}

	// Without the stored state (not read), or with no hold in it, the
	// note names the resume as before.
	for _, st := range []*gov.State{nil, &paused} {
		if st != nil {
			st.DeadLetter = nil
		}
		if note := oneShotOverruled("web", time.Time{}, now, acc, st); !strings.Contains(note, "the task is paused: 'flyball task resume web' runs it") {
			t.Errorf("run-now on a paused task, stored state %+v: note %q, want the resume named", st, note)
		}
	}
}

// TestOneShotUsedUpByTheSlotInFlightHasNoNote: a run-now while a slot is
// in flight up to gov.InFlightWindow ahead is served by that slot (the
// governor keeps it, and the trail says it is the one-shot hint): no
// note, however far ahead the slot lies within the window and whichever
// clock the CLI has. The check allowed 1 s by the CLI's own clock, so
// "hint --interval 2s" then "run-now" printed "note: the one-shot does
// not run at its time: slot … is in flight … and is the one-shot hint
// for …: kept" about half the time.
func TestOneShotUsedUpByTheSlotInFlightHasNoNote(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	spec := &events.TaskSpec{ID: "web", Schedule: events.Schedule{Interval: events.Duration(2 * time.Second)}}
	for _, ahead := range []time.Duration{1500 * time.Millisecond, gov.InFlightWindow} {
		st := gov.State{
			TaskID: "web", CreatedAt: now.Add(-time.Hour), LastScheduledAt: now.Add(ahead - 2*time.Second),
			NextRunAt: now.Add(ahead), Source: gov.SourceBaselineInterval,
		}
		d := gov.Decide(now, spec, st, gov.Input{Kind: gov.KindHinted, Hint: &gov.Hint{At: now}})
		if !d.NextRunAt.Equal(now.Add(ahead)) {
			t.Fatalf("slot %s ahead: the governor planned %s (%s), want the slot in flight kept; trail %q", ahead, d.NextRunAt, d.Source, d.Trail)
		}
		acc := &events.TaskAccepted{NextRunAt: &d.NextRunAt, Source: string(d.Source), Trail: d.Trail}
		// The CLI's clock may lag the server's: run-now's time is the
		// server's, not the CLI's.
		for _, skew := range []time.Duration{0, -3 * time.Second} {
			if note := oneShotOverruled("web", time.Time{}, now.Add(skew), acc, nil); note != "" {
				t.Errorf("slot %s ahead, CLI clock off by %s: note %q, want none", ahead, skew, note)
			}
		}
	}
}

// TestOneShotAtAPastTimeHasNoNoteWhenItRunsNow: the governor runs a
// one-shot whose time has passed at once (floored to its now), or counts
// it served by the slot in flight, running at or after that time (a
// one-shot is consumed by the first run at or after its time). Neither
// overrules it. The note compared the next run with the --at given, so
// "hint --at <an hour ago>" under an interval hint of 10s printed "note:
// the one-shot does not run at its time" about a run due that moment.
// Overruled, it still gets its note.
func TestOneShotAtAPastTimeHasNoNoteWhenItRunsNow(t *testing.T) {
	t.Parallel()
	sent := time.Date(2026, 3, 5, 5, 59, 21, 0, time.UTC)
	past := sent.Add(-time.Hour)
	due := sent.Add(200 * time.Millisecond)
	if note := oneShotOverruled("web", past, sent, &events.TaskAccepted{
		NextRunAt: &due, Source: "hint-interval",
		Trail: []string{"hint-interval: 10s after the slot of 2026-03-05T05:59:11.200Z", "nudged: earlier than the run planned at 2026-03-05T05:59:31.200Z"},
	}, nil); note != "" {
		t.Errorf("past one-shot, next run at the time the hint was sent (hint-interval): note %q, want none", note)
	}

	// A slot of the interval hint is running: it serves the one-shot.
	spec := &events.TaskSpec{ID: "web", Schedule: events.Schedule{Interval: events.Duration(time.Hour)}}
	st := gov.State{
		TaskID: "web", CreatedAt: sent.Add(-time.Hour), LastScheduledAt: sent.Add(-11 * time.Second),
		NextRunAt: sent.Add(-time.Second), Source: gov.SourceHintInterval,
		IntervalHint: &gov.IntervalHint{Interval: 10 * time.Second, ExpiresAt: sent.Add(time.Hour)},
	}
	d := gov.Decide(sent, spec, st, gov.Input{Kind: gov.KindHinted, Hint: &gov.Hint{At: past}})
	if h := d.State.OneShotHint; h == nil || !h.At.Equal(past) || !d.NextRunAt.Equal(sent.Add(9*time.Second)) {
		t.Fatalf("the governor planned %s (%s) with the one-shot %+v, want it served by the slot in flight (kept for its outcome); trail %q", d.NextRunAt, d.Source, h, d.Trail)
	}
	acc := &events.TaskAccepted{NextRunAt: &d.NextRunAt, Source: string(d.Source), Trail: d.Trail}
	if note := oneShotOverruled("web", past, sent, acc, nil); note != "" {
		t.Errorf("past one-shot served by the slot in flight: note %q, want none", note)
	}
	// The trail of a governor before 2026-12-02, which consumed it at once.
	old := []string{
		"baseline-interval: 1h0m0s after the slot of 2026-03-05T05:59:20.000Z",
		"one-shot hint for 2026-03-05T04:59:21.000Z is served by the slot in flight 2026-03-05T05:59:20.000Z: consumed, not planned again",
	}
	if note := oneShotOverruled("web", past, sent, &events.TaskAccepted{NextRunAt: &d.NextRunAt, Source: string(d.Source), Trail: old}, nil); note != "" {
		t.Errorf("past one-shot served by the slot in flight (an older governor's trail): note %q, want none", note)
	}

	recheck := sent.Add(30 * time.Minute)
	if note := oneShotOverruled("web", past, sent, &events.TaskAccepted{NextRunAt: &recheck, Source: "deadletter-recheck"}, nil); !strings.Contains(note, "does not run at its time") {
		t.Errorf("past one-shot of a dead-lettered task: note %q, want one", note)
	}
}

// TestCLIHintAtAPastTimeDuringARunHasNoNote: `flyball task hint --at`
// a time already past, while a run of the task calls its target: that
// run is the one-shot's, and the CLI prints the next run without a note.
func TestCLIHintAtAPastTimeDuringARunHasNoNote(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	calls, release := make(chan struct{}, 1), make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case calls <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(release) }) // before the close, which waits for the call
	spec := e.file(t, "web.yaml", strings.Replace(taskYAML("web", s.URL, "1h"), "timeout: 5s", "timeout: 1m", 1))
	e.ok(t, "task", "create", "-f", spec)
	select {
	case <-calls:
	case <-time.After(10 * time.Second):
		t.Fatal("the first run of web did not call its target")
	}

	r := e.run(t, "task", "hint", "web", "--at", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
	if r.code != 0 || !strings.HasPrefix(r.stdout, "hinted web: next run ") || r.stderr != "" {
		t.Fatalf("hint --at an hour ago during a run: exit %d\nstdout %q\nstderr %q; want the next run and no note", r.code, r.stdout, r.stderr)
	}
}
