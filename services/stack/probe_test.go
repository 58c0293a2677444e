package stack_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/stack"
	"github.com/flyballhq/flyball/streams"
)

// fragileHost is a target host: /fail answers 500, /ok records the call
// and answers 200 once release is closed.
type fragileHost struct {
	srv     *httptest.Server
	release chan struct{}
	mu      sync.Mutex
	ok      map[string]int // calls of /ok per Idempotency-Key
}

func newFragileHost(t *testing.T) *fragileHost {
	t.Helper()
	h := &fragileHost{release: make(chan struct{}), ok: map[string]int{}}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		h.mu.Lock()
		h.ok[r.Header.Get("Idempotency-Key")]++
		h.mu.Unlock()
		select {
		case <-h.release:
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(func() {
		select {
		case <-h.release:
		default:
			close(h.release)
		}
		h.srv.Close()
	})
	return h
}

// calls returns the number of /ok calls and of dispatches that made one.
func (h *fragileHost) calls() (calls, dispatches int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.ok {
		calls += n
	}
	return calls, len(h.ok)
}

// hostTask is a task calling url under a host-scoped breaker that opens
// on the first failure for openDelay, with one attempt per run.
func hostTask(id, url string, openDelay time.Duration) events.TaskSpec {
	spec := events.TaskSpec{
		ID:       id,
		Target:   events.Target{HTTP: &events.HTTPTarget{URL: url, Timeout: events.Duration(10 * time.Second)}},
		Schedule: events.Schedule{Interval: events.Duration(time.Hour)},
		Retry:    &events.Retry{MaxAttempts: 1},
		Breaker:  &events.BreakerPolicy{FailureThreshold: 1, OpenDelay: events.Duration(openDelay), Scope: "host"},
	}
	spec.Normalize()
	return spec
}

// TestHalfOpenHostBreakerLetsOneProbeThrough: a host-scoped breaker is
// open on a failing host while the dispatches of five of its tasks are
// deferred, across two executors. When retryAt passes, the host gets one
// call, the probe, and every other dispatch is deferred again while it
// runs (before, all five called at once: a thundering herd at the moment
// the host is fragile). Once the probe succeeds and the breaker closes,
// the other four call, each once.
func TestHalfOpenHostBreakerLetsOneProbeThrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "breaker")
	host := newFragileHost(t)
	var execs []*stack.Stack
	for _, name := range []string{"exec-a", "exec-b"} {
		execs = append(execs, e.startWith(func(c *stack.Config) { c.Instance = name }, "executor"))
	}
	deferred := func() (n float64) {
		for _, st := range execs {
			n += testutil.ToFloat64(st.Metrics().RunsTotal.WithLabelValues("deferred"))
		}
		return n
	}
	breakers := e.collect("flyball.breaker.>")
	// Long enough for five dispatches to reach two executors and be
	// deferred before retryAt on a loaded machine: 2s was not, once, and
	// 4s was not, once, while other tests took both cores.
	const openDelay, n = 8 * time.Second, 5

	natstest.PutJSON(t, e.srv.JS, streams.BucketTasks, "opener", hostTask("opener", host.srv.URL+"/fail", openDelay))
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "task" + string(rune('a'+i))
		natstest.PutJSON(t, e.srv.JS, streams.BucketTasks, ids[i], hostTask(ids[i], host.srv.URL+"/ok", openDelay))
	}
	dispatchAt(t, e.srv.JS, "opener", time.Now().UTC())
	var retryAt time.Time
	natstest.Eventually(t, 10*time.Second, "the host breaker opens", func() bool {
		for _, ev := range breakers() {
			var tr events.BreakerTransition
			if ev.Type() == events.TypeBreakerOpen && events.DecodeData(ev, &tr) == nil && tr.RetryAt != nil {
				retryAt = *tr.RetryAt
				return true
			}
		}
		return false
	})
	for _, id := range ids {
		dispatchAt(t, e.srv.JS, id, time.Now().UTC())
	}
	natstest.Eventually(t, 10*time.Second, "every dispatch deferred by the open breaker", func() bool { return deferred() >= n })
	if now := time.Now(); !now.Before(retryAt) {
		t.Fatalf("the dispatches were deferred %s after retryAt: the open delay is too short for this machine", now.Sub(retryAt))
	}

	// After retryAt: one call goes through; the others come back and are
	// deferred again while it runs (or, before, call too).
	natstest.Eventually(t, 20*time.Second, "the probe, and every other dispatch deferred again (or more calls)", func() bool {
		calls, _ := host.calls()
		return calls > 1 || calls == 1 && deferred() >= n+(n-1)
	})
	if calls, _ := host.calls(); calls != 1 {
		t.Fatalf("the half-open host got %d calls at once, want 1 (the probe)", calls)
	}
	probeDeferred := 0.0
	for _, st := range execs {
		probeDeferred += counterSum(t, st.Metrics().Registry, "flyball_breaker_probe_deferred_total")
	}
	if probeDeferred < n-1 {
		t.Errorf("flyball_breaker_probe_deferred_total = %v, want at least %d", probeDeferred, n-1)
	}
	opener := hostTask("opener", host.srv.URL+"/fail", openDelay)
	checkOneProbeClaim(t, e, executor.BreakerKey(&opener), retryAt) // host_127_0_0_1_P<port>

	// The probe succeeds: the breaker closes, and everyone calls.
	close(host.release)
	natstest.Eventually(t, 10*time.Second, "the breaker closes", func() bool {
		for _, ev := range breakers() {
			if ev.Type() == events.TypeBreakerClosed {
				return true
			}
		}
		return false
	})
	natstest.Eventually(t, 15*time.Second, "every dispatch calls the host", func() bool {
		_, dispatches := host.calls()
		return dispatches == n
	})
	if calls, _ := host.calls(); calls != n {
		t.Fatalf("%d calls for %d dispatches, want one each", calls, n)
	}
}

