// Package breaker is the circuit-breaker service. It consumes failed
// attempts and run.recovered events on RUNS (the successes that may change
// a breaker, which the executor sends again for it: executor/recovered.go)
// and keeps a closed → open → half-open → closed state
// machine per task (or per target host) in KV flyball-breakers, written
// only here, with compare-and-set. Each transition is published on
// flyball.breaker.<state>.<key> in the HEALTH stream, after its write and
// only while no later transition superseded it (publish).
//
// Rules (defaults from the task's breaker policy):
//   - closed: count consecutive failed attempts; at failureThreshold, open
//     with retryAt = openDelay after that failure (its finishedAt, never
//     later than now: a lagging breaker dates it as it happened, Next);
//   - open: the executor defers deliveries until retryAt; at retryAt this
//     service moves the breaker to half-open, and the next call is the probe
//     (the executor also lets a call through an open breaker past retryAt,
//     so a lagging breaker service never blocks the probe);
//   - a probe's success closes the breaker and resets the delay; its
//     failure re-opens it with the delay doubled, up to maxOpenDelay;
//   - any other success closes it too, unless its call started before the
//     breaker opened (it was in flight when failures tripped it): that
//     says nothing about the target since, and is ignored while open or
//     half-open (see Next). So is a failure of such a call, and, once the
//     breaker closed, a failure of a call that started before the
//     closing's cut-off (countFrom: the opening, or the probe's start,
//     never later than a second before the closing).
package breaker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/kvcache"
	"github.com/flyballhq/flyball/services/internal/lifecycle"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/streams"
)

// Config configures the breaker service.
type Config struct {
	svcconf.Common
}

// Service is the breaker service.
type Service struct {
	lifecycle.Base
	cfg      Config
	source   string
	breakers jetstream.KeyValue
	// health is the HEALTH stream, bound at start: publish reads a key's
	// last breaker event there before each transition's publish.
	health jetstream.Stream
	// schedules is read only for a failure with no record to compare its
	// taskCreatedAt with (otherTask).
	schedules jetstream.KeyValue
	// Watch-fed views: a success for a breaker that is closed with no
	// failures counted (nearly every outcome) needs no KV access at all.
	specs   *kvcache.Cache[*events.TaskSpec]
	records *kvcache.Cache[viewed]
	// tuneFollow, when set, adjusts the half-open loop's watch of
	// flyball-breakers before it starts (tests end the watch).
	tuneFollow func(*kvcache.Follower)
	// tuneKV, when set, wraps each bucket (flyball-breakers, flyball-tasks)
	// once it is bound: tests fail a read.
	tuneKV func(bucket string, kv jetstream.KeyValue) jetstream.KeyValue
	// publishing, when set, runs before a transition of key to state to
	// is published (tests delay that publish).
	publishing func(key string, to events.BreakerState)
	// checked, when set, runs once a publish of a transition of key to
	// state to found the record still holding it, right before its
	// conditional publish; false drops that publish (tests make it later,
	// and late, with the consumer free to move the breaker on).
	checked func(key string, to events.BreakerState) bool
}

// New validates cfg.
func New(cfg Config) (*Service, error) {
	if err := cfg.SetDefaults("breaker"); err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, source: jsutil.Source("breaker", cfg.Instance)}, nil
}

