package executor

import (
	"sync"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/kvcache"
)

// The breaker service consumes failed attempts and run.recovered events,
// not every success: nearly every success finds its breaker closed with no
// failures counted, and consuming it only to ack it cost one delivery and
// one ack per run (docs/benchmark-findings.md, findings 23 and 37). The executor
// decides which successes the breaker must see, and publishes each of those
// again as a run.recovered right after its run.succeeded, in the same
// outbox, so it reaches RUNS after every failure this executor published
// before it:
//
//   - when its view of flyball-breakers does not show the key settled
//     (Settled): open, half-open, failures counted, or not known;
//   - when it has published a failure for the key since its last
//     run.recovered for the key, in the last owedTTL or two (owed): the
//     failure may still be on its way to the breaker, or applied and not
//     yet in this view.
//
// With one executor the breaker therefore counts exactly what it counted
// when it consumed every success: every failure followed by a success in
// the stream is followed by a run.recovered. With several, a success of
// executor B while A's failure is stored but not yet in B's view is not
// sent, and the failures before it stay counted until the next success
// of the key (which is sent: the view then shows them). The count can be
// higher than stream order gives for that while, never lower. Two breaker
// replicas have the same window today (their views lag each other's
// writes). So does a restart: owed lives in memory, and a failure the
// breaker had not applied (and this view did not show) by the restarted
// executor's next success of the key stays counted the same way.

// Settled reports whether a breaker record, as a view shows it, is closed
// with no failures counted, so that a success cannot change it. A key
// with no record is a closed breaker; one the view cannot answer for, or
// whose record is unreadable, is not settled.
func Settled(r kvcache.Result[BreakerRecord]) bool {
	if !r.Known {
		return false
	}
	return !r.Found || (r.Err == nil && r.Value.State == events.BreakerClosed && r.Value.Failures == 0)
}

// maxOwed bounds the keys owed holds (a string each). A key leaves it with
// its next success, or owedTTL to twice that after its last failure, so it
// holds the keys that failed in the last owedTTL or two and have not
// succeeded since: the failing tasks and hosts of the moment, and those
// that failed recently and will not run again (a task deleted while
// failing, a host no task calls any more).
const maxOwed = 1 << 16

// owedTTL is how long a key stays owed after its last failure, at least
// (and at most twice that). The set only covers the breaker service's lag:
// once the breaker has applied the failure and this executor's view of
// flyball-breakers shows it, the view is not settled (failures counted,
// open or half-open) and Settled sends the key's successes on its own,
// for as long as the breaker is not closed with nothing counted,
// whatever its open period (up to the policy's 24 h maximum). So the
// bound is not the breaker policy's: it is how long a failure stored in
// RUNS may wait for RUNS/breaker to apply it and for the watch to bring
// the write back, seconds when the breaker service runs (a failed apply
// is redelivered after the consumer's 30 s AckWait). An hour, six times
// owedSpill (which rests on the same lag), covers a breaker service down
// for that long. A key dropped while its failure is still unapplied has
// the restart's window (see above): the failure stays counted until the
// key's next success, which is sent, since the view then shows it.
// Without a TTL, keys that never succeeded again stayed until a restart,
// and once they filled the set every failure of a key not in it sent
// every success for owedSpill, renewed by any live failing task.
const owedTTL = time.Hour

// owedSpill is how long every success is sent after owed overflowed and a
// key was dropped: long enough for the breaker to apply the dropped key's
// failure and for the view to show it, after which Settled covers it.
const owedSpill = 10 * time.Minute

// owed is the set of breaker keys this executor published a failure for
// since its last run.recovered for the key, and in the last owedTTL or
// two. It is kept in two generations, each owedTTL long: a failure puts
// its key in cur; when cur's period ends it becomes prev, and prev's keys
// (not failed again since) are dropped whole. Expiry costs nothing per
// key: no timestamps, no scan.
type owed struct {
	mu     sync.Mutex
	cur    map[string]struct{} // keys failed in the current period
	prev   map[string]struct{} // keys failed in the period before, not since
	turnAt time.Time           // the current period's end; zero before the first failure
	spill  time.Time           // send every success until then (an overflow dropped keys)
	max    int
	ttl    time.Duration
}

func newOwed() *owed {
	return &owed{cur: make(map[string]struct{}), prev: make(map[string]struct{}), max: maxOwed, ttl: owedTTL}
}

// turn starts the periods that ended by now, dropping the keys that did
// not fail in the last one (or in the last two, when only one ended).
func (o *owed) turn(now time.Time) {
	if o.turnAt.IsZero() {
		o.turnAt = now.Add(o.ttl)
		return
	}
	if now.Before(o.turnAt) {
		return
	}
	if now.Before(o.turnAt.Add(o.ttl)) {
		o.prev, o.cur = o.cur, make(map[string]struct{}, len(o.cur)/2)
		o.turnAt = o.turnAt.Add(o.ttl)
		return
	}
	o.prev, o.cur = make(map[string]struct{}), make(map[string]struct{})
	o.turnAt = now.Add(o.ttl)
}

// failed records a failure of key, after its event is in the outbox (so a
// success that sees it queues its run.recovered after the failure).
func (o *owed) failed(key string, now time.Time) {
	if key == "" {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.turn(now)
	if _, ok := o.cur[key]; ok {
		return
	}
	if _, ok := o.prev[key]; ok { // failed again: owed from this failure
		delete(o.prev, key)
		o.cur[key] = struct{}{}
		return
	}
	if len(o.cur)+len(o.prev) >= o.max {
		o.spill = now.Add(owedSpill)
		return
	}
	o.cur[key] = struct{}{}
}

// take reports whether a success of key must be sent as run.recovered for
// what this executor owes the breaker, and forgets the key.
func (o *owed) take(key string, now time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.turn(now)
	_, inCur := o.cur[key]
	_, inPrev := o.prev[key]
	delete(o.cur, key)
	delete(o.prev, key)
	return inCur || inPrev || now.Before(o.spill)
}

// recoveredAfter publishes run.recovered for a success whose run.succeeded
// was just queued, when the breaker must see it (see above). It strips the
// response: the breaker reads none of it, and the run.succeeded has it.
// If it cannot be stored, the key is owed again, so the next success of
// the key is sent.
func (s *Service) recoveredAfter(run *events.Run, hold time.Duration) {
	key := run.BreakerKey
	if key == "" {
		return
	}
	owedNow := s.owed.take(key, time.Now())
	if !owedNow && Settled(s.breakers.Lookup(key)) {
		return
	}
	rec := *run
	rec.Body, rec.BodyTruncated, rec.Fingerprint, rec.Request = "", false, "", nil
	msg, err := s.runMsg(events.OutcomeRecovered, &rec, events.RunID(run.DispatchID, run.Attempt, events.RunIDRecovered))
	if err != nil {
		s.log.Warn("run.recovered not published", "task", run.TaskID, "breaker", key, "err", err)
		s.owed.failed(key, time.Now())
		return
	}
	s.out.publish(msg, hold, func(err error) {
		if err != nil {
			s.log.Warn("run.recovered not stored; the next success of its breaker key is sent", "task", run.TaskID, "breaker", key, "err", err)
			s.owed.failed(key, time.Now())
			return
		}
		s.cfg.Metrics.BreakerRecovered.Inc()
	})
}
