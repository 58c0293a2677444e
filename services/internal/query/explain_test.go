package query_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/control"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/query"
	"github.com/flyballhq/flyball/services/stack"
	"github.com/flyballhq/flyball/streams"
)

// TestExplainSeesHostScopedBreakerTransitions: the governor applies a
// breaker transition to the task named in the event, whatever the breaker
// key; explain must replay the same inputs, so a task with a host-scoped
// breaker explains (and agrees with) its stored schedule.
func TestExplainSeesHostScopedBreakerTransitions(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	nc, js := srv.Connect(t)
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) }))
	t.Cleanup(tg.Close)
	ctl := startRunStack(t, nc, js)
	ctx := context.Background()
	for _, c := range []struct{ id, scope string }{{"bytask", "task"}, {"byhost", "host"}} {
		spec, err := control.DecodeSpec([]byte(`{"id":"` + c.id + `","target":{"http":{"url":"` + tg.URL + `/` + c.id + `"}},"schedule":{"interval":"1h"},` +
			`"retry":{"maxAttempts":1},"breaker":{"failureThreshold":1,"openDelay":"2h","maxOpenDelay":"4h","scope":"` + c.scope + `"}}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, ans, err := ctl.Send(ctx, events.VerbCreated, c.id, spec, 5*time.Second); err != nil || ans.Accepted == nil {
			t.Fatalf("create %s: %v %+v", c.id, err, ans)
		}
	}
	q, err := query.NewReader(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	health, err := js.Stream(ctx, streams.StreamHealth)
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 15*time.Second, "both breakers open on HEALTH and the governor caught up", func() bool {
		info, err := health.Info(ctx, jetstream.WithSubjectFilter("flyball.breaker.open.>"))
		if err != nil || len(info.State.Subjects) < 2 {
			return false
		}
		if !natstest.CaughtUp(ctx, js, streams.StreamHealth, streams.ConsumerGovernor) {
			return false
		}
		// the governor's stored trail says it applied the breaker event
		for _, id := range []string{"bytask", "byhost"} {
			v, err := q.Task(ctx, id)
			if err != nil || v.Schedule == nil || v.Schedule.BreakerOpenUntil.IsZero() {
				return false
			}
		}
		return true
	})
	for _, id := range []string{"bytask", "byhost"} {
		ex, err := q.Explain(ctx, id, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		breakerSteps := 0
		for _, s := range ex.Timeline {
			if s.Stream == streams.StreamHealth {
				breakerSteps++
			}
		}
		if ex.Stored == nil || ex.Replayed == nil {
			t.Fatalf("%s: no stored or replayed state", id)
		}
		if breakerSteps != 1 || !ex.Replayed.BreakerOpenUntil.Equal(ex.Stored.BreakerOpenUntil) {
			t.Errorf("%s: explain shows %d breaker transitions (want 1: the governor applied closed → open); replayed breakerOpenUntil %v, stored %v",
				id, breakerSteps, ex.Replayed.BreakerOpenUntil, ex.Stored.BreakerOpenUntil)
		}
	}
}

// startRunStack starts every service a run goes through (not the sweeper
// or the API) on js, and returns a control client on the same server.
func startRunStack(t *testing.T, nc *nats.Conn, js jetstream.JetStream) *control.Client {
	t.Helper()
	st, err := stack.Start(context.Background(), stack.Config{
		JS: js, Guard: executor.Guard{AllowLoopback: true},
		Services: []string{"governor", "timer", "executor", "breaker", "deadletter"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	return &control.Client{NC: nc, JS: js, Source: "test"}
}
