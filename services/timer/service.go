package timer

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/kvcache"
	"github.com/flyballhq/flyball/services/internal/lease"
	"github.com/flyballhq/flyball/services/internal/lifecycle"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/streams"
)

// Config configures the timer.
type Config struct {
	// JS is the JetStream context. Required.
	JS jetstream.JetStream
	// Instance names this replica in event sources and as the lease's
	// holder. Defaults to "timer" (stack.Start passes host-pid). It is
	// sanitized as the heartbeat sanitizes its name (events.SanitizeToken),
	// so the holder in KV flyball-leases is the NAME `flyball runtime`
	// lists, and `flyball status` can tell when the holder is offline.
	Instance string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics defaults to a private set.
	Metrics *metrics.Set
	// RetryDelay is the wait before re-publishing a dispatch whose publish
	// failed. Defaults to 250ms.
	RetryDelay time.Duration
	// Lead is the longest a dispatch is published before its slot. The
	// executor holds a dispatch until its scheduledAt, so the publish, the
	// store and the delivery of a burst happen before the slot instead of
	// delaying its calls.
	//
	// Each slot gets its own lead: a quarter of the time since the task's
	// previous slot, at most Lead. The previous run has to finish, and
	// DISPATCH to drop its dispatch, before the next can be stored (the
	// subject holds one; a second is refused and retried), so a 1s task
	// is published 250ms early and a 10s one 1s early. That quarter and
	// the executor's outbox hold (at most an eighth of the interval, see
	// executor.settleHold) leave the call more than half the interval. A slot whose task
	// has no previous slot this timer dispatched (a new task, the first
	// slot after a restart, a retried slot) gets at most FirstLead.
	//
	// Defaults to DefaultLead; a negative value publishes at the slot
	// itself. At most governor.MaxLead (1s, half of InFlightWindow): the
	// governor counts a slot due within InFlightWindow as possibly
	// dispatched, and keeps it when a breaker or spec change arrives; the
	// other half is the margin for the governor's own delay. New refuses
	// more.
	Lead time.Duration
	// Lease, if positive, elects one dispatching replica: the timers
	// share a lease in KV flyball-leases (key "timer"), and only its
	// holder watches the schedules and publishes dispatches. The others
	// stand by, holding no schedule, and take over once the holder's
	// lease has not been renewed for this long, or at once when it stops
	// cleanly: the new holder loads the schedules and dispatches the
	// slots that fell due in between, late. Zero: every replica watches
	// and dispatches every slot, and JetStream drops the copies
	// (Nats-Msg-Id).
	Lease time.Duration
}

const (
	// DefaultLead is the default Config.Lead, governor.MaxLead: a
	// burst of ten thousand runs is stored and delivered in under a
	// second on two cores, and a task has to run every 4s to get all of it.
	DefaultLead = gov.MaxLead
	// FirstLead caps the lead of a slot with no previous slot to measure
	// from: short enough for a task that runs every second.
	FirstLead = 250 * time.Millisecond
	// leadShare is the part of the time since the previous slot a slot's
	// lead may take (1/leadShare).
	leadShare = 4
)

// Service is the timer service.
type Service struct {
	lifecycle.Base
	cfg Config
	log *slog.Logger
	enc runDueEncoder

	// Dispatch results, resolved once: WithLabelValues hashes its labels
	// on every call, and a burst counts thousands of results.
	resultNew, resultDuplicate, resultPending, resultInProcess, resultError prometheus.Counter

	// sources interns schedule sources, so a million items share a handful
	// of strings. Only the watch goroutine (apply) uses it.
	sources map[string]string

	// batch bounds the dispatches taken and published at once, and
	// ackTimeout the wait for their acks (defaultBatch, defaultAckTimeout;
	// tests lower them).
	batch      int
	ackTimeout time.Duration

	// dispatch reads the run DISPATCH holds for a task (pendingSlot); it
	// is bound by Start.
	dispatch jetstream.Stream
	runCtx   context.Context

	// standby is set while a lease is configured and another replica
	// holds it: the dispatcher then publishes nothing.
	standby atomic.Bool
	// fence, with a lease, holds while the lease was confirmed recently
	// enough that no other replica can have taken it: standby is set only
	// once the lease's goroutine runs, which after a stall of the whole
	// process (SIGSTOP, docker pause, a VM paused) can be after the
	// dispatcher's. The dispatcher publishes nothing while it does not
	// hold. fencedSince is when the dispatcher began to hold its
	// dispatches back for it, zero while it does not; only the
	// dispatcher's goroutine uses it.
	fence       lease.Fence
	fencedSince time.Time
	// follower watches flyball-schedules; with a lease, only while this
	// replica holds it, and unfollow (set then) ends the watch. Only the
	// lease's goroutine (onLease) uses unfollow.
	follower kvcache.Follower
	unfollow func()

	// tuneFollow, when set, adjusts the watch of flyball-schedules before
	// it starts (tests end the watch and observe its replays).
	tuneFollow func(*kvcache.Follower)
	// tuneLease, when set, adjusts the lease before it runs (tests stall
	// its renewals).
	tuneLease func(*lease.Config)

	mu    sync.Mutex
	items map[string]*item
	queue dueHeap
	wake  chan struct{}
	ready chan struct{}
}

