package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/kvcache"
	"github.com/flyballhq/flyball/services/internal/lifecycle"
	"github.com/flyballhq/flyball/services/internal/repeatlog"
	"github.com/flyballhq/flyball/services/internal/slotdone"
	"github.com/flyballhq/flyball/services/internal/ssrf"
	"github.com/flyballhq/flyball/streams"
)

// Service is the executor service.
type Service struct {
	lifecycle.Base
	cfg       Config
	log       *slog.Logger
	source    string
	userAgent string // "flyball/" + Config.Version
	client    *http.Client
	schedules jetstream.KeyValue
	// runs and dead are read for a dispatch fired long after its slot
	// (ranAlready).
	runs, dead jetstream.Stream
	breakerKV  jetstream.KeyValue
	attempts   jetstream.KeyValue
	probes     jetstream.KeyValue // probe claims of half-open breakers (probe.go)
	// probeMargin is how much longer than its call a probe claim lives
	// (probeTTL): settleMargin; tests shorten it.
	probeMargin time.Duration
	// outRound and outBudget are the outbox's publish round and budget
	// (outboxRound, outboxBudget); tests shorten them.
	outRound, outBudget time.Duration
	// Watch-fed views, so a run costs no KV read in the common case.
	specs    *kvcache.Cache[*task]
	pauses   *kvcache.Cache[struct{}] // which tasks may be paused (flyball-pauses)
	breakers *kvcache.Cache[BreakerRecord]
	work     *jsutil.WorkerConsume
	out      *outbox       // run events on their way to RUNS
	calls    chan struct{} // a slot per call in flight (Concurrency)
	heldMu   sync.Mutex
	held     map[*held]struct{} // dispatches waiting for their slot, or deferred by their breaker
	parked   map[string]int     // of held, those deferred by their breaker (park), by breaker key
	byTask   map[string][]*held // of held, those deferred by their breaker, by task ID (wakeTask)
	nParked  int                // of held, those deferred by their breaker: the sum of parked
	retrying int                // of held, those tried again after an infrastructure failure (retryInfra)
	firing   sync.WaitGroup     // held dispatches not yet settled
	fire     chan *held         // held dispatches whose slot came, to the callers
	records  sync.WaitGroup     // background KV writes: attempt records, released probe claims
	settles  *settler           // acks, naks and terms until the server confirms them
	owed     *owed              // breaker keys whose next success is sent as run.recovered (recovered.go)
	// eventBytes is the size of the run events kept to publish again
	// (unconfirmedRun.counted), from their give-up to their settle, at most
	// eventBytesMax (keepsEvent). Atomic: released under heldMu or not.
	eventBytes    atomic.Int64
	eventBytesMax int64

	// stopping is closed when shutdown begins (releaseHeld, under
	// heldMu): a new arrival, and a dispatch waiting for a call slot, a
	// caller or a host slot, is handed back then, not at the end of the
	// grace.
	stopping chan struct{}
	// maxDeliver is the consumer's MaxDeliver: a transient failure on the
	// last possible delivery is final, because no redelivery can follow.
	maxDeliver int
	// infraRetryFirst and infraRetryMax space the tries of a dispatch
	// whose own reads or writes failed (retryInfra): from the first,
	// doubling up to the max. Tests shorten them.
	infraRetryFirst, infraRetryMax time.Duration
	// tune, set by tests, runs in Start once the buckets and streams are
	// bound, before the first delivery: it may wrap them (a slow read).
	tune func(*Service)
	// dropProgress, set by tests, loses the keep-alive's InProgress it
	// returns true for, as one sent while the DISPATCH consumer elects a
	// leader is lost.
	dropProgress func() bool

	// hosts holds the PerHost slots of each host (canonicalHost) that a
	// call holds or waits for, and no other: an idle host's entry is
	// dropped (hostUnref), and kept in spare for the next host. Both
	// under hostMu.
	hostMu sync.Mutex
	hosts  map[string]*hostSlots
	spare  []*hostSlots

	// waiting holds the dispatches waiting for a call, a caller or a host
	// slot, and those whose call runs or whose run event waits in the
	// outbox, each with its keep-alive: when its next InProgress is due,
	// and the one awaiting its confirmation; keepWaitersAlive sends them.
	// progressIDs names the waiter of each InProgress awaiting its
	// confirmation, by the ID that ends its reply subject (progressTo +
	// the ID, on progressSub). All under waitMu. progressMu is held while
	// it sends, so that settle can wait out an InProgress already on its
	// way (keepWaitersAlive).
	waitMu       sync.Mutex
	waiting      map[jetstream.Msg]keepAlive
	progressIDs  map[uint64]jetstream.Msg
	progressNext uint64
	progressTo   string
	progressSub  *nats.Subscription
	progressMu   sync.Mutex

	// sent holds the deliveries whose NATS-target request was sent, or
	// may have been, before the executor's own connection failed
	// (result.sent), from that call until their settle (settle): they are
	// tried again in place (retryInfra) and may be handed back meanwhile,
	// and must not be marked as having made no call (mayHaveCalled).
	// Under sentMu.
	sentMu sync.Mutex
	sent   map[jetstream.Msg]struct{}

	// pubViolations ends NATS-target requests (callNATS) and the direct
	// gets of a late slot's outcome (ranAlready) the server refuses.
	pubViolations jsutil.PubWatch

	// The room a dispatch an open breaker defers may take in the DISPATCH
	// consumer's max_ack_pending (parkRefused): set at Start from the
	// consumer (setParkRoom), all zero for a consumer with no limit.
	// maxAckPending is that limit; parkCap, half of it, the most this
	// executor parks for an open breaker, and the consumer's ack pending
	// past which none is parked; shedAt the consumer's ack pending at
	// which it sheds those it parks (watchParkRoom).
	maxAckPending, parkCap, shedAt int
	// ackPending is the consumer's ack pending as watchParkRoom last read
	// it, every parkPoll while this executor parks a dispatch; 0 while it
	// parks none.
	ackPending atomic.Int64
	parkPoll   time.Duration
	parkWarns  *repeatlog.Log // skipParked's warning, once per settleLogWindow
}

// New validates cfg and returns an executor ready to Start.
func New(cfg Config) (*Service, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("service", "executor")
	return &Service{
		cfg:         cfg,
		log:         log,
		source:      jsutil.Source("executor", cfg.Instance),
		userAgent:   "flyball/" + cfg.Version,
		client:      newHTTPClient(&cfg.Guard, cfg.PerHost, cfg.Concurrency, cfg.RedactHeaders),
		hosts:       make(map[string]*hostSlots),
		probeMargin: settleMargin,
		outRound:    outboxRound,
		outBudget:   outboxBudget,
		owed:        newOwed(),
		stopping:    make(chan struct{}),
		sent:        make(map[jetstream.Msg]struct{}),

		infraRetryFirst: infraRetryFirst,
		infraRetryMax:   infraRetryMax,
		eventBytesMax:   outboxMaxBytes,
		parkPoll:        parkPoll,
		parkWarns:       repeatlog.New(log, settleLogWindow),
	}, nil
}

// Start binds the KV buckets and starts consuming DISPATCH. After an
// error, call Stop: it ends whatever Start started before it failed.
func (s *Service) Start(ctx context.Context) error {
	runCtx, err := s.Begin(ctx)
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	var tasks, pauses jetstream.KeyValue
	if err := jsutil.BindBuckets(ctx, s.cfg.JS,
		jsutil.Bucket{Name: streams.BucketTasks, KV: &tasks},
		jsutil.Bucket{Name: streams.BucketSchedules, KV: &s.schedules},
		jsutil.Bucket{Name: streams.BucketPauses, KV: &pauses},
		jsutil.Bucket{Name: streams.BucketBreakers, KV: &s.breakerKV},
		jsutil.Bucket{Name: streams.BucketAttempts, KV: &s.attempts},
		jsutil.Bucket{Name: streams.BucketProbes, KV: &s.probes},
	); err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	if s.runs, err = s.cfg.JS.Stream(ctx, streams.StreamRuns); err != nil {
		return fmt.Errorf("executor: stream %s: %w", streams.StreamRuns, err)
	}
	if err := streams.Check(&s.runs.CachedInfo().Config); err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	if s.dead, err = s.cfg.JS.Stream(ctx, streams.StreamDeadLetter); err != nil {
		return fmt.Errorf("executor: stream %s: %w", streams.StreamDeadLetter, err)
	}
	if s.tune != nil {
		s.tune(s)
	}
	s.specs = kvcache.New(tasks, s.decodeTask, s.log)
	// Not a view of flyball-schedules: every run rewrites its schedule,
	// and only a paused task's matters here.
	s.pauses = kvcache.Keys(pauses, s.log)
	s.breakers = kvcache.New(s.breakerKV, DecodeBreaker, s.log)
	s.specs.Conn, s.pauses.Conn, s.breakers.Conn = s.cfg.JS.Conn(), s.cfg.JS.Conn(), s.cfg.JS.Conn()
	s.held = make(map[*held]struct{}) // before the breakers' watch: wakeDeferred reads it
	s.parked = make(map[string]int)
	s.byTask = make(map[string][]*held)
	s.breakers.Changed = s.wakeDeferred
	s.specs.Changed = s.wakeTask
	s.Go(func() { s.specs.Run(runCtx) })
	s.Go(func() { s.pauses.Run(runCtx) })
	s.Go(func() { s.breakers.Run(runCtx) })
	cons, err := s.cfg.JS.Consumer(ctx, streams.StreamDispatch, streams.ConsumerExecutor)
	if err != nil {
		return fmt.Errorf("executor: consumer %s/%s: %w", streams.StreamDispatch, streams.ConsumerExecutor, err)
	}
	s.maxDeliver = cons.CachedInfo().Config.MaxDeliver
	s.setParkRoom(cons.CachedInfo().Config.MaxAckPending)
	if ackWait := cons.CachedInfo().Config.AckWait; ackWait > 0 {
		s.cfg.AckWait = ackWait
	}
	// Before the outbox: a Start that fails here leaves nothing running.
	s.progressTo = s.cfg.JS.Conn().NewInbox() + "."
	if s.progressSub, err = s.cfg.JS.Conn().Subscribe(s.progressTo+"*", s.progressReply); err != nil {
		return fmt.Errorf("executor: InProgress confirmations: %w", err)
	}
	s.out = newOutbox(s.cfg.JS, s.log, outboxPerCall*s.cfg.Concurrency, s.cfg.Metrics, func() bool { return len(s.calls) > 0 })
	s.out.round, s.out.budget = s.outRound, s.outBudget
	// The keep-alive outlives the run context: the dispatches whose run
	// events the outbox flushes at stop (out.close, up to its budget, and
	// the records after it) are kept alive until their settle. On the run
	// context it ended before that flush, and a dispatch whose event waited
	// past its AckWait (RUNS electing a leader at a SIGTERM) was
	// redelivered to another executor mid-flush: its target called twice.
	s.waiting = make(map[jetstream.Msg]keepAlive)
	s.progressIDs = make(map[uint64]jetstream.Msg)
	aliveCtx, stopAlive := context.WithCancel(context.WithoutCancel(ctx))
	alive := make(chan struct{})
	go func() {
		defer close(alive)
		s.keepWaitersAlive(aliveCtx)
	}()
	// Registered as soon as the outbox runs: a Start that fails below
	// leaves Stop (which the caller owes a failed Start) its goroutine,
	// and the settler's subscription, to end.
	s.OnStop(func() {
		if s.work != nil {
			<-s.work.Done() // no handler will queue another event
		}
		s.firing.Wait()
		s.out.close()    // store the queued events and settle their dispatches
		s.records.Wait() // their attempt records (each before its settle), released probe claims
		stopAlive()      // the outbox has settled every dispatch it kept
		<-alive
		_ = s.progressSub.Unsubscribe()
		if s.settles != nil {
			s.settles.stop()
		}
		s.client.CloseIdleConnections()
	})
	// Before the callers and the consumer: a NATS-target call and a late
	// slot's read need it from their first request (jsutil.PubWatch).
	s.pubViolations.Install(s.cfg.JS.Conn())
	s.calls = make(chan struct{}, s.cfg.Concurrency)
	s.fire = make(chan *held)
	for range s.cfg.Concurrency {
		s.Go(func() { s.caller(runCtx) })
	}
	if s.settles, err = newSettler(s.cfg.JS.Conn(), s.log, s.cfg.Metrics); err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	if s.maxAckPending > 0 {
		s.Go(func() { s.watchParkRoom(runCtx, cons) })
	}
	cc, err := jsutil.ConsumeWorkers(ctx, s.cfg.JS, streams.StreamDispatch, streams.ConsumerExecutor, s.log,
		jsutil.Workers{
			N:            s.cfg.Concurrency,
			PullFailures: s.cfg.Metrics.PullFailures.WithLabelValues(streams.StreamDispatch),
			PullStalls:   s.cfg.Metrics.PullStalls.WithLabelValues(streams.StreamDispatch),
		},
		func(m jetstream.Msg) { s.handle(runCtx, m) })
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	s.work = cc
	s.Track(cc, s.cfg.JS.Conn())
	s.OnDrained(s.waitInflight)
	return nil
}

