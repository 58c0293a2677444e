package timer

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/lease"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
)

// stalledKV is the leases bucket whose updates, while stalled, wait until
// they are let through, whatever their context says: the lease's
// goroutine is stuck in its renewal as a frozen process's would be, while
// the dispatcher goes on (after a freeze both wake, in either order).
// Let through, the update is sent as it stands.
type stalledKV struct {
	jetstream.KeyValue
	mu      sync.Mutex
	gate    chan struct{} // nil: updates pass
	stalled atomic.Int32  // updates that waited at the gate
}

func (k *stalledKV) Update(ctx context.Context, key string, v []byte, rev uint64) (uint64, error) {
	k.mu.Lock()
	gate := k.gate
	k.mu.Unlock()
	if gate != nil {
		k.stalled.Add(1)
		<-gate
		ctx = context.Background()
	}
	return k.KeyValue.Update(ctx, key, v, rev)
}

func (k *stalledKV) stall() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.gate == nil {
		k.gate = make(chan struct{})
	}
}

func (k *stalledKV) release() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.gate != nil {
		close(k.gate)
		k.gate = nil
	}
}

// startStalling starts a timer holding the lease ttl whose renewals can be
// stalled, and waits until it holds the lease and has loaded the
// schedules.
func startStalling(t *testing.T, js jetstream.JetStream, instance string, ttl time.Duration) (*Service, *stalledKV, *warnings) {
	t.Helper()
	logs := &warnings{}
	s, err := New(Config{JS: js, Instance: instance, Logger: slog.New(logs), Metrics: metrics.New(), RetryDelay: 20 * time.Millisecond, Lease: ttl})
	if err != nil {
		t.Fatal(err)
	}
	kv := &stalledKV{}
	s.tuneLease = func(c *lease.Config) {
		kv.KeyValue = c.KV
		c.KV = kv
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	t.Cleanup(kv.release) // before the stop: the stop waits for the lease's goroutine
	natstest.Eventually(t, within, instance+" takes the free lease", func() bool { return dispatching(s) })
	select {
	case <-s.Ready():
	case <-time.After(within):
		t.Fatalf("%s did not load the schedules", instance)
	}
	return s, kv, logs
}

func published(s *Service) int {
	r := results(s)
	return r[resultNew] + r[resultDuplicate] + r[resultPending] + r[resultError]
}

// TestTimerHoldsDispatchesWhileItsLeaseIsUnconfirmed: a holder whose
// lease's goroutine has not confirmed the lease for its TTL (a process
// frozen past it: SIGSTOP, docker pause, a VM paused) may have been
// replaced by a standby, although it has not noticed. Its dispatcher
// publishes nothing then, and publishes the slot it held back once a
// renewal confirms the lease.
func TestTimerHoldsDispatchesWhileItsLeaseIsUnconfirmed(t *testing.T) {
	const ttl = time.Second
	srv := natstest.StartWithStreams(t)
	a, kv, logs := startStalling(t, srv.JS, "timer-a", ttl)

	kv.stall()
	natstest.Eventually(t, within, "timer-a's renewal stalls", func() bool { return kv.stalled.Load() > 0 })
	// The renewal that stalls was sent within TTL/3 of the last one
	// confirmed: two TTLs on, the lease has gone unconfirmed past its TTL
	// (less its margin) when the slot falls due.
	putSchedule(t, srv.JS, "task", time.Now().Add(2*ttl).UTC(), gov.SourceBaselineInterval)
	natstest.Eventually(t, within, "timer-a publishes the slot or holds it back", func() bool {
		return published(a) > 0 || logs.with(msgUnfenced)
	})
	if n := published(a); n != 0 || !dispatching(a) {
		t.Fatalf("timer-a published %d dispatches (%v) while its lease had gone unconfirmed past its TTL (dispatching %v)", n, results(a), dispatching(a))
	}
	if queued(a) != 1 {
		t.Fatalf("timer-a holds %d slots back, want the task's 1", queued(a))
	}

	kv.release()
	natstest.Eventually(t, within, "timer-a publishes the held slot once the lease is renewed", func() bool { return results(a)[resultNew] == 1 })
	if r := results(a); published(a) != 1 {
		t.Fatalf("timer-a results %v, want the one slot, stored once", r)
	}
	if got := testutil.ToFloat64(a.cfg.Metrics.TimerLeaseStalls); got != 1 {
		t.Fatalf("flyball_timer_lease_stalls_total %v, want 1", got)
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	n := 0
	for _, l := range logs.list {
		if strings.HasPrefix(l, msgUnfenced) {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("timer-a warned %d times of its unconfirmed lease, want once: %q", n, logs.list)
	}
}

// TestTimerWhoseLeaseWasTakenOverPublishesNothingStale: the same holder,
// and a standby that takes the lease it sees unrenewed for the TTL, and
// dispatches. The old holder, whose lease's goroutine still believes it
// holds the lease, publishes nothing; once its renewal runs it finds the
// lease taken, stands by and forgets its schedules, the slot it held
// back with them. The slot is stored once, by the new holder.
func TestTimerWhoseLeaseWasTakenOverPublishesNothingStale(t *testing.T) {
	const ttl = time.Second
	srv := natstest.StartWithStreams(t)
	a, kv, logs := startStalling(t, srv.JS, "timer-a", ttl)
	b := startLeased(t, srv.JS, "timer-b", ttl)

	kv.stall()
	natstest.Eventually(t, within, "timer-a's renewal stalls", func() bool { return kv.stalled.Load() > 0 })
	putSchedule(t, srv.JS, "task", time.Now().Add(2*ttl).UTC(), gov.SourceBaselineInterval)
	natstest.Eventually(t, within, "timer-b takes the unrenewed lease and dispatches", func() bool { return published(b) > 0 })
	natstest.Eventually(t, within, "timer-a publishes the slot or holds it back", func() bool {
		return published(a) > 0 || logs.with(msgUnfenced)
	})
	if n := published(a); n != 0 {
		t.Fatalf("timer-a published %d dispatches (%v) after timer-b took its lease over (timer-b: %v)", n, results(a), results(b))
	}

	kv.release()
	natstest.Eventually(t, within, "timer-a finds the lease taken, stands by and forgets the slot", func() bool {
		return !dispatching(a) && queued(a) == 0
	})
	if r := results(b); r[resultNew] != 1 || published(b) != 1 || published(a) != 0 {
		t.Fatalf("results timer-a %v, timer-b %v; want the slot stored once, by timer-b", results(a), r)
	}
}