// dueRun is one dispatch of a batch: the slot taken off the heap and its
// publish.
type dueRun struct {
	it     *item
	id     string
	source string
	at     int64 // the slot: nextRunAt, Unix nanoseconds
	// created is the schedule's createdAt, Unix nanoseconds (0: none).
	created int64
	// planned is when the timer first meant to publish it: its lead before
	// the slot (for a retried slot, firstPlan); sent is when this try was
	// published. Both Unix nanoseconds.
	planned, sent int64
	// tried is item.tried when the run was taken: when an earlier try of
	// the slot that may have been stored went out, 0 when none.
	tried  int64
	future jetstream.PubAckFuture
}

const (
	// defaultBatch is the most dispatches taken off the heap and published
	// at once. Two batches in flight stay well under nats.go's async
	// publish window (4,000 by default, per JetStream context, which the
	// services of one process share), so a burst never stalls on its own
	// publishes.
	defaultBatch = 1024
	// defaultAckTimeout bounds the wait for a batch's acks. A reply can be
	// lost (a stream leader that fails after storing, say), and nats.go
	// has no ack timeout by default, so without one the dispatcher would
	// wait forever. The dispatch is published again with the same
	// Nats-Msg-Id, which JetStream deduplicates if the first was stored.
	// The dispatcher waits this long before its next batch, so it is
	// short: a healthy server acks a 1,024-dispatch batch in well under a
	// second, and a publish lost in a leader election is the case to
	// recover from quickly.
	defaultAckTimeout = 3 * time.Second
	// presizeTimeout bounds the bucket status request that sizes the
	// schedules' map (presize): a healthy server answers in milliseconds,
	// and one that does not only delays the load that follows.
	presizeTimeout = 2 * time.Second
	// maxSources bounds the intern table; the governor writes about twenty
	// distinct sources, so only junk values could pass it.
	maxSources = 256
)

// New validates cfg and returns a timer ready to Start.
func New(cfg Config) (*Service, error) {
	if cfg.JS == nil {
		return nil, errors.New("timer: Config.JS is required")
	}
	if cfg.Instance == "" {
		cfg.Instance = "timer"
	}
	cfg.Instance = events.SanitizeToken(cfg.Instance)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Metrics = metrics.OrNew(cfg.Metrics)
	if cfg.RetryDelay <= 0 {
		cfg.RetryDelay = 250 * time.Millisecond
	}
	switch {
	case cfg.Lead > gov.MaxLead:
		// The governor counts a slot due within twice that as possibly
		// dispatched.
		return nil, fmt.Errorf("timer: Config.Lead %s is longer than governor.MaxLead (%s)", cfg.Lead, gov.MaxLead)
	case cfg.Lead == 0:
		cfg.Lead = DefaultLead
	case cfg.Lead < 0:
		cfg.Lead = 0
	}
	if cfg.Lease < 0 {
		return nil, fmt.Errorf("timer: Config.Lease %s is negative", cfg.Lease)
	}
	total := cfg.Metrics.DispatchTotal
	s := &Service{
		cfg:             cfg,
		log:             cfg.Logger.With("service", "timer"),
		enc:             newRunDueEncoder(jsutil.Source("timer", cfg.Instance)),
		resultNew:       total.WithLabelValues(resultNew),
		resultDuplicate: total.WithLabelValues(resultDuplicate),
		resultPending:   total.WithLabelValues(resultPending),
		resultInProcess: total.WithLabelValues(resultInProcess),
		resultError:     total.WithLabelValues(resultError),
		sources:         make(map[string]string),
		batch:           defaultBatch,
		ackTimeout:      defaultAckTimeout,
		items:           make(map[string]*item),
		wake:            make(chan struct{}, 1),
		ready:           make(chan struct{}),
	}
	s.standby.Store(cfg.Lease > 0)
	s.cfg.Metrics.TimerDispatching.Set(boolGauge(cfg.Lease == 0))
	return s, nil
}