// Start binds KV and consumes RUNS.
func (s *Service) Start(ctx context.Context) error {
	runCtx, err := s.Begin(ctx)
	if err != nil {
		return fmt.Errorf("breaker: %w", err)
	}
	var tasks jetstream.KeyValue
	if err := jsutil.BindBuckets(ctx, s.cfg.JS,
		jsutil.Bucket{Name: streams.BucketTasks, KV: &tasks},
		jsutil.Bucket{Name: streams.BucketBreakers, KV: &s.breakers},
		jsutil.Bucket{Name: streams.BucketSchedules, KV: &s.schedules},
	); err != nil {
		return fmt.Errorf("breaker: %w", err)
	}
	if s.tuneKV != nil {
		s.breakers = s.tuneKV(streams.BucketBreakers, s.breakers)
		tasks = s.tuneKV(streams.BucketTasks, tasks)
	}
	if s.health, err = s.cfg.JS.Stream(ctx, streams.StreamHealth); err != nil {
		return fmt.Errorf("breaker: stream %s: %w", streams.StreamHealth, err)
	}
	s.specs = kvcache.Specs(tasks, s.cfg.Logger)
	s.records = kvcache.New(s.breakers, decodeViewed, s.cfg.Logger)
	s.specs.Conn, s.records.Conn = s.cfg.JS.Conn(), s.cfg.JS.Conn()
	s.Go(func() { s.specs.Run(runCtx) })
	s.Go(func() { s.records.Run(runCtx) })
	if err := s.watchOpen(runCtx); err != nil {
		return fmt.Errorf("breaker: %w", err)
	}
	if err := s.watchDeletes(runCtx, tasks); err != nil {
		return fmt.Errorf("breaker: %w", err)
	}
	cc, err := jsutil.Consume(ctx, s.cfg.JS, streams.StreamRuns, streams.ConsumerBreaker, s.cfg.Logger, s.cfg.Metrics.PullFailures.WithLabelValues(streams.StreamRuns),
		func(m jetstream.Msg) { s.handle(runCtx, m) })
	if err != nil {
		return fmt.Errorf("breaker: %w", err)
	}
	s.Track(cc, s.cfg.JS.Conn())
	return nil
}

