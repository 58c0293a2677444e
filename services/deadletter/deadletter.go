// Package deadletter is the single writer of the DEADLETTER stream. It
// consumes final run.failed events and writes one entry per failed dispatch
// to flyball.deadletter.<id>, carrying the original dispatch, every
// attempt's error (read back from RUNS), the attempt count, the reason and
// timestamps. The entry's Nats-Msg-Id is derived from the dispatch ID, so the
// same failure dead-lettered twice yields one entry.
package deadletter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/lifecycle"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/streams"
)

// Config configures the dead-letter service.
type Config struct {
	svcconf.Common
	// ReconcileInterval is how often the service looks in DISPATCH for
	// dispatches that exhausted their deliveries without a MAX_DELIVERIES
	// advisory reaching ADVISORIES (reconcile.go). A dispatch is
	// dead-lettered once two looks in a row find it. Defaults to 1m.
	ReconcileInterval time.Duration
}

// Service is the dead-letter service.
type Service struct {
	lifecycle.Base
	cfg      Config
	source   string
	dispatch jetstream.Stream
	// runs and dead are read for an exhausted dispatch's stored outcome.
	runs, dead jetstream.Stream
	attempts   jetstream.KeyValue
	// recMu serialises reconcile passes; suspects holds the DISPATCH
	// sequences the last pass found exhausted (reconcile.go).
	recMu    sync.Mutex
	suspects map[uint64]bool
	// refusals ends a stream bind (bindStream) or a read of a slot's
	// outcome (slotdone.Watched) that the server refused.
	refusals jsutil.PubWatch
	// counted holds the entries this process counted lately (write).
	counted recentIDs
}

// New validates cfg.
func New(cfg Config) (*Service, error) {
	if err := cfg.SetDefaults("deadletter"); err != nil {
		return nil, err
	}
	if cfg.ReconcileInterval <= 0 {
		cfg.ReconcileInterval = time.Minute
	}
	return &Service{cfg: cfg, source: jsutil.Source("deadletter", cfg.Instance)}, nil
}

// Start consumes final failures from RUNS.
func (s *Service) Start(ctx context.Context) error {
	runCtx, err := s.Begin(ctx)
	if err != nil {
		return fmt.Errorf("deadletter: %w", err)
	}
	// Before the first stream bind (bindStream).
	s.refusals.Install(s.cfg.JS.Conn())
	// Each names what is missing: the server's "stream not found" does not.
	if s.dispatch, err = s.bindStream(ctx, streams.StreamDispatch); err != nil {
		return fmt.Errorf("deadletter: %w", err)
	}
	if err := streams.Check(&s.dispatch.CachedInfo().Config); err != nil {
		return fmt.Errorf("deadletter: %w", err)
	}
	if s.runs, err = s.bindStream(ctx, streams.StreamRuns); err != nil {
		return fmt.Errorf("deadletter: %w", err)
	}
	if s.dead, err = s.bindStream(ctx, streams.StreamDeadLetter); err != nil {
		return fmt.Errorf("deadletter: %w", err)
	}
	// An entry is stored once per dispatch by its Nats-Msg-Id only
	// within DEADLETTER's duplicate window (write).
	if err := streams.Check(&s.dead.CachedInfo().Config); err != nil {
		return fmt.Errorf("deadletter: %w", err)
	}
	if s.attempts, err = s.cfg.JS.KeyValue(ctx, streams.BucketAttempts); err != nil {
		return fmt.Errorf("deadletter: bind KV %s: %w (run flyball provision, or flyball serve with --ensure-streams)", streams.BucketAttempts, err)
	}
	cc, err := jsutil.Consume(ctx, s.cfg.JS, streams.StreamRuns, streams.ConsumerDeadLetter, s.cfg.Logger, s.cfg.Metrics.PullFailures.WithLabelValues(streams.StreamRuns),
		func(m jetstream.Msg) { s.handle(runCtx, m) })
	if err != nil {
		return fmt.Errorf("deadletter: %w", err)
	}
	s.Track(cc, s.cfg.JS.Conn())
	cc, err = jsutil.Consume(ctx, s.cfg.JS, streams.StreamAdvisories, streams.ConsumerDeadLetter, s.cfg.Logger, s.cfg.Metrics.PullFailures.WithLabelValues(streams.StreamAdvisories),
		func(m jetstream.Msg) { s.handleAdvisory(runCtx, m) })
	if err != nil {
		return fmt.Errorf("deadletter: %w", err)
	}
	s.Track(cc, s.cfg.JS.Conn())
	s.Go(func() { s.reconcileEvery(runCtx) })
	return nil
}