// waitInflight gives in-flight calls up to ShutdownGrace to finish before
// Stop cancels them.
func (s *Service) waitInflight() {
	s.releaseHeld()
	done := make(chan struct{})
	go func() { <-s.work.Done(); s.firing.Wait(); close(done) }()
	t := time.NewTimer(s.cfg.ShutdownGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.log.Warn("shutdown grace expired; cancelling in-flight calls (they will be redelivered)", "grace", s.cfg.ShutdownGrace)
	}
}

// MaxDispatchAhead is how far ahead of its scheduledAt a dispatch may
// arrive, on the NATS server's clock (serverClock), which the governor plans
// slots on. The timer publishes at most governor.MaxLead (1s) early, so
// this leaves ample room for the skew of the timer's clock; the executor
// terminates a dispatch due further ahead as malformed.
const MaxDispatchAhead = 5 * time.Minute

// handle processes one dispatch delivery.
func (s *Service) handle(ctx context.Context, m jetstream.Msg) {
	arrived := time.Now() // the delivery's AckWait runs from here
	e, err := events.Decode(m.Headers(), m.Data())
	if err == nil {
		// The subject's token is checked against the data below.
		err = events.CheckType(events.Subject{Family: events.FamilyDispatch, ID: strings.TrimPrefix(m.Subject(), "flyball.dispatch.")}, e)
	}
	if err != nil {
		s.terminate(m, jsutil.MalformedReason(err))
		return
	}
	var d events.Dispatch
	if err := events.DecodeDispatch(e, &d); err != nil {
		s.terminate(m, "malformed dispatch: "+err.Error())
		return
	}
	if !events.ValidToken(d.TaskID) || events.DispatchSubject(d.TaskID) != m.Subject() {
		s.terminate(m, "malformed dispatch: taskId does not match the subject")
		return
	}
	// The dispatch ID is the Idempotency-Key targets see and keys the
	// attempt count in flyball-attempts: one that is not this task's and
	// slot's would pass another dispatch's identity to the target.
	if !events.IsDispatchID(d.DispatchID, d.TaskID, d.ScheduledAt) {
		want := events.DispatchID(d.TaskID, d.ScheduledAt)
		s.terminate(m, fmt.Sprintf("malformed dispatch: dispatchId %q is not <taskId>:<scheduledAt Unix ms> (%q)", capText(d.DispatchID, 80), want))
		return
	}
	// A dispatch due far ahead would be nakked until its slot and, kept in
	// the work queue, hold the task's one DISPATCH slot: every later
	// dispatch of the task would be refused (10077) until then. Ahead, and
	// the wait for the slot below, are on the server's clock, which the
	// slot was planned on: judged on its own, an executor more than 5
	// minutes behind the server terminated every on-time dispatch as
	// malformed, and one less behind held each for as long as it was
	// behind (the task's next dispatch refused meanwhile, and under
	// catchUp "none" the slot then skipped as missed once its next one
	// had passed too).
	//
	// Until the heartbeat has measured the offset (right after a start,
	// when a restart's backlog arrives), the executor's own clock is all
	// it has: a dispatch that looks far ahead on it, or due beyond half
	// the AckWait, is handed back for unmeasuredRecheck, to be judged
	// again on the server's clock, not terminated or nakked until the
	// slot as its own clock has it (an executor 10 minutes behind would
	// lose the slot, or call it 10 minutes late). It is handed back as
	// at shutdown (handBackNak): no call was made, and the mark keeps its
	// redelivery judged as a first one under catchUp "none".
	now, measured := s.serverClock()
	if ahead := d.ScheduledAt.Sub(now); ahead > MaxDispatchAhead {
		if !measured {
			s.handBackNak(m, &d, unmeasuredRecheck)
			return
		}
		s.terminate(m, fmt.Sprintf("malformed dispatch: scheduledAt %s is %s ahead, more than %s", d.ScheduledAt.Format(time.RFC3339), ahead.Round(time.Second), MaxDispatchAhead))
		return
	}
	md, err := m.Metadata()
	if err != nil {
		// No consumer leader to confirm a term: its reply subject is not
		// one of JetStream's.
		jsutil.Terminate(m, "not a JetStream message: "+err.Error(), s.cfg.Metrics, s.log)
		return
	}
	if wait := d.ScheduledAt.Sub(now); wait > 0 {
		if !measured && wait > s.cfg.AckWait/2 {
			s.handBackNak(m, &d, unmeasuredRecheck)
			return
		}
		s.hold(ctx, m, md, &d, arrived, wait)
		return
	}
	// Kept alive from here to its settle (waitBegin), through the reads
	// before the call too (run).
	s.waitBegin(m, arrived)
	// Whether the slot was missed is judged on the server's clock too,
	// which the governor planned it on (serverClock): an executor whose
	// clock runs ahead saw every on-time slot of a 1 s task as past its
	// next one, and skipped them all.
	if now.Sub(d.ScheduledAt) >= events.MinInterval && s.missedUnderNone(ctx, m, md, &d, now) {
		return
	}
	if !s.acquireCall(ctx, m, &d, arrived) {
		return
	}
	defer s.releaseCall()
	s.run(ctx, m, md, &d, arrived, false, nil, 0)
}

// terminate ends a malformed dispatch, which can never run, with reason in
// the MSG_TERMINATED advisory, and counts and logs it once (jsutil.Reject).
// The term is a confirmed settle, retried until the consumer leader
// answers, as every other (ack.go): a plain term lost in a leader
// election left the dispatch in DISPATCH, holding its task's one slot,
// until AckWait, and its redelivery was counted and logged again.
func (s *Service) terminate(m jetstream.Msg, reason string) {
	s.settle(m, "term", termBody(jsutil.Reject(m.Subject(), reason, s.cfg.Metrics, s.log)))
}

// run checks the task's spec, pause and breaker at the moment of the call,
// then calls it. arrived is when the delivery reached this executor. fresh
// reads the spec from the bucket, not the view: a dispatch woken because
// its breaker record was removed with its deleted task can get here before
// the view of flyball-tasks has the delete, and would call the old target
// (one woken by a change of its spec, wakeTask, is read again too).
// slot is a host slot the dispatch already holds (held.slot), or nil.
// fails is how many tries of this delivery in a row met an
// infrastructure failure (retryInfra), 0 on its first.
func (s *Service) run(ctx context.Context, m jetstream.Msg, md *jetstream.MsgMetadata, d *events.Dispatch, arrived time.Time, fresh bool, slot *hostSlots, fails int) {
	// Kept alive from here, before the first read, until its settle: the
	// reads before the call (spec, schedule, pause, breaker, attempt
	// record, ranAlready's reads of RUNS and DEADLETTER, the probe claim)
	// may each take nats.go's 5 s while NATS is slow or electing, and
	// together outlast the AckWait. Kept alive only from the call, such a
	// dispatch was redelivered to another executor while this one went
	// on to call its target: two calls. (acquireCall, which may end a
	// keep-alive, runs before this; every path from here settles m, parks
	// it, or holds it for a host slot, all kept alive.)
	s.waitBegin(m, arrived)
	get := s.specs.Get
	if fresh {
		get = s.specs.Read
	}
	t, _, err := get(ctx, d.TaskID)
	if err == nil {
		var other string
		if t, other, err = s.ofTask(ctx, t, d); other != "" {
			s.log.Info("dispatch of a deleted task: skipping the run", "task", d.TaskID, "dispatch", d.DispatchID, "reason", other)
			s.skip(ctx, m, d, skipRecreated, other)
			return
		}
	}
	switch {
	case jsutil.IsKeyMissing(err):
		s.skip(ctx, m, d, skipDeleted, "task deleted")
		return
	case errors.Is(err, errInvalidSpec):
		// Skipped, not terminated or retried: a retry reads the same
		// revision, and a term leaves only an advisory while the sweeper
		// re-dispatches the slot that never completed. run.skipped, with
		// the validation error as its reason, is in the task's run
		// history, counted in flyball_runs_total{result="skipped"}, and
		// lets the governor schedule the next slot, which runs once the
		// spec is fixed.
		s.log.Warn("stored spec does not validate: skipping the run", "task", d.TaskID, "err", err)
		s.skip(ctx, m, d, skipInvalidSpec, capText(err.Error(), 1000))
		return
	case err != nil:
		s.retryInfra(ctx, m, md, d, arrived, fails, nil, "spec not read", err)
		return
	}
	p, err := s.pauseOf(ctx, d.TaskID)
	if err != nil {
		// Not read is not "not paused": a paused task's target was
		// called while flyball-schedules was electing a leader.
		s.retryInfra(ctx, m, md, d, arrived, fails, nil, "schedule not read", err)
		return
	}
	if governor.PausedAt(p.Paused, p.PausedUntil, d.ScheduledAt) {
		s.skip(ctx, m, d, skipPaused, events.SkipReasonPaused)
		return
	}
	g := s.breakerGate(ctx, t.breakerKey, d)
	if g.wait > 0 {
		s.deferCall(ctx, m, md, d, arrived, t.breakerKey, g.wait, g.retryAt, "breaker open")
		return
	}
	s.execute(ctx, m, md, t, d, arrived, g, slot, fails)
}

// hold keeps a dispatch that arrived ahead of its slot (the timer publishes
// Lead early) for wait, until the server's clock reaches its scheduledAt
// (handle), without occupying a worker, then runs it under the same call
// limit. One due further ahead than half the AckWait goes back to the
// stream until then.
func (s *Service) hold(ctx context.Context, m jetstream.Msg, md *jetstream.MsgMetadata, d *events.Dispatch, arrived time.Time, wait time.Duration) {
	if wait > s.cfg.AckWait/2 {
		s.nak(m, wait, nil)
		return
	}
	s.keep(ctx, &held{m: m, md: md, d: d, arrived: arrived, until: time.Now().Add(wait)}, wait)
}

// park keeps a dispatch its breaker defers (open until retryAt, or
// half-open while another call probes) for wait, kept alive meanwhile
// (waitBegin), then runs it again from the top: spec, pause and breaker
// are read again, as for a held dispatch. A deferral thus uses none of
// the consumer's MaxDeliver (50) deliveries. It was a NakWithDelay, one
// delivery each: a dispatch waiting out a slow probe (a re-check every
// 0.5 s or more) or a long outage of its host (an open period per
// re-open, doubling up to breaker.maxOpenDelay) used them all up and was
// dead-lettered as max-deliveries without ever calling its target.
//
// A parked dispatch is delivered and unacked, so it counts toward the
// DISPATCH consumer's max_ack_pending (20,000), across all executors, as
// a NakWithDelay would too (the server keeps a nakked message pending
// until its redelivery). A breaker open over 20,000 pending runs (a host
// breaker, a datacenter outage) left no room for any other dispatch: every
// task stopped until the breakers closed. So a dispatch waiting for an
// open breaker's retryAt (not for a probe: that ends with the probe's
// call) longer than half an AckWait is parked only while there is room
// for it (parkRefused); otherwise it is reported run.skipped and acked
// (skipParked), and the governor plans the task's next slot, as after
// any skip: no earlier than retryAt when the breaker is the task's own
// (its breaker hold).
func (s *Service) park(ctx context.Context, m jetstream.Msg, md *jetstream.MsgMetadata, d *events.Dispatch, arrived time.Time, key string, wait time.Duration, retryAt time.Time) {
	h := &held{m: m, md: md, d: d, arrived: arrived, parked: true, key: key, retryAt: retryAt, until: time.Now().Add(wait)}
	if full := s.keep(ctx, h, wait); full != "" {
		s.skipParked(ctx, h, full)
	}
}

