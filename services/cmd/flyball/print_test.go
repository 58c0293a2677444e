package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/query"
)

// TestRunPrinterMarksATaskCreatedAgain: the table marks where the runs of
// a deleted task give way to those of the task created again under its
// ID, and a late run of the deleted one; runs naming no createdAt (older
// events) and JSON lines are left unmarked.
func TestRunPrinterMarksATaskCreatedAgain(t *testing.T) {
	old := time.Date(2026, 11, 27, 19, 0, 0, 0, time.UTC)
	recreated := old.Add(time.Hour)
	run := func(created time.Time, body string) *query.RunRecord {
		return &query.RunRecord{Outcome: events.OutcomeSucceeded, Run: events.Run{
			TaskID: "web", TaskCreatedAt: created, FinishedAt: recreated, Status: 200, Body: body,
		}}
	}
	records := []*query.RunRecord{
		run(time.Time{}, "legacy"), run(old, "old-1"), run(old, "old-2"),
		run(recreated, "new-1"), run(time.Time{}, "unnamed"), run(old, "old-late"), run(recreated, "new-2"),
	}
	render := func(out output) string {
		var b bytes.Buffer
		p := runPrinter{w: &b, out: out}
		for _, r := range records {
			if err := p.print(r); err != nil {
				t.Fatal(err)
			}
		}
		return b.String()
	}
	var marks []string
	for line := range strings.Lines(render(outTable)) {
		if strings.HasPrefix(line, "-- ") {
			marks = append(marks, line)
			continue
		}
		for _, body := range []string{"new-1", "old-late", "new-2"} {
			if strings.Contains(line, body) && len(marks) == 0 {
				t.Errorf("%s printed before any mark", body)
			}
		}
	}
	want := []string{
		"-- task deleted and created again at 2026-11-27T20:00:00.000Z: the runs below are the new task's --\n",
		"-- the runs below are the deleted task's (created at 2026-11-27T19:00:00.000Z), stored late --\n",
		"-- task deleted and created again at 2026-11-27T20:00:00.000Z: the runs below are the new task's --\n",
	}
	if strings.Join(marks, "") != strings.Join(want, "") {
		t.Fatalf("marks:\n%s\nwant:\n%s", strings.Join(marks, ""), strings.Join(want, ""))
	}
	if js := render(outJSON); strings.Contains(js, "-- ") || strings.Count(js, "\n") != len(records) {
		t.Fatalf("JSON output is not one line per run:\n%s", js)
	}
}

// TestPrintExplanationSaysWhatIsPending: the table marks the inputs the
// governor has not applied yet, and the last line says the store agrees
// with the replay before them and where they lead; a real mismatch
// still says MISMATCH.
func TestPrintExplanationSaysWhatIsPending(t *testing.T) {
	at := time.Date(2026, 11, 27, 20, 0, 0, 0, time.UTC)
	stored := &gov.State{NextRunAt: at.Add(time.Minute), Source: gov.SourceBaselineInterval}
	replayed := &gov.State{NextRunAt: at.Add(2 * time.Minute), Source: gov.SourceBaselineInterval}
	ex := &query.Explanation{
		TaskID: "web", Stored: stored, Replayed: replayed, Agrees: true, Pending: 1,
		Timeline: []query.ExplainedStep{
			{At: at, Input: "task.created", NextRunAt: stored.NextRunAt, Source: string(stored.Source)},
			{At: at.Add(time.Minute), Input: "run succeeded", NextRunAt: replayed.NextRunAt, Source: string(replayed.Source), Pending: true},
		},
	}
	var b bytes.Buffer
	printExplanation(&b, ex, time.Time{})
	out := b.String()
	for _, want := range []string{
		"  task.created  ",
		"(pending) run succeeded",
		"stored: next run 2026-11-27T20:01:00.000Z (baseline-interval); the replay agrees up to the last 1 input(s), marked (pending): " +
			"the governor had not applied them yet (stored within 10s); they lead to next run 2026-11-27T20:02:00.000Z (baseline-interval)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("explain output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "(pending) task.created") {
		t.Errorf("the applied creation is marked pending:\n%s", out)
	}

	ex.Agrees, ex.Pending, ex.Timeline[1].Pending = false, 0, false
	b.Reset()
	printExplanation(&b, ex, time.Time{})
	if want := "MISMATCH: stored next run 2026-11-27T20:01:00.000Z (baseline-interval), replayed next run 2026-11-27T20:02:00.000Z (baseline-interval)\n"; !strings.HasSuffix(b.String(), want) {
		t.Errorf("mismatch output:\n%s\nwant it to end with %q", b.String(), want)
	}
}