// bindStream binds the stream name. A stream info request the service's
// NATS user may not publish draws no reply, only the server's
// asynchronous -ERR (jsutil.PubWatch): the bind ends at it, and the error
// names the refused subject. It said "context deadline exceeded" after
// the JetStream timeout, with a hint to provision, to a deployment with
// its own NATS users that had upgraded without granting the deadletter
// user RUNS's and DEADLETTER's stream info and direct gets
// (docs/operations.md, upgrading).
func (s *Service) bindStream(ctx context.Context, name string) (jetstream.Stream, error) {
	wctx, unwatch := s.refusals.Watch(ctx, jsutil.APISubject(s.cfg.JS, "STREAM.INFO."+name))
	defer unwatch()
	st, err := s.cfg.JS.Stream(wctx, name)
	if err == nil {
		return st, nil
	}
	if v, ok := jsutil.Refusal(wctx); ok {
		also := ""
		if name != streams.StreamDispatch {
			// Read for an exhausted dispatch's stored outcome.
			also = ", and " + jsutil.APISubject(s.cfg.JS, "DIRECT.GET."+name+".>")
		}
		return nil, fmt.Errorf("stream %s: %w; the deadletter service's NATS user needs it%s (docs/security.md lists its subjects)", name, v, also)
	}
	return nil, fmt.Errorf("stream %s: %w (run flyball provision, or flyball serve with --ensure-streams)", name, err)
}

// EntryID is the Nats-Msg-Id (and event id) of a dispatch's dead-letter entry.
func EntryID(dispatchID string) string { return "deadletter:" + dispatchID }