// retryInfra keeps a dispatch whose try met a failure of flyball's own
// infrastructure (a read or write of a KV bucket: its spec, its attempt
// record, its breaker's probe claim, its hand-back mark; a run event the
// outbox could not get confirmed stored) and tries it again from the top
// (run; with ev, that event published again first: republish) after a pause that
// grows with fails, the number of such failures in a row before this one:
// from infraRetryFirst, doubling up to infraRetryMax. Like a parked
// dispatch, it is kept alive meanwhile and uses none of the consumer's
// deliveries, and a shutdown hands it back at once (keep, releaseHeld). It
// was nakked for 1 s, one delivery each: an outage of a bucket longer
// than MaxDeliver seconds (an R1 bucket on a restarting node) used up
// every pending retry, and every dispatch handed back at shutdown, without
// calling its target again, and each was dead-lettered as max-deliveries.
// It holds a timer and no worker, caller or call slot, at most one per
// dispatch in hand (MaxAckPending).
func (s *Service) retryInfra(ctx context.Context, m jetstream.Msg, md *jetstream.MsgMetadata, d *events.Dispatch, arrived time.Time, fails int, ev *unconfirmedRun, what string, err error) {
	h := &held{m: m, md: md, d: d, arrived: arrived, retry: fails + 1, event: ev}
	if ctx.Err() != nil {
		s.handBackHeld(h, handBackFloor) // handed back at shutdown
		return
	}
	wait := min(s.infraRetryFirst<<min(fails, 8), s.infraRetryMax)
	s.log.Warn("flyball's own state not read or written; trying the dispatch again in place", "step", what,
		"task", d.TaskID, "dispatch", d.DispatchID, "try", fails+1, "in", wait, "err", err)
	h.until = time.Now().Add(wait)
	s.keep(ctx, h, wait)
}

// unpark counts the parked dispatch h out. The caller holds heldMu.
func (s *Service) unpark(h *held) {
	s.nParked--
	if s.parked[h.key]--; s.parked[h.key] <= 0 {
		delete(s.parked, h.key)
	}
	if hs := slices.DeleteFunc(s.byTask[h.d.TaskID], func(o *held) bool { return o == h }); len(hs) > 0 {
		s.byTask[h.d.TaskID] = hs
	} else {
		delete(s.byTask, h.d.TaskID)
	}
}

// wakeDeferred checks the dispatches deferred by breaker key again now:
// its record changed (closed, half-open, re-opened, or removed with its
// deleted task). Waiting for retryAt, up to breaker.maxOpenDelay, held a
// closed breaker's calls back, and a deleted task's dispatch kept its
// DISPATCH subject from the task created again under its ID. A dispatch
// still deferred is parked again with a fresh wait.
func (s *Service) wakeDeferred(key string) {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	if s.parked[key] == 0 {
		return // the common case: every failure writes its breaker's record
	}
	for h := range s.held {
		if h.parked && h.key == key {
			h.wake()
		}
	}
}

// wakeTask checks the dispatches of task id parked by their breaker again
// now: its spec changed or was deleted. They run again from the top, on
// the spec as it is now: one whose spec keys its breaker otherwise (a
// switch of breaker.scope, a host-scoped task moved to another host)
// meets that breaker, and one of a deleted task is skipped. Woken only by
// the old key's record, they waited for its retryAt, up to
// breaker.maxOpenDelay, while the governor had lifted its hold, holding
// the task's one DISPATCH subject (and a deleted task's, the task created
// again under its ID) meanwhile.
func (s *Service) wakeTask(id string) {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	for _, h := range s.byTask[id] { // none, the common case
		h.wake()
	}
}

// wake runs the parked h once, now, unless its timer has fired already.
// The caller holds heldMu.
func (h *held) wake() {
	if h.t.Stop() {
		h.woken = true
		h.t.Reset(0) // stopped before it ran: it runs once, now
	}
}

// keep holds h for wait, then hands it to a caller (fireHeld). Once
// shutdown has begun, it is handed back instead (handBack). A dispatch
// parked for an open breaker that finds no room (parkRefused) is not
// kept: keep returns why, and the caller settles it.
func (s *Service) keep(ctx context.Context, h *held, wait time.Duration) (full string) {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	if s.stopped() {
		s.handBackHeld(h, h.handBack())
		return ""
	}
	if full := s.parkRefused(h, wait); full != "" {
		return full
	}
	s.held[h] = struct{}{}
	if h.parked {
		s.parked[h.key]++
		s.byTask[h.d.TaskID] = append(s.byTask[h.d.TaskID], h)
		s.nParked++
	}
	if h.retry > 0 {
		s.retrying++
	}
	if h.deferred() {
		s.waitBegin(h.m, h.arrived)
		h.kept = true
	}
	s.heldChanged()
	s.firing.Add(1)
	h.t = time.AfterFunc(wait, func() { s.fireHeld(ctx, h) })
	return ""
}

// heldChanged updates the gauges of held and parked dispatches. The
// caller holds heldMu.
func (s *Service) heldChanged() {
	parked := s.retrying + s.nParked
	s.cfg.Metrics.DispatchHeld.Set(float64(len(s.held) - parked))
	s.cfg.Metrics.DispatchDeferred.Set(float64(parked))
}

// held is a dispatch waiting for its slot, or deferred by its breaker
// (parked).
type held struct {
	m       jetstream.Msg
	md      *jetstream.MsgMetadata
	d       *events.Dispatch
	arrived time.Time
	t       *time.Timer
	parked  bool   // deferred by its breaker (park)
	key     string // parked: the breaker key (wakeDeferred)
	woken   bool   // parked: woken early by a change of its breaker record or its spec
	// retryAt: parked for an open breaker, its retryAt; zero for one
	// waiting for another call's probe.
	retryAt time.Time
	// until is when it is checked again (parked or retry), or when its
	// slot comes (held for it: hold), on this executor's clock; zero for
	// one due already (waitForHost).
	until time.Time
	// retry: kept after an infrastructure failure (retryInfra), the
	// number of such failures in a row; 0 for any other.
	retry int
	// event: retry of a run event the outbox could not get confirmed
	// stored (republish), published again before, and instead of, the
	// run.
	event *unconfirmedRun
	// kept: m is kept alive (waitBegin) until the caller that takes it
	// ends that (callHeld), as ending it here could undo a park of the
	// same message by that caller.
	kept bool
	// host: it was due while this host was at PerHost (waitForHost), and
	// waits for one of its slots (fireHeld) before it takes a caller;
	// slot is that slot, released by the caller after the call.
	host string
	slot *hostSlots
}

// deferred reports whether h is kept alive while it waits (waitBegin):
// parked by its breaker, or kept after an infrastructure failure.
func (h *held) deferred() bool { return h.parked || h.retry > 0 }

// unheld counts h out of the parked and retrying dispatches. The caller
// holds heldMu.
func (s *Service) unheld(h *held) {
	if h.parked {
		s.unpark(h)
	}
	if h.retry > 0 {
		s.retrying--
	}
}

// handBackLead and handBackFloor shape the nak that hands a held dispatch
// back at shutdown.
const (
	// handBackLead: it comes back this long before it is due, so that
	// another executor takes it in and runs it on time.
	handBackLead = 250 * time.Millisecond
	// handBackFloor: never at once. The stopping executor's last pull may
	// still be open on the server (nats.go unsubscribes it a moment after
	// the drain), and a message redelivered into it is lost there until
	// AckWait: a held dispatch then ran an AckWait late
	// (TestHeldDispatchesAreHandedBackAtShutdown failed 3 times in 24 under
	// load).
	handBackFloor = 250 * time.Millisecond
)

// handBack is the delay of the nak that hands h back at shutdown: a
// moment before its slot for a dispatch held for its slot, before its
// next check for a parked one, and never less than handBackFloor.
// Its slot is until, not scheduledAt: the wait for it is on the server's
// clock (handle).
func (h *held) handBack() time.Duration {
	return max(time.Until(h.until)-handBackLead, handBackFloor)
}

// fireHeld hands a held dispatch whose slot has come to one of the
// callers. It runs on the timer's goroutine, which is new for every
// dispatch: running the call there grew a fresh stack through the HTTP
// client every time, while the callers live as long as the service and
// keep their stacks (until a GC shrinks an idle one). In two W1c profiles
// each, runtime.newstack fell from 3.1-3.4% to 1.8-2.0% of the samples.
func (s *Service) fireHeld(ctx context.Context, h *held) {
	s.heldMu.Lock()
	delete(s.held, h) // releaseHeld removes only the timers it stopped
	s.unheld(h)
	s.heldChanged()
	s.heldMu.Unlock()
	if h.deferred() {
		// Its AckWait runs again from here, for the checks and the call
		// ahead (waitBegin counts from arrived); it stays kept alive
		// until a caller takes it.
		_ = h.m.InProgress()
		h.arrived = time.Now()
		s.waitBegin(h.m, h.arrived)
	}
	if h.host != "" {
		// Here, on its own goroutine, it holds no caller and no call
		// slot while its host is busy (acquireHost keeps it alive).
		if h.slot = s.acquireHost(ctx, h.m, h.arrived, h.host); h.slot == nil {
			s.handBackHeld(h, handBackFloor) // handed back at shutdown (handBack)
			s.firing.Done()
			return
		}
	}
	select {
	case s.fire <- h:
		return
	default:
	}
	// Every caller is busy with a call: as long as the wait for a call
	// slot, so h is kept alive meanwhile.
	if !h.kept {
		s.waitBegin(h.m, h.arrived)
		h.kept = true
	}
	select {
	case s.fire <- h:
		return
	case <-ctx.Done():
	case <-s.stopping: // not left to take a caller during the grace
	}
	s.waitEnd(h.m)
	s.releaseHost(h.slot)
	s.handBackHeld(h, handBackFloor) // handed back at shutdown (handBack)
	s.firing.Done()
}

// caller runs held dispatches as their slots come, under the same call
// limit as every other call; Start runs Concurrency of them.
func (s *Service) caller(ctx context.Context) {
	for {
		select {
		case h := <-s.fire:
			s.callHeld(ctx, h)
		case <-ctx.Done():
			return
		}
	}
}

func (s *Service) callHeld(ctx context.Context, h *held) {
	defer s.firing.Done()
	defer s.releaseHost(h.slot)
	if h.event != nil {
		// Still kept alive: the event's own settle ends that.
		if s.republish(ctx, h) {
			return
		}
	}
	if h.kept {
		s.waitEnd(h.m)
	}
	if !s.acquireCall(ctx, h.m, h.d, h.arrived) {
		return // handed back at shutdown
	}
	defer s.releaseCall()
	s.run(ctx, h.m, h.md, h.d, h.arrived, h.woken, h.slot, h.retry)
}

// stopped reports whether shutdown has begun (releaseHeld closed
// stopping): new arrivals are handed back at once.
func (s *Service) stopped() bool {
	select {
	case <-s.stopping:
		return true
	default:
		return false
	}
}

// releaseHeld hands every dispatch still waiting for its slot, or
// deferred by its breaker, back to the stream at shutdown (handBack), so
// another executor runs it on time.
func (s *Service) releaseHeld() {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	if !s.stopped() {
		close(s.stopping) // under heldMu: keep sees it, or its dispatch is in held
	}
	for h := range s.held {
		if h.t.Stop() {
			delete(s.held, h)
			s.unheld(h)
			if h.kept {
				s.waitEnd(h.m)
			}
			s.firing.Done()
			s.handBackHeld(h, h.handBack())
		}
	}
	s.heldChanged()
}

// acquireCall takes one of the Concurrency call slots, or hands m (of d)
// back if the service stops first: as soon as shutdown begins
// (releaseHeld). It waited for the run context, which ends only after
// the grace: a call that ended within the grace freed its slot to a
// waiting dispatch, which called its target while the executor stopped,
// and a call cut at the end of the grace was called again elsewhere.
// While it waits, m is kept alive (waitBegin).
func (s *Service) acquireCall(ctx context.Context, m jetstream.Msg, d *events.Dispatch, arrived time.Time) bool {
	select {
	case s.calls <- struct{}{}:
		return true
	default:
	}
	s.waitBegin(m, arrived)
	defer s.waitEnd(m)
	select {
	case s.calls <- struct{}{}:
		return true
	case <-ctx.Done():
		s.handBackNak(m, d, 0)
		return false
	case <-s.stopping:
		// Not at once: this executor's last pull may still be open
		// (handBackFloor).
		s.handBackNak(m, d, handBackFloor)
		return false
	}
}

