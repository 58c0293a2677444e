package executor

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

func TestProbeDeferral(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		age, left, want time.Duration
	}{
		{0, 50 * time.Second, probeRecheck},                           // a probe just started: re-check soon
		{3 * time.Second, 50 * time.Second, 3 * time.Second},          // a slow probe: back off as long as it has run
		{40 * time.Second, 10 * time.Second, 10 * time.Second},        // never past the claim's expiry
		{40 * time.Second, 10 * time.Millisecond, probeRecheckFloor},  // about to expire
		{40 * time.Second, -time.Second, probeRecheckFloor},           // expired, not yet removed
		{-time.Second, 50 * time.Second, probeRecheck},                // the claimant's clock is ahead
		{time.Second, 700 * time.Millisecond, 700 * time.Millisecond}, // the claim's end comes first
	} {
		if got := probeDeferral(c.age, c.left); got != c.want {
			t.Errorf("probeDeferral(%s, %s) = %s, want %s", c.age, c.left, got, c.want)
		}
	}
}

func TestProbeTTLOutlastsTheCall(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		target events.Target
		want   time.Duration
	}{
		{events.Target{HTTP: &events.HTTPTarget{Timeout: events.Duration(30 * time.Second)}}, 50 * time.Second},
		{events.Target{HTTP: &events.HTTPTarget{Timeout: events.Duration(1500 * time.Millisecond)}}, 22 * time.Second},
		{events.Target{NATS: &events.NATSTarget{Timeout: events.Duration(5 * time.Second)}}, 25 * time.Second},
	} {
		spec := &events.TaskSpec{Target: c.target}
		if got := probeTTL(spec, settleMargin); got != c.want {
			t.Errorf("probeTTL(timeout %s) = %s, want %s", callTimeout(spec), got, c.want)
		}
	}
}

// TestDeadProbersClaimExpiresAndAnotherExecutorProbes: an executor that
// dies mid-probe leaves its claim in flyball-probes. Another executor
// defers the dispatch while the claim lives, and probes once it expires
// (its TTL: the call's timeout plus the claim margin, 1 s here).
func TestDeadProbersClaimExpiresAndAnotherExecutorProbes(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	ctx := context.Background()
	shortenAckWait(t, srv.JS) // the dead executor's delivery comes back after 1 s

	var mu sync.Mutex
	var calls []time.Time
	hang := make(chan struct{})
	target := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls = append(calls, time.Now())
		first := len(calls) == 1
		mu.Unlock()
		if first { // the dead executor's probe never ends
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		}
	}))
	t.Cleanup(func() { close(hang); target.Close() })
	nCalls := func() int { mu.Lock(); defer mu.Unlock(); return len(calls) }

	spec, probes, key := halfOpenTask(t, srv, "probed", target.URL, 2*time.Second)

	// Executor a claims the probe, calls, and dies mid-call.
	nc, err := nats.Connect("", nats.InProcessServer(srv.Server))
	if err != nil {
		t.Fatal(err)
	}
	a := startProbeExecutor(t, nc, "a")
	crash := sync.OnceFunc(func() { nc.Close(); a.Stop() })
	t.Cleanup(crash)
	dispatchNow(t, srv.JS, spec.ID)
	natstest.Eventually(t, 10*time.Second, "executor a probes", func() bool { return nCalls() == 1 })
	crash()
	ent, err := probes.Get(ctx, key)
	if err != nil {
		t.Fatalf("the dead executor's claim %s: %v", key, err)
	}
	var dead probeClaim
	if err := json.Unmarshal(ent.Value(), &dead); err != nil || dead.Executor != "flyball/executor/a" {
		t.Fatalf("claim %s = %s (%v), want executor a's", key, ent.Value(), err)
	}

	// Executor b gets the dispatch back, defers it while the claim lives,
	// and probes once it has expired.
	ncB, _ := srv.Connect(t)
	b := startProbeExecutor(t, ncB, "b")
	t.Cleanup(b.Stop)
	natstest.Eventually(t, 15*time.Second, "executor b probes after the claim expires", func() bool { return nCalls() == 2 })
	mu.Lock()
	second := calls[1]
	mu.Unlock()
	if second.Before(dead.ExpiresAt) {
		t.Errorf("executor b called %s before the dead executor's claim expired", dead.ExpiresAt.Sub(second))
	}
	if n := testutil.ToFloat64(b.cfg.Metrics.ProbeDeferred); n < 1 {
		t.Errorf("executor b deferred the dispatch %v times while the claim lived, want at least once", n)
	}
	natstest.Eventually(t, 5*time.Second, "the claim is executor b's", func() bool {
		ent, err := probes.Get(ctx, key)
		var c probeClaim
		return err == nil && json.Unmarshal(ent.Value(), &c) == nil && c.Executor == "flyball/executor/b"
	})
}