// TestStatusNamesTheTimerLeaseHolder: `flyball status` says which timer
// dispatches, and says so plainly when that timer is offline (a crash not
// yet taken over).
func TestStatusNamesTheTimerLeaseHolder(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	printServices(&out, &query.ServicesHealth{Online: map[string]int{"timer": 2}, TimerLease: "timer1"})
	if !strings.Contains(out.String(), "  timer lease: timer1 dispatches; other timers stand by\n") {
		t.Errorf("holder online:\n%s", out.String())
	}
	out.Reset()
	printServices(&out, &query.ServicesHealth{Online: map[string]int{"timer": 1}, TimerLease: "timer1"})
	if got := out.String(); !strings.Contains(got, "  timer lease: timer1 dispatches; no other timer is online to take over\n") || strings.Contains(got, "stand by") {
		t.Errorf("the only timer online holds the lease:\n%s", got)
	}
	out.Reset()
	var gone query.Instance
	gone.Kind, gone.Name = "timer", "timer1"
	printServices(&out, &query.ServicesHealth{Online: map[string]int{"timer": 1}, Offline: []query.Instance{gone}, TimerLease: "timer1"})
	if !strings.Contains(out.String(), "timer lease: timer1 is OFFLINE") {
		t.Errorf("holder offline:\n%s", out.String())
	}
	out.Reset()
	printServices(&out, &query.ServicesHealth{Online: map[string]int{"timer": 2}})
	if strings.Contains(out.String(), "timer lease") {
		t.Errorf("no lease, yet a lease line:\n%s", out.String())
	}
}

// TestStatusPrintsTheBacklog: `flyball status` totals the work waiting
// in NATS and lists only the durables that need a look: messages waiting
// or redelivered, near their max_ack_pending, or unreadable.
func TestStatusPrintsTheBacklog(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	printBacklog(&out, []query.ConsumerBacklog{
		{Stream: "DISPATCH", Consumer: "executor", AckPending: 19000, MaxAckPending: 20000},
		{Stream: "RUNS", Consumer: "breaker", MaxAckPending: 10000},
		{Stream: "RUNS", Consumer: "governor", Pending: 4500, AckPending: 16, MaxAckPending: 10000, Redelivered: 2},
		{Stream: "TASKS", Consumer: "governor", Error: "nats: consumer not found"},
	})
	got := out.String()
	for _, want := range []string{
		"backlog       4500 waiting for delivery, 19016 delivered and unacked (4 durable(s))\n",
		"DISPATCH/executor", "19000 of 20000", "at its max_ack_pending",
		"RUNS/governor", "4500", "16 of 10000",
		"TASKS/governor", "cannot read: nats: consumer not found",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("status backlog lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "RUNS/breaker") {
		t.Errorf("an idle durable is listed:\n%s", got)
	}
	out.Reset()
	printBacklog(&out, []query.ConsumerBacklog{{Stream: "RUNS", Consumer: "breaker", MaxAckPending: 10000}})
	if got := out.String(); got != "backlog       0 waiting for delivery, 0 delivered and unacked (1 durable(s))\n" {
		t.Errorf("an idle backlog printed:\n%s", got)
	}
}

// TestStatusPointsPastTheCap: with more tasks than --stale can list, the
// "more" line names the largest --stale, not the count.
func TestStatusPointsPastTheCap(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	printHealth(&out, &query.Health{Staleness: make([]query.StalenessEntry, statusStale), StalenessCount: 100_000})
	if want := "  … and 99990 more (flyball status --stale 1000 lists the 1000 stalest)\n"; !strings.HasSuffix(out.String(), want) {
		t.Errorf("status of 100,000 tasks:\n%s\nwant it to end with %q", out.String(), want)
	}
}

// TestTaskTableSaysWhenTheNextRunFalls: task get -o table gives the next
// run's distance from now in words; one in the past is overdue, not
// "in -8s".
func TestTaskTableSaysWhenTheNextRunFalls(t *testing.T) {
	now := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		next time.Time
		want string
	}{
		{"future", now.Add(8 * time.Second), "(in 8s)"},
		{"past", now.Add(-8 * time.Second), "(overdue by 8s)"},
		{"now", now.Add(200 * time.Millisecond), "(due now)"},
	} {
		var b bytes.Buffer
		printTask(&b, &query.TaskView{Spec: events.TaskSpec{ID: "web"}, Schedule: &gov.State{NextRunAt: c.next}}, now)
		var line string
		for l := range strings.Lines(b.String()) {
			if strings.HasPrefix(l, "next run") {
				line = l
			}
		}
		if !strings.Contains(line, c.want) || strings.Contains(line, "-8s") {
			t.Errorf("%s: next run line %q, want it to contain %q", c.name, line, c.want)
		}
	}
}
