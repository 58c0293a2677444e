package stack_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
)

// healingTarget answers 500 on the paths of failing tasks until healed,
// 200 otherwise, and counts the calls of each path /<id>.
type healingTarget struct {
	srv    *httptest.Server
	healed atomic.Bool
	mu     sync.Mutex
	calls  map[string]int
}

func newHealingTarget(t *testing.T) *healingTarget {
	t.Helper()
	h := &healingTarget{calls: map[string]int{}}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.Path, "/")
		h.mu.Lock()
		h.calls[id]++
		h.mu.Unlock()
		if strings.HasPrefix(id, "down") && !h.healed.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *healingTarget) of(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[id]
}

// TestBreakerDeferralsPastTheirRoomRunOnceTheBreakersClose: end to end,
// with the executor consumer's max_ack_pending at 2 (20,000 in
// production) and its AckWait at 2 s. Two tasks fail, and their breakers
// open for 8 s: their retries wait for retryAt, and the executor keeps at
// most one of them (half of max_ack_pending, less when the consumer
// fills), reporting the other run.skipped. A healthy task due every
// second keeps running meanwhile (before, both waits filled the consumer
// and it ran only once the breakers closed). The governor plans a skipped
// task's next run at its breaker's retryAt, and once the targets answer
// again each task succeeds, with no dead letter: a skip, not a loss.
func TestBreakerDeferralsPastTheirRoomRunOnceTheBreakersClose(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "governor", "breaker", "deadletter", "timer")
	changeDispatch(t, e.srv.JS, func(c *jetstream.ConsumerConfig) { c.MaxAckPending, c.AckWait = 2, 2*time.Second })
	ex := e.start("executor")
	tg := newHealingTarget(t)
	skipped := e.collect("flyball.run.skipped.>")
	succeeded := e.collect("flyball.run.succeeded.>")
	dls := e.collect("flyball.deadletter.>")
	const openDelay = 8 * time.Second
	for _, id := range []string{"down1", "down2"} {
		e.create(id, fmt.Sprintf(`{"id":%q,"target":{"http":{"url":%q}},"schedule":{"interval":"2s"},
			"retry":{"maxAttempts":5,"initialDelay":"500ms","multiplier":1,"maxDelay":"500ms","jitter":0},
			"breaker":{"failureThreshold":1,"openDelay":%q,"maxOpenDelay":"20s"}}`, id, tg.srv.URL+"/"+id, openDelay.String()))
	}
	e.create("healthy", fmt.Sprintf(`{"id":"healthy","target":{"http":{"url":%q}},"schedule":{"interval":"1s"}}`, tg.srv.URL+"/healthy"))

	deferred := func() float64 { return testutil.ToFloat64(ex.Metrics().RunsTotal.WithLabelValues("deferred")) }
	natstest.Eventually(t, 15*time.Second, "both retries held back by their open breakers", func() bool { return deferred() >= 2 })
	since, calls := time.Now(), tg.of("healthy")
	natstest.Eventually(t, openDelay, "two more calls of the healthy task while the breakers are open", func() bool { return tg.of("healthy") >= calls+2 })
	if waited := time.Since(since); waited >= openDelay {
		t.Fatalf("the healthy task took %s for two calls: the breakers (open %s) may have closed meanwhile", waited, openDelay)
	}
	if n := testutil.ToFloat64(ex.Metrics().SkipsTotal.WithLabelValues("breaker")); n < 1 {
		t.Fatalf("flyball_skips_total{reason=\"breaker\"} = %v, want at least 1", n)
	}
	var reason string
	for _, ev := range skipped() {
		var r events.Run
		if events.DecodeData(ev, &r) == nil && strings.HasPrefix(r.Reason, "breaker open until ") {
			reason = r.Reason
		}
	}
	if reason == "" {
		t.Fatal("no run.skipped names the open breaker")
	}
	tg.healed.Store(true)
	natstest.Eventually(t, 30*time.Second, "both failing tasks succeed once their breakers let a call through", func() bool {
		ok := map[string]bool{}
		for _, ev := range succeeded() {
			var r events.Run
			if events.DecodeData(ev, &r) == nil {
				ok[r.TaskID] = true
			}
		}
		return ok["down1"] && ok["down2"]
	})
	if n := len(dls()); n != 0 {
		t.Fatalf("%d dead letters, want none: a run held back by its breaker is skipped, not failed", n)
	}
}