func (s *Service) handle(ctx context.Context, m jetstream.Msg) {
	subj, err := events.ParseSubject(m.Subject())
	if err != nil || subj.Family != events.FamilyRun {
		jsutil.Terminate(m, "bad subject: "+m.Subject(), s.cfg.Metrics, s.cfg.Logger)
		return
	}
	// A run.succeeded (from a filter set by hand, or delivered before the
	// filter changed) for a breaker already settled here needs no decode
	// at all: the executor's headers name the key and the outcome, and the
	// governor, which consumes every run.succeeded, terminates and counts
	// a malformed body. One whose last transition is a closing made by
	// this very outcome goes on: its publish may have failed (settled).
	// A run.recovered is decoded first: this service is its only
	// consumer, so a malformed one acked here was acked unread and
	// uncounted. The decode costs microseconds, and a settled breaker
	// still needs no KV access (the check after it); the executor sends
	// run.recovered only for a breaker its view shows unsettled, which
	// nearly always goes on to a write anyway.
	o := events.Outcome(subj.Action)
	ok := success(o)
	if o == events.OutcomeSucceeded {
		if key := m.Headers().Get(events.HeaderBreakerKey); key != "" && s.settled(key, successID(m.Headers().Get(jetstream.MsgIDHeader))) {
			_ = m.Ack()
			return
		}
	}
	// The task and key become a KV key: one that is no key fails every
	// write, and the outcome would be nakked forever.
	var run events.Run
	if !jsutil.DecodeRun(m, subj, &run, s.cfg.Metrics, s.cfg.Logger) {
		return
	}
	if run.BreakerKey != "" && !validKey(run.BreakerKey) {
		jsutil.Terminate(m, fmt.Sprintf("malformed run: breakerKey %.64q is neither a task ID nor host_<host>", run.BreakerKey), s.cfg.Metrics, s.cfg.Logger)
		return
	}
	if !ok && run.ErrorKind == events.ErrorPermanent && run.Status == 0 {
		// A blocked or invalid target is a configuration problem, not an
		// unhealthy endpoint: it is dead-lettered, not breaker material.
		_ = m.Ack()
		return
	}
	key := run.BreakerKey
	if ok && key != "" && s.settled(key, outcomeID(&run, ok)) {
		_ = m.Ack()
		return
	}
	spec, _, err := s.specs.Get(ctx, run.TaskID)
	if jsutil.IsKeyMissing(err) && (key == "" || key == run.TaskID) {
		// The task was deleted while this attempt was in flight. A record
		// under its own key would outlive it (watchDeletes has already
		// removed the old one), and a task created again under the same
		// ID would inherit it.
		_ = m.Ack()
		return
	}
	if err == nil && spec != nil && key == run.TaskID && isHostKey(executor.BreakerKey(spec)) {
		// The task switched to breaker.scope: host while this attempt was
		// in flight: its own record is no longer its breaker (watchDeletes
		// has removed it), and one written now would never be written
		// again, half-open for good once its retryAt passed.
		_ = m.Ack()
		return
	}
	if err != nil && !jsutil.IsKeyMissing(err) && !errors.Is(err, kvcache.ErrUnreadable) {
		// The spec could not be read (KV electing a leader, a timeout):
		// counting the outcome with the default policy applied another
		// threshold and open delay than the task's. Try again, as for a
		// failed write.
		s.cfg.Logger.Warn("task spec read failed; retrying", "task", run.TaskID, "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	if err != nil || spec == nil {
		// A deleted task's outcome still counts for a host-scoped
		// breaker, with the default policy: it is evidence about the
		// host. So does an outcome of a task whose stored spec does not
		// decode (reading it again would not help).
		spec = &events.TaskSpec{ID: run.TaskID}
		spec.Normalize()
	}
	if key == "" { // an event from an executor that predates breakerKey
		key = executor.BreakerKey(spec)
	}
	if err := s.apply(ctx, key, spec, &run, ok); err != nil {
		s.cfg.Logger.Warn("breaker update failed; retrying", "task", run.TaskID, "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	_ = m.Ack()
}

// validKey reports a key executor.BreakerKey can produce: a task ID, or
// a host key (HostKeyPrefix and the host, or its hash), a token too, that
// names a host. It accepted host_ alone, and host_ followed by a token of
// up to 128 characters, 133 in all, which no executor makes: it hashes a
// host whose key would be longer than a token.
func validKey(key string) bool {
	return events.ValidToken(key) && key != events.HostKeyPrefix
}

// success reports whether an outcome on RUNS counts as a success: a
// run.recovered, or a run.succeeded (the consumer takes none since
// run.recovered exists, but one stored before the filter changed may be
// delivered, and counts as it always did).
func success(o events.Outcome) bool {
	return o == events.OutcomeRecovered || o == events.OutcomeSucceeded
}

// successID is the outcome ID (outcomeID) of a success whose event ID is
// msgID: the executor publishes run.succeeded as
// <dispatch>:<attempt>:succeeded and run.recovered as
// <dispatch>:<attempt>:recovered (events.RunID). Empty for any other ID
// (one published by hand): the body decides then.
func successID(msgID string) string {
	for _, suffix := range [...]events.RunIDSuffix{events.RunIDSucceeded, events.RunIDRecovered} {
		if id, ok := strings.CutSuffix(msgID, string(suffix)); ok && strings.Contains(id, ":") {
			return id + ":ok"
		}
	}
	return ""
}

// settled reports whether a success (outcomeID outcome; empty when not
// decoded yet) needs neither a write nor a publish: the breaker for key is
// known to be closed with no failures counted (executor.Settled), and its
// last transition is no closing made by outcome. That closing's publish
// may have failed after its write, and the redelivered success is what
// publishes it again (apply); one not decoded yet may be that success.
// Records this service writes reach the view at once (read-your-writes);
// another replica's writes arrive through the watch a moment later.
func (s *Service) settled(key, outcome string) bool {
	r := s.records.Lookup(key)
	if !executor.Settled(kvcache.MapResult(r, func(v viewed) executor.BreakerRecord { return v.BreakerRecord })) {
		return false
	}
	return r.Value.closedBy == "" || outcome != "" && outcome != r.Value.closedBy
}

// apply moves the breaker for one attempt outcome and publishes a
// transition if the state changed. It is idempotent: the record names the
// outcomes it applied, so an outcome redelivered after a failed publish
// (or a lost ack) is not counted again, and the transition it made, kept
// in the record, is published again unless the record moved on since
// (publish; Nats-Msg-Id drops a second copy).
func (s *Service) apply(ctx context.Context, key string, spec *events.TaskSpec, run *events.Run, ok bool) error {
	pol := spec.Breaker
	now := s.cfg.Now().UTC()
	outcome := outcomeID(run, ok)
	var from, to record
	var written []byte
	// A task-scoped record counts the outcomes of one task: a task deleted
	// and created again under the same ID is another (events.Run.TaskCreatedAt).
	own := key == run.TaskID && !run.TaskCreatedAt.IsZero()
	var checked, other bool // otherTask, read once whatever the CAS retries
	rev, err := jsutil.CAS(ctx, s.breakers, key, 10, func(cur []byte) ([]byte, error) {
		from = decodeRecord(key, cur)
		if from.applied(outcome) {
			return nil, errApplied
		}
		base := from
		switch {
		case !own:
		case cur == nil && !ok:
			// No record: the deleted task's was removed (watchDeletes),
			// and this failure may be its last, arriving after the task
			// was created again. The schedule says which task is current.
			if !checked {
				var err error
				if other, err = s.otherTask(ctx, run); err != nil {
					return nil, err
				}
				checked = true
			}
			if other {
				return nil, errOtherTask
			}
		case from.TaskCreatedAt.IsZero():
		case run.TaskCreatedAt.Before(from.TaskCreatedAt):
			return nil, errOtherTask
		case run.TaskCreatedAt.After(from.TaskCreatedAt):
			base = decodeRecord(key, nil) // the old task's record: start closed
		}
		if !ok && base.State == events.BreakerClosed && !run.StartedAt.IsZero() && run.StartedAt.Before(base.countFrom()) {
			// A call in flight while the breaker was open, failing after
			// the probe's success closed it: not a failure since.
			return nil, errBeforeClose
		}
		to = base
		to.BreakerRecord = Next(base.BreakerRecord, pol, ok, run.StartedAt, run.FinishedAt, now)
		to.TaskCreatedAt = base.TaskCreatedAt // Next's closing starts a record afresh
		if base.State != events.BreakerClosed && to.State == events.BreakerClosed {
			to.ClosedAt = now
			to.CountFrom = countFrom(base.BreakerRecord, run.StartedAt, now)
		}
		if own {
			to.TaskCreatedAt = run.TaskCreatedAt
		}
		// A closed breaker with no failures needs no record; one that
		// exists is rewritten to name the task it now counts.
		if to.State == from.State && to.Failures == from.Failures && to.RetryAt.Equal(from.RetryAt) && (cur == nil || to.TaskCreatedAt.Equal(from.TaskCreatedAt)) {
			return nil, jsutil.ErrNoChange
		}
		to.remember(outcome, now)
		to.Transition = from.Transition
		if moved(from.BreakerRecord, to.BreakerRecord) {
			to.Transition = transitionOf(key, spec.ID, from.State, to.BreakerRecord, run, outcome, now)
		}
		var err error
		written, err = json.Marshal(to)
		return written, err
	})
	if errors.Is(err, errApplied) {
		// A redelivery of an outcome already applied: publish its
		// transition again, in case that publish is what failed.
		if t := from.Transition; t != nil && t.Outcome == outcome {
			return s.publish(ctx, t)
		}
		return nil
	}
	if errors.Is(err, jsutil.ErrNoChange) {
		return nil
	}
	if errors.Is(err, errBeforeClose) {
		s.cfg.Logger.Debug("failure of a call started before the breaker closed ignored", "key", key, "dispatch", run.DispatchID, "startedAt", run.StartedAt)
		return nil
	}
	if errors.Is(err, errOtherTask) {
		s.cfg.Logger.Info("outcome of a deleted task of the same ID ignored", "key", key, "dispatch", run.DispatchID, "taskCreatedAt", run.TaskCreatedAt)
		return nil
	}
	if err != nil {
		return err
	}
	s.records.Put(key, rev, written)
	if !moved(from.BreakerRecord, to.BreakerRecord) {
		return nil
	}
	s.cfg.Metrics.BreakerTransitions.WithLabelValues(string(to.State)).Inc()
	s.cfg.Logger.Info("breaker transition", "key", key, "from", from.State, "to", to.State, "failures", to.Failures)
	return s.publish(ctx, to.Transition)
}

// errApplied ends apply's CAS for an outcome the record already applied.
var errApplied = errors.New("outcome already applied")

// errBeforeClose ends apply's CAS for a failure of a call that started
// before the closed breaker's cut-off (countFrom).
var errBeforeClose = errors.New("failure of a call started before the closing")

// errOtherTask ends apply's CAS for an outcome of a task deleted since.
var errOtherTask = errors.New("outcome of another task of the same ID")

// otherTask reports whether run belongs to another task than the one
// flyball-schedules holds under its ID: the schedule was created at
// another time, or there is none (a task's runs come from its schedule,
// which the governor writes before its first dispatch and deletes right
// after the spec: governor applyDelete removes the spec first, so no
// signal can write a schedule back for a deleted task). In the moment
// between the two deletes the schedule still names the deleted task, and
// a failure whose spec this service's view still holds counts; the
// record it writes goes with the sweeper's orphan removal. A schedule
// without createdAt (written by hand, or by flyball before 2026-11-27)
// tells nothing, and the run counts.
func (s *Service) otherTask(ctx context.Context, run *events.Run) (bool, error) {
	ent, err := s.schedules.Get(ctx, run.TaskID)
	if jsutil.IsKeyMissing(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("read schedule %s: %w", run.TaskID, err)
	}
	var st struct {
		CreatedAt time.Time `json:"createdAt"`
	}
	if json.Unmarshal(ent.Value(), &st) != nil {
		st.CreatedAt = time.Time{} // unreadable: it tells nothing either
	}
	return governor.OtherCreatedAt(st.CreatedAt, run.TaskCreatedAt), nil
}

// moved reports whether from → to is a transition to publish: a change of
// state, or an open breaker re-opened with a new retryAt.
func moved(from, to executor.BreakerRecord) bool {
	if to.State == from.State {
		return to.State == events.BreakerOpen && !to.RetryAt.Equal(from.RetryAt)
	}
	return true
}

// transitionOf is the event for the transition an outcome made. Its id is
// deterministic: the key, the new state and the outcome.
func transitionOf(key, taskID string, from events.BreakerState, to executor.BreakerRecord, run *events.Run, outcome string, now time.Time) *storedTransition {
	tr := events.BreakerTransition{
		Key: key, TaskID: taskID, From: from, To: to.State, Failures: to.Failures,
		OpenDelay: to.OpenDelay, At: now, Reason: run.Error,
	}
	if taskID == run.TaskID {
		tr.TaskCreatedAt = run.TaskCreatedAt
	}
	if to.State == events.BreakerOpen {
		r := to.RetryAt
		tr.RetryAt = &r
	}
	return &storedTransition{
		EventID: fmt.Sprintf("breaker:%s:%s:%s", key, to.State, outcome), Outcome: outcome, BreakerTransition: tr,
	}
}

// Next is the breaker state machine: the record after one attempt outcome
// whose call started at started and ended at finished (zero when the
// event does not say), applied at now. An open breaker whose retryAt
// passed is treated as half-open: the attempt that reached the target was
// the probe.
//
// A failure is dated by its finished, never later than now (now when the
// event does not say): the opening it makes and its retryAt, and whether
// it came before retryAt. A lagging breaker service (down, or behind on
// RUNS) dated them by its own clock when it caught up: a success of a
// call started after the failures tripped the breaker, and before it
// caught up, was then taken for a call in flight at the opening and
// ignored, and the recovered target held for a whole openDelay. A retryAt
// already past when the failure is applied makes the breaker half-open at
// once (watchOpen): the next call is the probe.
//
// A success closes the breaker from any state, except that an open or
// half-open breaker ignores one whose call started before it opened: the
// call was admitted before the failures tripped it (a slow request still
// in flight), and its 200 says nothing about the target since. Closing on
// it would send full traffic at a target that just failed
// failureThreshold times. The probe, and any call let through after the
// opening, started later and closes it. A success without a start time
// (an event from an executor that predates startedAt) closes it, as
// before. The opening is compared with the start time, not the half-open
// transition: the executor lets the probe through an open breaker past
// retryAt when the transition is late, so a probe may start before it.
// While closed, any success resets the failure count, as it always did.
//
// A failed probe re-opens the breaker for the current period doubled, up
// to pol.MaxOpenDelay, and never for less than the current period (pol is
// the policy of the task whose outcome this is; a host breaker's tasks
// may have other caps, or the task lowered its own).
//
// A failure re-opens an open breaker past retryAt, or a half-open one,
// only if its call started after the opening (or does not say when): a
// call in flight when the breaker opened may fail long after retryAt (a
// timeout), and is no probe. A half-open breaker last written more than
// closeClockMargin after retryAt, by this service's clock (it turned
// half-open late, or has applied outcomes since: lagged), also ignores a
// failure that happened more than closeClockMargin before retryAt: the
// backlog of a lagging breaker service. One that turned half-open on time
// does not: the runs are stamped by the NATS server's clock, which may be
// behind this service's by more than that margin, and its probe's
// failure looked earlier than retryAt.
func Next(b executor.BreakerRecord, pol *events.BreakerPolicy, ok bool, started, finished, now time.Time) executor.BreakerRecord {
	lagged := b.State == events.BreakerHalfOpen && b.UpdatedAt.After(b.RetryAt.Add(closeClockMargin))
	b.UpdatedAt = now
	at := now // when the failure happened
	if !finished.IsZero() && finished.Before(now) {
		at = finished.UTC()
	}
	if ok {
		if b.State != events.BreakerClosed && !started.IsZero() && started.Before(openedAt(b)) {
			return b
		}
		return executor.BreakerRecord{Key: b.Key, State: events.BreakerClosed, UpdatedAt: now}
	}
	b.Failures++
	switch b.State {
	case events.BreakerOpen, events.BreakerHalfOpen:
		if b.State == events.BreakerOpen && at.Before(b.RetryAt) ||
			lagged && at.Before(b.RetryAt.Add(-closeClockMargin)) ||
			!started.IsZero() && started.Before(openedAt(b)) {
			// A failure reported while open (an attempt already in flight
			// when it opened) does not extend the delay. Nor does one
			// that happened well before retryAt, applied once the breaker
			// is half-open, if it turned half-open late (lagged): a
			// lagging breaker service, whose retryAt passed before it
			// caught up, applies the failures of the calls the executors
			// made while its record still said closed, and no probe
			// starts before retryAt, less the clocks' skew. A breaker
			// that turned half-open on time takes such a failure for the
			// probe's: its clock may run ahead of the server's that
			// stamps finishedAt, and the probe it let through fails
			// "before" retryAt (it stayed half-open, and the executors
			// probed again once the probe claim ran out). Nor does one of a
			// call that started before the opening and ends past retryAt:
			// it is not the probe, and taking it for the probe's failure
			// re-opened the breaker for twice as long, and the real probe,
			// started before that re-opening, had its success ignored.
			return b
		}
		// Doubled, up to the cap of the task whose probe failed, but never
		// shorter than the current period: a host breaker is shared by
		// tasks of different caps, and one opened for an hour by a task
		// capped at 1h re-opened for 5 min when a task with the default
		// cap probed and failed.
		d := min(b.OpenDelay*2, max(pol.MaxOpenDelay, b.OpenDelay))
		if d <= 0 {
			d = pol.OpenDelay
		}
		b.State, b.OpenDelay, b.RetryAt = events.BreakerOpen, d, at.Add(d.D())
	default:
		if b.Failures >= pol.FailureThreshold {
			b.State, b.OpenDelay, b.RetryAt = events.BreakerOpen, pol.OpenDelay, at.Add(pol.OpenDelay.D())
		}
	}
	return b
}

// closeClockMargin is how far apart the breaker's and the executors'
// clocks may be for a closed breaker to count the failures of the calls
// its closing released (countFrom).
const closeClockMargin = time.Second

// countFrom is the cut-off a breaker closing at now by a success whose
// call started at started (zero: the event does not say) keeps: while it
// stays closed, a failure of a call started before it is not counted.
// It is the opening, or the probe's start if later, but never later
// than closeClockMargin before the closing: max(opened, min(started,
// now - closeClockMargin)). The calls parked while the breaker was open
// start milliseconds after the closing, stamped by their executor's
// clock; the breaker's own clock at the closing as the cut-off dropped
// every failure of that wave on an executor whose clock was a few
// milliseconds behind. A call in flight before the opening is dropped
// still; a call started after the probe started (a second probe, when
// this service lagged longer than the probe claim lives) counts.
func countFrom(b executor.BreakerRecord, started, now time.Time) time.Time {
	cut := now.Add(-closeClockMargin)
	if !started.IsZero() && started.Before(cut) {
		cut = started
	}
	if opened := openedAt(b); opened.After(cut) {
		cut = opened
	}
	return cut.UTC()
}

// openedAt is when an open or half-open breaker last opened (when the
// failure that opened it happened, Next): every opening sets retryAt to
// that instant plus the openDelay it stores, and half-open keeps both, so
// the record needs no field of its own (and records written before this
// rule have it too).
func openedAt(b executor.BreakerRecord) time.Time {
	return b.RetryAt.Add(-b.OpenDelay.D())
}