// releaseCall frees a call slot; the last call to end wakes the outbox,
// so its run events go out without the linger. Of calls ending together,
// at least the last to look sees none left: a wake is never missed.
func (s *Service) releaseCall() {
	<-s.calls
	if len(s.calls) == 0 {
		s.out.wake()
	}
}

// task is a stored spec with what the executor derives from it once per
// spec revision rather than once per run.
type task struct {
	spec *events.TaskSpec
	// createdAt is the task's, stored with its spec (governor.StoredSpec),
	// or zero.
	createdAt  time.Time
	breakerKey string
	host       string        // the HTTP target's host, for the per-host limit
	hold       time.Duration // how long its run events may wait in the outbox (settleHold)
	// record is what every run record of the task says was sent, its
	// secrets redacted; runs of one spec revision share it, read-only.
	record *events.RequestRecord
}

// errInvalidSpec marks a stored spec the executor cannot run: it does not
// decode, or does not validate. Decoding is per spec revision, so this is
// permanent until the spec is rewritten.
var errInvalidSpec = errors.New("invalid stored spec")

// decodeTask decodes and validates a flyball-tasks value. The governor
// validates every spec it stores, but a value written by hand or by an
// older or newer governor may not pass, and the call path relies on it
// (a spec without a target would dereference nil).
//
// It does not use kvcache.DecodeStoredSpec, which normalizes as it
// decodes: the specs it accepts are the same, but the reasons given in
// run.skipped and the log are not. Normalize is for a spec that
// validated: on one with retry.initialDelay (or breaker.openDelay) over
// 24h and no maxDelay (maxOpenDelay), it defaults that to the same value,
// and validation then also blames a field the author never wrote
// (TestStoredSpecReasonNamesOnlyWhatItHolds). An undecodable value would
// also read "stored spec <id> is unreadable" instead of the JSON error.
func (s *Service) decodeTask(_ string, raw []byte) (*task, error) {
	var spec events.TaskSpec
	stored := governor.StoredSpec{TaskSpec: &spec}
	if err := json.Unmarshal(raw, &stored); err != nil {
		return nil, fmt.Errorf("%w: %w", errInvalidSpec, err)
	}
	// The rules for new specs only are left out: a task stored before one
	// was added runs as it did (ValidateStored).
	if err := spec.ValidateStored(); err != nil {
		return nil, fmt.Errorf("%w: %w", errInvalidSpec, err)
	}
	spec.Normalize() // as kvcache.DecodeSpec: cached, shared, read-only
	t := &task{spec: &spec, createdAt: stored.CreatedAt, breakerKey: BreakerKey(&spec), hold: settleHold(&spec)}
	if h := spec.Target.HTTP; h != nil {
		if u, err := url.Parse(h.URL); err == nil {
			t.host = canonicalHost(u)
		}
		t.record = &events.RequestRecord{
			Method: h.Method, URL: redactURL(h.URL, s.cfg.RedactHeaders), Headers: redactHeaders(h.Headers, s.cfg.RedactHeaders),
		}
	}
	if n := spec.Target.NATS; n != nil {
		t.record = &events.RequestRecord{Subject: n.Subject}
	}
	return t, nil
}

// settleHold is how long a task's run event may wait in the outbox for
// company while other calls are in flight: an eighth of the tightest gap
// its own cadence can take (the low end of governor.AdaptiveRange:
// bounds.min, or a quarter of the baseline, at least 1s), between
// outboxLinger and outboxMaxHold. The dispatch stays pending, and
// DISPATCH holds one pending run per task, so the hold must stay well
// inside the gap to the next run, which the timer publishes up to a
// quarter of that gap early (timer.Config.Lead): a 1s task holds 125ms, a
// 10s one 312ms, a 60s one a second. A cron task holds outboxLinger.
func settleHold(spec *events.TaskSpec) time.Duration {
	if spec.Schedule.Interval <= 0 {
		return outboxLinger
	}
	lo, _ := governor.AdaptiveRange(spec)
	return min(max(lo/8, outboxLinger), outboxMaxHold)
}

// holdOf is how long the run event of d may wait in the outbox: its
// task's settleHold when d is a slot of the task's own cadence
// (governor.Source.Cadence), and outboxLinger when a hint, a catch-up, a
// retry, a requeue or a cron expression chose it, as the next run may then
// follow closely. (The first run after an interval hint that tightens the
// cadence can still find its predecessor's dispatch pending for up to the
// old hold: the timer retries it until it is stored, so that run is late,
// never lost.)
func holdOf(t *task, d *events.Dispatch) time.Duration {
	if governor.Source(d.Source).Cadence() {
		return t.hold
	}
	return outboxLinger
}

// scheduleView is the part of a stored schedule the executor needs: its
// pause (pauseOf) and the createdAt of its task (ofTask).
type scheduleView struct {
	Paused      bool      `json:"paused"`
	PausedUntil time.Time `json:"pausedUntil"`
	CreatedAt   time.Time `json:"createdAt"`
	NextRunAt   time.Time `json:"nextRunAt"`
	// LastScheduledAt is the slot before NextRunAt and GridStep the step
	// of the grid NextRunAt is on, when it is one (governor.State's
	// fields): governor.MissedUnderNone takes both as stored, for the gap
	// in force (missedUnderNone).
	LastScheduledAt time.Time     `json:"lastScheduledAt"`
	GridStep        time.Duration `json:"gridStep"`
}

// LateRedispatch is how long after its slot a dispatch must be published
// for ranAlready to look for the slot's outcome. DISPATCH drops a second
// publish of a slot within its 2-minute duplicate window, and the timer
// publishes a slot at most its lead (1 s) ahead, so a second dispatch of
// a slot that gets stored was fired more than 2 minutes less a second
// after it; a minute leaves room for clocks.
//
// How late a dispatch is (lateBy) is the later of its firedAt and the
// time DISPATCH stored it, after its slot. The duplicate window is judged
// on the server's clock, from a first publish another timer made on its
// own clock: by firedAt alone, two timer replicas about a minute apart
// (one ahead of the server, one behind) made a stored second dispatch
// look on time. With the server's stamp, only one host's offset from the
// server matters. Looking when the dispatch is not a second one costs a
// read, never a call: it is skipped only if its slot's outcome is stored.
const LateRedispatch = time.Minute

// lateBy is how long after its slot d was fired or stored (md), whichever
// is later (LateRedispatch).
func lateBy(md *jetstream.MsgMetadata, d *events.Dispatch) time.Duration {
	at := d.FiredAt
	if md.Timestamp.After(at) {
		at = md.Timestamp
	}
	return at.Sub(d.ScheduledAt)
}

// ranAlready skips attempt 1 of a dispatch fired or stored long after its
// slot (LateRedispatch, lateBy) when that slot already has its final outcome on RUNS
// or its dead letter on DEADLETTER. Such a dispatch is the slot published
// again: by a timer that started (a restart, a new replica) while the
// governor had not applied the slot's outcome, so the schedule still
// named it, or by the sweeper for a zombie. Past DISPATCH's duplicate
// window it is stored as a new message and would run the slot a second
// time. It is reported as run.skipped, not just acked, so the governor
// advances the schedule from it even if it ignores the stored outcome.
// Only the slot's own outcome counts (slotdone.SlotOnly): a later slot
// can have run first (a run-now planned ahead of a slot held by a slow
// call, then refused by DISPATCH until that call ended). A lost-write
// repair (events.ReasonLostWrite) is checked as the sweeper judged it
// (slotdone.SlotOrLater): it dispatches a slot only when the governor has
// applied the outcome of that slot or of a later one, and no dispatch of
// the task is pending, so a later slot's outcome covers it (a schedule
// set back by hand or restored while later slots ran); checked for its
// own outcome only, it called the target again. A redelivery is
// checked too (a nak on a read error, a hand-back at shutdown): attempt 1
// has no failure recorded, so a stored outcome of its slot is this
// dispatch's own, whose ack was lost. A dispatch fired on time, a later
// attempt (counted in flyball-attempts) and every read error (logged) run
// as before: at least once. It reports whether it skipped.
func (s *Service) ranAlready(ctx context.Context, m jetstream.Msg, md *jetstream.MsgMetadata, d *events.Dispatch) bool {
	if lateBy(md, d) < LateRedispatch {
		return false
	}
	match := slotdone.SlotOnly
	if d.Reason == events.ReasonLostWrite {
		match = slotdone.SlotOrLater
	}
	// Watched: a direct get the executor's user may not make ends the
	// read at once, naming it, rather than holding the call for the
	// JetStream timeout.
	w := slotdone.Watched{Refusals: &s.pubViolations, JS: s.cfg.JS, Service: "executor"}
	done, err := w.Done(ctx, s.runs, s.dead, d.TaskID, d.ScheduledAt, d.TaskCreatedAt, match)
	if err != nil {
		s.log.Warn("could not read whether a slot dispatched again long after it fell due already ran; calling it", "dispatch", d.DispatchID, "err", err)
		return false
	}
	if !done {
		return false
	}
	what := "the outcome of this slot is stored"
	if match == slotdone.SlotOrLater {
		what = "the outcome of this slot or of a later one is stored, applied by the governor (lost-write repair)"
	}
	reason := events.SkipReasonAlreadyRan + what + "; it was dispatched again at " + d.FiredAt.UTC().Format(time.RFC3339Nano) +
		" (stored at " + md.Timestamp.UTC().Format(time.RFC3339Nano) + "), after the duplicate window, while the governor was behind"
	s.log.Warn("dispatch of a slot that already ran: skipping it", "dispatch", d.DispatchID, "firedAt", d.FiredAt, "storedAt", md.Timestamp)
	s.skip(ctx, m, d, skipAlreadyRan, reason)
	return true
}

// ofTask returns the spec a dispatch calls, or why it must call none:
// d is a slot of a task deleted since and created again under the same
// ID (the timer published it, up to its lead ahead, before the delete),
// whose namesake's target it must not call. t is the spec the view
// holds. The createdAt stored with it (governor.StoredSpec) filters at no
// KV cost; when it differs from the dispatch's, the schedule, which the
// governor writes with the same time, decides: it names another task
// (skip), none because the task is being deleted or created (skip), or
// the dispatch's, when the view still holds the deleted task's spec (read
// it again). A dispatch or spec from flyball before 2026-11-27 names no
// createdAt, and calls as before.
//
// One dispatch of another task is run, as the new task's: the slot the
// new task's schedule waits for (adopt). A cron task created again within
// the lead before a slot the old one had dispatched gets that slot as its
// first, and its own dispatch has the old one's Nats-Msg-Id, which
// DISPATCH drops as a duplicate: skipped, the slot would run only when
// the sweeper re-nudged it, minutes later. d then names the new task.
func (s *Service) ofTask(ctx context.Context, t *task, d *events.Dispatch) (*task, string, error) {
	if !governor.OtherCreatedAt(d.TaskCreatedAt, t.createdAt) {
		return t, "", nil
	}
	var p scheduleView
	ent, err := s.schedules.Get(ctx, d.TaskID)
	if err != nil && !jsutil.IsKeyMissing(err) {
		return nil, "", fmt.Errorf("read schedule %s: %w", d.TaskID, err)
	}
	if ent != nil {
		if json.Unmarshal(ent.Value(), &p) != nil || p.CreatedAt.IsZero() {
			return t, "", nil //nolint:nilerr // an unreadable schedule tells nothing: the governor rebuilds it
		}
		if p.CreatedAt.Equal(d.TaskCreatedAt) {
			fresh, _, err := s.specs.Read(ctx, d.TaskID)
			return fresh, "", err
		}
		if fresh, ok, err := s.adopt(ctx, d, p); ok || err != nil {
			return fresh, "", err
		}
	}
	now := "is being deleted or created"
	if !p.CreatedAt.IsZero() {
		now = "was created at " + p.CreatedAt.UTC().Format(time.RFC3339Nano)
	}
	return nil, "task deleted: this slot is of the task created at " + d.TaskCreatedAt.UTC().Format(time.RFC3339Nano) +
		"; the task of this ID now " + now, nil
}

