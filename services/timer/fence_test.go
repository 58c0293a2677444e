package timer

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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
	logs := &warnings{info: true}
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

// count is how many warnings start with msg.
func (w *warnings) count(msg string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, l := range w.list {
		if strings.HasPrefix(l, msg) {
			n++
		}
	}
	return n
}

// stalls reads flyball_timer_lease_stalls_total.
func stalls(s *Service) int { return int(testutil.ToFloat64(s.cfg.Metrics.TimerLeaseStalls)) }

// fenceTTL is the lease of the fence tests: long enough that a renewal
// starved on a loaded -race run does not run the fence out on its own
// (it would have to come 1.7 s late), short enough to keep them quick.
const fenceTTL = 3 * time.Second

// stallRenewals stalls kv's renewals, waits until one waits at the gate,
// and writes a slot due once the fence has surely run out, and returns
// it. The renewal that waits was sent after the last one confirmed, so
// the fence runs out within TTL less its margin from now; the slot falls
// due a TTL and a half from now, and is published its lead (at most
// FirstLead) before that.
func stallRenewals(t *testing.T, js jetstream.JetStream, kv *stalledKV, ttl time.Duration) time.Time {
	t.Helper()
	kv.stall()
	natstest.Eventually(t, within, "the holder's renewal stalls", func() bool { return kv.stalled.Load() > 0 })
	slot := time.Now().Add(ttl + ttl/2).UTC().Truncate(time.Millisecond)
	putSchedule(t, js, "task", slot, gov.SourceBaselineInterval)
	return slot
}

// TestTimerHoldsDispatchesWhileItsLeaseIsUnconfirmed: a holder whose
// lease's goroutine has not confirmed the lease for its TTL (a process
// frozen past it: SIGSTOP, docker pause, a VM paused) may have been
// replaced by a standby, although it has not noticed. Its dispatcher
// publishes nothing then, while it still believes it holds the lease,
// warns once for the stall and counts it, and publishes the slot it held
// back once it holds the lease confirmed again. (The renewal let through
// confirms the lease as of when it was sent, before the stall, so the
// next gives the lease up and, finding the key unchanged, takes it back:
// the slot goes out after the schedules are loaded again.)
func TestTimerHoldsDispatchesWhileItsLeaseIsUnconfirmed(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	a, kv, logs := startStalling(t, srv.JS, "timer-a", fenceTTL)

	slot := stallRenewals(t, srv.JS, kv, fenceTTL)
	// From here until the release nothing confirms the lease: the
	// dispatcher is held back once, for good, whenever its fence ran out.
	before := stalls(a)
	natstest.Eventually(t, within, "timer-a publishes the slot or holds it back", func() bool {
		return published(a) > 0 || logs.with(msgUnfenced)
	})
	// Past the slot, by a few of the dispatcher's checks.
	natstest.Eventually(t, within, "the slot falls due while timer-a's renewal stalls", func() bool {
		return published(a) > 0 || time.Now().After(slot.Add(5*fenceRecheck))
	})
	if n := published(a); n != 0 || !dispatching(a) {
		t.Fatalf("timer-a published %d dispatches (%v) while its lease had gone unconfirmed past its TTL (dispatching %v)", n, results(a), dispatching(a))
	}
	if queued(a) != 1 {
		t.Fatalf("timer-a holds %d slots back, want the task's 1", queued(a))
	}
	// Once per stall, not once per check, and each warning counted. A
	// stall before this one (a renewal starved on a loaded machine) may
	// have counted already; it went on into this one.
	got, warned := stalls(a), logs.count(msgUnfenced)
	if got < 1 || got-before > 1 || warned != got {
		t.Fatalf("flyball_timer_lease_stalls_total %d (%d before the renewals stalled), %d warnings, during one stall; want one more at most, at least 1 in all, and a warning each: %q", got, before, warned, logs.list)
	}

	kv.release()
	natstest.Eventually(t, within, "timer-a publishes the held slot once it holds the lease confirmed again", func() bool { return results(a)[resultNew] == 1 })
}

// TestTimerWhoseLeaseWasTakenOverPublishesNothingStale: the same holder,
// and a standby that takes the lease it sees unrenewed for the TTL, and
// dispatches. The old holder, whose lease's goroutine still believes it
// holds the lease, publishes nothing; once its renewal runs it finds the
// lease taken, stands by and forgets its schedules, the slot it held
// back with them. The slot is stored once, by the new holder.
func TestTimerWhoseLeaseWasTakenOverPublishesNothingStale(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	a, kv, logs := startStalling(t, srv.JS, "timer-a", fenceTTL)
	b := startLeased(t, srv.JS, "timer-b", fenceTTL)

	stallRenewals(t, srv.JS, kv, fenceTTL)
	natstest.Eventually(t, within, "timer-b takes the unrenewed lease and dispatches", func() bool { return published(b) > 0 })
	natstest.Eventually(t, within, "timer-a publishes the slot or holds it back", func() bool {
		return published(a) > 0 || logs.with(msgUnfenced)
	})
	if n := published(a); n != 0 || !dispatching(a) {
		t.Fatalf("timer-a published %d dispatches (%v) after timer-b took its lease over (timer-b: %v; timer-a dispatching %v)", n, results(a), results(b), dispatching(a))
	}

	kv.release()
	natstest.Eventually(t, within, "timer-a finds the lease taken, stands by and forgets the slot", func() bool {
		return !dispatching(a) && queued(a) == 0
	})
	// timer-b may publish the slot again (a duplicate) if a starved
	// renewal made it give the lease up and take it back; it is stored
	// once, and timer-a published nothing, before or after its release.
	if r := results(b); r[resultNew] != 1 || published(a) != 0 {
		t.Fatalf("results timer-a %v, timer-b %v; want the slot stored once, by timer-b", results(a), r)
	}
}

