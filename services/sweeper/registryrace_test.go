package sweeper

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/streams"
)

// syncBuffer is a log sink the sweeper and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// otherSweeperMarks is KV flyball-runtime where another sweeper's offline
// mark of the same stale revision is stored just before this one's.
type otherSweeperMarks struct{ jetstream.KeyValue }

func (o otherSweeperMarks) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	if _, err := o.KeyValue.Update(ctx, key, value, last); err != nil {
		return 0, err
	}
	return o.KeyValue.Update(ctx, key, value, last)
}

// stoppedBeforeGet is KV flyball-runtime where the instance's clean stop
// deletes its key between the sweep's key list and its read of the entry.
type stoppedBeforeGet struct{ jetstream.KeyValue }

func (s stoppedBeforeGet) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if err := s.Delete(ctx, key); err != nil {
		return nil, err
	}
	return s.KeyValue.Get(ctx, key)
}

// startRegistrySweeper starts a sweeper (an hour between sweeps: the test
// sweeps) over one online entry, executor.gone, that it has seen once, and
// moves its clock past OfflineAfter.
func startRegistrySweeper(t *testing.T, logs *syncBuffer) (*Service, *metrics.Set) {
	t.Helper()
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	runtime, err := srv.JS.KeyValue(ctx, streams.BucketRuntime)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC()
	putOnline(t, runtime, "executor.gone", t0)
	var ahead atomic.Int64
	m := metrics.New()
	s, err := New(Config{Common: svcconf.Common{
		JS: srv.JS, Metrics: m, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Now: func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) },
	}, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	<-s.Swept() // sees the entry's revision
	ahead.Store(int64(time.Minute))
	return s, m
}

func instances(m *metrics.Set, status string) float64 {
	return testutil.ToFloat64(m.RuntimeInstances.WithLabelValues(status))
}

// TestAMarkLostToAnotherSweeperCountsTheInstanceOffline: two sweepers saw
// the same stale revision and the other's offline mark was stored first.
// This one's conflict was taken for a beat, and it counted the dead
// instance online for a sweep. It reads the entry again to count it.
func TestAMarkLostToAnotherSweeperCountsTheInstanceOffline(t *testing.T) {
	var logs syncBuffer
	s, m := startRegistrySweeper(t, &logs)
	s.runtime = otherSweeperMarks{s.runtime}
	if err := s.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	if on, off := instances(m, "online"), instances(m, "offline"); on != 0 || off != 1 {
		t.Fatalf("flyball_runtime_instances online %v, offline %v after another sweeper's mark won; want 0 and 1", on, off)
	}
}

// TestAKeyDeletedAfterTheListIsNoFailure: an instance's clean stop deleted
// its key between the sweep's key list and its read of the entry, and the
// sweeper warned "sweeping instance failed" for a normal deregistration.
// The key is skipped without a word, and not counted.
func TestAKeyDeletedAfterTheListIsNoFailure(t *testing.T) {
	var logs syncBuffer
	s, m := startRegistrySweeper(t, &logs)
	s.runtime = stoppedBeforeGet{s.runtime}
	if err := s.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "sweeping instance failed") {
		t.Fatalf("a deregistered instance was logged as a failure:\n%s", logs.String())
	}
	if on, off := instances(m, "online"), instances(m, "offline"); on != 0 || off != 0 {
		t.Fatalf("flyball_runtime_instances online %v, offline %v after the only instance deregistered; want 0 and 0", on, off)
	}
}
