package executor

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/streams"
)

// runOf decodes a run event stored on RUNS.
func runOf(t *testing.T, m *jetstream.RawStreamMsg) events.Run {
	t.Helper()
	e, err := events.Decode(m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	var r events.Run
	if err := events.DecodeData(e, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// lastRun returns the task's last run event of outcome o on RUNS, if any.
func lastRun(t *testing.T, js jetstream.JetStream, o events.Outcome, id string) (events.Run, bool) {
	t.Helper()
	runs, err := js.Stream(t.Context(), streams.StreamRuns)
	if err != nil {
		t.Fatal(err)
	}
	m, err := runs.GetLastMsgForSubject(t.Context(), events.RunSubject(o, id))
	if err != nil {
		return events.Run{}, false
	}
	return runOf(t, m), true
}

// pathTarget is an HTTP target that counts the calls of each path /<id>.
type pathTarget struct {
	url   string
	mu    sync.Mutex
	calls map[string]int
}

func newPathTarget(t *testing.T) *pathTarget {
	t.Helper()
	p := &pathTarget{calls: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.calls[strings.TrimPrefix(r.URL.Path, "/")]++
		p.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	p.url = srv.URL
	return p
}

// of returns how many times task id's path was called.
func (p *pathTarget) of(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[id]
}

// spec is a normalized hourly task calling p at /<id>.
func (p *pathTarget) spec(id string) events.TaskSpec {
	spec := events.TaskSpec{
		ID:       id,
		Target:   events.Target{HTTP: &events.HTTPTarget{URL: p.url + "/" + id}},
		Schedule: events.Schedule{Interval: events.Duration(time.Hour)},
	}
	spec.Normalize()
	return spec
}