// onLease follows the lease. A timer that takes it loads the schedules
// and dispatches; one that loses it stops before its next batch, ends its
// watch and forgets the schedules. A standby holds no schedule and
// receives no schedule write, so it costs the stack nothing per run; on
// taking over it loads the bucket, as a timer does at start, and fires
// the slots that fell due meanwhile.
func (s *Service) onLease(held bool) {
	s.standby.Store(!held)
	s.cfg.Metrics.TimerDispatching.Set(boolGauge(held))
	if !held {
		if s.unfollow != nil {
			s.unfollow()
			s.unfollow = nil
		}
		s.forget()
		return
	}
	if s.unfollow != nil {
		return
	}
	ctx, cancel := context.WithCancel(s.runCtx)
	done := make(chan struct{})
	s.Go(func() {
		defer close(done)
		// Sized here, not on the lease's goroutine: that goroutine renews
		// nothing until onLease returns, and a status request that hangs
		// (up to nats.go's 5 s API timeout, longer than a 3 s lease) would
		// let a standby take the lease while this timer dispatches.
		s.presize(ctx, s.follower.KV)
		s.follower.Run(ctx)
	})
	s.unfollow = func() { cancel(); <-done }
	s.poke()
}

// forget drops every schedule, once the watch has ended: a dispatch still
// in flight finds its item gone and is not re-queued.
func (s *Service) forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items = make(map[string]*item)
	s.queue = nil
	s.cfg.Metrics.DispatchPending.Set(0)
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Ready is closed once the initial snapshot of flyball-schedules is
// loaded; with a lease, the first time this replica holds it and has
// loaded the schedules.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Start begins watching schedules and dispatching.
func (s *Service) Start(ctx context.Context) error {
	runCtx, err := s.Begin(ctx)
	if err != nil {
		return fmt.Errorf("timer: %w", err)
	}
	kv, err := s.cfg.JS.KeyValue(ctx, streams.BucketSchedules)
	if err != nil {
		return fmt.Errorf("timer: bind KV %s: %w (run flyball provision, or flyball serve with --ensure-streams)", streams.BucketSchedules, err)
	}
	var leases jetstream.KeyValue
	if s.cfg.Lease > 0 {
		if leases, err = s.cfg.JS.KeyValue(ctx, streams.BucketLeases); err != nil {
			return fmt.Errorf("timer: bind KV %s: %w (run flyball provision, or flyball serve with --ensure-streams)", streams.BucketLeases, err)
		}
	}
	// Bound now rather than at the first refused dispatch: a DISPATCH
	// that is not the definition's refuses every later dispatch of a task
	// without a word (streams.Check).
	if s.dispatch, err = s.cfg.JS.Stream(ctx, streams.StreamDispatch); err != nil {
		return fmt.Errorf("timer: stream %s: %w (run flyball provision, or flyball serve with --ensure-streams)", streams.StreamDispatch, err)
	}
	if err := streams.Check(&s.dispatch.CachedInfo().Config); err != nil {
		return fmt.Errorf("timer: %w", err)
	}
	s.runCtx = runCtx
	var once sync.Once
	s.follower = kvcache.Follower{
		KV: kv, Conn: s.cfg.JS.Conn(), Log: s.log, Apply: s.apply, Prune: s.prune,
		Loaded: func() { once.Do(func() { close(s.ready) }) },
	}
	if s.tuneFollow != nil {
		s.tuneFollow(&s.follower)
	}
	if leases == nil {
		s.presize(ctx, kv)
		follow, err := s.follower.Start(runCtx)
		if err != nil {
			return fmt.Errorf("timer: watch %s: %w", streams.BucketSchedules, err)
		}
		s.Go(follow)
	} else {
		// A standby watches only once it holds the lease: check now that
		// it can, so a missing permission fails its start, not its
		// takeover.
		w, err := kv.WatchAll(ctx, jetstream.UpdatesOnly())
		if err != nil {
			return fmt.Errorf("timer: watch %s: %w", streams.BucketSchedules, err)
		}
		if err := w.Stop(); err != nil {
			s.log.Debug("stopping the start-up watch check failed", "err", err)
		}
		lc := lease.Config{
			KV: leases, Key: streams.LeaseTimer, Holder: s.cfg.Instance, TTL: s.cfg.Lease, Logger: s.log, OnChange: s.onLease,
			Fence: &s.fence,
		}
		if s.tuneLease != nil {
			s.tuneLease(&lc)
		}
		s.Go(func() { lease.Run(runCtx, lc) })
	}
	s.Go(func() { s.fire(runCtx) })
	return nil
}

// presize sizes the item map and the heap for the bucket's keys before the
// watch delivers them: growing a map of a million entries step by step
// rehashes and copies it over and over, and leaves it and the heap's
// backing array up to twice the size they need.
//
// It waits at most presizeTimeout for the bucket's status: the load does
// not need it.
func (s *Service) presize(ctx context.Context, kv jetstream.KeyValue) {
	ctx, cancel := context.WithTimeout(ctx, presizeTimeout)
	defer cancel()
	st, err := kv.Status(ctx)
	if err != nil {
		s.log.Debug("bucket status unavailable; not pre-sizing", "err", err)
		return
	}
	// Keys, deleted ones included; Values() would also count history.
	n := st.Values()
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo() != nil {
		n = bs.StreamInfo().State.NumSubjects
	}
	if n <= math.MaxInt32 {
		s.reserve(int(n))
	}
}

