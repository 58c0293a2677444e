package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

const ttl = 3 * time.Second

// replica is one participant driven step by step on its own clock, so
// the tests decide when TTL has passed instead of waiting for it.
type replica struct {
	*state
	clock   time.Time
	changes []bool
}

func newReplica(t *testing.T, kv jetstream.KeyValue, holder string) *replica {
	t.Helper()
	r := &replica{clock: time.Unix(1_800_000_000, 0)}
	r.state = &state{cfg: Config{
		KV: kv, Key: "timer", Holder: holder, TTL: ttl,
		OnChange: func(held bool) { r.changes = append(r.changes, held) },
		now:      func() time.Time { return r.clock },
	}, value: []byte(holder + tokenSep + newToken())}
	r.log = quiet
	return r
}

func (r *replica) advance(d time.Duration) { r.clock = r.clock.Add(d) }

func leases(t *testing.T) (*natstest.Server, jetstream.KeyValue) {
	t.Helper()
	srv := natstest.StartWithStreams(t)
	kv, err := srv.JS.KeyValue(context.Background(), streams.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	return srv, kv
}

func holder(t *testing.T, kv jetstream.KeyValue) string {
	t.Helper()
	e, err := kv.Get(context.Background(), "timer")
	if err != nil {
		t.Fatalf("get lease: %v", err)
	}
	return HolderOf(e.Value())
}

func TestFreeLeaseIsTakenAndRenewalsKeepOthersOut(t *testing.T) {
	_, kv := leases(t)
	ctx := context.Background()
	a, b := newReplica(t, kv, "timer-a"), newReplica(t, kv, "timer-b")

	a.step(ctx)
	if !a.held || holder(t, kv) != "timer-a" {
		t.Fatalf("a did not take the free lease (held %v)", a.held)
	}
	b.step(ctx)
	if b.held {
		t.Fatal("b took a lease a holds")
	}
	// a renews every TTL/3; b's clock runs well past TTL in the meantime,
	// but each renewal moves the revision b watches.
	for range 6 {
		a.advance(ttl / 3)
		a.step(ctx)
		b.advance(ttl / 2)
		b.step(ctx)
		if b.held {
			t.Fatal("b took the lease while a renewed it")
		}
	}
	if !a.held || len(a.changes) != 1 || len(b.changes) != 0 {
		t.Fatalf("changes a %v b %v, want a [true] and b none", a.changes, b.changes)
	}
}

func TestSilentHolderIsReplacedAfterTTL(t *testing.T) {
	_, kv := leases(t)
	ctx := context.Background()
	a, b, c := newReplica(t, kv, "timer-a"), newReplica(t, kv, "timer-b"), newReplica(t, kv, "timer-c")
	a.step(ctx)
	b.step(ctx)
	c.step(ctx)

	// a goes silent. Just short of TTL, b and c wait.
	b.advance(ttl - time.Millisecond)
	b.step(ctx)
	if b.held {
		t.Fatal("b took the lease before TTL passed")
	}
	// Both see it silent for TTL; one compare-and-set wins.
	b.advance(time.Millisecond)
	c.advance(ttl)
	b.step(ctx)
	c.step(ctx)
	if !b.held || c.held || holder(t, kv) != "timer-b" {
		t.Fatalf("held: b %v, c %v (key %q); want b alone", b.held, c.held, holder(t, kv))
	}
	// a wakes up: its renewal loses the compare-and-set, and it stands by.
	a.step(ctx)
	if a.held || len(a.changes) != 2 || a.changes[1] {
		t.Fatalf("a after b took over: held %v, changes %v", a.held, a.changes)
	}
	if holder(t, kv) != "timer-b" {
		t.Fatalf("a's failed renewal changed the key to %q", holder(t, kv))
	}
}

// TestStandbyTakesOverTTLAfterItSawTheLastRenewal runs a standby as
// services do, on a fake clock whose ticks come a little late or early
// as real ones do: it takes a silent lease TTL after it first saw the
// holder's last renewal, not at the first tick after that. Its ticks are
// TTL/3 apart, so if the one that saw the renewal came a millisecond late,
// the third after it comes a millisecond short of TTL; waiting for the
// fourth took over up to TTL + 2·TTL/3 after the renewal, past the TTL +
// TTL/3 the docs promise.
func TestStandbyTakesOverTTLAfterItSawTheLastRenewal(t *testing.T) {
	_, kv := leases(t)
	ctx := context.Background()
	a := newReplica(t, kv, "timer-a")
	start := a.clock
	a.step(ctx)
	// a renews once, between b's first and second ticks, then crashes.
	renewal := start.Add(ttl/3 + ttl/6)
	late := map[int]time.Duration{2: time.Millisecond}
	var (
		clock      = start
		ticked     int
		seen, took time.Time
	)
	Run(ctx, Config{
		KV: kv, Key: "timer", Holder: "timer-b", TTL: ttl, Logger: quiet,
		OnChange: func(held bool) {
			if held {
				took = clock
			}
		},
		now: func() time.Time { return clock },
		wait: func(_ context.Context, at time.Time) bool {
			if !took.IsZero() || ticked == 10 {
				return false
			}
			if tick := start.Add(time.Duration(ticked+1)*ttl/3 + late[ticked+1]); at.IsZero() || tick.Before(at) {
				clock = tick
				ticked++
			} else {
				clock = at
			}
			if a.clock.Before(renewal) && !clock.Before(renewal) {
				a.clock = renewal
				a.step(ctx)
				seen = clock // b's step at this clock reads the renewal
			}
			return true
		},
	})
	if took.IsZero() {
		t.Fatalf("b did not take the lease in %d ticks after a went silent", ticked)
	}
	if took.Sub(seen) != ttl || took.Sub(renewal) > ttl+ttl/3 {
		t.Fatalf("b took the lease %s after a's last renewal, %s after it saw it; want %s after it saw it, at most %s after the renewal",
			took.Sub(renewal), took.Sub(seen), ttl, ttl+ttl/3)
	}
}

// TestRenewalWhoseReplyWasLostKeepsTheLease: a renewal the server stored
// but whose reply never came leaves the holder one revision behind the
// key; its next renewal loses the compare-and-set, finds its own name at
// a later revision, and keeps the lease.
func TestRenewalWhoseReplyWasLostKeepsTheLease(t *testing.T) {
	_, kv := leases(t)
	ctx := context.Background()
	a := newReplica(t, kv, "timer-a")
	a.step(ctx)
	if _, err := kv.Update(ctx, "timer", a.value, a.rev); err != nil {
		t.Fatal(err)
	}
	a.advance(ttl / 3)
	a.step(ctx)
	if !a.held || len(a.changes) != 1 {
		t.Fatalf("a after a lost reply: held %v, changes %v; want it still held", a.held, a.changes)
	}
	a.advance(ttl / 3)
	a.step(ctx)
	if !a.held {
		t.Fatal("a lost the lease at the renewal after adopting its revision")
	}
	// Another replica's write at a later revision is not adopted.
	if _, err := kv.Put(ctx, "timer", []byte("timer-b")); err != nil {
		t.Fatal(err)
	}
	a.step(ctx)
	if a.held {
		t.Fatal("a adopted a revision another replica wrote")
	}
}

func TestReleaseHandsOverAtTheNextRead(t *testing.T) {
	_, kv := leases(t)
	ctx := context.Background()
	a, b := newReplica(t, kv, "timer-a"), newReplica(t, kv, "timer-b")
	a.step(ctx)
	b.step(ctx)

	a.release()
	if a.held || len(a.changes) != 2 || a.changes[1] {
		t.Fatalf("a after release: held %v, changes %v", a.held, a.changes)
	}
	// b's clock has not moved: only the release lets it in.
	b.step(ctx)
	if !b.held || holder(t, kv) != "timer-b" {
		t.Fatalf("b did not take the released lease (held %v)", b.held)
	}
}

func TestHolderCutOffFromNATSStepsDownAfterTTL(t *testing.T) {
	srv, kv := leases(t)
	ctx := context.Background()
	nc, js := srv.Connect(t)
	own, err := js.KeyValue(ctx, streams.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	a, b := newReplica(t, own, "timer-a"), newReplica(t, kv, "timer-b")
	a.step(ctx)
	if !a.held {
		t.Fatal("a did not take the free lease")
	}
	nc.Close()

	// A renewal that fails keeps the lease while TTL has not passed:
	// nobody can have taken it yet.
	a.advance(ttl / 3)
	short, cancel := context.WithTimeout(ctx, time.Second)
	a.step(short)
	cancel()
	if !a.held {
		t.Fatal("a gave the lease up before TTL passed")
	}
	a.advance(ttl)
	short, cancel = context.WithTimeout(ctx, time.Second)
	a.step(short)
	cancel()
	if a.held {
		t.Fatal("a kept a lease it could not renew for TTL")
	}

	b.step(ctx)
	b.advance(ttl)
	b.step(ctx)
	if !b.held || holder(t, kv) != "timer-b" {
		t.Fatalf("b did not take the silent lease (held %v)", b.held)
	}
}

// failingKV fails every call while fail is set, as a KV whose stream is
// electing a leader does; otherwise it is the real bucket.
type failingKV struct {
	jetstream.KeyValue
	fail bool
}

var errElection = errors.New("nats: no responders available for request")

func (f *failingKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if f.fail {
		return nil, errElection
	}
	return f.KeyValue.Get(ctx, key)
}

func (f *failingKV) Update(ctx context.Context, key string, v []byte, rev uint64) (uint64, error) {
	if f.fail {
		return 0, errElection
	}
	return f.KeyValue.Update(ctx, key, v, rev)
}

// TestHolderThatCouldNotRenewTakesBackAnUnchangedKey: a holder whose
// renewals failed for TTL (the bucket electing a leader) stands down; once
// it can read the key again and finds it unchanged, nobody has taken it,
// and it holds it again at once rather than after another TTL.
func TestHolderThatCouldNotRenewTakesBackAnUnchangedKey(t *testing.T) {
	_, kv := leases(t)
	ctx := context.Background()
	flaky := &failingKV{KeyValue: kv}
	a, b := newReplica(t, flaky, "timer-a"), newReplica(t, kv, "timer-b")
	a.step(ctx)
	b.step(ctx)
	// Renewals sent a tick apart fail: the second leaves too little of
	// the TTL for the next, and a gives the lease up (not the path of a
	// holder that did not run for its TTL, which sends none).
	flaky.fail = true
	a.advance(ttl / 3)
	a.step(ctx)
	if !a.held {
		t.Fatal("a gave the lease up after one failed renewal, with 2/3 of its TTL left")
	}
	a.advance(ttl / 3)
	a.step(ctx)
	if a.held {
		t.Fatal("a kept a lease it could not renew with a tick of its TTL left")
	}
	flaky.fail = false
	a.step(ctx)
	if !a.held || holder(t, kv) != "timer-a" || len(a.changes) != 3 {
		t.Fatalf("a with the key unchanged: held %v, changes %v", a.held, a.changes)
	}
	// b had seen the old revision: the retake moved it, so b waits anew.
	b.advance(ttl)
	b.step(ctx)
	if b.held {
		t.Fatal("b took the lease a had taken back")
	}
}

// TestRunTakesAndReleases runs replicas as services do, on the real
// clock: the first takes the free lease, and releases it when it stops,
// so the next takes it at its first read.
func TestRunTakesAndReleases(t *testing.T) {
	_, kv := leases(t)
	var aHeld, bHeld atomic.Bool
	ctxA, stopA := context.WithCancel(context.Background())
	doneA := make(chan struct{})
	go func() {
		defer close(doneA)
		Run(ctxA, Config{KV: kv, Key: "timer", Holder: "timer-a", TTL: time.Minute, OnChange: aHeld.Store, Logger: quiet})
	}()
	natstest.Eventually(t, 5*time.Second, "a takes the free lease", aHeld.Load)
	if holder(t, kv) != "timer-a" {
		t.Fatalf("key %q, want timer-a", holder(t, kv))
	}
	stopA()
	<-doneA
	if aHeld.Load() {
		t.Fatal("a still reports the lease after it stopped")
	}
	if _, err := kv.Get(context.Background(), "timer"); err == nil {
		t.Fatal("a stopped without releasing the lease")
	}

	ctxB, stopB := context.WithCancel(context.Background())
	doneB := make(chan struct{})
	defer func() { stopB(); <-doneB }()
	go func() {
		defer close(doneB)
		Run(ctxB, Config{KV: kv, Key: "timer", Holder: "timer-b", TTL: time.Minute, OnChange: bHeld.Store, Logger: quiet})
	}()
	natstest.Eventually(t, 5*time.Second, "b takes the released lease", bHeld.Load)
	if holder(t, kv) != "timer-b" {
		t.Fatalf("key %q, want timer-b", holder(t, kv))
	}
}

var quiet = slog.New(slog.DiscardHandler)

// TestSameNameDoesNotShareTheLease: two processes of one name (a holder
// restarted while the old process was only stalled or cut off, or two
// replicas given one name) never both keep the lease. The second finds
// its own name in the key but not its run's token: it waits for TTL like
// any standby, instead of taking the key back at its second read as one
// it had held itself. When the first wakes, its renewal fails and the key
// is not its run's, so it stands by instead of adopting the other's writes
// as renewals of its own whose reply was lost.
func TestSameNameDoesNotShareTheLease(t *testing.T) {
	_, kv := leases(t)
	ctx := context.Background()
	a, b := newReplica(t, kv, "timer-a"), newReplica(t, kv, "timer-a")
	a.step(ctx)
	b.step(ctx)
	// a misses one renewal, well within its TTL: it still dispatches.
	b.advance(ttl / 3)
	b.step(ctx)
	if b.held {
		t.Fatalf("b took the lease of a live holder of its name after %s, within the holder's TTL (%s)", ttl/3, ttl)
	}
	b.advance(ttl - ttl/3)
	b.step(ctx)
	if !b.held {
		t.Fatal("b did not take a lease silent for its TTL")
	}
	for round := range 6 {
		a.advance(ttl / 3)
		a.step(ctx)
		b.advance(ttl / 3)
		b.step(ctx)
		if a.held && b.held {
			t.Fatalf("round %d: both processes named timer-a hold the lease", round)
		}
	}
	if a.held || !b.held {
		t.Fatalf("held: a %v, b %v; want b alone", a.held, b.held)
	}
}

func TestHolderOf(t *testing.T) {
	t.Parallel()
	for value, want := range map[string]string{
		"timer1#5c0f9a3e": "timer1", "a#b#5c0f9a3e": "a#b", "timer1": "timer1", "": "",
	} {
		if got := HolderOf([]byte(value)); got != want {
			t.Errorf("HolderOf(%q) = %q, want %q", value, got, want)
		}
	}
}

// hangingKV is the real bucket whose updates, while hang is set, hang
// until their context ends, as on a connection that went quiet; instead
// of waiting, each moves the replica's clock on by the time it was given.
type hangingKV struct {
	jetstream.KeyValue
	r    *replica
	hang bool
}

func (h *hangingKV) Update(ctx context.Context, key string, v []byte, rev uint64) (uint64, error) {
	if !h.hang {
		return h.KeyValue.Update(ctx, key, v, rev)
	}
	if d, ok := ctx.Deadline(); ok {
		// Read a moment after the deadline was set: round to the timeout.
		h.r.advance(time.Until(d).Round(time.Millisecond))
	}
	return 0, context.DeadlineExceeded
}

// TestHolderWhoseRenewalsHangStopsAtItsTTL: a holder whose renewals hang
// gives the lease up by TTL after its last renewal, when a standby that
// saw that renewal may take it, not up to a renewal's timeout later: a
// renewal may only wait for what is left of the TTL, and the holder reads
// its clock again after it.
func TestHolderWhoseRenewalsHangStopsAtItsTTL(t *testing.T) {
	_, kv := leases(t)
	ctx := context.Background()
	slow := &hangingKV{KeyValue: kv}
	a, b := newReplica(t, slow, "timer-a"), newReplica(t, kv, "timer-b")
	slow.r = a
	a.step(ctx)
	b.step(ctx)
	slow.hang = true
	// a's ticker fires every TTL/3; each renewal ends before the next.
	for a.held {
		due := a.clock.Add(ttl / 3)
		a.step(ctx)
		if a.held && a.clock.Sub(b.clock) >= ttl {
			t.Fatalf("a still holds the lease %s after its last renewal, when b may take it", a.clock.Sub(b.clock))
		}
		if a.clock.Before(due) {
			a.clock = due
		}
	}
	if got := a.clock.Sub(b.clock); got > ttl+ttl/10 {
		t.Fatalf("a gave the lease up %s after its last renewal, want by %s", got, ttl)
	}
}

// TestHolderWhoseRenewalsFailFastStopsByItsTTL: a holder whose renewals
// fail at once (no responders while the bucket elects a leader, or a
// closed connection) gives the lease up before a standby that saw its
// last renewal may take it, not a tick later. Its ticks come a tick
// apart from that renewal, each a little early or late: one near the TTL
// may still find a few microseconds left, and if that renewal fails too
// the holder must not keep the lease to the tick after it.
func TestHolderWhoseRenewalsFailFastStopsByItsTTL(t *testing.T) {
	_, kv := leases(t)
	ctx := context.Background()
	flaky := &failingKV{KeyValue: kv}
	a, b := newReplica(t, flaky, "timer-a"), newReplica(t, kv, "timer-b")
	a.step(ctx)
	b.step(ctx)
	renewed := a.clock
	flaky.fail = true
	for tick := time.Duration(1); a.held; tick++ {
		a.clock = renewed.Add(tick*ttl/3 - time.Microsecond)
		a.step(ctx)
		if tick == 1 && !a.held {
			t.Fatal("a gave the lease up after one failed renewal, with two thirds of its TTL left")
		}
		next := a.clock.Add(ttl / 3)
		if !a.held || !next.After(renewed.Add(ttl)) {
			continue
		}
		// a holds the lease until its next tick; b, which saw the last
		// renewal, takes it at the TTL.
		b.clock = renewed.Add(ttl)
		b.step(ctx)
		if b.held {
			t.Fatalf("a keeps the lease until its next tick, %s after its last renewal, but b took it at %s: two holders for %s",
				next.Sub(renewed), ttl, next.Sub(b.clock))
		}
	}
	b.clock = renewed.Add(ttl)
	b.step(ctx)
	if !b.held {
		t.Fatal("b did not take the lease a gave up")
	}
}

// records is a slog.Handler that keeps every record, at every level, so a
// test reads what an operator would see and at which level.
type records struct {
	mu   sync.Mutex
	list []slog.Record
}

func (*records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.list = append(h.list, r.Clone())
	return nil
}
func (h *records) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *records) WithGroup(string) slog.Handler      { return h }

// take returns the records logged since the last take, one line each:
// level, message and the attributes named in keys.
func (h *records) take(keys ...string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.list {
		line := r.Level.String() + " " + r.Message
		r.Attrs(func(a slog.Attr) bool {
			if slices.Contains(keys, a.Key) {
				line += " " + a.Key + "=" + a.Value.String()
			}
			return true
		})
		out = append(out, line)
	}
	h.list = nil
	return out
}

// TestUnreadableLeaseWarnsOncePerMinute: a standby that cannot read the
// lease key (here its bucket is deleted, so the read fails on the real
// server) says so at Warn, which the default --log-level info shows and
// the FlyballNoTimerDispatching runbook tells operators to look for: at
// the first failure, then at most once a minute with the count of the
// failures and when they began, and once at Info when it reads the key
// again. A new outage warns at its first failure again.
func TestUnreadableLeaseWarnsOncePerMinute(t *testing.T) {
	srv, kv := leases(t)
	ctx := context.Background()
	a, b := newReplica(t, kv, "timer-a"), newReplica(t, kv, "timer-b")
	logged := &records{}
	b.log = slog.New(logged)
	a.step(ctx)
	b.step(ctx)
	logged.take()
	outage := func() {
		t.Helper()
		if err := srv.JS.DeleteKeyValue(ctx, streams.BucketLeases); err != nil {
			t.Fatal(err)
		}
	}
	outage()
	start, failures := b.clock, 1
	b.step(ctx)
	if got, want := logged.take("failures", "since"), []string{
		"WARN lease unreadable; standing by failures=1 since=" + start.String(),
	}; !slices.Equal(got, want) {
		t.Fatalf("a standby that could not read the lease logged %q, want %q", got, want)
	}
	// Read every TTL/3 for most of a minute: nothing more.
	for b.clock.Sub(start) < time.Minute-ttl/3 {
		b.advance(ttl / 3)
		b.step(ctx)
		failures++
	}
	if got := logged.take(); len(got) != 0 {
		t.Fatalf("failed reads within a minute of the warning logged %q, want nothing", got)
	}
	b.advance(ttl / 3)
	b.step(ctx)
	failures++
	got := logged.take("failures", "since")
	if want := fmt.Sprintf("WARN lease unreadable; standing by failures=%d since=%s", failures, start); len(got) == 0 || got[len(got)-1] != want {
		t.Fatalf("a minute into the outage the standby logged %q, want it to end with %q", got, want)
	}
	for _, line := range got {
		if !strings.HasPrefix(line, "WARN lease unreadable") {
			t.Fatalf("a minute into the outage the standby logged %q, want only the warning (and its count)", got)
		}
	}

	if _, err := srv.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: streams.BucketLeases}); err != nil {
		t.Fatal(err)
	}
	b.advance(ttl / 3)
	b.step(ctx)
	if got, want := logged.take("failures"), []string{
		fmt.Sprintf("INFO lease readable again failures=%d", failures),
		"INFO took the lease: lease was free",
	}; !b.held || !slices.Equal(got, want) {
		t.Fatalf("reading the key again the standby logged %q (held %v), want %q", got, b.held, want)
	}

	b.held = false // stand by again, as after a lost renewal
	outage()
	b.advance(ttl / 3)
	b.step(ctx)
	if got, want := logged.take("failures"), []string{"WARN lease unreadable; standing by failures=1"}; !slices.Equal(got, want) {
		t.Fatalf("a second outage, within a minute of the last warning, logged %q, want %q", got, want)
	}
}

