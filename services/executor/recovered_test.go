package executor

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// len is the number of keys owed.
func (o *owed) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.cur) + len(o.prev)
}

// owes reports whether key is owed.
func (o *owed) owes(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, inCur := o.cur[key]
	_, inPrev := o.prev[key]
	return inCur || inPrev
}

// TestOwedKeysAreSentOnce: a key this executor published a failure for is
// owed to the breaker until its next success takes it; a key past the
// bound is not kept, and every success is sent for owedSpill instead.
func TestOwedKeysAreSentOnce(t *testing.T) {
	o := newOwed()
	o.max = 2
	now := time.Now()
	if o.take("a", now) {
		t.Fatal("a key that never failed is owed")
	}
	o.failed("a", now)
	o.failed("a", now)
	o.failed("", now)
	if o.len() != 1 {
		t.Fatalf("%d keys owed after failures of a and of no key, want 1", o.len())
	}
	if !o.take("a", now) || o.take("a", now) {
		t.Fatal("a failed key must be owed once, until its next success")
	}
	o.failed("a", now)
	o.failed("b", now)
	o.failed("c", now) // over the bound: dropped, every success is sent
	if o.len() != 2 {
		t.Fatalf("%d keys owed, want the bound of 2", o.len())
	}
	if !o.take("c", now) || !o.take("never-failed", now.Add(owedSpill-time.Second)) {
		t.Fatal("after an overflow every success must be sent until the spill ends")
	}
	if o.take("never-failed", now.Add(owedSpill)) {
		t.Fatal("a key that never failed is still owed after the spill ended")
	}
	if !o.take("a", now.Add(owedSpill)) || !o.take("b", now.Add(owedSpill)) {
		t.Fatal("the keys kept through the overflow must stay owed")
	}
}

// TestDeadOwedKeysDoNotRepeatEverySuccess is the reviewer's scenario: the
// owed set fills with keys that failed and are never seen again (tasks
// deleted while failing, hosts no longer used after a failure), and a live
// task keeps failing. Before, a key left owed only with its success, so
// the dead keys stayed for good, and every failure of a key not in the
// full set sent every success of every key for owedSpill: a day later,
// with the live task failing every 20 minutes, most successes of healthy
// keys were still repeated as run.recovered. Owed keys now expire once
// the breaker has long applied their failure.
func TestDeadOwedKeysDoNotRepeatEverySuccess(t *testing.T) {
	t.Parallel()
	o := newOwed()
	t0 := time.Now()
	for i := range maxOwed {
		o.failed(fmt.Sprintf("dead-%d", i), t0)
	}
	day := t0.Add(24 * time.Hour)
	repeated, successes := 0, 0
	for s := range 2 * 3600 { // two hours, a success of a healthy key a second
		now := day.Add(time.Duration(s) * time.Second)
		if s%(20*60) == 0 {
			o.failed("live", now) // a task that keeps failing
		}
		successes++
		if o.take(fmt.Sprintf("healthy-%d", s%100), now) {
			repeated++
		}
	}
	if repeated != 0 {
		t.Fatalf("%d of %d successes of healthy keys were repeated as run.recovered a day after %d keys failed and were never seen again, want 0",
			repeated, successes, maxOwed)
	}
	if !o.take("live", day.Add(2*time.Hour)) {
		t.Fatal("the live task's success after its failure is not sent as run.recovered")
	}
	if n := o.len(); n != 0 {
		t.Fatalf("%d keys owed a day after they failed, want 0", n)
	}
}

