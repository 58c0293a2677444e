package executor

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// putNoneTask stores the fixture's task with catchUp "none", calling url
// every interval, and waits until the executor's view holds it.
func (f *attemptsFixture) putNoneTask(t *testing.T, url string, interval time.Duration) {
	t.Helper()
	jitter := 0.0
	natstest.PutJSON(t, f.srv.JS, streams.BucketTasks, f.id, events.TaskSpec{
		ID:       f.id,
		Target:   events.Target{HTTP: &events.HTTPTarget{URL: url, Timeout: events.Duration(5 * time.Second)}},
		Schedule: events.Schedule{Interval: events.Duration(interval)},
		CatchUp:  events.CatchUpNone,
		Retry: &events.Retry{
			MaxAttempts: 3, InitialDelay: events.Duration(100 * time.Millisecond),
			Multiplier: 1, MaxDelay: events.Duration(100 * time.Millisecond), Jitter: &jitter,
		},
	})
	natstest.Eventually(t, 10*time.Second, "the executor's view holds catchUp none", func() bool {
		r := f.ex.specs.Lookup(f.id)
		return r.Found && r.Value.spec.CatchUp == events.CatchUpNone && r.Value.spec.Schedule.Interval.D() == interval
	})
}

// holdThenStop publishes a dispatch of the task's cadence slot at slot
// (ahead), waits until the executor holds it, and stops the executor,
// which hands it back. It returns the dispatch.
func (f *attemptsFixture) holdThenStop(t *testing.T, slot time.Time) events.Dispatch {
	t.Helper()
	d := f.publishSlot(t, slot)
	natstest.Eventually(t, 10*time.Second, "the executor holds the dispatch for its slot", func() bool {
		return testutil.ToFloat64(f.ex.cfg.Metrics.DispatchHeld) == 1
	})
	f.ex.Stop()
	return d
}