// lateReplyKV is the real bucket whose updates are answered late: each
// moves the replica's clock on by late once it is stored.
type lateReplyKV struct {
	jetstream.KeyValue
	r    *replica
	late time.Duration
}

func (k *lateReplyKV) Update(ctx context.Context, key string, v []byte, rev uint64) (uint64, error) {
	rev, err := k.KeyValue.Update(ctx, key, v, rev)
	k.r.advance(k.late)
	return rev, err
}

// TestFenceHoldsUntilTTLLessItsMarginAfterTheWriteWasSent: a holder's
// fence holds from the moment it takes the lease until TTL less
// FenceMargin after its last confirmed write, counted from when that
// write was sent, not from its late reply: a standby may have seen the
// write as soon as it was stored. A renewal whose reply was lost confirms
// nothing, and a lease lost or released clears the fence.
func TestFenceHoldsUntilTTLLessItsMarginAfterTheWriteWasSent(t *testing.T) {
	_, kv := leases(t)
	ctx := context.Background()
	late := &lateReplyKV{KeyValue: kv}
	a := newReplica(t, late, "timer-a")
	late.r = a
	fence := &Fence{}
	a.cfg.Fence = fence
	var heldAtChange []bool
	a.cfg.OnChange = func(bool) { heldAtChange = append(heldAtChange, fence.Holds(a.clock)) }
	bound := ttl - FenceMargin(ttl)
	if fence.Holds(a.clock) {
		t.Fatal("the fence holds before the lease was taken")
	}

	a.step(ctx)
	taken := a.clock
	if !a.held || !fence.Holds(taken) || !fence.Holds(taken.Add(bound-time.Nanosecond)) || fence.Holds(taken.Add(bound)) {
		t.Fatalf("after the take at %s: held %v, fence until %s; want it to hold until %s", taken, a.held, until(fence), taken.Add(bound))
	}

	// A renewal sent at sent, answered ttl/6 later.
	late.late = ttl / 6
	a.advance(ttl / 3)
	sent := a.clock
	a.step(ctx)
	if got := until(fence); !a.held || !got.Equal(sent.Add(bound)) {
		t.Fatalf("after a renewal sent at %s and answered at %s: fence until %s, want %s", sent, a.clock, got, sent.Add(bound))
	}

	// A renewal stored whose reply was lost: adopted, but not confirmed.
	late.late = 0
	if _, err := kv.Update(ctx, "timer", a.value, a.rev); err != nil {
		t.Fatal(err)
	}
	a.advance(ttl / 3)
	a.step(ctx)
	if got := until(fence); !a.held || !got.Equal(sent.Add(bound)) {
		t.Fatalf("after a renewal whose reply was lost: held %v, fence until %s, want still %s", a.held, got, sent.Add(bound))
	}

	// Another replica's write: the lease is lost, and the fence with it.
	if _, err := kv.Put(ctx, "timer", []byte("timer-b#00000000")); err != nil {
		t.Fatal(err)
	}
	a.step(ctx)
	if a.held || fence.Holds(a.clock) || !until(fence).IsZero() {
		t.Fatalf("after losing the lease: held %v, fence until %s", a.held, until(fence))
	}
	// OnChange learns of the take with the fence holding, and of the loss
	// before it is cleared.
	if want := []bool{true, true}; !slices.Equal(heldAtChange, want) {
		t.Fatalf("fence held at the changes: %v, want %v", heldAtChange, want)
	}

	// Released: cleared too.
	if err := kv.Delete(ctx, "timer"); err != nil {
		t.Fatal(err)
	}
	a.step(ctx)
	if !a.held || !fence.Holds(a.clock) {
		t.Fatalf("a did not take the free lease back (held %v, fence until %s)", a.held, until(fence))
	}
	if sent := fence.Confirmed(); !sent.Equal(a.clock) {
		t.Fatalf("fence confirmed at %s, want %s", sent, a.clock)
	}
	a.release()
	if fence.Holds(a.clock) {
		t.Fatalf("the fence holds until %s after the release", until(fence))
	}
}

