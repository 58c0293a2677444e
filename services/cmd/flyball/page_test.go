package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/query"
	"github.com/flyballhq/flyball/streams"
)

// TestCLIListsPage: task list, runs and dlq list print a page of --limit
// and, when more remain, one line on stderr with the flag that prints the
// next page; that page ends the listing, with no such line. Before pages,
// runs and dlq list showed the newest entries and nothing older.
func TestCLIListsPage(t *testing.T) {
	t.Parallel()
	srv, url := natstest.StartListening(t)
	e := &cliEnv{url: url, srv: srv, dir: t.TempDir()}
	ctx := t.Context()
	kv, err := srv.JS.KeyValue(ctx, streams.BucketTasks)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for i, id := range []string{"web-c", "web-a", "web-b"} {
		if _, err := kv.Put(ctx, id, fmt.Appendf(nil, `{"id":%q}`, id)); err != nil {
			t.Fatal(err)
		}
		run := events.Run{DispatchID: fmt.Sprintf("web:%d", i+1), TaskID: "web", Attempt: i + 1, Status: 200}
		if err := jsutil.PublishEvent(ctx, srv.JS, events.RunSubject(events.OutcomeSucceeded, "web"), "",
			events.OutcomeSucceeded.Type(), "test", "web", run, now); err != nil {
			t.Fatal(err)
		}
		dl := events.DeadLetter{TaskID: "web", Reason: events.DeadLetterPermanent, Attempts: i + 1, DeadLetteredAt: now}
		if err := jsutil.PublishEvent(ctx, srv.JS, events.DeadLetterSubject("web"), "",
			events.TypeDeadLettered, "test", "web", dl, now); err != nil {
			t.Fatal(err)
		}
	}

	for _, c := range []struct {
		name         string
		first        []string
		hint         string
		next         []string
		rows1, rows2 []string // a word of each row, in order
	}{
		{
			"task list",
			[]string{"task", "list", "--limit", "2"},
			"more tasks: repeat with --after web-b for the next page\n",
			[]string{"task", "list", "--limit", "2", "--after", "web-b"},
			[]string{"web-a", "web-b"},
			[]string{"web-c"},
		},
		{
			"runs",
			[]string{"runs", "web", "--limit", "2"},
			"more runs: repeat with --before 2 for the next page\n",
			[]string{"runs", "web", "--limit", "2", "--before", "2"},
			[]string{"2", "3"},
			[]string{"1"},
		},
		{
			"dlq list",
			[]string{"dlq", "list", "--limit", "2"},
			"more dead letters: repeat with --before 2 for the next page\n",
			[]string{"dlq", "list", "--limit", "2", "--before", "2"},
			[]string{"2", "3"},
			[]string{"1"},
		},
	} {
		r := e.run(t, c.first...)
		if r.code != 0 || r.stderr != c.hint {
			t.Errorf("%s: exit %d, stderr %q; want exit 0 and %q", c.name, r.code, r.stderr, c.hint)
		}
		checkRows(t, c.name, r.stdout, c.rows1)
		r = e.run(t, c.next...)
		if r.code != 0 || r.stderr != "" {
			t.Errorf("%s, the last page: exit %d, stderr %q; want exit 0 and no hint", c.name, r.code, r.stderr)
		}
		checkRows(t, c.name+", the last page", r.stdout, c.rows2)
	}
}

// checkRows fails unless the table below the header has one row per
// want, each holding that word (a task id, the attempt of a run, the SEQ
// of a dead letter).
func checkRows(t *testing.T, what, stdout string, want []string) {
	t.Helper()
	rows := strings.Split(strings.TrimSpace(stdout), "\n")[1:]
	if len(rows) != len(want) {
		t.Errorf("%s: %d rows, want %d:\n%s", what, len(rows), len(want), stdout)
		return
	}
	for i, w := range want {
		if !strings.Contains(" "+rows[i]+" ", " "+w+" ") {
			t.Errorf("%s: row %d %q, want %s in it", what, i, rows[i], w)
		}
	}
}