// publishSlot publishes a dispatch of the task's cadence slot at slot and
// returns it.
func (f *attemptsFixture) publishSlot(t *testing.T, slot time.Time) events.Dispatch {
	t.Helper()
	d := events.Dispatch{
		DispatchID: events.DispatchID(f.id, slot), TaskID: f.id, ScheduledAt: slot, FiredAt: time.Now().UTC(),
		Source: string(governor.SourceBaselineInterval),
	}
	body, err := events.Marshal(events.TypeRunDue, "test", f.id, d, d.FiredAt, d.DispatchID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.srv.JS.Publish(t.Context(), events.DispatchSubject(f.id), body); err != nil {
		t.Fatal(err)
	}
	return d
}

// attemptRecordOf reads d's record in flyball-attempts; found is false
// for none.
func (f *attemptsFixture) attemptRecordOf(t *testing.T, d *events.Dispatch) (r attemptRecord, found bool) {
	t.Helper()
	kv, err := f.srv.JS.KeyValue(t.Context(), streams.BucketAttempts)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(t.Context(), attemptKey(d))
	if jsutil.IsKeyMissing(err) {
		return attemptRecord{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		t.Fatal(err)
	}
	return r, true
}

// startTunedExecutor starts another executor on the fixture's server,
// with tune as its Service.tune.
func (f *attemptsFixture) startTunedExecutor(t *testing.T, instance string, tune func(*Service)) *Service {
	t.Helper()
	nc, _ := f.srv.Connect(t)
	return startExecutorOn(t, nc, instance, func(s *Service) { s.tune = tune })
}

// TestHandedBackMissedSlotIsSkippedUnderCatchUpNone: an executor holds
// the dispatch of a catchUp "none" slot before it falls due and stops,
// handing it back (a nak, which counts as a delivery). No executor runs
// while the slot and the next one pass, as in a full-stack restart. The
// next executor gets the dispatch as a second delivery: the slot is
// missed, and must be skipped (run.skipped, reason missed), its target
// not called. Before, only a first delivery was skipped, and the slot
// ran late (a 3-node drill: 3m40s late after make down, make up).
func TestHandedBackMissedSlotIsSkippedUnderCatchUpNone(t *testing.T) {
	t.Parallel()
	target := newAttemptTarget(t, http.StatusOK)
	f := newAttemptsFixture(t, target, 3, 0, 0)
	const interval = time.Second // the next slot: a second after this one
	f.putNoneTask(t, target.srv.URL, interval)
	slot := time.Now().Add(2 * time.Second).UTC().Truncate(time.Millisecond)
	d := f.holdThenStop(t, slot)
	if r, found := f.attemptRecordOf(t, &d); !found || !r.handedBackOnly() {
		t.Fatalf("record after the hand-back: %+v (found %v), want a hand-back mark", r, found)
	}
	// Past the next slot, and late by more than events.MinInterval.
	natstest.Eventually(t, 10*time.Second, "the slot and the next one passed", func() bool {
		return time.Now().After(slot.Add(interval + 500*time.Millisecond))
	})
	f.startTunedExecutor(t, "b", nil)
	natstest.Eventually(t, 20*time.Second, "a run event of the slot on RUNS", func() bool { return len(f.stored(t)) > 0 })
	got := f.stored(t)
	if len(got) != 1 || got[0].outcome != "skipped" || !strings.Contains(got[0].run.Reason, "missed") {
		t.Fatalf("RUNS holds %v (reason %q), want one run.skipped as missed: a handed-back slot whose next slot passed runs late", got, got[0].run.Reason)
	}
	if calls := target.attempts(); len(calls) != 0 {
		t.Fatalf("target called with attempts %v for a missed slot under catchUp none, want no call", calls)
	}
	if n := f.delivered(t); n != 2 {
		t.Fatalf("%d deliveries, want 2 (the hand-back at Stop)", n)
	}
}

// TestHandedBackDispatchRemovesItsMarkBeforeTheCall: a handed-back
// dispatch whose slot is not missed is called by the next executor, and
// its hand-back mark is gone by the time the target is called: a crash
// mid-call must never leave a mark saying no call was made.
func TestHandedBackDispatchRemovesItsMarkBeforeTheCall(t *testing.T) {
	t.Parallel()
	f := newAttemptsFixture(t, newAttemptTarget(t, http.StatusOK), 3, 0, 0)
	kv, err := f.srv.JS.KeyValue(t.Context(), streams.BucketAttempts)
	if err != nil {
		t.Fatal(err)
	}
	slot := time.Now().Add(time.Second).UTC().Truncate(time.Millisecond)
	key := attemptKey(&events.Dispatch{DispatchID: events.DispatchID(f.id, slot)})
	var mu sync.Mutex
	var atCall []string // what the record was at each call
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		state := "none"
		if e, err := kv.Get(r.Context(), key); err == nil {
			state = string(e.Value())
		} else if !jsutil.IsKeyMissing(err) {
			state = err.Error()
		}
		mu.Lock()
		atCall = append(atCall, state)
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	f.putNoneTask(t, srv.URL, time.Hour)
	d := f.holdThenStop(t, slot)
	if r, found := f.attemptRecordOf(t, &d); !found || !r.handedBackOnly() {
		t.Fatalf("record after the hand-back: %+v (found %v), want a hand-back mark", r, found)
	}
	f.startTunedExecutor(t, "b", nil)
	natstest.Eventually(t, 20*time.Second, "a run event of the slot on RUNS", func() bool { return len(f.stored(t)) > 0 })
	if got := successOf(f.stored(t)); len(got) != 1 || got[0].outcome != "succeeded" {
		t.Fatalf("RUNS holds %v, want one run.succeeded: a handed-back slot not missed runs", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(atCall) != "[none]" {
		t.Fatalf("flyball-attempts at each call: %q, want one call with no record (the mark removed before it)", atCall)
	}
	if r, found := f.attemptRecordOf(t, &d); found {
		t.Fatalf("record after the run: %+v, want none (a success at attempt 1 writes nothing)", r)
	}
}

// successOf is stored without a run.recovered right after a
// run.succeeded of the same attempt: an executor started while its
// dispatch waits cannot wait for its breaker view first, and a success
// its view cannot place yet is sent again as run.recovered (Settled).
func successOf(stored []storedRun) []storedRun {
	if n := len(stored); n == 2 && stored[0].outcome == "succeeded" && stored[1].outcome == "recovered" && stored[1].run.Attempt == stored[0].run.Attempt {
		return stored[:1]
	}
	return stored
}

// failDeleteKV is flyball-attempts whose deletes fail while fail is set.
type failDeleteKV struct {
	jetstream.KeyValue
	fail    atomic.Bool
	refused atomic.Int32
}

func (k *failDeleteKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	if k.fail.Load() {
		k.refused.Add(1)
		return errors.New("test: delete refused")
	}
	return k.KeyValue.Delete(ctx, key, opts...)
}

// TestHandedBackDispatchIsNotCalledWhileItsMarkStays: when the mark of a
// handed-back dispatch cannot be removed, the target is not called (the
// dispatch is nakked and tried again): a call made under the mark could
// crash and leave the slot looking uncalled. Once the mark can go, the
// target is called once.
func TestHandedBackDispatchIsNotCalledWhileItsMarkStays(t *testing.T) {
	t.Parallel()
	target := newAttemptTarget(t, http.StatusOK)
	f := newAttemptsFixture(t, target, 3, 0, 0)
	f.putNoneTask(t, target.srv.URL, time.Hour)
	slot := time.Now().Add(time.Second).UTC().Truncate(time.Millisecond)
	d := f.holdThenStop(t, slot)
	kv := &failDeleteKV{}
	kv.fail.Store(true)
	f.startTunedExecutor(t, "b", func(s *Service) {
		kv.KeyValue = s.attempts
		s.attempts = kv
	})
	natstest.Eventually(t, 20*time.Second, "two refused removals of the mark", func() bool { return kv.refused.Load() >= 2 })
	if calls := target.attempts(); len(calls) != 0 {
		t.Fatalf("target called with attempts %v while the mark could not be removed, want no call", calls)
	}
	if r, found := f.attemptRecordOf(t, &d); !found || !r.handedBackOnly() {
		t.Fatalf("record while removals fail: %+v (found %v), want the hand-back mark", r, found)
	}
	kv.fail.Store(false)
	natstest.Eventually(t, 20*time.Second, "a run event of the slot on RUNS", func() bool { return len(f.stored(t)) > 0 })
	if got := successOf(f.stored(t)); len(got) != 1 || got[0].outcome != "succeeded" {
		t.Fatalf("RUNS holds %v, want one run.succeeded", got)
	}
	if calls := target.attempts(); fmt.Sprint(calls) != "[1]" {
		t.Fatalf("target called with attempts %v, want [1]", calls)
	}
}

// TestOnlyAFirstDeliveryIsMarkedHandedBack: a mark says no delivery of
// the dispatch started a call. A later delivery may follow one that did
// and crashed mid-call (leaving no record), or one that removed the mark
// and then crashed; handed back, it must leave no mark, or the next
// delivery would report that call skipped as missed. Nor is a task that
// is not under catchUp "none" ever marked. Before, any hand-back with no
// record created a mark.
func TestOnlyAFirstDeliveryIsMarkedHandedBack(t *testing.T) {
	t.Parallel()
	target := newAttemptTarget(t, http.StatusOK)
	f := newAttemptsFixture(t, target, 3, 0, 0)
	f.putNoneTask(t, target.srv.URL, time.Minute)
	f.ex.Stop()
	slot := time.Now().Add(8 * time.Second).UTC().Truncate(time.Millisecond) // held: within half the AckWait
	d := f.publishSlot(t, slot)
	// The first delivery, taken and given up with no record, as by an
	// executor that crashed mid-call.
	natstest.FetchOne(t, f.srv.JS, streams.StreamDispatch, streams.ConsumerExecutor, func(m jetstream.Msg) error { return m.Nak() })
	// The second, held by an executor until its slot, and handed back.
	b := f.startTunedExecutor(t, "b", nil)
	natstest.Eventually(t, 10*time.Second, "executor b holds the redelivered dispatch", func() bool {
		return testutil.ToFloat64(b.cfg.Metrics.DispatchHeld) == 1
	})
	b.Stop()
	if got := f.delivered(t); got != 2 {
		t.Fatalf("%d deliveries, want 2", got)
	}
	if r, found := f.attemptRecordOf(t, &d); found {
		t.Fatalf("a second delivery handed back left %+v in flyball-attempts, want no record: a call of the first may have started", r)
	}

	// A task under the default catchUp: its first delivery handed back
	// leaves no mark either.
	g := newAttemptsFixture(t, target, 3, 0, 0) // its view holds the task: one it does not know yet is marked
	other := g.holdThenStop(t, time.Now().Add(8*time.Second).UTC().Truncate(time.Millisecond))
	if r, found := g.attemptRecordOf(t, &other); found {
		t.Fatalf("a hand-back of a task not under catchUp none left %+v in flyball-attempts, want no record", r)
	}
}

// TestNATSCallLostWithTheConnectionIsNotMarkedHandedBack: a NATS-target
// call under catchUp "none" whose reply is lost with the executor's own
// connection (cut and back while the request waits) is tried again in
// place, uncounted (retryInfra): it is infra, but the request was sent
// and may have been processed. Handed back at shutdown while it waits for
// that try, its first delivery must leave no hand-back mark. Before, it
// was marked as if no call was made, and the next executor, the slot and
// the next one passed, reported it run.skipped as missed: the run history
// said no call was made although the target had been called.
func TestNATSCallLostWithTheConnectionIsNotMarkedHandedBack(t *testing.T) {
	t.Parallel()
	srv, addr := natstest.StartListening(t)
	proxy := startCuttableProxy(t, strings.TrimPrefix(addr, "nats://"))
	f := &attemptsFixture{srv: srv, id: "nats-none"}
	const interval = time.Second
	natstest.PutJSON(t, srv.JS, streams.BucketTasks, f.id, events.TaskSpec{
		ID:       f.id,
		Target:   events.Target{NATS: &events.NATSTarget{Subject: "targets.svc", Timeout: events.Duration(2 * time.Second)}},
		Schedule: events.Schedule{Interval: events.Duration(interval)},
		CatchUp:  events.CatchUpNone,
		Retry:    &events.Retry{MaxAttempts: 3},
	})
	// The target's service, on its own connection.
	received, requests := answerAllButTheFirst(t, srv.NC, "targets.svc")
	nc := connectThrough(t, proxy)
	ex := startExecutorOn(t, nc, "a", func(s *Service) {
		// Held for its try until Stop; its hand-back is nakked for about
		// as long.
		s.infraRetryFirst, s.infraRetryMax = 3*time.Second, 3*time.Second
	})
	natstest.Eventually(t, 10*time.Second, "the executor's view holds catchUp none", func() bool {
		r := ex.specs.Lookup(f.id)
		return r.Found && r.Value.spec.CatchUp == events.CatchUpNone
	})
	d := f.publishSlot(t, time.Now().UTC().Truncate(time.Millisecond))
	awaitClosed(t, received, 20*time.Second, "the NATS-target request")
	proxy.setDown(true)
	natstest.Eventually(t, 10*time.Second, "the executor's connection lost", func() bool { return !nc.IsConnected() })
	proxy.setDown(false)
	natstest.Eventually(t, 10*time.Second, "the executor's connection back", nc.IsConnected)
	natstest.Eventually(t, 20*time.Second, "the call timed out and is held for its try in place", func() bool {
		return testutil.ToFloat64(ex.cfg.Metrics.DispatchDeferred) == 1
	})
	ex.Stop()
	if n := requests.Load(); n != 1 {
		t.Fatalf("%d requests before the stop, want 1: the try in place came first", n)
	}
	if r, found := f.attemptRecordOf(t, &d); found {
		t.Fatalf("a dispatch whose request was sent, handed back, left %+v in flyball-attempts, want no record: a mark says no call was made", r)
	}
	natstest.Eventually(t, 10*time.Second, "the slot and the next one passed", func() bool {
		return time.Now().After(d.ScheduledAt.Add(interval + 500*time.Millisecond))
	})
	other, _ := srv.Connect(t)
	startExecutorOn(t, other, "b", nil)
	natstest.Eventually(t, 20*time.Second, "a run event of the slot on RUNS", func() bool { return len(f.stored(t)) > 0 })
	if got := successOf(f.stored(t)); len(got) != 1 || got[0].outcome != "succeeded" {
		t.Fatalf("RUNS holds %v, want one run.succeeded: a slot whose target may have been called is not skipped as missed", got)
	}
	if n := requests.Load(); n != 2 {
		t.Fatalf("%d requests, want 2 (the lost one and the run at least once)", n)
	}
}
