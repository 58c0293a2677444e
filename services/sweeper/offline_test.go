package sweeper

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/streams"
)

// TestOfflineMarkAnnouncedOnceHEALTHTakesIt: the sweeper marked a silent
// instance offline in KV, then failed to publish its runtime.offline
// (HEALTH unavailable), and never published it: the next sweep found the
// entry offline already and left it. Whoever follows
// flyball.runtime.offline.> never heard of the instance. The sweeper now
// publishes it again at each sweep until HEALTH stores it (its event ID
// is the same, so a copy is stored once).
func TestOfflineMarkAnnouncedOnceHEALTHTakesIt(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	runtime, err := srv.JS.KeyValue(ctx, streams.BucketRuntime)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC()
	putOnline(t, runtime, "executor.gone", t0)
	var ahead atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	s, err := New(Config{Common: svcconf.Common{JS: srv.JS, Now: clock}, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	<-s.Swept() // sees the entry's revision

	if err := srv.JS.DeleteStream(ctx, streams.StreamHealth); err != nil {
		t.Fatal(err)
	}
	ahead.Store(int64(time.Minute))      // silent past OfflineAfter (45 s)
	if err := s.Sweep(ctx); err != nil { // marks it; its runtime.offline fails (logged)
		t.Fatal(err)
	}
	ent, err := runtime.Get(ctx, "executor.gone")
	if err != nil || !jsonHas(ent.Value(), `"status":"offline"`) {
		t.Fatalf("the entry is not marked offline: %v %s", err, ent.Value())
	}

	if err := streams.Ensure(ctx, srv.JS); err != nil {
		t.Fatal(err)
	}
	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	health, err := srv.JS.Stream(ctx, streams.StreamHealth)
	if err != nil {
		t.Fatal(err)
	}
	subject := events.RuntimeSubject(events.RuntimeOffline, "executor", "gone")
	if _, err := health.GetLastMsgForSubject(ctx, subject); errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("the instance is marked offline but %s was never published", subject)
	} else if err != nil {
		t.Fatal(err)
	}
	// Published once: a later sweep stores no second copy.
	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := health.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[subject]; n != 1 {
		t.Fatalf("%d runtime.offline events stored, want 1", n)
	}
}

func jsonHas(raw []byte, frag string) bool { return strings.Contains(string(raw), frag) }

// TestOfflineMarkUnannouncedByAStoppedSweeperIsAnnouncedByTheNext: the
// retry of a runtime.offline that HEALTH refused lived in the marking
// sweeper's memory. Stopped (a restart, a replica taking over) before
// HEALTH took it, it left the entry marked offline with no event, and no
// sweeper published it: the next found the mark standing and left it. A
// sweep that finds a mark younger than offlineAnnounceFor (half HEALTH's
// 2-minute duplicate window) now publishes its event with the same ID,
// stored once however many sweeps or replicas publish it; an older mark
// is left alone, so a standing mark does not store a copy per sweep.
func TestOfflineMarkUnannouncedByAStoppedSweeperIsAnnouncedByTheNext(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	runtime, err := srv.JS.KeyValue(ctx, streams.BucketRuntime)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC()
	putOnline(t, runtime, "executor.gone", t0)
	start := func(ahead time.Duration) *Service {
		s, err := New(Config{Common: svcconf.Common{JS: srv.JS, Now: func() time.Time { return time.Now().Add(ahead) }}, Interval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		<-s.Swept()
		return s
	}
	first := start(0) // sees the entries' revisions
	if err := srv.JS.DeleteStream(ctx, streams.StreamHealth); err != nil {
		t.Fatal(err)
	}
	first.cfg.Now = func() time.Time { return time.Now().Add(time.Minute) } // silent past OfflineAfter
	if err := first.Sweep(ctx); err != nil {                                // marks it; runtime.offline fails
		t.Fatal(err)
	}
	first.Stop()
	if err := streams.Ensure(ctx, srv.JS); err != nil {
		t.Fatal(err)
	}
	health, err := srv.JS.Stream(ctx, streams.StreamHealth)
	if err != nil {
		t.Fatal(err)
	}
	stored := func(name string) uint64 {
		subject := events.RuntimeSubject(events.RuntimeOffline, "executor", name)
		info, err := health.Info(ctx, jetstream.WithSubjectFilter(subject))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Subjects[subject]
	}

	// A replica whose clock says the mark is older than that publishes
	// nothing.
	late := start(offlineAnnounceFor + time.Second)
	late.Stop()
	if n := stored("gone"); n != 0 {
		t.Fatalf("%d runtime.offline stored by a sweeper that found the mark older than %v, want 0", n, offlineAnnounceFor)
	}
	next := start(0)
	t.Cleanup(next.Stop)
	for range 2 {
		if err := next.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := stored("gone"); n != 1 {
		t.Fatalf("%d runtime.offline events of the mark a stopped sweeper left unannounced stored by the next one, want 1", n)
	}
}

// TestOfflineMarkWaitsForTheFirstSweepPastOfflineAfter pins the bound
// docs/operations.md states: the sweeper counts OfflineAfter from the
// sweep that first saw the entry's revision (not from its lastBeat), and
// marks the instance at the first sweep more than OfflineAfter after that.
// With 15 s sweeps a beat is first seen up to 15 s after it is written and
// marked on the third or fourth sweep after that, 45 to 75 s after the
// beat: operations.md said "after 45 s without a beat", and an executor
// killed on compose was marked 59 s after its last beat.
func TestOfflineMarkWaitsForTheFirstSweepPastOfflineAfter(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	runtime, err := srv.JS.KeyValue(ctx, streams.BucketRuntime)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now() // keeps its monotonic reading, as the sweeper's clock does
	putOnline(t, runtime, "executor.quiet", base.Add(-10*time.Minute))
	const offlineAfter = 45 * time.Second // the default
	var elapsed atomic.Int64
	s := startHourlyWith(t, svcconf.Common{JS: srv.JS, Now: func() time.Time { return base.Add(time.Duration(elapsed.Load())) }}) // its first sweep sees the revision at base
	for _, c := range []struct {
		at   time.Duration
		want string
	}{
		{offlineAfter, "online"},                    // silent for OfflineAfter exactly, though its lastBeat is 10 min old
		{offlineAfter + time.Nanosecond, "offline"}, // the first sweep past it marks it
	} {
		elapsed.Store(int64(c.at))
		if err := s.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		ent, err := runtime.Get(ctx, "executor.quiet")
		if err != nil {
			t.Fatal(err)
		}
		if !jsonHas(ent.Value(), `"status":"`+c.want+`"`) {
			t.Fatalf("a sweep %v after the one that first saw the entry: %s, want status %s", c.at, ent.Value(), c.want)
		}
	}
}

// TestRegistryKeyThatNamesNoInstanceIsSkipped: a flyball-runtime key
// that is not <kind>.<name> of subject tokens (written by hand: host_x,
// executor.a=b) named no instance, and the sweeper marked it offline and
// published its runtime.offline to flyball.runtime.offline.. , which
// timed out (5 s) and was retried at every sweep for good. Such a key is
// now skipped, with one warning naming it, and the registry's other
// instances are swept as before.
func TestRegistryKeyThatNamesNoInstanceIsSkipped(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	runtime, err := srv.JS.KeyValue(ctx, streams.BucketRuntime)
	if err != nil {
		t.Fatal(err)
	}
	putOnline(t, runtime, "executor.gone", time.Now())
	bad := []string{"host_x", "executor.a=b", "exec/utor.x"}
	for _, key := range bad {
		if _, err := runtime.Put(ctx, key, []byte("null")); err != nil {
			t.Fatal(err)
		}
	}
	var ahead atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	logs := &records{}
	s := startHourlyWith(t, svcconf.Common{JS: srv.JS, Now: clock, Logger: slog.New(logs)})
	ahead.Store(int64(time.Minute)) // silent past OfflineAfter (45 s)
	for range 2 {
		if err := s.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := instanceStatus(t, runtime, "executor.gone"); got != "offline" {
		t.Fatalf("executor.gone is %s, want offline", got)
	}
	for _, key := range bad {
		ent, err := runtime.Get(ctx, key)
		if err != nil || string(ent.Value()) != "null" || ent.Revision() > uint64(len(bad)+1) {
			t.Errorf("key %q: %v, %s (revision %d); want it left alone", key, err, ent.Value(), ent.Revision())
		}
	}
	warned := map[string]int{}
	for _, r := range logs.named(msgBadRegistryKey) {
		if r.level != slog.LevelWarn {
			t.Errorf("%q logged at %s, want WARN", r.msg, r.level)
		}
		warned[r.attrs["key"]]++
	}
	for _, key := range bad {
		if warned[key] != 1 {
			t.Errorf("key %q warned %d times over three sweeps, want once: %v", key, warned[key], warned)
		}
	}
	if n := len(logs.named("runtime.offline not published; next sweep retries")); n != 0 {
		t.Errorf("%d runtime.offline publishes failed, want 0", n)
	}
}