// reserve sizes the empty item map and heap for n items.
func (s *Service) reserve(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.items) == 0 && n > 0 {
		s.items = make(map[string]*item, n)
		s.queue = make(dueHeap, 0, n)
	}
}

// prune forgets the tasks a replayed watch no longer holds (purged while
// the watch was down; see kvcache.Follower).
func (s *Service) prune(keep func(id string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.items {
		if !keep(id) {
			s.removeLocked(id)
		}
	}
}

func (s *Service) apply(e jetstream.KeyValueEntry) {
	id := e.Key()
	if e.Operation() != jetstream.KeyValuePut {
		s.remove(id)
		return
	}
	if !events.ValidToken(id) {
		// Written by hand (dot.ted): its dispatch would go to no task's
		// subject, and be retried every RetryDelay for good.
		s.log.Error(msgBadScheduleKey, "key", id)
		s.remove(id)
		return
	}
	sc, err := decodeSchedule(e.Value())
	if err != nil {
		s.log.Error("unreadable schedule; task not scheduled until it is rewritten", "task", id, "err", err)
		s.remove(id)
		return
	}
	if sc.next.IsZero() {
		if len(sc.source) == 0 && undecided(e.Value()) {
			// JSON null or {}: not a state with no next run (paused,
			// deleted), which names its source. The sweeper repairs it,
			// as an unreadable one; it was skipped without a word.
			s.log.Error("unreadable schedule; task not scheduled until it is rewritten", "task", id, "err", gov.ErrUndecided)
		}
		s.remove(id)
		return
	}
	next, ok := slotNanos(sc.next)
	if !ok {
		// The timer holds a slot in Unix nanoseconds, which end at
		// 2262-04-11T23:47:16Z (and begin at 1677-09-21); past them
		// UnixNano wraps. Queued wrapped, a slot after 2262 (a startAt
		// or a timed pause's end, which the governor accepts up to year
		// 9999) would be dispatched at once with a garbage slot, or sit
		// at the top of the heap and hold back every other task.
		//
		// A slot after 2262 is not queued, like an indefinite pause: it
		// is more than two centuries away, no timer runs that long, and
		// every timer start and watch replay reads it again. Whatever
		// the governor writes before then (a new spec, a resume, a
		// deletion) replaces it as usual. A slot before 1678 cannot be
		// named in a dispatch (scheduledAt, dispatch ID): the governor
		// never writes one (a past startAt runs at once), so it is
		// treated as an unreadable schedule.
		s.remove(id)
		if sc.next.After(time.Unix(0, 0)) {
			s.log.Debug("nextRunAt after 2262; task not queued", "task", id, "nextRunAt", sc.next)
		} else {
			s.log.Error("nextRunAt before 1678 cannot be dispatched; task not scheduled until it is rewritten", "task", id, "nextRunAt", sc.next)
		}
		return
	}
	// 0 where Unix nanoseconds cannot hold it (before 1678 or after 2262,
	// written by hand): the dispatch then names no createdAt.
	created, ok := events.UnixNanos(sc.created)
	if sc.created.IsZero() || !ok {
		created = 0
	}
	written := e.Created().UnixNano()
	if e.Created().IsZero() {
		written = 0
	}
	s.upsert(id, next, s.intern(sc.source), created, written)
}

// msgBadScheduleKey is the error for a flyball-schedules key that is not
// a task ID.
const msgBadScheduleKey = "schedule key is not a task ID (1-128 characters of [A-Za-z0-9_-]); not scheduled: delete it"

// minSlot is the earliest slot the timer holds: a slot less a lead
// (at most gov.MaxLead, New refuses more) stays a valid Unix nanosecond.
const minSlot = math.MinInt64 + int64(gov.MaxLead)

// noSlot is item.fired of a task with no slot dispatched (a new task, a
// slot being retried). It is below minSlot, so no slot equals it: zero
// would be 1970-01-01T00:00:00Z, a valid nextRunAt, which upsert then took
// for a re-put of a slot already dispatched and never queued.
const noSlot = math.MinInt64

// slotNanos returns t in Unix nanoseconds, and false where they cannot
// hold it (after 2262-04-11, before 1678: UnixNano wraps) or it is before
// minSlot. Every slot the timer queues passed it, so the arithmetic on
// slots (less a lead, the wait from now) cannot wrap.
func slotNanos(t time.Time) (int64, bool) {
	n, ok := events.UnixNanos(t)
	return n, ok && n >= minSlot
}

// lead returns how long before slot at to publish it, given prev, the
// task's previous slot this timer dispatched (noSlot when none): see
// Config.Lead. A previous slot at or before 1970 (the governor writes none)
// counts as none too, so at-prev cannot wrap.
func (s *Service) lead(at, prev int64) int64 {
	if prev <= 0 || at <= prev {
		return int64(min(s.cfg.Lead, FirstLead))
	}
	return int64(min(s.cfg.Lead, time.Duration(at-prev)/leadShare))
}

// firstPlan is when to publish slot at with no previous slot to measure
// from: a new task's first slot, or a retried one.
func (s *Service) firstPlan(at int64) int64 { return at - s.lead(at, 0) }

// intern returns the canonical copy of a source; the lookup does not
// allocate.
func (s *Service) intern(b []byte) string {
	if v, ok := s.sources[string(b)]; ok {
		return v
	}
	v := string(b)
	if len(s.sources) < maxSources {
		s.sources[v] = v
	}
	return v
}

// upsert queues slot at of task id, chosen by source, of the schedule
// created at created and written at written (Unix nanoseconds, 0 when
// it has none).
func (s *Service) upsert(id string, at int64, source string, created, written int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.items[id]
	if !ok {
		// The watcher's key is a substring of the message subject
		// ("$KV.flyball-schedules.<id>"): keeping it would pin the whole
		// subject for as long as the task lives.
		it = &item{id: strings.Clone(id), fired: noSlot, index: -1}
		s.items[it.id] = it
	}
	it.source, it.created = source, created
	if at == it.fired {
		// A re-put of a slot already dispatched (another input changed the
		// state but not the time): dispatching it again would be a duplicate.
		if it.index >= 0 {
			heap.Remove(&s.queue, int(it.index))
			s.cfg.Metrics.DispatchPending.Set(float64(len(s.queue)))
		}
		return
	}
	if at != it.due {
		it.tried = 0 // the tries were of another slot
		it.written = written
	} else {
		// Rewritten with the same slot (another input changed): the slot
		// was known since its first write.
		it.written = min(it.written, written)
	}
	it.at, it.due, it.waits = at-s.lead(at, it.fired), at, 0
	if it.index >= 0 {
		heap.Fix(&s.queue, int(it.index))
	} else {
		heap.Push(&s.queue, it)
	}
	s.cfg.Metrics.DispatchPending.Set(float64(len(s.queue)))
	s.pokeIfFirst(it)
}

func (s *Service) remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removeLocked(id)
}