// TestHashedHostBreakerIsSharedEndToEnd: two host-scoped tasks on one
// host whose breaker key is hashed (a name of 138 characters: host_ and
// it would be over a token's 128) share one breaker through the whole
// path. The first task's failure reaches the breaker on RUNS under the
// hashed key, which opens it in flyball-breakers and says so on HEALTH;
// the second task's dispatch is then deferred without a call. The unit
// tests of hostKey, and the breaker's of hand-made host_ keys, would all
// pass if the breaker refused the hashed form (validKey terminates such
// a run as malformed, and the host's breaker never opens).
// The host is under .invalid (RFC 2606): it never resolves, so every
// call fails with a DNS error, a transient failure the breaker counts.
func TestHashedHostBreakerIsSharedEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "breaker", "executor")
	host := strings.Repeat("a", 60) + "." + strings.Repeat("b", 50) + ".flyball-stack-test.invalid"
	// Long enough for the second dispatch to be deferred on a loaded
	// machine; the test ends before it passes.
	const openDelay = time.Minute
	opener := hostTask("opener", "http://"+host+"/fail", openDelay)
	// A machine with no reachable resolver times the lookup out instead
	// of answering NXDOMAIN: bound the failing call well inside the wait.
	opener.Target.HTTP.Timeout = events.Duration(time.Second)
	key := executor.BreakerKey(&opener)
	if !regexp.MustCompile(`^host_[a-z0-9_-]+-H[0-9a-f]{16}$`).MatchString(key) || len(key) > events.MaxIDLength {
		t.Fatalf("breaker key %q of a %d-character host, want host_<its first characters>-H<16 hex>, at most %d characters", key, len(host), events.MaxIDLength)
	}
	opened := e.collect(events.BreakerSubject(events.BreakerOpen, ">"))
	otherRuns := e.collect(events.RunSubject("*", "other"))

	natstest.PutJSON(t, e.srv.JS, streams.BucketTasks, "opener", opener)
	natstest.PutJSON(t, e.srv.JS, streams.BucketTasks, "other", hostTask("other", "http://"+host+":80/ok", openDelay))
	dispatchAt(t, e.srv.JS, "opener", time.Now().UTC())
	e.awaitBreaker(key, 15*time.Second, "the hashed host key's breaker open in "+streams.BucketBreakers, func(b executor.BreakerRecord) bool {
		return b.State == events.BreakerOpen
	})
	natstest.Eventually(t, 5*time.Second, "breaker.opened on HEALTH", func() bool { return len(opened()) > 0 })
	for _, ev := range opened() {
		var tr events.BreakerTransition
		if err := events.DecodeData(ev, &tr); err != nil || tr.Key != key {
			t.Errorf("breaker.opened for key %q (%v), want only %q", tr.Key, err, key)
		}
	}
	if n := len(natstest.Read(t, e.srv.JS, streams.StreamHealth, events.BreakerSubject(events.BreakerOpen, key))); n != 1 {
		t.Errorf("HEALTH holds %d breaker.opened on the hashed key, want 1", n)
	}

	// The other task's dispatch meets the open breaker: deferred, no call
	// and so no outcome on RUNS.
	dispatchAt(t, e.srv.JS, "other", time.Now().UTC())
	natstest.Eventually(t, 10*time.Second, "the other task's dispatch deferred by the shared breaker", func() bool {
		return testutil.ToFloat64(e.st.Metrics().RunsTotal.WithLabelValues("deferred")) >= 1
	})
	if runs := otherRuns(); len(runs) != 0 {
		t.Errorf("the other task has %d outcomes on RUNS (first %s), want none while its host's breaker is open", len(runs), runs[0].Type())
	}
	if n := counterSum(t, e.st.Metrics().Registry, "flyball_rejected_events_total"); n != 0 {
		t.Errorf("flyball_rejected_events_total = %v, want 0 (a run under the hashed key terminated as malformed?)", n)
	}
}

// checkOneProbeClaim checks that flyball-probes holds one claim, for the
// breaker key's half-open period that began at retryAt.
func checkOneProbeClaim(t *testing.T, e *env, breakerKey string, retryAt time.Time) {
	t.Helper()
	kv, err := e.srv.JS.KeyValue(context.Background(), streams.BucketProbes)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for k := range keys.Keys() {
		got = append(got, k)
	}
	want := breakerKey + "." + strconv.FormatInt(retryAt.UnixMilli(), 10)
	if len(got) != 1 || got[0] != want {
		t.Errorf("flyball-probes keys %q, want [%s]", strings.Join(got, " "), want)
	}
}
