package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// healthStaleness reads GET path: the task ids of its staleness list, in
// order, and its stalenessCount (-1 when absent).
func healthStaleness(t *testing.T, b *bundle, path string) ([]string, int) {
	t.Helper()
	r := b.call(t, http.MethodGet, path, "")
	expect(t, "GET "+path, r, http.StatusOK, "")
	list, ok := r.body["staleness"].([]any)
	if !ok {
		t.Fatalf("GET %s: no staleness list: %.300s", path, r.raw)
	}
	ids := make([]string, 0, len(list))
	for _, e := range list {
		ids = append(ids, e.(map[string]any)["taskId"].(string))
	}
	count := -1
	if n, ok := r.body["stalenessCount"].(float64); ok {
		count = int(n)
	}
	return ids, count
}

// TestHealthListsTheStalestThousand: GET /api/v1/scheduler/health lists
// the 1000 stalest tasks by default, stalest first, and how many tasks it
// scored; staleness=<n> lists n, from 0 to 1000, and any other value is a
// 400 naming the parameter. It listed every task: at 100,000 tasks, tens
// of MB built in the API's memory.
func TestHealthListsTheStalestThousand(t *testing.T) {
	t.Parallel()
	b, js := apiOnly(t)
	now := time.Now().UTC()
	const tasks = 1002
	for i := range tasks {
		id := fmt.Sprintf("t%04d", i)
		// Every task last succeeded an hour ago. t1001 runs every 10
		// minutes (score 1) and t1000 every 20 ((60-20)/80 = 0.5): the
		// two stalest. The rest run hourly, tie at 0 and come by id.
		every := time.Hour
		switch id {
		case "t1001":
			every = 10 * time.Minute
		case "t1000":
			every = 20 * time.Minute
		}
		natstest.PutJSON(t, js, streams.BucketTasks, id, events.TaskSpec{
			ID: id, Target: events.Target{HTTP: &events.HTTPTarget{URL: "http://example.test/"}},
			Schedule: events.Schedule{Interval: events.Duration(every)},
		})
		natstest.PutJSON(t, js, streams.BucketSchedules, id, gov.State{TaskID: id, NextRunAt: now.Add(time.Minute), LastSuccessAt: now.Add(-time.Hour)})
	}

	ids, count := healthStaleness(t, b, "/api/v1/scheduler/health")
	if len(ids) != 1000 || ids[0] != "t1001" || ids[1] != "t1000" || ids[2] != "t0000" || ids[999] != "t0997" || count != tasks {
		t.Fatalf("GET /api/v1/scheduler/health: %d entries (%v … %v), stalenessCount %d; want 1000: t1001, t1000, t0000 … t0997, and %d",
			len(ids), ids[:min(len(ids), 3)], ids[max(len(ids)-1, 0):], count, tasks)
	}
	for _, c := range []struct {
		query string
		want  string
	}{
		{"staleness=3", "t1001 t1000 t0000"},
		{"staleness=1", "t1001"},
		{"staleness=0", ""},
	} {
		path := "/api/v1/scheduler/health?" + c.query
		if ids, count := healthStaleness(t, b, path); strings.Join(ids, " ") != c.want || count != tasks {
			t.Errorf("GET %s: %v, stalenessCount %d; want %q and %d", path, ids, count, c.want, tasks)
		}
	}
	for _, v := range []string{"1001", "-1", "ten", "1.5"} {
		path := "/api/v1/scheduler/health?staleness=" + v
		r := b.call(t, http.MethodGet, path, "")
		expect(t, "GET "+path, r, http.StatusBadRequest, "staleness")
		if d, want := r.str("detail"), fmt.Sprintf(`must be an integer in [0, 1000], got %q`, v); d != want {
			t.Errorf("GET %s: detail %q, want %q", path, d, want)
		}
	}
}

// TestHealthzAnswersOtherMethodsWithoutAToken: /healthz is public, but
// only its GET was: POST /healthz without a token was a 401, and with one
// a 405. It is a 405 (Allow: GET) either way.
func TestHealthzAnswersOtherMethodsWithoutAToken(t *testing.T) {
	t.Parallel()
	b, _ := apiOnly(t)
	for _, auth := range []string{"", "Bearer " + token} {
		for _, m := range []string{http.MethodPost, http.MethodDelete, http.MethodPut} {
			r := b.do(t, m, "/healthz", auth, "")
			expect(t, fmt.Sprintf("%s /healthz (Authorization %q)", m, auth), r, http.StatusMethodNotAllowed, "")
			if a := r.header.Get("Allow"); a != "GET" {
				t.Fatalf("%s /healthz: Allow %q, want GET", m, a)
			}
		}
	}
	// Every other path still asks for a token first.
	expect(t, "POST /api/v1/runtime without a token", b.do(t, http.MethodPost, "/api/v1/runtime", "", ""), http.StatusUnauthorized, "Authorization")
}