// removeLocked is remove with s.mu held.
func (s *Service) removeLocked(id string) {
	it, ok := s.items[id]
	if !ok {
		return
	}
	if it.index >= 0 {
		heap.Remove(&s.queue, int(it.index))
	}
	delete(s.items, id)
	s.cfg.Metrics.DispatchPending.Set(float64(len(s.queue)))
}

func (s *Service) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// pokeIfFirst wakes the dispatcher if it is now at the top of the heap:
// only then can the dispatcher have to fire earlier than it planned. Any
// other change at most makes its timer fire early, and it recomputes then.
// Loading a bucket thus does not wake the dispatcher once per schedule.
// The caller holds s.mu.
func (s *Service) pokeIfFirst(it *item) {
	if it.index == 0 {
		s.poke()
	}
}

// fire waits for the earliest due time and dispatches everything due.
func (s *Service) fire(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		wait := s.dispatchDue(ctx)
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.wake:
		}
	}
}

// dispatchDue publishes every due item, a batch at a time, and returns how
// long to wait for the next one. Batches are pipelined: the next batch is
// published before the acks of the previous one are collected, so the
// server always has work queued while the timer waits, and at most two
// batches are in flight.
func (s *Service) dispatchDue(ctx context.Context) time.Duration {
	var flight []dueRun // published, acks not collected yet
	for ctx.Err() == nil {
		next, wait := s.takeDue()
		s.publishAll(next)
		if flight != nil {
			s.collect(ctx, flight)
		} else if next == nil {
			return wait
		}
		flight = next
	}
	return time.Hour
}