func (s *Service) handle(ctx context.Context, m jetstream.Msg) {
	subj, err := events.ParseSubject(m.Subject())
	if err != nil {
		jsutil.Terminate(m, "bad subject: "+m.Subject(), s.cfg.Metrics, s.cfg.Logger)
		return
	}
	// The entry goes to the task the subject names, as the governor and
	// the breaker read it: not to whichever task the data names.
	var run events.Run
	if !jsutil.DecodeRun(m, subj, &run, s.cfg.Metrics, s.cfg.Logger) {
		return
	}
	if !run.Final {
		_ = m.Ack()
		return
	}
	if run.Dispatch == nil {
		jsutil.Terminate(m, "malformed run: final failure without its dispatch", s.cfg.Metrics, s.cfg.Logger)
		return
	}
	// Redelivered, an earlier delivery may have stored the entry without
	// counting it (write). Metadata that does not read counts as a
	// redelivery: better a count twice than none.
	md, err := m.Metadata()
	retry := err != nil || md.NumDelivered > 1
	_, err = s.write(ctx, &run, *run.Dispatch, run.DeadLetterReason(), retry)
	if jsutil.TooLarge(err) {
		// No redelivery makes it fit (the attempts' errors add up past
		// max_payload): one forged attempt must not be nakked forever.
		jsutil.Terminate(m, "cannot be dead-lettered: "+err.Error(), s.cfg.Metrics, s.cfg.Logger)
		return
	}
	if err != nil {
		s.cfg.Logger.Warn("dead-letter failed; retrying", "task", run.TaskID, "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	_ = m.Ack()
}

// write publishes the dead-letter entry for a dispatch whose last word is
// final, and reports whether it counted the entry in
// flyball_deadletter_total and logged it. Its Nats-Msg-Id makes a second
// write of the same failure store nothing; whether that write counts is
// the rule below.
//
// The entry is counted (and logged) by the write that stores it, or, when
// that write never learnt it did (its PubAck lost: an error, the trigger
// nakked) or stopped before the count, by a retry of the same trigger
// that finds it stored: a redelivered final failure or advisory, or a
// dispatch still in DISPATCH, which is deleted only after its entry is
// counted. retry says the write is one. A write that finds the entry
// stored without being a retry does not count it: another trigger of
// the same failure stored it, and counts it or is retried itself. Each
// process remembers the entries it counted for countedKeep and counts
// none twice, so an ack lost after the count is not counted again. So
// no entry goes uncounted, and one is counted twice only when its
// trigger comes back to another process (or after a restart, or past
// countedKeep) after the count: the process that counted it stopped
// before the ack (or the dispatch's delete), or its ack was lost; or
// the first handling found the entry stored by another trigger and
// its ack was lost.
func (s *Service) write(ctx context.Context, final *events.Run, d events.Dispatch, reason string, retry bool) (bool, error) {
	entry := events.DeadLetter{
		TaskID: final.TaskID, Reason: reason, Dispatch: d, Attempts: final.Attempt,
		DeadLetteredAt: s.cfg.Now().UTC(),
	}
	var err error
	if entry.Errors, err = s.attemptErrors(ctx, final); err != nil {
		return false, fmt.Errorf("read attempt history: %w", err)
	}
	if len(entry.Errors) > 0 {
		entry.FirstFailedAt = entry.Errors[0].At
		entry.LastFailedAt = entry.Errors[len(entry.Errors)-1].At
		entry.Attempts = max(entry.Attempts, entry.Errors[len(entry.Errors)-1].Attempt)
	}
	stored, err := jsutil.PublishNewEvent(ctx, s.cfg.JS, events.DeadLetterSubject(final.TaskID), EntryID(final.DispatchID),
		events.TypeDeadLettered, s.source, final.TaskID, entry, entry.DeadLetteredAt)
	if err != nil {
		return false, err
	}
	if !stored && !retry || !s.counted.add(EntryID(final.DispatchID), s.cfg.Now()) {
		// Another final failure of the same dispatch, the advisory and
		// the reconcile pass both at once, or a redelivery after the
		// count (its ack was lost): the entry is stored and was counted.
		s.cfg.Logger.Debug("dead letter already stored", "task", final.TaskID, "dispatch", final.DispatchID)
		return false, nil
	}
	s.cfg.Metrics.DeadLetterTotal.WithLabelValues(reason).Inc()
	s.cfg.Logger.Warn("run dead-lettered", "task", final.TaskID, "dispatch", final.DispatchID, "reason", reason, "attempts", entry.Attempts)
	return true, nil
}

// AttemptClockSkew is how far an executor's clock may run ahead of the
// NATS server's before a dead-letter entry misses attempts. The executor
// calls a slot when its own clock reaches scheduledAt, while RUNS stores
// the attempt by the server's clock: an executor ahead by d stores its
// first attempt up to d before scheduledAt by the server's. The lookup
// reads RUNS from scheduledAt less this, on the task's own run.failed
// subject, and keeps the events of this dispatch only, so the margin
// costs the read at most the task's failed attempts of the minute before
// the slot (its earlier dispatches', which run one at a time).
const AttemptClockSkew = time.Minute

// attemptErrors reads every failed attempt of the dispatch back from RUNS,
// so the entry is complete even if this service restarted in between.
// It reads from AttemptClockSkew before the slot: attempts are stored by
// the server's clock and the slot is called by the executor's.
// The lookup's consumer is deleted when it is done: nats.go deletes the
// ordered consumer's previous consumers at each fetch, but not the last,
// which stayed on RUNS for nats.go's default inactive threshold (5
// minutes), one per dead letter in a burst. The 30 s threshold covers a
// delete that fails.
func (s *Service) attemptErrors(ctx context.Context, final *events.Run) ([]events.AttemptError, error) {
	start := final.ScheduledAt.Add(-AttemptClockSkew)
	cons, err := s.cfg.JS.OrderedConsumer(ctx, streams.StreamRuns, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{events.RunSubject(events.OutcomeFailed, final.TaskID)},
		DeliverPolicy:     jetstream.DeliverByStartTimePolicy,
		OptStartTime:      &start,
		InactiveThreshold: jsutil.OrderedInactiveThreshold,
	})
	if err != nil {
		return nil, err
	}
	defer s.deleteLookup(ctx, cons)
	out := []events.AttemptError{} // an array even when empty (a crash on the first attempt records none), never null
	seen := map[int]int{}          // attempt → its index in out
	for {
		batch, err := cons.FetchNoWait(256)
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			e, err := events.Decode(m.Headers(), m.Data())
			if err != nil {
				continue
			}
			var r events.Run
			if events.DecodeRun(e, &r) != nil || r.DispatchID != final.DispatchID {
				continue
			}
			ae := events.AttemptError{Attempt: r.Attempt, At: r.FinishedAt, Status: r.Status, Error: r.Error}
			if i, ok := seen[r.Attempt]; ok {
				// The executor repeats an attempt number whose record it
				// could not write; a final failure of the repeat is the
				// call that ended the run. A final one that made no call
				// (maxAttempts lowered meanwhile: no StartedAt) leaves the
				// call's own error.
				if r.Final && !r.StartedAt.IsZero() {
					out[i] = ae
				}
				continue
			}
			seen[r.Attempt] = len(out)
			out = append(out, ae)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, err
		}
		if n == 0 {
			break
		}
	}
	if _, ok := seen[final.Attempt]; final.Attempt > 0 && !ok {
		out = append(out, events.AttemptError{Attempt: final.Attempt, At: final.FinishedAt, Status: final.Status, Error: final.Error})
	}
	slices.SortFunc(out, func(a, b events.AttemptError) int { return a.Attempt - b.Attempt })
	return out, nil
}