// adopt runs d, a slot of a deleted task, as the slot of the task created
// since under its ID when that task's schedule waits for the same slot
// (see ofTask): it returns the new task's spec, and d names the new task
// from then on, so the outcome counts for it. The spec must name the
// schedule's createdAt; one that does not is of a task still being
// created or deleted again, and the dispatch is skipped as before.
func (s *Service) adopt(ctx context.Context, d *events.Dispatch, p scheduleView) (*task, bool, error) {
	if !p.NextRunAt.Equal(d.ScheduledAt) || !p.CreatedAt.After(d.TaskCreatedAt) {
		return nil, false, nil
	}
	fresh, _, err := s.specs.Read(ctx, d.TaskID)
	if err != nil {
		if jsutil.IsKeyMissing(err) {
			return nil, false, nil
		}
		return nil, false, err
	}
	if !fresh.createdAt.Equal(p.CreatedAt) {
		return nil, false, nil
	}
	s.log.Info("dispatch of a deleted task is the first slot of the task created since: running it as that task's",
		"task", d.TaskID, "dispatch", d.DispatchID, "dispatchedFor", d.TaskCreatedAt, "runsFor", p.CreatedAt)
	d.TaskCreatedAt = p.CreatedAt
	return fresh, true, nil
}

// pauseOf reports the task's pause. Only a task with a key in
// flyball-pauses can be paused (the governor writes it before the paused
// schedule), and for such a task, or while that view is loading, the
// schedule decides: a hint alone never skips a run. A task with no
// schedule, or one that does not decode, is not paused (deletion is
// checked on the spec; the governor rebuilds a corrupt schedule). A
// schedule that could not be read is an error: read as not paused, a
// paused task's target was called while flyball-schedules was electing
// a leader or a read timed out.
func (s *Service) pauseOf(ctx context.Context, id string) (scheduleView, error) {
	if r := s.pauses.Lookup(id); r.Known && !r.Found {
		return scheduleView{}, nil
	}
	return s.readSchedule(ctx, id)
}

// scheduleOf reads the task's schedule; one missing or unreadable is the
// zero view.
func (s *Service) scheduleOf(ctx context.Context, id string) scheduleView {
	p, _ := s.readSchedule(ctx, id)
	return p
}

// readSchedule reads the task's schedule. One missing, or whose value
// does not decode, is the zero view; a failed read is an error.
func (s *Service) readSchedule(ctx context.Context, id string) (scheduleView, error) {
	ent, err := s.schedules.Get(ctx, id)
	if err != nil {
		if jsutil.IsKeyMissing(err) {
			err = nil // no schedule: not paused
		}
		return scheduleView{}, err
	}
	var p scheduleView
	if json.Unmarshal(ent.Value(), &p) != nil {
		p = scheduleView{} // corrupt: not paused (the governor rebuilds it)
	}
	return p, nil
}

// HostScoped reports whether spec, a flyball-tasks value, keys its
// breaker by host (BreakerKey): the task's own record is then no
// breaker's, and nothing writes it again. A value that does not decode is
// not.
func HostScoped(spec []byte) bool {
	var t events.TaskSpec
	return json.Unmarshal(spec, &t) == nil && strings.HasPrefix(BreakerKey(&t), events.HostKeyPrefix)
}

// BreakerKey is the flyball-breakers key for a task: its ID, or with scope
// "host" the key of the target host (hostKey: host_api_example_com, one
// key per host, as KV keys are subject tokens).
// The host is canonicalHost's, as for the per-host call limit: one host
// spelled https://API.example.com and https://api.example.com:443 is one
// breaker (the raw URL host made three, and records under those
// spellings are orphans the sweeper deletes once idle), and so is
// https://bücher.example with https://xn--bcher-kva.example
// (host_xn--bcher-kva_example; before, host_b__cher_example, which
// bächer.example shared).
func BreakerKey(spec *events.TaskSpec) string {
	if spec.Breaker != nil && spec.Breaker.Scope == "host" && spec.Target.HTTP != nil {
		if u, err := url.Parse(spec.Target.HTTP.URL); err == nil && u.Hostname() != "" {
			return hostKey(canonicalHost(u))
		}
	}
	return spec.ID
}

// hostKey is the breaker key of host, a canonicalHost: one key per host,
// at most events.MaxIDLength characters of a subject token, so that no
// task owner can name a host whose failures open another host's breaker.
//
//   - A name of only [a-z0-9.-] is host_ and the name with '_' for '.':
//     api.example.com is host_api_example_com, xn--bcher-kva.example is
//     host_xn--bcher-kva_example. A port other than the scheme's default
//     adds _P and its digits: api.example.com:8443 is
//     host_api_example_com_P8443.
//   - Any other host (one with '_' or another character outside
//     [a-z0-9.-], an IPv6 literal, a name IDNA refuses, which stays in
//     Unicode) and any key longer than events.MaxIDLength is hashed: host_,
//     the host's first characters with '_' for each one outside a token's,
//     then -H and 16 hex digits of the host's SHA-256. a_b.example.com is
//     host_a_b_example_com-H<16 hex>.
//
// A canonical host's name is lower-case (an IPv6 zone keeps its case,
// but a host with one is hashed), so the upper-case P and H of a plain
// key never come from a name: a plain key cannot be another host's with
// a port, nor a hashed one. Before, each character outside a token's became
// '_' and a hash was "-<16 hex>": a_b.example.com and a.b.example.com,
// a.b:8080 and a.b.8080 shared a key, and so did a host named after
// another's hashed key.
func hostKey(host string) string {
	name, port, hasPort := host, "", false
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		name, port, hasPort = host[:i], host[i+1:], true
	}
	if plainHostName(name) && (!hasPort || port != "" && strings.Trim(port, "0123456789") == "") {
		key := events.HostKeyPrefix + strings.ReplaceAll(name, ".", "_")
		if hasPort {
			key += "_P" + port
		}
		if len(key) <= events.MaxIDLength {
			return key
		}
	}
	sum := sha256.Sum256([]byte(host))
	readable := events.SanitizeToken(host)
	readable = readable[:min(len(readable), events.MaxIDLength-len(events.HostKeyPrefix)-len("-H")-16)]
	return events.HostKeyPrefix + readable + "-H" + hex.EncodeToString(sum[:8])
}

// plainHostName reports whether name is non-empty and only of
// [a-z0-9.-]: the names whose key is host_ and the name, '_' for '.'.
func plainHostName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

// BreakerRecord is the value stored in KV flyball-breakers.
type BreakerRecord struct {
	Key       string              `json:"key"`
	State     events.BreakerState `json:"state"`
	Failures  int                 `json:"failures"`
	OpenDelay events.Duration     `json:"openDelay,omitempty"`
	RetryAt   time.Time           `json:"retryAt,omitzero"`
	UpdatedAt time.Time           `json:"updatedAt"`
	// TaskCreatedAt is the createdAt of the task whose outcomes a
	// task-scoped record counts (events.Run.TaskCreatedAt); zero for a
	// host key, and in a record written before the breaker service
	// stored it (or by an outcome that named none). A record naming
	// another createdAt than a dispatch's is the breaker of a task
	// deleted since, not of the task created again under its ID
	// (breakerGate).
	TaskCreatedAt time.Time `json:"taskCreatedAt,omitzero"`
}

// OtherTask reports whether b, the record under key, is the breaker of
// another task of id than the one created at createdAt: a task-scoped
// record (key is id) naming another createdAt. The record of a task
// deleted and created again while the breaker service was not watching
// (down, or its watch of flyball-tasks ended by a reconnect) outlives
// the old task; the new one starts with a closed breaker. A record or a
// createdAt that names none, and a host breaker, shared by every task of
// the host, are no other task's.
func (b *BreakerRecord) OtherTask(key, id string, createdAt time.Time) bool {
	return key == id && governor.OtherCreatedAt(b.TaskCreatedAt, createdAt)
}

// DecodeBreaker decodes a flyball-breakers value. An unreadable record
// reads as closed: the breaker service rewrites it on the next outcome.
func DecodeBreaker(key string, raw []byte) (BreakerRecord, error) {
	b := BreakerRecord{Key: key, State: events.BreakerClosed}
	if err := json.Unmarshal(raw, &b); err != nil {
		return BreakerRecord{Key: key, State: events.BreakerClosed}, fmt.Errorf("breaker record %s: %w", key, err)
	}
	return b, nil
}

// breakerGate reports whether to defer d's call while the breaker is open
// (until retryAt), or whether the call would be the probe of a half-open
// breaker (half-open, or open past retryAt: a lagging breaker service
// never blocks the probe), which execute must claim first (claimProbe). A
// closed breaker returns the zero gate at no KV cost: it reads the
// watch-fed view of flyball-breakers, where a key without a record is a
// closed breaker. So is a task-scoped record of another task of d's ID
// (BreakerRecord.OtherTask): applied to the task created again, it
// deferred every call until the old task's retryAt (up to
// breaker.maxOpenDelay), and no outcome came for the breaker service to
// start the new task's breaker closed.
func (s *Service) breakerGate(ctx context.Context, key string, d *events.Dispatch) gate {
	var b BreakerRecord
	if r := s.breakers.Lookup(key); r.Known {
		if !r.Found || r.Err != nil {
			return gate{}
		}
		b = r.Value
	} else {
		ent, err := s.breakerKV.Get(ctx, key)
		if err != nil {
			return gate{}
		}
		if b, err = DecodeBreaker(key, ent.Value()); err != nil {
			return gate{}
		}
	}
	if b.State != events.BreakerClosed && b.OtherTask(key, d.TaskID, d.TaskCreatedAt) {
		s.log.Debug("breaker record of a deleted task of the same ID: not applied", "task", d.TaskID,
			"dispatch", d.DispatchID, "recordFor", b.TaskCreatedAt, "taskCreatedAt", d.TaskCreatedAt)
		return gate{}
	}
	switch b.State {
	case events.BreakerOpen:
		if wait := time.Until(b.RetryAt); wait > 0 {
			return gate{wait: wait, retryAt: b.RetryAt}
		}
	case events.BreakerHalfOpen:
	default:
		return gate{}
	}
	return gate{probe: true, retryAt: b.RetryAt}
}

// deferCall keeps d for wait without calling its target (park; why says
// what the breaker said), and counts it as deferred. retryAt is an open
// breaker's, zero for a wait for another call's probe.
func (s *Service) deferCall(ctx context.Context, m jetstream.Msg, md *jetstream.MsgMetadata, d *events.Dispatch, arrived time.Time, key string, wait time.Duration, retryAt time.Time, why string) {
	s.cfg.Metrics.RunsTotal.WithLabelValues("deferred").Inc()
	s.log.Debug(why+": deferring", "task", d.TaskID, "wait", wait)
	s.park(ctx, m, md, d, arrived, key, wait, retryAt)
}

// serverClock is the NATS server's clock as this executor reads it: its
// own less the offset its heartbeat last measured (Config.ClockOffset).
// The governor plans each slot at the server's stamps of its inputs, so
// a slot's lateness is judged on it, and the runs are stamped on it
// (stamp, onServerClock). The bool is false while the heartbeat has
// measured no offset yet: the time is then this executor's own clock.
// An executor given no ClockOffset takes its own clock for the server's.
func (s *Service) serverClock() (time.Time, bool) {
	return s.onServerClock(s.cfg.Now())
}

// onServerClock is t, a reading of this executor's own clock
// (Config.Now), on the server's clock as serverClock reads it now: t
// itself, and false, while no offset is measured.
func (s *Service) onServerClock(t time.Time) (time.Time, bool) {
	if s.cfg.ClockOffset == nil {
		return t, true
	}
	if off, ok := s.cfg.ClockOffset(); ok {
		return t.Add(-off), true
	}
	return t, false
}