// TestCancelledProbesClaimIsReleased: an executor whose shutdown cancels
// its probe mid-call deletes its claim, so another executor may probe at
// once rather than when the claim expires.
func TestCancelledProbesClaimIsReleased(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	ctx := context.Background()
	arrived := make(chan struct{}, 1)
	target := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done() // hangs until the executor gives up
	}))
	t.Cleanup(target.Close)
	spec, probes, key := halfOpenTask(t, srv, "cancelled", target.URL, 30*time.Second)
	nc, _ := srv.Connect(t)
	s := startProbeExecutor(t, nc, "a")
	dispatchNow(t, srv.JS, spec.ID)
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the probe never reached the target")
	}
	if _, err := probes.Get(ctx, key); err != nil {
		t.Fatalf("claim %s while the probe runs: %v", key, err)
	}
	s.Stop() // the 1 ms shutdown grace cancels the call
	if _, err := probes.Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyDeleted) {
		t.Fatalf("claim %s after the cancelled probe: err %v, want it deleted", key, err)
	}
}

// startProbeExecutor starts an executor named instance on nc whose probe
// claims live their call's timeout plus one second.
func startProbeExecutor(t *testing.T, nc *nats.Conn, instance string) *Service {
	t.Helper()
	return startExecutorOn(t, nc, instance, func(s *Service) { s.probeMargin = time.Second })
}

// startExecutorOn starts an executor named instance on nc, stopped in
// t.Cleanup, after prepare (if not nil) has set its test knobs.
func startExecutorOn(t *testing.T, nc *nats.Conn, instance string, prepare func(*Service)) *Service {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{JS: js, Instance: instance, Logger: quietLog(), Guard: Guard{AllowLoopback: true}, ShutdownGrace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if prepare != nil {
		prepare(s)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// shortenAckWait gives the DISPATCH consumer a 1 s AckWait.
func shortenAckWait(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	changeDispatchConsumer(t, js, func(c *jetstream.ConsumerConfig) { c.AckWait = time.Second })
}

// changeDispatchConsumer updates the DISPATCH consumer with change (before
// an executor starts: it reads the consumer at Start).
func changeDispatchConsumer(t *testing.T, js jetstream.JetStream, change func(*jetstream.ConsumerConfig)) {
	t.Helper()
	ctx := context.Background()
	c, err := js.Consumer(ctx, streams.StreamDispatch, streams.ConsumerExecutor)
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.CachedInfo().Config
	change(&cfg)
	if _, err := js.UpdateConsumer(ctx, streams.StreamDispatch, cfg); err != nil {
		t.Fatal(err)
	}
}

// dispatchNow publishes a run.due for task id, due now.
func dispatchNow(t *testing.T, js jetstream.JetStream, id string) {
	t.Helper()
	slot := time.Now().UTC()
	d := events.Dispatch{DispatchID: events.DispatchID(id, slot), TaskID: id, ScheduledAt: slot, FiredAt: slot, Source: "test"}
	body, err := events.Marshal(events.TypeRunDue, "test", id, d, slot, d.DispatchID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(context.Background(), events.DispatchSubject(id), body); err != nil {
		t.Fatal(err)
	}
}

// halfOpenTask stores a task calling url with timeout, whose breaker is
// half-open since a second ago, and returns it with the probe bucket and
// the key of its probe claim.
func halfOpenTask(t *testing.T, srv *natstest.Server, id, url string, timeout time.Duration) (events.TaskSpec, jetstream.KeyValue, string) {
	t.Helper()
	spec := events.TaskSpec{
		ID:       id,
		Target:   events.Target{HTTP: &events.HTTPTarget{URL: url, Timeout: events.Duration(timeout)}},
		Schedule: events.Schedule{Interval: events.Duration(time.Hour)},
	}
	spec.Normalize()
	natstest.PutJSON(t, srv.JS, streams.BucketTasks, spec.ID, spec)
	retryAt := time.Now().Add(-time.Second).UTC()
	natstest.PutJSON(t, srv.JS, streams.BucketBreakers, spec.ID, BreakerRecord{
		Key: spec.ID, State: events.BreakerHalfOpen, Failures: 3, OpenDelay: events.Duration(time.Second), RetryAt: retryAt, UpdatedAt: time.Now().UTC(),
	})
	probes, err := srv.JS.KeyValue(t.Context(), streams.BucketProbes)
	if err != nil {
		t.Fatal(err)
	}
	return spec, probes, probeKey(spec.ID, retryAt)
}