// TestOwedKeyIsSentWithinTheBound: a key stays owed for at least owedTTL
// after its last failure, whatever the failure's place in the set's
// period and whatever else happens meanwhile, so its success within that
// bound is still sent as run.recovered; a key that keeps failing stays
// owed from its last failure; and a key that neither failed nor succeeded
// for twice owedTTL is owed no more.
func TestOwedKeyIsSentWithinTheBound(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	for _, phase := range []time.Duration{0, time.Second, owedTTL / 2, owedTTL - time.Second, owedTTL, 3*owedTTL + time.Minute} {
		o := newOwed()
		o.take("other", t0) // starts the set's first period
		f := t0.Add(phase)
		o.failed("k", f)
		o.failed("gone", f)                                        // never seen again
		for m := time.Duration(0); m < owedTTL; m += time.Minute { // other keys' outcomes meanwhile
			o.failed(fmt.Sprintf("other-%d", m/time.Minute%7), f.Add(m))
			o.take(fmt.Sprintf("other-%d", m/time.Minute%5), f.Add(m))
		}
		if !o.take("k", f.Add(owedTTL-time.Second)) {
			t.Fatalf("a key that failed %s into the set's period is not owed owedTTL-1s later", phase)
		}
		if o.take("gone", f.Add(2*owedTTL)) {
			t.Fatalf("a key that failed %s into the set's period is still owed 2*owedTTL later", phase)
		}
	}

	o := newOwed()
	last := t0
	for m := time.Duration(0); m <= 5*time.Hour; m += 50 * time.Minute { // a task that keeps failing
		last = t0.Add(m)
		o.failed("live", last)
	}
	if !o.take("live", last.Add(owedTTL-time.Second)) {
		t.Fatal("a key failing every 50 minutes for 5 hours is not owed owedTTL-1s after its last failure")
	}
}

// TestSuccessIsRepeatedOnlyWhenItCanChangeTheBreaker runs the executor on
// an embedded server with no breaker service:
//   - a success with nothing owed and no breaker record (settled) is
//     stored as run.succeeded alone;
//   - a success after this executor's failure of the key is followed by a
//     run.recovered with the same run, stored after the failure, and
//     without the response;
//   - a success while the breaker record counts a failure (as another
//     executor's failure would leave it) is repeated too, though this
//     executor owes nothing.
func TestSuccessIsRepeatedOnlyWhenItCanChangeTheBreaker(t *testing.T) {
	t.Parallel()
	target := newAttemptTarget(t, http.StatusOK, http.StatusInternalServerError, http.StatusOK, http.StatusOK)
	f := newAttemptsFixture(t, target, 3, 0, 0)
	runs := func(n int) []storedRun {
		t.Helper()
		var got []storedRun
		natstest.Eventually(t, 20*time.Second, "run events stored", func() bool {
			got = f.stored(t)
			return len(got) >= n
		})
		return got
	}
	acked := func(seq uint64) { // the run event is stored before the ack
		t.Helper()
		natstest.AwaitAcked(t, f.srv.JS, streams.StreamDispatch, streams.ConsumerExecutor, seq)
	}
	// A view that cannot tell yet (still loading, or its read of the key
	// failed) repeats the success, to be safe; the first case is about a
	// view that knows there is no record.
	natstest.Eventually(t, 10*time.Second, "the executor's view knows the key has no breaker record", func() bool {
		return Settled(f.ex.breakers.Lookup(f.id))
	})
	seq := f.dispatch(t)
	got := runs(1)
	if len(got) != 1 || got[0].outcome != "succeeded" {
		t.Fatalf("RUNS holds %v after a success with nothing owed, want succeeded alone", got)
	}
	acked(seq)

	seq = f.dispatch(t) // fails, then succeeds at attempt 2
	got = runs(4)
	want := []string{"succeeded", "failed", "succeeded", "recovered"}
	for i, r := range got {
		if i >= len(want) || r.outcome != want[i] {
			t.Fatalf("RUNS holds %v, want outcomes %v", got, want)
		}
	}
	// The IDs the breaker's header shortcut reads (successID): built the
	// one way both sides share.
	for i, suffix := range []events.RunIDSuffix{events.RunIDFailed, events.RunIDSucceeded, events.RunIDRecovered} {
		r := got[i+1]
		if want := events.RunID(r.run.DispatchID, r.run.Attempt, suffix); r.id != want {
			t.Fatalf("run.%s stored as %q, want %q", r.outcome, r.id, want)
		}
	}
	succ, rec := got[2].run, got[3].run
	if rec.DispatchID != succ.DispatchID || rec.Attempt != 2 || rec.BreakerKey != f.id || rec.Status != http.StatusOK ||
		!rec.StartedAt.Equal(succ.StartedAt) || rec.Request != nil || rec.Fingerprint != "" {
		t.Fatalf("run.recovered %+v does not repeat run.succeeded %+v without its response", rec, succ)
	}
	if n := f.ex.owed.len(); n != 0 {
		t.Fatalf("%d keys still owed after the recovered was sent", n)
	}
	acked(seq)

	// Another executor's failure, applied by the breaker service.
	natstest.PutJSON(t, f.srv.JS, streams.BucketBreakers, f.id, BreakerRecord{Key: f.id, State: events.BreakerClosed, Failures: 1, UpdatedAt: time.Now()})
	natstest.Eventually(t, 10*time.Second, "the executor's view shows the failure", func() bool {
		return !Settled(f.ex.breakers.Lookup(f.id))
	})
	f.dispatch(t)
	got = runs(6)
	if len(got) != 6 || got[4].outcome != "succeeded" || got[5].outcome != "recovered" {
		t.Fatalf("RUNS holds %v, want a success repeated while the breaker counts a failure", got)
	}
}

