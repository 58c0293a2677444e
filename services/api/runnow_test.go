package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/api"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/streams"
)

// TestRunNowCarriesNoCallerClock: run-now's one-shot was stamped with
// the API host's clock, which the governor compared with the command's
// time on the NATS server's clock: a host ahead by Δ ran it Δ late, and
// with a ttl of Δ or less the governor rejected it ("would never run").
// It now sends a zero at, which the governor takes as the time TASKS
// stored the command. Here the API's clock runs an hour ahead.
func TestRunNowCarriesNoCallerClock(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	_, js := srv.Connect(t)
	natstest.PutJSON(t, js, streams.BucketTasks, "web", events.TaskSpec{
		ID:       "web",
		Target:   events.Target{HTTP: &events.HTTPTarget{URL: "http://127.0.0.1:1/"}},
		Schedule: events.Schedule{Interval: events.Duration(time.Hour)},
	})
	s := startAPI(t, api.Config{
		Common: svcconf.Common{JS: js, Now: func() time.Time { return time.Now().Add(time.Hour) }},
		Addr:   "127.0.0.1:0", Tokens: []string{token}, AnswerTimeout: 100 * time.Millisecond,
	})
	b := &bundle{js: js, base: "http://" + s.Addr()}
	// No governor runs: the command is stored, its answer pending.
	expect(t, "run-now", b.call(t, http.MethodPost, "/api/v1/tasks/web/run-now", `{"ttl":"30m"}`), http.StatusAccepted, "")
	var h events.TaskHint
	natstest.LastData(t, js, streams.StreamTasks, events.TaskSubject(events.VerbHinted, "web"), &h)
	if h.At == nil || !h.At.IsZero() || h.TTL.D() != 30*time.Minute || h.Reason != "run-now" {
		t.Fatalf("stored run-now hint %+v (at %v), want a zero at (the governor's now), ttl 30m, reason run-now", h, h.At)
	}
}
