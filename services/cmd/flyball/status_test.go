package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// stalenessRow matches a task line of the status table's staleness list.
var stalenessRow = regexp.MustCompile(`(?m)^  (t\d\d)  +\d\.\d\d  `)

// TestStatusListsTheTenStalest: `flyball status` lists the 10 stalest
// tasks and says how many more there are and how to see them; --stale
// lists more, and -o json lists as many as the API (1000) unless --stale
// is given. It printed one line per task: 100,000 lines at 100,000 tasks.
func TestStatusListsTheTenStalest(t *testing.T) {
	t.Parallel()
	srv, url := natstest.StartListening(t)
	now := time.Now().UTC()
	// t00..t11 run every minute; tN last succeeded N minutes ago, so the
	// higher N, the staler (t05 and above score 1 and come by id).
	for i := range 12 {
		id := fmt.Sprintf("t%02d", i)
		natstest.PutJSON(t, srv.JS, streams.BucketTasks, id, events.TaskSpec{
			ID: id, Target: events.Target{HTTP: &events.HTTPTarget{URL: "http://example.test/"}},
			Schedule: events.Schedule{Interval: events.Duration(time.Minute)},
		})
		natstest.PutJSON(t, srv.JS, streams.BucketSchedules, id, gov.State{
			TaskID: id, NextRunAt: now.Add(time.Hour), LastSuccessAt: now.Add(-time.Duration(i) * time.Minute),
		})
	}
	e := &cliEnv{url: url, srv: srv, dir: t.TempDir()}
	rows := func(out string) string {
		var ids []string
		for _, m := range stalenessRow.FindAllStringSubmatch(out, -1) {
			ids = append(ids, m[1])
		}
		return strings.Join(ids, " ")
	}

	out := e.ok(t, "status")
	if got, want := rows(out), "t05 t06 t07 t08 t09 t10 t11 t04 t03 t02"; got != want ||
		!strings.Contains(out, "staleness     12 task(s), stalest first\n") ||
		!strings.Contains(out, "  … and 2 more (flyball status --stale 12 lists them all)\n") {
		t.Fatalf("status: staleness rows %q, want %q, a count of 12 and a line for the 2 more:\n%s", got, want, out)
	}
	out = e.ok(t, "status", "--stale", "20")
	if got := rows(out); len(strings.Fields(got)) != 12 || strings.Contains(out, "more (flyball status") {
		t.Fatalf("status --stale 20: rows %q, want all 12 and no more line:\n%s", got, out)
	}
	out = e.ok(t, "status", "--stale", "0")
	if got := rows(out); got != "" || !strings.Contains(out, "  … and 12 more (flyball status --stale 12 lists them all)\n") {
		t.Fatalf("status --stale 0: rows %q, want none and a line for the 12:\n%s", got, out)
	}

	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"status", "-o", "json"}, 12},
		{[]string{"status", "--json", "--stale", "3"}, 3},
	} {
		// Decoded as a client of the API would, by the JSON names.
		var h struct {
			Staleness []struct {
				TaskID string `json:"taskId"`
			} `json:"staleness"`
			StalenessCount int `json:"stalenessCount"`
		}
		if err := json.Unmarshal([]byte(e.ok(t, c.args...)), &h); err != nil {
			t.Fatal(err)
		}
		if len(h.Staleness) != c.want || h.StalenessCount != 12 || (len(h.Staleness) > 0 && h.Staleness[0].TaskID != "t05") {
			t.Errorf("flyball %s: %d entries, stalenessCount %d, %+v; want %d, 12, t05 first", strings.Join(c.args, " "), len(h.Staleness), h.StalenessCount, h.Staleness, c.want)
		}
	}
}