// stamp is the time a run event reports (run.started's startedAt, a
// skip's or give-up's finishedAt): now on the server's clock
// (serverClock), the one its slot was judged on. The governor plans on
// the server's clock and ignores an outcome that finished before the
// slot of the last one it applied (governor's outdated): stamped by its
// own clock, an executor 1.5 s behind the server finished each on-time
// run of a 1 s task before the slot before it, and the task stalled
// until the sweeper's repair. Before the offset is measured it is this
// executor's own clock, as for lateness.
func (s *Service) stamp() time.Time {
	now, _ := s.serverClock()
	return now.UTC()
}

// unmeasuredRecheck is how long a dispatch that cannot be judged before
// the clock offset is measured (handle) is handed back for: the first
// beat measures it at the start, and a redelivery is judged again.
const unmeasuredRecheck = 2 * time.Second

// missedUnderNone skips a dispatch whose task's next slot passed too,
// under catchUp "none" (governor.MissedUnderNone): the overdue slot the
// timer fires after a downtime, or one a governor planned late from a
// backlog. A slot whose retry is pending is not missed: it runs. A
// redelivery is skipped only if its record is a hand-back mark
// (markHandedBack): otherwise an earlier delivery may have started the call
// and crashed mid-call, and the slot runs late (at least once). The
// governor plans the next slot from the run.skipped. It reports whether
// it skipped. now is the server's clock as this executor reads it
// (serverClock): the slot and its next one are on the server's.
func (s *Service) missedUnderNone(ctx context.Context, m jetstream.Msg, md *jetstream.MsgMetadata, d *events.Dispatch, now time.Time) bool {
	t, _, err := s.specs.Get(ctx, d.TaskID)
	if err != nil {
		return false // run decides: deleted, invalid, or read again
	}
	source := governor.Source(d.Source)
	next, missed := governor.MissedUnderNone(t.spec, source, 0, time.Time{}, d.ScheduledAt, now)
	if missed && governor.GapJudged(source) {
		// A cadence the governor may have stretched past the spec's
		// interval, or a slot the budget or quiet hours placed: the
		// schedule that planned the slot gives the gap in force (its
		// gridStep and lastScheduledAt, as stored). Read only here, on a
		// slot already late by an interval.
		if p := s.scheduleOf(ctx, d.TaskID); p.NextRunAt.Equal(d.ScheduledAt) {
			next, missed = governor.MissedUnderNone(t.spec, source, p.GridStep, p.LastScheduledAt, d.ScheduledAt, now)
		}
	}
	if !missed {
		return false
	}
	// A read error is no proof of a missed slot: the dispatch runs (at
	// least once), and execute reads the record again.
	r, _, err := s.readAttempt(ctx, d)
	if err != nil {
		s.log.Warn("could not read the attempt record of a slot missed under catchUp none; running it", "dispatch", d.DispatchID, "err", err)
		return false
	}
	if md.NumDelivered > 1 && !r.handedBackOnly() {
		// An earlier delivery may have started the call and crashed:
		// only a hand-back mark says it did not.
		return false
	}
	if r.Attempts > 0 && r.Outcome == "" {
		// A retry is pending, and d is its dispatch, which runs under
		// catchUp "none" as every retry does. It is the slot dispatched
		// again (the sweeper re-dispatches it as a zombie once the
		// nakked dispatch of its retry was lost), with its cadence
		// source and long after its next slot: skipped as missed, a run
		// whose attempt failed ended with no final failure and no dead
		// letter.
		return false
	}
	s.log.Debug("slot missed under catchUp none: skipping", "task", d.TaskID, "slot", d.ScheduledAt, "next", next)
	s.skip(ctx, m, d, skipMissed, "missed: the slot of "+d.ScheduledAt.UTC().Format(time.RFC3339Nano)+" and the next one, "+
		next.UTC().Format(time.RFC3339Nano)+", passed before it could run (catchUp none)")
	return true
}

// The flyball_skips_total label of each kind of run.skipped.
const (
	skipDeleted     = "deleted"      // the task's spec is gone
	skipRecreated   = "recreated"    // a dispatch of a task deleted and created again (ofTask)
	skipPaused      = "paused"       // the slot falls in a pause
	skipMissed      = "missed"       // catchUp none: the next slot passed too (missedUnderNone)
	skipInvalidSpec = "invalid-spec" // the stored spec does not decode or validate
	skipAlreadyRan  = "already-ran"  // a slot dispatched again after it ran (ranAlready)
	skipBreaker     = "breaker"      // an open breaker's wait, with no room for it in DISPATCH (skipParked)
)

// skip reports d as run.skipped with reason, counted under label why.
func (s *Service) skip(ctx context.Context, m jetstream.Msg, d *events.Dispatch, why, reason string) {
	run := d.Run()
	run.Reason, run.FinishedAt = reason, s.stamp()
	s.settleAfter(ctx, m, d, outboxLinger, events.OutcomeSkipped, &run, events.SkippedRunID(d.DispatchID), func(m jetstream.Msg) {
		s.cfg.Metrics.RunsTotal.WithLabelValues("skipped").Inc()
		s.cfg.Metrics.SkipsTotal.WithLabelValues(why).Inc()
		s.ack(m)
	})
}

// execute performs one attempt and settles the message. With g.probe, the
// call goes ahead only if it wins the breaker's probe claim, taken just
// before the call (after the wait for a host slot), so the claim's TTL
// need only outlast the call itself. slot is a host slot the dispatch
// already holds (released by its holder), or nil.
func (s *Service) execute(ctx context.Context, m jetstream.Msg, md *jetstream.MsgMetadata, t *task, d *events.Dispatch, arrived time.Time, g gate, slot *hostSlots, fails int) {
	spec := t.spec
	attempt, prior, err := s.attemptNumber(ctx, md, d)
	if err != nil {
		s.retryInfra(ctx, m, md, d, arrived, fails, nil, "attempt record not read", err)
		return
	}
	if prior.Outcome != "" { // done: only its ack or term was lost
		// Or a first delivery: the slot published again after it ran
		// (attemptNumber). ranAlready reports it as run.skipped, so the
		// governor advances the schedule from it.
		if md.NumDelivered <= 1 && s.ranAlready(ctx, m, md, d) {
			return
		}
		s.settleAgain(m, d, prior)
		return
	}
	if attempt == 1 && s.ranAlready(ctx, m, md, d) {
		return
	}
	if attempt > 1 && attempt > spec.Retry.MaxAttempts {
		s.giveUp(ctx, m, t, d, attempt-1) // maxAttempts lowered while this retry was pending
		return
	}
	// A held slot stays in the table while held, so its key names it:
	// it is of another host only if the spec changed while it waited.
	if slot == nil || t.host == "" || slot.key != t.host {
		own, ok := s.tryHost(t.host)
		if !ok {
			s.waitForHost(ctx, m, md, d, arrived, t.host)
			return
		}
		defer s.releaseHost(own)
	}
	var claim string
	var claimRev uint64
	if g.probe {
		if ctx.Err() != nil {
			s.handBackNak(m, d, 0) // handed back at shutdown
			return
		}
		var wait time.Duration
		if claim, claimRev, wait, err = s.claimProbe(ctx, t, d, g.retryAt); err != nil {
			s.retryInfra(ctx, m, md, d, arrived, fails, nil, "probe claim not taken", err)
			return
		}
		if wait > 0 {
			s.cfg.Metrics.ProbeDeferred.Inc()
			s.deferCall(ctx, m, md, d, arrived, t.breakerKey, wait, time.Time{}, "breaker half-open and another call is its probe ("+claim+")")
			return
		}
		s.log.Info("breaker half-open: this call is its probe", "task", d.TaskID, "breaker", t.breakerKey, "claim", claim)
	}
	if prior.handedBackOnly() {
		// A redelivery after a hand-back: no mark may stay over a call
		// (unmarkHandedBack). Only such a delivery pays this write.
		if err := s.unmarkHandedBack(ctx, d, prior.rev); err != nil {
			if claimRev != 0 {
				s.releaseProbe(claim, claimRev)
			}
			s.retryInfra(ctx, m, md, d, arrived, fails, nil, "hand-back mark not removed", err)
			return
		}
	}
	// Kept alive (since run) through the call and the outbox, until
	// settle: together they may outlast any AckWait (waitBegin).
	if s.cfg.EmitStarted {
		started := d.Run()
		started.Attempt, started.StartedAt, started.Source = attempt, s.stamp(), d.Source
		if err := s.publishRun(ctx, events.OutcomeStarted, &started, events.RunID(d.DispatchID, attempt, events.RunIDStarted)); err != nil {
			s.log.Warn("run.started not published", "task", d.TaskID, "err", err)
		}
	}
	s.cfg.Metrics.Inflight.Inc()
	start := s.cfg.Now()
	var res *result
	if spec.Target.HTTP != nil {
		res = s.callHTTP(ctx, spec.Target.HTTP, t.record, d, attempt)
	} else {
		res = s.callNATS(ctx, spec.Target.NATS, t.record, d, attempt)
	}
	took := s.cfg.Now().Sub(start) // on the monotonic clock
	s.cfg.Metrics.Inflight.Dec()
	s.cfg.Metrics.RunDuration.Observe(took.Seconds())
	if ctx.Err() != nil {
		// Cancelled mid-call by shutdown: hand the dispatch straight back so
		// another executor runs it, without counting the attempt. Had this
		// process died instead, JetStream would redeliver after AckWait.
		if claimRev != 0 {
			s.releaseProbe(claim, claimRev) // no outcome: let another executor probe now
		}
		s.settle(m, "nak", nakBody(0))
		return
	}
	if res.infra { // the executor's own NATS connection failed, not the target (callNATS)
		if claimRev != 0 {
			s.releaseProbe(claim, claimRev)
		}
		if res.sent {
			s.calledMaybe(m)
		}
		s.retryInfra(ctx, m, md, d, arrived, fails, nil, "NATS-target call lost with the executor's own connection", res.err)
		return
	}
	run := d.Run()
	run.Attempt, run.Source, run.BreakerKey = attempt, d.Source, t.breakerKey
	// Stamped on the server's clock (stamp), by the offset known now;
	// the call's end is its start plus its duration, so a new offset
	// measured mid-call moves neither apart.
	started, _ := s.onServerClock(start)
	run.StartedAt, run.FinishedAt, run.Duration = started.UTC(), started.Add(took).UTC(), events.Duration(took)
	run.Status, run.Body, run.BodyTruncated, run.Fingerprint, run.Request = res.status, res.body, res.truncated, res.fingerprint, res.request
	hold := holdOf(t, d)
	if res.ok() {
		queued := s.settleAfter(ctx, m, d, hold, events.OutcomeSucceeded, &run, events.RunID(d.DispatchID, attempt, events.RunIDSucceeded), func(m jetstream.Msg) {
			s.cfg.Metrics.RunsTotal.WithLabelValues("succeeded").Inc()
			if attempt == 1 { // no record to write: the common case costs no KV round trip
				s.ack(m)
				return
			}
			s.recordThenSettle(m, d, attemptRecord{Attempts: attempt, Outcome: events.OutcomeSucceeded}, "ack", ackBody)
		})
		if queued {
			s.recoveredAfter(&run, hold)
		}
		return
	}
	retry := spec.Retry
	run.Error = res.err.Error()
	run.ErrorKind = events.ErrorTransient
	if res.permanent {
		run.ErrorKind = events.ErrorPermanent
	}
	lastDelivery := s.maxDeliver > 0 && int(md.NumDelivered) >= s.maxDeliver
	if res.permanent || attempt >= retry.MaxAttempts || lastDelivery {
		run.Final = true
		run.Dispatch = d
		// Its own event ID, never the ":failed" of a non-final failure: an
		// attempt number is repeated (its record was not written, a crash
		// between the event and the record, an outbox give-up whose event
		// was in fact stored), and a final failure of the repeat under
		// the earlier failure's ID was dropped by RUNS as a duplicate,
		// while its dispatch was terminated: no final outcome, no dead
		// letter. A republish of this same event still deduplicates.
		if s.settleAfter(ctx, m, d, hold, events.OutcomeFailed, &run, events.RunID(d.DispatchID, attempt, events.RunIDFinal), func(m jetstream.Msg) {
			s.cfg.Metrics.RunsTotal.WithLabelValues("failed").Inc()
			// Recorded as done before the term is sent, so a redelivery
			// after a lost term terminates it again without a call.
			s.recordThenSettle(m, d, attemptRecord{Attempts: attempt, Outcome: events.OutcomeFailed},
				"term", termBody(fmt.Sprintf("final failure after %d attempt(s): %s", attempt, capText(run.Error, 150))))
		}) {
			s.owed.failed(run.BreakerKey, time.Now())
		}
		return
	}
	delay := retryDelay(retry, attempt, d.DispatchID, res.retryAfter)
	run.RetryIn = events.Duration(delay)
	// The attempt is counted only once its event is stored: one the outbox
	// cannot store is nakked uncounted, and the redelivery repeats it.
	if s.settleAfter(ctx, m, d, hold, events.OutcomeFailed, &run, events.RunID(d.DispatchID, attempt, events.RunIDFailed), func(m jetstream.Msg) {
		s.cfg.Metrics.RunsTotal.WithLabelValues("failed").Inc()
		s.cfg.Metrics.RetriesTotal.Inc()
		s.recordThenSettle(m, d, attemptRecord{Attempts: attempt}, "nak", nakBody(delay))
	}) {
		s.owed.failed(run.BreakerKey, time.Now())
	}
}

