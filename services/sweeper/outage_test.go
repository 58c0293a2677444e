package sweeper

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/streams"
)

// unlistable is KV flyball-runtime whose key list fails while down is
// set: NATS unreachable.
type unlistable struct {
	jetstream.KeyValue
	down *atomic.Bool
}

func (u unlistable) ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	if u.down.Load() {
		return nil, errors.New("nats: connection closed (injected)")
	}
	return u.KeyValue.ListKeys(ctx, opts...)
}

// TestAnOutageMarksNoInstanceThatHasNotBeatenSince: a sweep that could
// not read the registry (NATS unreachable) kept each instance's silence
// clock from before, so the first sweep after an outage longer than
// OfflineAfter marked offline every live instance that had not beaten
// since NATS came back (runtime.offline, a warning, then runtime.online
// at its next beat). A sweep that cannot read the registry now restarts
// those clocks: silence is not judged across a time the sweeper could not
// see, and a dead instance is marked OfflineAfter after the last such
// sweep instead.
func TestAnOutageMarksNoInstanceThatHasNotBeatenSince(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	runtime, err := srv.JS.KeyValue(ctx, streams.BucketRuntime)
	if err != nil {
		t.Fatal(err)
	}
	putOnline(t, runtime, "executor.live", time.Now())
	base := time.Now() // keeps its monotonic reading, as the sweeper's clock does
	var elapsed atomic.Int64
	s := startHourlyWith(t, svcconf.Common{JS: srv.JS, Now: func() time.Time { return base.Add(time.Duration(elapsed.Load())) }}) // its first sweep sees the revision at base
	var down atomic.Bool
	s.runtime = unlistable{KeyValue: s.runtime, down: &down}
	status := func() string { return instanceStatus(t, runtime, "executor.live") }
	down.Store(true)
	for _, at := range []time.Duration{15 * time.Second, 30 * time.Second, 45 * time.Second, 60 * time.Second} {
		elapsed.Store(int64(at))
		if err := s.Sweep(ctx); err == nil {
			t.Fatalf("a sweep %v in, with the registry unreadable: no error", at)
		}
	}
	down.Store(false)
	elapsed.Store(int64(75 * time.Second)) // the first sweep after the outage; the instance has not beaten yet
	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := status(); got != "online" {
		t.Fatalf("the first sweep after a 60 s outage marked an instance that had not beaten since: status %s, want online", got)
	}
	// A dead instance is still marked: OfflineAfter (45 s) after the last
	// sweep that could not read the registry.
	elapsed.Store(int64(60*time.Second + 45*time.Second + time.Nanosecond))
	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := status(); got != "offline" {
		t.Fatalf("a sweep 45 s after the outage's last: status %s, want offline", got)
	}
}

// TestAReconnectMarksNoInstanceThatHasNotBeatenSince: NATS restarted
// between two sweeps, and back by the time the second reads the registry
// (the sweep's earlier steps can wait out a whole outage on their
// timeouts). That read succeeds, so only the connection's reconnect tells
// the sweeper it could not see: before, it judged silence across the
// outage and marked a live instance that had not beaten since.
func TestAReconnectMarksNoInstanceThatHasNotBeatenSince(t *testing.T) {
	r := natstest.StartRestartable(t)
	nc, js := r.Connect(t)
	ctx := t.Context()
	runtime, err := js.KeyValue(ctx, streams.BucketRuntime)
	if err != nil {
		t.Fatal(err)
	}
	putOnline(t, runtime, "executor.live", time.Now())
	base := time.Now() // keeps its monotonic reading, as the sweeper's clock does
	var elapsed atomic.Int64
	s := startHourlyWith(t, svcconf.Common{JS: js, Now: func() time.Time { return base.Add(time.Duration(elapsed.Load())) }}) // its first sweep sees the revision at base
	status := func() string { return instanceStatus(t, runtime, "executor.live") }
	r.Restart(t)
	natstest.Eventually(t, 10*time.Second, "the client reconnected", func() bool {
		return nc.IsConnected() && nc.Stats().Reconnects > 0
	})
	elapsed.Store(int64(60 * time.Second)) // the outage, as the sweep's earlier steps waited it out
	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := status(); got != "online" {
		t.Fatalf("the first sweep after a reconnect marked an instance that had not beaten since: status %s, want online", got)
	}
	// A dead instance is still marked: OfflineAfter (45 s) after that sweep.
	elapsed.Store(int64(60*time.Second + 45*time.Second + time.Nanosecond))
	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := status(); got != "offline" {
		t.Fatalf("a sweep 45 s after the reconnect's: status %s, want offline", got)
	}
}

// putOnline stores key (kind.name) in KV flyball-runtime as an online
// instance whose last beat was at.
func putOnline(t *testing.T, runtime jetstream.KeyValue, key string, at time.Time) {
	t.Helper()
	kind, name, _ := strings.Cut(key, ".")
	beat := `{"kind":"` + kind + `","name":"` + name + `","status":"online","lastBeat":"` + at.UTC().Format(time.RFC3339Nano) + `"}`
	if _, err := runtime.Put(t.Context(), key, []byte(beat)); err != nil {
		t.Fatal(err)
	}
}

// instanceStatus is "offline" while key's entry in KV flyball-runtime is
// the sweeper's offline mark, else "online".
func instanceStatus(t *testing.T, runtime jetstream.KeyValue, key string) string {
	t.Helper()
	ent, err := runtime.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if jsonHas(ent.Value(), `"status":"offline"`) {
		return "offline"
	}
	return "online"
}