// frozenJS is the timer's JetStream whose next async publish, once
// frozen, waits until thawed: the dispatcher stops between its check of
// the fence and its write to the connection, as in a process stopped
// there. For each publish it sends it records whether the timer's fence
// held as the publish went out.
type frozenJS struct {
	jetstream.JetStream
	fence  atomic.Pointer[lease.Fence]
	frozen atomic.Bool // a publish waits at the gate, or went through it
	mu     sync.Mutex
	gate   chan struct{} // taken by the next publish
	thawed chan struct{} // closed by thaw
	held   []bool        // the fence held as each publish went out
}

func (j *frozenJS) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	j.mu.Lock()
	gate := j.gate
	j.gate = nil // one publish freezes
	j.mu.Unlock()
	if gate != nil {
		j.frozen.Store(true)
		<-gate
	}
	j.mu.Lock()
	j.held = append(j.held, j.fence.Load().Holds(time.Now()))
	j.mu.Unlock()
	return j.JetStream.PublishMsgAsync(m, opts...)
}

// freeze makes the next publish wait until thaw.
func (j *frozenJS) freeze() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.gate = make(chan struct{})
	j.thawed = j.gate
}

func (j *frozenJS) thaw() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.thawed != nil {
		close(j.thawed)
		j.thawed = nil
	}
}

// sent is, for each publish sent, whether the fence held as it went out.
func (j *frozenJS) sent() []bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.held)
}

// TestTimerFrozenMidBatchPastItsFenceSendsOnlyTheDispatchItHadChecked:
// a holder frozen while it publishes a batch (between its check of the
// fence for the first dispatch and the write), and whose lease goes
// unconfirmed meanwhile, wakes past its fence. The dispatch it had
// checked goes out, late: nothing bounds a freeze after the check (see
// lease.FenceMargin). The rest of the batch is checked on waking: held
// back, not dropped and not published, re-queued, with one warning and
// one stall counted for the stall however often the dispatcher checks;
// once a renewal confirms the lease again (the one that stalled, sent
// before the fence ran out, so the lease is kept and not given up) the
// timer logs so, once, and publishes them.
func TestTimerFrozenMidBatchPastItsFenceSendsOnlyTheDispatchItHadChecked(t *testing.T) {
	const n = 3
	srv := natstest.StartWithStreams(t)
	js := &frozenJS{JetStream: srv.JS}
	a, kv, logs := startStalling(t, js, "timer-a", fenceTTL)
	js.fence.Store(&a.fence)
	t.Cleanup(js.thaw) // before the stop: the stop waits for the dispatcher

	// The slots are all queued before they fall due, so the dispatcher
	// takes them as one batch.
	js.freeze()
	slot := time.Now().Add(time.Second).UTC().Truncate(time.Millisecond)
	for i := range n {
		putSchedule(t, srv.JS, fmt.Sprintf("task-%d", i), slot, gov.SourceBaselineInterval)
	}
	natstest.Eventually(t, within, "timer-a freezes publishing the batch", js.frozen.Load)
	if q := queued(a); q != 0 {
		t.Fatalf("timer-a took %d of the %d slots in the batch it froze in", n-q, n)
	}

	before, warned := stalls(a), logs.count(msgUnfenced)
	kv.stall()
	natstest.Eventually(t, within, "the holder's renewal stalls", func() bool { return kv.stalled.Load() > 0 })
	natstest.Eventually(t, within, "timer-a's fence runs out", func() bool { return !a.fence.Holds(time.Now()) })
	js.thaw()

	// The dispatch it had checked goes out, and the dispatcher finds the
	// fence out as it checks the next. Its ack is collected after the
	// dispatcher checked the fence again, and a few checks more pass.
	natstest.Eventually(t, within, "the frozen dispatch acked and the fence found out", func() bool {
		return published(a) > 0 && logs.with(msgUnfenced)
	})
	acked := time.Now()
	natstest.Eventually(t, within, "a few of the dispatcher's checks pass", func() bool {
		return published(a) > 1 || time.Now().After(acked.Add(3*fenceRecheck))
	})
	if sent := js.sent(); len(sent) != 1 || sent[0] || published(a) != 1 || queued(a) != n-1 {
		t.Fatalf("while the fence is out timer-a sent %d dispatches (the fence held as each went out: %v; results %v) and holds %d back; "+
			"want only the one frozen after its check, sent past the fence, and the other %d held back", len(sent), sent, results(a), queued(a), n-1)
	}
	if got, w := stalls(a)-before, logs.count(msgUnfenced)-warned; got != 1 || w != 1 {
		t.Fatalf("flyball_timer_lease_stalls_total rose by %d and %d warnings were logged during one stall, want 1 each: %q", got, w, logs.list)
	}

	kv.release()
	natstest.Eventually(t, within, "timer-a publishes the slots it held back once its lease is confirmed again", func() bool {
		return results(a)[resultNew] == n
	})
	if logs.with("lost the lease") {
		t.Fatalf("timer-a gave the lease up: the renewal let through came after the fence it would confirm ran out too (the test waited too long): %q", logs.list)
	}
	if c := logs.count(msgConfirmed); c != 1 {
		t.Fatalf("%d %q logged, want 1: %q", c, msgConfirmed, logs.list)
	}
	if sent := js.sent(); !slices.Equal(sent, []bool{false, true, true}) {
		t.Fatalf("the fence held as each publish went out: %v, want only the frozen first one sent past it", sent)
	}
	if got := stalls(a) - before; got != 1 {
		t.Fatalf("flyball_timer_lease_stalls_total rose by %d, want 1 for the one stall", got)
	}
}
