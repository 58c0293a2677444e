package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
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