// deleteLookup deletes the consumer an attempt lookup reads RUNS with.
func (s *Service) deleteLookup(ctx context.Context, cons jetstream.Consumer) {
	if err := jsutil.DeleteOrdered(ctx, s.cfg.JS, streams.StreamRuns, cons); err != nil {
		s.cfg.Logger.Debug("attempt lookup's consumer not deleted; the server removes it once idle", "idleFor", jsutil.OrderedInactiveThreshold, "err", err)
	}
}

// countedKeep is how long a process remembers an entry it counted
// (write): past the redeliveries of its trigger (AckWait 30 s, a nak's
// 1 s) and the reconcile passes (two of ReconcileInterval, 1m by
// default) that can handle it again. One handled again later is counted
// again.
const countedKeep = 10 * time.Minute

// recentIDs is the set of the entry IDs counted in the last countedKeep.
type recentIDs struct {
	mu    sync.Mutex
	at    map[string]time.Time
	order []string // oldest first
}

// add records id and reports whether it was not recorded, forgetting the
// IDs recorded more than countedKeep before now.
func (r *recentIDs) add(id string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.order) > 0 && now.Sub(r.at[r.order[0]]) > countedKeep {
		delete(r.at, r.order[0])
		r.order = r.order[1:]
	}
	if _, ok := r.at[id]; ok {
		return false
	}
	if r.at == nil {
		r.at = map[string]time.Time{}
	}
	r.at[id] = now
	r.order = append(r.order, id)
	return true
}