// takeDue takes up to s.batch due items off the heap, in one lock hold.
// With none due it returns nil and how long to wait for the next one; a
// replica standing by for the lease takes none, and waits for onLease,
// and one whose lease is unconfirmed (unfenced) takes none until it is
// confirmed again or lost.
func (s *Service) takeDue() ([]dueRun, time.Duration) {
	if s.standby.Load() {
		s.fencedSince = time.Time{} // lost: the lease's goroutine said so
		return nil, time.Hour
	}
	clock := time.Now()
	if s.unfenced(clock) {
		return nil, fenceRecheck
	}
	now := clock.UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	var runs []dueRun
	for len(runs) < s.batch && len(s.queue) > 0 {
		it := s.queue[0]
		if it.at > now {
			if runs == nil {
				return nil, waitUntil(it.at, now)
			}
			break
		}
		if runs == nil {
			runs = make([]dueRun, 0, min(len(s.queue), s.batch))
		}
		heap.Pop(&s.queue)
		planned := it.at
		if it.fired == noSlot {
			// A first slot, or a retry: a retry's lateness counts from the
			// slot's first plan, so a NATS outage shows in the metric.
			planned = min(planned, s.firstPlan(it.due))
		}
		// Not before the schedule was written: a slot written for now
		// (or past) cannot be published its lead before it, and a slot
		// held back by a NATS outage or a timer failover after its write
		// still counts from its plan.
		planned = max(planned, it.written)
		it.fired = it.due
		runs = append(runs, dueRun{it: it, id: it.id, source: it.source, at: it.due, created: it.created, planned: planned, tried: it.tried})
	}
	if runs == nil {
		return nil, time.Hour
	}
	s.cfg.Metrics.DispatchPending.Set(float64(len(s.queue)))
	return runs, 0
}

// maxWait bounds one sleep of the dispatch loop. The slots are wall-clock
// times, but a timer sleeps on the monotonic clock: after the wall clock
// steps forward (an NTP step, a VM resumed from suspend), a sleep computed
// before the step would end late by the size of the step. Waking at least
// this often bounds that lateness, for one heap peek a second when idle.
const maxWait = time.Second

// waitUntil returns the wait from now to at, both Unix nanoseconds, for
// at > now, at most maxWait. The difference saturates where it does not
// fit a Duration (more than 292 years, which only a wall clock set far
// back could make): wrapped, it would turn negative and fire at once.
func waitUntil(at, now int64) time.Duration {
	if d := at - now; d > 0 {
		return min(time.Duration(d), maxWait)
	}
	return maxWait
}

// fenceRecheck is how often a dispatcher whose lease is unconfirmed
// checks whether it was confirmed again. That happens after the whole
// process stalled past the lease, at the lease's next renewal, which
// comes at once on waking (its overdue tick fires), or after a renewal
// that failed and a next one that came late (a NATS leader election, a
// slow server), at most a tenth of the lease later: the runs held back
// are late already, and a few checks cost nothing.
const fenceRecheck = 50 * time.Millisecond

// msgUnfenced is the warning of a timer that holds its dispatches back
// because its lease went unconfirmed for its TTL.
const msgUnfenced = "lease not confirmed within its TTL; holding dispatches until it is renewed or lost"

// msgConfirmed is the Info that ends a stall msgUnfenced began, when a
// renewal confirms the lease again.
const msgConfirmed = "lease confirmed again; dispatching"

// unfenced reports whether, at now, the timer's lease is configured and
// its fence does not hold: the lease has gone unconfirmed for its TTL
// (less lease.FenceMargin), so a standby may have taken it over although
// the lease's goroutine has not said so. The dispatcher then publishes
// nothing: the runs stay queued, and go out if the next renewal confirms
// the lease, or are forgotten with the schedules if it finds the lease
// taken. It warns once per such stall, and counts it.
func (s *Service) unfenced(now time.Time) bool {
	if s.cfg.Lease == 0 {
		return false
	}
	if s.fence.Holds(now) {
		if !s.fencedSince.IsZero() {
			s.log.Info(msgConfirmed, "held", now.Sub(s.fencedSince))
			s.fencedSince = time.Time{}
		}
		return false
	}
	if s.fencedSince.IsZero() {
		s.fencedSince = now
		args := []any{"lease", s.cfg.Lease}
		if sent := s.fence.Confirmed(); !sent.IsZero() {
			args = append(args, "unconfirmedFor", now.Sub(sent))
		}
		s.log.Warn(msgUnfenced, args...)
		s.cfg.Metrics.TimerLeaseStalls.Inc()
	}
	return true
}