// giveUp ends a dispatch whose pending retry the task's retry.maxAttempts,
// lowered since the last attempt failed, no longer allows: the target is
// not called again (before, the retry made one call past the new limit),
// and a final run.failed of the last attempt made ends the run. It has no
// status and is permanent, like a blocked target, so the breaker does not
// count a call that was not made; it is dead-lettered as permanent.
func (s *Service) giveUp(ctx context.Context, m jetstream.Msg, t *task, d *events.Dispatch, made int) {
	run := d.Run()
	run.Attempt, run.FinishedAt, run.Source, run.BreakerKey = made, s.stamp(), d.Source, t.breakerKey
	run.Final, run.Dispatch, run.ErrorKind = true, d, events.ErrorPermanent
	run.Error = fmt.Sprintf("retry.maxAttempts is now %d: attempt %d not made", t.spec.Retry.MaxAttempts, made+1)
	s.settleAfter(ctx, m, d, holdOf(t, d), events.OutcomeFailed, &run, events.RunID(d.DispatchID, made, events.RunIDExhausted), func(m jetstream.Msg) {
		s.cfg.Metrics.RunsTotal.WithLabelValues("failed").Inc()
		s.recordThenSettle(m, d, attemptRecord{Attempts: made, Outcome: events.OutcomeFailed}, "term", termBody(run.Error))
	})
}

// Backoff is the delay before attempt+1: initialDelay × multiplier^(attempt-1),
// capped at maxDelay, with ± jitter drawn deterministically from the
// dispatch ID and attempt (so every replica computes the same delay).
func Backoff(r *events.Retry, attempt int, dispatchID string) time.Duration {
	base := float64(r.InitialDelay.D()) * math.Pow(r.Multiplier, float64(max(attempt-1, 0)))
	base = math.Min(base, float64(r.MaxDelay.D()))
	j := 0.0
	if r.Jitter != nil {
		j = *r.Jitter
	}
	if j > 0 {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s:%d", dispatchID, attempt)
		u := float64(h.Sum64()%1_000_000) / 1_000_000 // [0,1)
		base *= 1 + j*(2*u-1)
	}
	return time.Duration(math.Max(base, float64(100*time.Millisecond)))
}

// retryDelay is the delay before attempt+1: Backoff, lengthened by the
// target's Retry-After (zero when it sent none) up to maxDelay. It never
// shortens it: at the cap, the jitter can take Backoff past maxDelay,
// and capping the larger of the two cut it down to maxDelay, so a 429
// asking for 1s was retried sooner than one asking for nothing.
func retryDelay(r *events.Retry, attempt int, dispatchID string, retryAfter time.Duration) time.Duration {
	delay := Backoff(r, attempt, dispatchID)
	return max(delay, min(retryAfter, r.MaxDelay.D()))
}

// maxRunText caps each free-text field of a run event (error, reason):
// 4 KiB, cut on a UTF-8 boundary and ending with runTextCut. A target
// controls these texts (a 1 MB Location quoted whole by Go's url.Error, a
// NATS service's Nats-Service-Error header), and an event over the
// server's max_payload could never be stored: its dispatch was nakked
// uncounted and the target called again as attempt 1 until MaxDeliver.
const maxRunText = 4 << 10

// runTextCut ends a text cut at maxRunText.
const runTextCut = "…[cut]"

// capText returns s as valid UTF-8 (each run of invalid bytes one U+FFFD)
// of at most n bytes: a longer one is cut on a rune boundary and ends with
// runTextCut.
func capText(s string, n int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= n {
		return s
	}
	return runePrefix(s, n-len(runTextCut)) + runTextCut
}

// runePrefix is s cut to at most n bytes on a UTF-8 character boundary.
func runePrefix(s string, n int) string {
	if n >= len(s) {
		return s
	}
	n = max(n, 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// runEventHeadroom is the part of the server's max_payload left for a run
// event's headers (Content-Type, Nats-Msg-Id, Flyball-Breaker-Key: a few
// hundred bytes at most) when fitRunBody sizes its data.
const runEventHeadroom = 4 << 10

// runMsg encodes a run event; msgID is its id and Nats-Msg-Id. Its error
// and reason are capped at maxRunText first, and an event still larger
// than the connection's max_payload is cut to fit (fitRunBody), so the
// event can always be stored. A body that could take more than the
// limit in JSON (maxJSONGrowth bytes a byte) is cut to the limit's worth
// before it is encoded: maxResponseBytes may be 10 MiB, and its encoding
// up to six times that, only to be cut away.
func (s *Service) runMsg(o events.Outcome, run *events.Run, msgID string) (*nats.Msg, error) {
	run.Error, run.Reason = capText(run.Error, maxRunText), capText(run.Reason, maxRunText)
	limit := s.cfg.JS.Conn().MaxPayload() - runEventHeadroom
	if limit > 0 && int64(len(run.Body))*maxJSONGrowth > limit {
		if cut, _ := events.JSONStringPrefix(run.Body, int(limit)); len(cut) < len(run.Body) {
			run.Body, run.BodyTruncated = cut, true
		}
	}
	at := time.Now().UTC()
	body, err := events.Marshal(o.Type(), s.source, run.TaskID, run, at, msgID)
	if err != nil {
		return nil, err
	}
	if limit > 0 && int64(len(body)) > limit {
		if body, err = s.fitRunBody(o, run, msgID, at, body, limit); err != nil {
			return nil, err
		}
	}
	if run.BreakerKey == "" {
		return jsutil.EventMsg(events.RunSubject(o, run.TaskID), msgID, body), nil
	}
	return jsutil.EventMsg(events.RunSubject(o, run.TaskID), msgID, body, events.HeaderBreakerKey, run.BreakerKey), nil
}

// maxJSONGrowth is the most bytes of JSON one byte of a string takes:
// <, >, & and other control bytes are \u00XX, a byte of invalid UTF-8
// \ufffd.
const maxJSONGrowth = 6

// bodyTruncatedJSON is what setting BodyTruncated adds to a run's JSON.
const bodyTruncatedJSON = `,"bodyTruncated":true`

// fitRunBody cuts run.Body until the encoded event (body, as encoded
// now, at time at) is at most limit bytes, and sets BodyTruncated.
// maxResponseBytes may be up to 10 MiB while NATS refuses a message over
// its max_payload (1 MiB by default): such an event could never be
// stored, and the dispatch would be nakked and its target called again
// until MaxDeliver. The body's JSON is in the event once, as is, and
// nothing else changes with its cut but bodyTruncated: the body keeps as
// many bytes of JSON (events.JSONStringPrefix; <, >, & take 6 bytes, "
// and a newline 2) as the event is under the limit without them, less
// at most a character's: one round fits (the loop is a guard).
// The cut falls on a character boundary, so it adds no replacement
// characters. An event still over limit with no body left (a server with
// a tiny max_payload, a spec with a huge URL or headers) loses its
// request record, then its error and reason are cut to 256 bytes; only
// an event over limit even then is an error.
func (s *Service) fitRunBody(o events.Outcome, run *events.Run, msgID string, at time.Time, body []byte, limit int64) ([]byte, error) {
	marshal := func() (err error) {
		body, err = events.Marshal(o.Type(), s.source, run.TaskID, run, at, msgID)
		return err
	}
	for int64(len(body)) > limit && run.Body != "" {
		_, width := events.JSONStringPrefix(run.Body, math.MaxInt)
		keep := width - int(int64(len(body))-limit)
		if !run.BodyTruncated {
			keep -= len(bodyTruncatedJSON)
		}
		run.Body, _ = events.JSONStringPrefix(run.Body, keep)
		run.BodyTruncated = true
		if err := marshal(); err != nil {
			return nil, err
		}
	}
	if int64(len(body)) > limit && run.Request != nil {
		run.Request = nil
		if err := marshal(); err != nil {
			return nil, err
		}
	}
	if int64(len(body)) > limit {
		run.Error, run.Reason = capText(run.Error, 256), capText(run.Reason, 256)
		if err := marshal(); err != nil {
			return nil, err
		}
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("run event of %d bytes exceeds %d bytes with no body", len(body), limit)
	}
	return body, nil
}

// publishRun publishes a run event and waits for it to be stored.
func (s *Service) publishRun(ctx context.Context, o events.Outcome, run *events.Run, msgID string) error {
	msg, err := s.runMsg(o, run, msgID)
	if err != nil {
		return err
	}
	_, err = s.cfg.JS.PublishMsg(ctx, msg, jetstream.WithRetryAttempts(20), jetstream.WithRetryWait(250*time.Millisecond))
	return err
}

// settleAfter hands the run event of m, a delivery of d, to the outbox,
// to be published within hold (settleHold) while calls are in flight, and
// returns at once; once the event is stored, settled runs with m (it acks,
// naks or terms it). If the event cannot be stored (too large, refused),
// m is nak'ed for a retry in a second, exactly as if the call had not
// happened: the attempt is not counted either, as counts are written only
// after the event (recordThenSettle). One the outbox gave up on
// (errUnconfirmed) is kept and published again in place (republish). It
// reports whether the event is in the outbox (false: m was nakked).
func (s *Service) settleAfter(ctx context.Context, m jetstream.Msg, d *events.Dispatch, hold time.Duration, o events.Outcome, run *events.Run, msgID string, settled func(jetstream.Msg)) bool {
	msg, err := s.runMsg(o, run, msgID)
	if err != nil {
		s.nak(m, time.Second, err)
		return false
	}
	called := 0 // a skip, or a give-up (giveUp): no call made
	if !run.StartedAt.IsZero() {
		called = run.Attempt
	}
	s.publishThenSettle(ctx, m, d, unconfirmedRun{called: called, msg: msg, hold: hold, settled: settled}, 0)
	return true
}

// publishThenSettle queues r's event, the run event of m, in the outbox,
// and settles m once it is stored (settleAfter). fails is how many times
// in a row the outbox gave up on it before. A give-up keeps m, alive and
// using none of its deliveries, for r to be published again (retryInfra,
// republish), its bytes counted from then until m is settled
// (keepsEvent); m is settled once, by r.settled or a nak. r is a value,
// copied into the closure, and to a heap object of its own only at a
// give-up: every run passes here (taking its address in the closure
// would move it to the heap on every run).
func (s *Service) publishThenSettle(ctx context.Context, m jetstream.Msg, d *events.Dispatch, r unconfirmedRun, fails int) {
	s.out.publish(r.msg, r.hold, func(err error) {
		if err == nil {
			s.uncount(r.counted, r.msg)
			r.settled(m)
			return
		}
		md, mdErr := m.Metadata()
		if !errors.Is(err, errUnconfirmed) || mdErr != nil || !r.counted && !s.keepsEvent(len(r.msg.Data)) {
			s.uncount(r.counted, r.msg)
			s.nak(m, time.Second, err)
			return
		}
		kept := r
		kept.counted = true
		s.retryInfra(ctx, m, md, d, s.unconfirmedFirst(), fails, &kept, "run event not confirmed stored", err)
	})
}

func (s *Service) nak(m jetstream.Msg, delay time.Duration, cause error) {
	if cause != nil {
		s.log.Warn("transient failure; redelivering", "subject", m.Subject(), "delay", delay, "err", cause)
	}
	s.settle(m, "nak", nakBody(delay))
}

// settleMargin is how much longer than its call a probe claim lives
// (probeTTL): the time to store the call's run event (up to outboxBudget)
// and confirm its ack.
const settleMargin = outboxBudget + 5*time.Second

// callTimeout is the longest one call of spec's target can take.
func callTimeout(spec *events.TaskSpec) time.Duration {
	switch {
	case spec.Target.HTTP != nil:
		return spec.Target.HTTP.Timeout.D()
	case spec.Target.NATS != nil:
		return spec.Target.NATS.Timeout.D()
	}
	return events.DefaultNATSTimeout
}

// waitBegin keeps m alive until waitEnd or settle: while its dispatch
// waits for a call slot (acquireCall), a caller (fireHeld) or a host slot
// (acquireHost), waits with no bound, and from its delivery (handle), or
// its slot (run), until its ack, nak or term is sent: through the reads
// before its call, the call, up to its timeout, and the outbox, which
// retries a run event for up to outboxBudget while RUNS elects a leader. keepWaitersAlive sends
// InProgress from half an AckWait after the delivery, then every half
// AckWait, each within a sixteenth of an AckWait of its time, and sends
// again at once one the consumer leader has not confirmed. Without it, a wait
// past the AckWait made JetStream redeliver the dispatch, and both copies
// called the target. Waiters register only once a slot is not free at
// once; every due dispatch registers, and one settled in a few
// milliseconds costs a map entry and no InProgress. A burst waits here by the thousand, so one
// ticker serves every waiter rather than a timer each.
func (s *Service) waitBegin(m jetstream.Msg, arrived time.Time) {
	s.waitMu.Lock()
	if k, ok := s.waiting[m]; ok {
		delete(s.progressIDs, k.id)
	}
	s.waiting[m] = keepAlive{due: arrived.Add(s.cfg.AckWait / 2)}
	s.waitMu.Unlock()
}

// waitEnd ends waitBegin's keep-alive. It reports whether m was kept
// alive, and when its next InProgress was due.
func (s *Service) waitEnd(m jetstream.Msg) (due time.Time, kept bool) {
	s.waitMu.Lock()
	k, kept := s.waiting[m]
	if kept {
		delete(s.progressIDs, k.id)
		delete(s.waiting, m)
	}
	s.waitMu.Unlock()
	return k.due, kept
}

// keepAlive is a waiter's keep-alive (waitBegin).
type keepAlive struct {
	// due is when its next InProgress is due: half an AckWait after the
	// last one sent, or after its delivery.
	due time.Time
	// id is the reply ID of its InProgress awaiting the consumer leader's
	// confirmation, 0 for none; unconfirmed at lost, it is taken as lost.
	id   uint64
	lost time.Time
}

// keepWaitersAlive sends InProgress for every waiter whose turn is due,
// checking every sixteenth of an AckWait: a waiter is kept alive at most
// nine sixteenths of an AckWait after its delivery or its last InProgress.
//
// Each InProgress is a request the consumer leader confirms (as settle's
// acks are): one sent while the DISPATCH consumer elects a leader (4-9 s)
// is lost, and sent unconfirmed every half AckWait, the next came about a
// whole AckWait after the last that landed, when the server had already
// redelivered the dispatch to another executor, which called the target
// while this one's call ran. One answered "no responders" (no leader), or
// not confirmed within progressTry, is sent again at the next tick, while
// the waiter is kept. A lost one is sent again at most an eighth of an
// AckWait (2 s at the 30 s AckWait) plus a tick after it, at once after a
// "no responders", and so on until one lands: with the first sent by nine
// sixteenths of an AckWait, an election of up to 9 s at the 30 s AckWait,
// whenever it starts, leaves the dispatch with this executor.
func (s *Service) keepWaitersAlive(ctx context.Context) {
	tick, try := max(s.cfg.AckWait/16, time.Millisecond), progressTry(s.cfg.AckWait)
	t := time.NewTicker(tick)
	defer t.Stop()
	type send struct {
		m  jetstream.Msg
		id uint64
	}
	var due []send
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			due = due[:0]
			s.progressMu.Lock()
			s.waitMu.Lock()
			for m, k := range s.waiting {
				switch {
				case k.id != 0 && now.Before(k.lost): // awaiting its confirmation
					continue
				case k.id != 0: // unconfirmed: taken as lost, sent again
					delete(s.progressIDs, k.id)
				case now.Before(k.due):
					continue
				}
				s.progressNext++
				k.id, k.lost, k.due = s.progressNext, now.Add(try), now.Add(s.cfg.AckWait/2)
				s.progressIDs[k.id] = m
				s.waiting[m] = k
				due = append(due, send{m, k.id})
			}
			s.waitMu.Unlock()
			for _, d := range due {
				s.sendProgress(d.m, d.id)
			}
			s.progressMu.Unlock()
		}
	}
}