// TestUnstoredRecoveredIsSentWithTheNextSuccess: a run.recovered that RUNS
// refuses (here: its subject already holds the one message RUNS is set to
// take, and a second is refused) leaves its key owed, and the key's next
// success is repeated even though nothing failed in between and the
// breaker view is settled. Before the refusal is settled, the key was
// taken: without the re-mark, the breaker would never see the success.
func TestUnstoredRecoveredIsSentWithTheNextSuccess(t *testing.T) {
	t.Parallel()
	target := newAttemptTarget(t, http.StatusInternalServerError, http.StatusOK)
	f := newAttemptsFixture(t, target, 3, 0, 0)
	ctx := t.Context()
	restore := f.changeRuns(t, func(c *jetstream.StreamConfig) {
		c.MaxMsgsPerSubject, c.Discard, c.DiscardNewPerSubject = 1, jetstream.DiscardNew, true
	})
	filler, err := events.Marshal(events.TypeRunRecovered, "test", f.id, events.Run{DispatchID: "filler", TaskID: f.id, Attempt: 1, Status: 200, BreakerKey: f.id}, time.Now(), "filler")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.srv.JS.Publish(ctx, events.RunSubject(events.OutcomeRecovered, f.id), filler); err != nil {
		t.Fatal(err)
	}
	before := testutil.ToFloat64(f.ex.cfg.Metrics.BreakerRecovered)

	seq := f.dispatch(t) // fails, then succeeds at attempt 2: its run.recovered is refused
	natstest.Eventually(t, 20*time.Second, "the refused run.recovered leaves the key owed", func() bool {
		got := f.stored(t)
		return len(got) == 3 && got[2].outcome == "succeeded" && f.ex.owed.owes(f.id)
	})
	if n := testutil.ToFloat64(f.ex.cfg.Metrics.BreakerRecovered); n != before {
		t.Fatalf("flyball_breaker_recovered_total rose by %v for a refused run.recovered", n-before)
	}
	restore()
	// DISPATCH takes one message per subject: the first must be acked.
	natstest.AwaitAcked(t, f.srv.JS, streams.StreamDispatch, streams.ConsumerExecutor, seq)
	f.dispatch(t) // succeeds at once: nothing failed since, yet it is owed
	natstest.Eventually(t, 20*time.Second, "the next success repeated as run.recovered", func() bool {
		got := f.stored(t)
		return len(got) == 5 && got[4].outcome == "recovered"
	})
	if got := f.stored(t); got[3].outcome != "succeeded" || got[4].run.DispatchID != got[3].run.DispatchID {
		t.Fatalf("RUNS holds %v, want the second run's success and its run.recovered last", got)
	}
	if f.ex.owed.owes(f.id) {
		t.Fatal("the key is still owed after its run.recovered was stored")
	}
}