// publishAll publishes a batch of due runs without waiting for their acks.
// A run that cannot even be sent is counted and re-queued at once; one
// due while the lease is unconfirmed (a stall between takeDue and here,
// or during the batch) is re-queued unsent and uncounted.
//
// Each run is checked against the fence just before its write, and
// nothing bounds a freeze of the whole process that falls after the
// check (lease.FenceMargin). On waking it sends the run it had checked,
// and nats.go flushes what the batch wrote to the connection before the
// freeze and had not flushed yet: at most its 32 KiB write buffer, which
// it flushes once full and otherwise at once from its flusher goroutine.
// These go out however late: the ack timeouts (ackTimeout, nats.go's)
// bound the wait for an ack, not the write. Every one of them passed its
// check while the fence held; the runs not checked yet are held back
// (TestTimerFrozenMidBatchPastItsFenceSendsOnlyTheDispatchItHadChecked).
// Each carries its slot's Nats-Msg-Id, so DISPATCH drops it if the new
// holder stored the slot within the duplicate window, or refuses it while
// the task has a dispatch pending; stored later still, long after its
// slot, it is skipped by the executor if the slot's outcome is stored
// (executor.LateRedispatch). Closing the window would take a fence the
// server checks as it stores the dispatch, and JetStream checks only
// expectations within the stream written to.
func (s *Service) publishAll(runs []dueRun) {
	// One log line per batch and kind of failure, not one per run: when
	// the server is away, every run of every batch fails.
	var unsent failures
	for i := range runs {
		r := &runs[i]
		now := time.Now()
		if s.unfenced(now) {
			s.requeue(r.it, r.at, 0, false, 0)
			continue
		}
		r.sent = now.UnixNano()
		f, err := s.publish(r, now)
		if err != nil {
			// Connection closed, too many pending acks, a body that
			// cannot be encoded.
			s.resultError.Inc()
			unsent.add(r.id, err)
			s.retryLater(r.it, r.at, 0)
			continue
		}
		r.future = f
	}
	unsent.log(s.log, "dispatch publish failed; retrying", len(runs))
}

// collect waits for the acks of a published batch. Every run ends
// acknowledged (new, duplicate, or already pending) or re-queued by
// retryLater: none is lost.
func (s *Service) collect(ctx context.Context, runs []dueRun) {
	var unstored failures
	defer unstored.log(s.log, "dispatch not stored; retrying", len(runs))
	timer := time.NewTimer(s.ackTimeout)
	defer timer.Stop()
	deadline := jsutil.NewAckDeadline(timer.C)
	for i := range runs {
		r := &runs[i]
		if r.future == nil {
			continue
		}
		ack, err := deadline.Await(ctx, r.future)
		if ctx.Err() != nil {
			return
		}
		// A 10158 is retried without a warning: two timers without a
		// lease publishing a slot at once to a replicated DISPATCH can
		// meet it in the normal course.
		if !s.settle(r, ack, err) && !jsutil.IsDuplicateInProcess(err) {
			unstored.add(r.id, err)
		}
	}
}

// failures summarises the failed runs of a batch for the log.
type failures struct {
	n     int
	first string
	err   error
}

func (f *failures) add(id string, err error) {
	if f.n == 0 {
		f.first, f.err = id, err
	}
	f.n++
}

func (f *failures) log(logger *slog.Logger, msg string, batch int) {
	if f.n > 0 {
		logger.Warn(msg, "task", f.first, "err", f.err, "failed", f.n, "batch", batch)
	}
}

// Dispatch results, the values of flyball_dispatch_total's result label.
const (
	resultNew       = "new"
	resultDuplicate = "duplicate"
	resultPending   = "pending"
	resultInProcess = "in-process"
	resultError     = "error"
)

// classify names the result of a dispatch publish. A duplicate PubAck
// means the run is stored, and error 10077 for DISPATCH's per-subject
// limit (the subject already holds its one message) means a run of the
// task is already pending. Error 10158 (IsDuplicateInProcess: a publish
// with the same Nats-Msg-Id is being stored right now, another replica's
// or this timer's own earlier try whose ack timed out) is
// resultInProcess: that publish may yet fail (a stream leader that lost
// its quorum never commits it), so, as jsutil.PublishNewEvent does, the
// slot is published again until the stream answers stored or duplicate.
// Error 10077 for any other cause (a stream-wide max_msgs or max_bytes
// reached, a storage error) is a dispatch not stored: resultError,
// retried and logged at Warn like any other.
func classify(ack *jetstream.PubAck, err error) string {
	switch {
	case err == nil && ack != nil && ack.Duplicate:
		return resultDuplicate
	case err == nil:
		return resultNew
	case jsutil.IsDuplicateInProcess(err):
		return resultInProcess
	case streams.IsSubjectFull(err):
		return resultPending
	default:
		return resultError
	}
}