// progressTry is how long keepWaitersAlive waits for an InProgress's
// confirmation before it takes it as lost: a settle's try (ackTry), but
// an eighth of an AckWait for a shorter one.
func progressTry(ackWait time.Duration) time.Duration {
	return max(min(ackTry, ackWait/8), time.Millisecond)
}

// sendProgress sends m's InProgress as a request, its confirmation to
// come to progressReply under id. A failed publish (the connection down)
// goes unconfirmed, and is sent again as a lost one is.
func (s *Service) sendProgress(m jetstream.Msg, id uint64) {
	if s.dropProgress != nil && s.dropProgress() {
		return
	}
	_ = s.cfg.JS.Conn().PublishRequest(m.Reply(), s.progressTo+strconv.FormatUint(id, 10), progressBody)
}

// progressReply handles the consumer leader's confirmation of an
// InProgress, or the server's "no responders" while the consumer has no
// leader: that one is sent again at the next tick. An answer to one
// already taken as lost, or whose waiter has ended, is ignored.
func (s *Service) progressReply(r *nats.Msg) {
	id, err := strconv.ParseUint(r.Subject[len(s.progressTo):], 10, 64)
	if err != nil {
		return
	}
	noResponders := len(r.Data) == 0 && r.Header.Get("Status") == "503"
	s.waitMu.Lock()
	defer s.waitMu.Unlock()
	m, ok := s.progressIDs[id]
	if !ok {
		return
	}
	delete(s.progressIDs, id)
	k := s.waiting[m] // kept: waitEnd and waitBegin drop the IDs they end
	k.id = 0
	if noResponders {
		k.due = time.Now()
	}
	s.waiting[m] = k
}

// canonicalHost is u's host as the PerHost limit counts it: its name in
// the ASCII form net/http dials (ssrf.ASCIIHost: an internationalized
// name in punycode) and lower-cased (but an IPv6 zone), in brackets for
// an IPv6 literal, and its port unless that is the scheme's default.
// https://API.example.com, https://api.example.com:443 and
// https://api.example.com:/ are one host, api.example.com, the same one
// as http://api.example.com; a host on another port (:8443) is another.
// https://bücher.example and https://xn--bcher-kva.example are one host,
// xn--bcher-kva.example. A name IDNA refuses (bü_cher.example) stays in
// Unicode, lower-cased (net/http dials it as written); hostKey hashes it.
// A port's leading zeros are left out (https://api.example.com:0443 dials
// 443: it is api.example.com; :08443 is api.example.com:8443; :00 is :0),
// and so is one trailing '.' of a name (api.example.com. is
// api.example.com). Only the key and the limit see this: the URL dialled,
// and the SSRF guard that checks its address, are as written.
// Computed once per spec revision (decodeTask), not per call.
func canonicalHost(u *url.URL) string {
	name, port := u.Hostname(), u.Port()
	zone := ""
	if i := strings.IndexByte(name, '%'); i >= 0 {
		name, zone = name[:i], name[i:] // an interface name is case-sensitive
	}
	name = strings.ToLower(ssrf.ASCIIHost(name)) + zone
	if strings.IndexByte(name, ':') >= 0 {
		name = "[" + name + "]"
	} else if len(name) > 1 {
		name = strings.TrimSuffix(name, ".")
	}
	if port != "" {
		// url.Parse leaves only digits in a port.
		if port = strings.TrimLeft(port, "0"); port == "" {
			port = "0"
		}
	}
	if port == "" || port == defaultPort[u.Scheme] {
		return name
	}
	return name + ":" + port
}

// defaultPort is the port a URL of each scheme names by leaving it out.
var defaultPort = map[string]string{"http": "80", "https": "443"}

// hostSlots is one host's PerHost call slots: sem holds a value per slot
// taken. It is in the table (Service.hosts) under key while refs, the
// calls holding or waiting for one of its slots, is above 0; refs and
// key change only under hostMu.
type hostSlots struct {
	key  string
	sem  chan struct{}
	refs int
}

// hostRef returns host's slots, counting one more call holding or
// waiting for one; an idle host gets a spare entry, or a new one. The
// caller holds hostMu.
func (s *Service) hostRef(host string) *hostSlots {
	h := s.hosts[host]
	if h == nil {
		if n := len(s.spare); n > 0 {
			h, s.spare = s.spare[n-1], s.spare[:n-1]
		} else {
			h = &hostSlots{sem: make(chan struct{}, s.cfg.PerHost)}
		}
		h.key = host
		s.hosts[host] = h
	}
	h.refs++
	return h
}

// hostUnref counts one call out of h, and drops h from the table once no
// call holds or waits for one of its slots (its sem is then empty),
// keeping up to Concurrency such entries spare, so that a host called one
// call at a time does not allocate a new entry for every call. The
// caller holds hostMu.
func (s *Service) hostUnref(h *hostSlots) {
	if h.refs--; h.refs > 0 {
		return
	}
	delete(s.hosts, h.key)
	h.key = ""
	if len(s.spare) < s.cfg.Concurrency {
		s.spare = append(s.spare, h)
	}
}

// tryHost takes one of host's PerHost call slots if one is free, and
// returns it for releaseHost (nil for no host). ok is false when the host
// is at its limit.
func (s *Service) tryHost(host string) (slot *hostSlots, ok bool) {
	if host == "" {
		return nil, true
	}
	s.hostMu.Lock()
	defer s.hostMu.Unlock()
	h := s.hostRef(host)
	select {
	case h.sem <- struct{}{}:
		return h, true
	default:
		s.hostUnref(h) // others hold every slot: it stays
		return nil, false
	}
}

// waitForHost holds a due dispatch whose host is at PerHost until one of
// its slots frees up (fireHeld), then runs it from the top. It waits
// there, not in the caller: a caller waiting for a host kept its call
// slot, and a few dispatches of one slow host took every slot while the
// calls of every other host waited for that host's calls to end.
func (s *Service) waitForHost(ctx context.Context, m jetstream.Msg, md *jetstream.MsgMetadata, d *events.Dispatch, arrived time.Time, host string) {
	s.keep(ctx, &held{m: m, md: md, d: d, arrived: arrived, host: host}, 0)
}

// acquireHost takes one of host's PerHost call slots and returns it for
// releaseHost; nil (no host, or ctx ended or shutdown began) holds
// nothing. While it waits,
// m is kept alive (waitBegin), and counted in the host's refs.
func (s *Service) acquireHost(ctx context.Context, m jetstream.Msg, arrived time.Time, host string) *hostSlots {
	if host == "" {
		return nil
	}
	s.hostMu.Lock()
	h := s.hostRef(host)
	s.hostMu.Unlock()
	select {
	case h.sem <- struct{}{}:
		return h
	default:
	}
	s.waitBegin(m, arrived)
	defer s.waitEnd(m)
	select {
	case h.sem <- struct{}{}:
		return h
	case <-ctx.Done():
	case <-s.stopping:
	}
	s.hostMu.Lock()
	s.hostUnref(h)
	s.hostMu.Unlock()
	return nil
}

// releaseHost frees a slot tryHost or acquireHost took (nil: none).
func (s *Service) releaseHost(h *hostSlots) {
	if h == nil {
		return
	}
	s.hostMu.Lock()
	<-h.sem // never blocks: this call's value is in it
	s.hostUnref(h)
	s.hostMu.Unlock()
}

// The spacing of the tries of a dispatch whose own reads or writes failed
// (retryInfra): from infraRetryFirst, doubling up to infraRetryMax.
const (
	infraRetryFirst = time.Second
	infraRetryMax   = 15 * time.Second
)