// TestCLITaskListListsEveryTask: task list without --limit lists every
// task, more than the API's default page of 1000, as a table and as one
// JSON array, with an unreadable spec among them and no next-page hint.
func TestCLITaskListListsEveryTask(t *testing.T) {
	t.Parallel()
	srv, url := natstest.StartListening(t)
	e := &cliEnv{url: url, srv: srv, dir: t.TempDir()}
	ctx := t.Context()
	kv, err := srv.JS.KeyValue(ctx, streams.BucketTasks)
	if err != nil {
		t.Fatal(err)
	}
	const tasks = 2001
	want := make([]string, tasks)
	for i := range tasks {
		want[i] = fmt.Sprintf("web-%04d", i)
		if _, err := kv.Put(ctx, want[i], fmt.Appendf(nil, `{"id":%q}`, want[i])); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.PutString(ctx, "web-1500", "garbage"); err != nil {
		t.Fatal(err)
	}

	r := e.run(t, "task", "list")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("task list: exit %d, stderr %q; want exit 0 and no hint", r.code, r.stderr)
	}
	checkRows(t, "task list", r.stdout, want)
	if !strings.Contains(r.stdout, "UNREADABLE SPEC (flyball task get web-1500)") {
		t.Errorf("task list: web-1500 not listed as unreadable")
	}

	r = e.run(t, "task", "list", "-o", "json", "--after", "web-0999")
	var list []query.TaskView
	if err := json.Unmarshal([]byte(r.stdout), &list); r.code != 0 || r.stderr != "" || err != nil {
		t.Fatalf("task list -o json --after web-0999: exit %d, stderr %q, %v", r.code, r.stderr, err)
	}
	got := []string{}
	for _, v := range list {
		got = append(got, v.Spec.ID)
	}
	if !slices.Equal(got, want[1000:]) || !strings.HasPrefix(list[500].Unreadable, "stored spec does not decode") {
		t.Errorf("task list -o json --after web-0999: %d tasks, web-1500 unreadable %q; want %d", len(got), list[500].Unreadable, len(want[1000:]))
	}
	var whole bytes.Buffer
	if err := printJSON(&whole, list); err != nil || whole.String() != r.stdout {
		t.Errorf("task list -o json is not the array printJSON prints (%v)", err)
	}
}

// TestCLIRunsMarksATaskCreatedAgainAtAPageEdge: where the runs of a
// deleted task give way to those of the task created again under its ID
// exactly between two pages, each page marks it at its edge: the newer
// page above its first row, the older page below its last one. Each page
// printed no mark: it only compared the runs on it.
func TestCLIRunsMarksATaskCreatedAgainAtAPageEdge(t *testing.T) {
	t.Parallel()
	srv, url := natstest.StartListening(t)
	e := &cliEnv{url: url, srv: srv, dir: t.TempDir()}
	ctx := t.Context()
	old := time.Date(2026, 11, 27, 19, 0, 0, 0, time.UTC)
	recreated := old.Add(time.Hour)
	for i, created := range []time.Time{old, old, old, recreated, recreated, recreated} { // seqs 1-6
		run := events.Run{DispatchID: fmt.Sprintf("web:%d", i+1), TaskID: "web", TaskCreatedAt: created, Attempt: i + 1, Status: 200}
		if err := jsutil.PublishEvent(ctx, srv.JS, events.RunSubject(events.OutcomeSucceeded, "web"), "",
			events.OutcomeSucceeded.Type(), "test", "web", run, recreated); err != nil {
			t.Fatal(err)
		}
	}
	const (
		top    = "-- task deleted and created again at 2026-11-27T20:00:00.000Z: the runs below are the new task's --"
		bottom = "-- task deleted and created again at 2026-11-27T20:00:00.000Z: the runs after these are the new task's --"
	)
	r := e.run(t, "runs", "web", "--limit", "3")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); r.code != 0 || len(lines) != 5 || lines[1] != top {
		t.Errorf("runs --limit 3: exit %d, stdout:\n%s\nwant the mark %q above the first row", r.code, r.stdout, top)
	}
	if want := "more runs: repeat with --before 4 for the next page\n"; r.stderr != want {
		t.Errorf("runs --limit 3: stderr %q, want %q", r.stderr, want)
	}
	r = e.run(t, "runs", "web", "--limit", "3", "--before", "4")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); r.code != 0 || len(lines) != 5 || lines[4] != bottom {
		t.Errorf("runs --limit 3 --before 4: exit %d, stdout:\n%s\nwant the mark %q below the last row", r.code, r.stdout, bottom)
	}
	// A page that holds the changeover marks it once, between the rows;
	// JSON lines carry no mark.
	r = e.run(t, "runs", "web", "--limit", "4", "--before", "6")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); r.code != 0 || len(lines) != 6 || lines[3] != top || strings.Count(r.stdout, "-- ") != 1 {
		t.Errorf("runs --limit 4 --before 6: exit %d, stdout:\n%s\nwant one mark, between the rows of attempt 3 and 4", r.code, r.stdout)
	}
	for _, args := range [][]string{{"runs", "web", "--limit", "3", "-o", "json"}, {"runs", "web", "--limit", "3", "--before", "4", "-o", "json"}} {
		if r := e.run(t, args...); r.code != 0 || strings.Contains(r.stdout, "-- ") || strings.Count(r.stdout, "\n") != 3 {
			t.Errorf("%s: exit %d, stdout:\n%s\nwant 3 JSON lines", strings.Join(args, " "), r.code, r.stdout)
		}
	}
}