// until is when f stops holding; zero while it does not.
func until(f *Fence) time.Time {
	if c := f.last.Load(); c != nil {
		return c.until
	}
	return time.Time{}
}

// TestHolderFrozenPastItsTTLSaysSoAndTakesBackAnUntouchedLease: a holder
// whose own clock shows it went longer than its TTL without running (a
// process stopped, paused or starved) may have been replaced already, and
// a renewal could wait for none of the TTL: it gives the lease up unsent,
// saying how long it went unrenewed against its TTL, not "context
// deadline exceeded", which the runbook reads as a bucket with no leader.
// It then reads the key as a standby does: nobody wrote it, and it takes
// it back in the same step, not a tick later; taken, it stands by.
func TestHolderFrozenPastItsTTLSaysSoAndTakesBackAnUntouchedLease(t *testing.T) {
	_, kv := leases(t)
	ctx := context.Background()
	a, b := newReplica(t, kv, "timer-a"), newReplica(t, kv, "timer-b")
	logged := &records{}
	a.log = slog.New(logged)
	a.step(ctx)
	b.step(ctx)
	logged.take()

	// Frozen for more than two TTLs; nobody took the lease meanwhile.
	a.advance(2*ttl + 400*time.Millisecond)
	a.step(ctx)
	if got, want := logged.take("err"), []string{
		"WARN lost the lease: lease not renewed for 6.4s, past its 3s TTL: the process did not run for that long (stopped, paused or starved?)",
		"INFO took the lease: lease untouched since this replica gave it up",
	}; !slices.Equal(got, want) {
		t.Fatalf("a holder frozen past its TTL logged %q, want %q", got, want)
	}
	if !a.held || holder(t, kv) != "timer-a" || !slices.Equal(a.changes, []bool{true, false, true}) {
		t.Fatalf("a after a freeze nobody took the lease in: held %v, key %q, changes %v; want it taken back", a.held, holder(t, kv), a.changes)
	}

	// Frozen again; this time b takes the lease over meanwhile.
	a.advance(ttl + time.Second)
	b.advance(ttl)
	b.step(ctx) // sees a's take-back
	b.advance(ttl)
	b.step(ctx)
	if !b.held {
		t.Fatal("b did not take the lease a left unrenewed for its TTL")
	}
	a.step(ctx)
	if got, want := logged.take("err"), []string{
		"WARN lost the lease: lease not renewed for 4s, past its 3s TTL: the process did not run for that long (stopped, paused or starved?)",
	}; !slices.Equal(got, want) {
		t.Fatalf("a holder frozen past its TTL, replaced meanwhile, logged %q, want %q", got, want)
	}
	if a.held || holder(t, kv) != "timer-b" {
		t.Fatalf("a after a freeze b took the lease in: held %v, key %q; want b alone", a.held, holder(t, kv))
	}
}