// settle counts a dispatch's result and re-queues it if it was not
// stored, reporting false then.
func (s *Service) settle(r *dueRun, ack *jetstream.PubAck, err error) bool {
	result := classify(ack, err)
	if result == resultNew || result == resultDuplicate && r.tried != 0 {
		// Once per dispatch, for the try that was stored: tries that were
		// not are counted in flyball_dispatch_total, and retried. A retry
		// answered duplicate was not that try: an earlier one whose ack
		// was lost was, and recording the retry's time would add the ack
		// timeout (3 s) and the retry delay to a dispatch stored on time.
		// A duplicate with no such earlier try is another timer's copy (a
		// replica's, or its predecessor's before a restart or a lease
		// takeover, which publishes again the slots dispatched within the
		// 2-minute duplicate window): that timer recorded it, and this
		// copy's time, up to 2 minutes late, says nothing of it.
		sent := r.sent
		if result == resultDuplicate {
			sent = r.tried
		}
		s.cfg.Metrics.DispatchLateness.Observe(time.Duration(max(sent-r.planned, 0)).Seconds())
	}
	switch result {
	case resultNew:
		s.resultNew.Inc()
	case resultDuplicate:
		s.resultDuplicate.Inc()
	case resultInProcess:
		// The slot is not stored yet, and may never be by the publish in
		// process: try again. This try was refused, so it is not one that
		// may have been stored (an earlier try whose ack timed out is
		// already in the item's tried).
		s.resultInProcess.Inc()
		s.retryLater(r.it, r.at, 0)
		return false
	case resultPending:
		// The subject still holds an earlier dispatch of the task. Either
		// its run is still going (a re-plan while it retries) or it has
		// finished and its ack is on the way: the governor decides the
		// next slot once the outcome is stored, which can beat the ack,
		// and an ack lost in a leader election is retried for seconds.
		// Counting this slot as dispatched would then lose it and, with
		// it, every later run of the task. So try again, backing off:
		// the slot is stored once the subject frees up, unless a newer
		// schedule supersedes it first.
		//
		// The one case to tell apart is the pending dispatch being this
		// very slot (a timer that restarted during a run longer than the
		// 2-minute duplicate window publishes it again): retrying that
		// would run the slot twice. One read tells.
		s.resultPending.Inc()
		it, id, at := r.it, r.id, r.at
		s.Go(func() {
			if same, err := s.pendingSlot(id, at); err == nil && same {
				return
			} else if err != nil {
				s.log.Debug("pending dispatch unreadable; retrying the slot", "task", id, "err", err)
			}
			s.retryPending(it, at)
		})
	default:
		s.resultError.Inc()
		var tried int64
		if !jsutil.NotStored(err) { // its ack timed out or was lost: it may be stored
			tried = r.sent
		}
		s.retryLater(r.it, r.at, tried)
		return false
	}
	return true
}

func (s *Service) publish(r *dueRun, now time.Time) (jetstream.PubAckFuture, error) {
	id := r.id
	scheduledAt := time.Unix(0, r.at).UTC()
	var created time.Time
	if r.created != 0 {
		created = time.Unix(0, r.created).UTC()
	}
	body, err := s.enc.encode(id, scheduledAt, now.UTC(), r.source, created)
	if err != nil {
		return nil, err
	}
	m := &nats.Msg{Subject: events.DispatchSubject(id), Data: body, Header: nats.Header{
		// Set directly: both keys are already in canonical form, which is
		// what Header.Set would produce.
		jetstream.MsgIDHeader: {events.DispatchID(id, scheduledAt)},
		"Content-Type":        {events.ContentTypeStructured},
	}}
	return s.cfg.JS.PublishMsgAsync(m)
}

// retryLater re-queues a failed dispatch unless the schedule moved on.
// tried is when the failed try went out if it may have been stored
// nonetheless (!jsutil.NotStored), else 0.
func (s *Service) retryLater(it *item, at, tried int64) {
	s.requeue(it, at, s.cfg.RetryDelay, false, tried)
}

// maxPendingWait caps the backoff of a slot refused with 10077.
const maxPendingWait = 4 * time.Second

// retryPending re-queues a slot refused because an earlier dispatch of the
// task is still pending: RetryDelay, doubling per refusal up to
// maxPendingWait.
func (s *Service) retryPending(it *item, at int64) { s.requeue(it, at, s.cfg.RetryDelay, true, 0) }

// pendingSlot reports whether the dispatch DISPATCH holds for task id is
// the slot at itself.
func (s *Service) pendingSlot(id string, at int64) (bool, error) {
	ctx, cancel := context.WithTimeout(s.runCtx, 5*time.Second)
	defer cancel()
	m, err := s.dispatch.GetLastMsgForSubject(ctx, events.DispatchSubject(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil // gone since: publish the slot now
	}
	if err != nil {
		return false, err
	}
	return m.Header.Get(jetstream.MsgIDHeader) == events.DispatchID(id, time.Unix(0, at).UTC()), nil
}

func (s *Service) requeue(it *item, at int64, delay time.Duration, pending bool, tried int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.items[it.id]; !ok || cur != it || it.index >= 0 || it.fired != at {
		return
	}
	if it.tried == 0 { // the slot's tries go out one after another: the first is the earliest
		it.tried = tried
	}
	if pending {
		delay = min(delay<<min(it.waits, 8), maxPendingWait)
		it.waits++
	}
	it.fired = noSlot
	it.due = at
	it.at = max(s.firstPlan(at), time.Now().Add(delay).UnixNano())
	heap.Push(&s.queue, it)
	s.cfg.Metrics.DispatchPending.Set(float64(len(s.queue)))
	s.pokeIfFirst(it)
}
