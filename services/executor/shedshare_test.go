package executor

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestTwoExecutorsShedDownToHalfBetweenThem: the consumer's ack pending
// counts every executor's parked dispatches. Each executor shed
// ack pending − parkCap of its own, so two that read it before either's
// skips were acked shed almost everything between them (1992 kept of a
// max_ack_pending of 2000 went down to 27–79, not 1000). Each sheds its
// share now, in proportion to what it parks: here both read the full
// consumer (the test drives the read, its watch is an hour apart), and
// between them they keep half of max_ack_pending.
func TestTwoExecutorsShedDownToHalfBetweenThem(t *testing.T) {
	t.Parallel()
	const n = 40 // max_ack_pending, and as many dispatches under one host breaker
	srv := natstest.StartWithStreams(t)
	changeDispatchConsumer(t, srv.JS, func(c *jetstream.ConsumerConfig) { c.MaxAckPending = n })
	target := newPathTarget(t)
	var key string
	for i := range n {
		spec := target.spec(fmt.Sprintf("down%d", i))
		spec.Breaker = &events.BreakerPolicy{Scope: "host"}
		spec.Normalize()
		natstest.PutJSON(t, srv.JS, streams.BucketTasks, spec.ID, spec)
		if key == "" {
			u, err := url.Parse(spec.Target.HTTP.URL)
			if err != nil {
				t.Fatal(err)
			}
			key = hostKey(canonicalHost(u))
		}
	}
	noWatch := func(s *Service) { s.parkPoll = time.Hour }
	var exs []*Service
	for _, instance := range []string{"a", "b"} {
		nc, _ := srv.Connect(t)
		exs = append(exs, startExecutorOn(t, nc, instance, noWatch))
	}
	rec := BreakerRecord{Key: key, State: events.BreakerOpen, Failures: 3, OpenDelay: events.Duration(time.Hour), RetryAt: time.Now().Add(time.Hour).UTC(), UpdatedAt: time.Now().UTC()}
	for _, ex := range exs {
		putBreakerSeen(t, srv.JS, ex, key, rec)
	}
	for i := range n {
		dispatchNow(t, srv.JS, fmt.Sprintf("down%d", i))
	}
	kept := func() (k float64) {
		for _, ex := range exs {
			k += testutil.ToFloat64(ex.cfg.Metrics.DispatchDeferred)
		}
		return k
	}
	natstest.Eventually(t, 10*time.Second, "every dispatch kept or skipped", func() bool {
		return kept()+breakerSkips(exs[0])+breakerSkips(exs[1]) == n
	})
	before := kept()
	if before < n*3/4 {
		t.Fatalf("%v of %d dispatches kept before shedding, want the consumer past shedAt", before, n)
	}
	cons, err := srv.JS.Consumer(t.Context(), streams.StreamDispatch, streams.ConsumerExecutor)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, ex := range exs { // both read it before either's skips are acked
		ex.shedFor(t.Context(), int64(info.NumAckPending))
	}
	if got := kept(); got < n/2 || got > n/2+2 {
		t.Errorf("two executors that read %d delivered and unacked kept %v of %v between them after shedding, want %d (half of max_ack_pending %d)", info.NumAckPending, got, before, n/2, n)
	}
}
