package sweeper

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/kvcache"
	"github.com/flyballhq/flyball/services/internal/query"
	"github.com/flyballhq/flyball/services/internal/slotdone"
	"github.com/flyballhq/flyball/streams"
)

// view is the sweeper's in-memory picture of every task, kept current by
// KV watches so a sweep costs no KV reads.
type view struct {
	mu        sync.Mutex
	specs     map[string]query.Expectation // task → the cadence its staleness is measured against
	schedules map[string]schedule
	// stale holds schedules written since the last sweep, undecoded. Every
	// run rewrites its task's schedule, and a sweep reads each task once,
	// so decoding at the sweep costs one decode per task per sweep instead
	// of one per run (1,000 tasks at 1s: 15 times fewer at the default
	// interval). Its size is capped by maxStale.
	stale    map[string][]byte
	caughtUp bool // the schedules watch has delivered every stored value
	breakers map[string]breakerSeen
	// created is the createdAt stored with each task's spec, when it has
	// one: a task-scoped breaker record naming another is a deleted
	// task's of the same ID (sweepTasks).
	created map[string]time.Time
	// hostKeys is the host breaker key of each host-scoped task: a host
	// breaker that none of them names is forgotten (hostBreakerIdle).
	hostKeys map[string]string
	ready    sync.WaitGroup
}

// breakerSeen is the part of a flyball-breakers record a sweep reads,
// and the revision it read it at: a sweep that judges the record an
// orphan deletes only that revision (removeOrphans).
type breakerSeen struct {
	State     events.BreakerState `json:"state"`
	UpdatedAt time.Time           `json:"updatedAt"`
	// TaskCreatedAt is the createdAt of the task whose outcomes a
	// task-scoped record counts (executor.BreakerRecord), or zero.
	TaskCreatedAt time.Time `json:"taskCreatedAt"`
	rev           uint64
}

// hostBreakerIdle is how long a host breaker that no task names must go
// unwritten before the sweeper deletes it: a task just created (its spec
// not yet in the view) whose outcomes wrote it keeps it, and a host no
// task uses any more does not keep an open or half-open breaker (and
// flyball_breakers_open) for good.
const hostBreakerIdle = 10 * time.Minute

// maxStale bounds the undecoded schedules the view holds between sweeps
// (about 1 KiB each); past it they are decoded at once.
const maxStale = 1 << 16

// schedule is the part of a stored gov.State a sweep reads: skipping the
// trail and the one-shot hint keeps the decode cheap and the view small.
type schedule struct {
	TaskID          string     `json:"taskId"`
	NextRunAt       time.Time  `json:"nextRunAt"`
	Source          gov.Source `json:"source"`
	Paused          bool       `json:"paused"`
	PausedUntil     time.Time  `json:"pausedUntil"`
	CreatedAt       time.Time  `json:"createdAt"`
	LastScheduledAt time.Time  `json:"lastScheduledAt"`
	LastSuccessAt   time.Time  `json:"lastSuccessAt"`
	// IntervalHint is the cadence staleness is measured against while it
	// lasts, as flyball status measures it.
	IntervalHint *gov.IntervalHint `json:"intervalHint"`
}

func newView() *view {
	v := &view{
		specs: map[string]query.Expectation{}, schedules: map[string]schedule{},
		stale: map[string][]byte{}, breakers: map[string]breakerSeen{},
		created: map[string]time.Time{}, hostKeys: map[string]string{},
	}
	v.ready.Add(3)
	return v
}

// watch keeps one bucket mirrored into the view until ctx ends, watching
// again if a watch ends (kvcache.Follower); prune forgets the keys a
// replay no longer holds. loaded runs once, when the first load is done or
// the watch gives up before it.
//
// Nothing reaches the view once ctx has ended: the sweeper ends the
// schedules watch to scan instead (pickScheduleSource), and a delivery
// the watch was still making would overwrite the scan's schedule with an
// older one (TestAnEndedWatchDoesNotOverwriteTheScan). The check is
// under v.mu, which the scan takes after the cancel.
func (s *Service) watch(ctx context.Context, kv jetstream.KeyValue, apply func(jetstream.KeyValueEntry), prune func(keep func(string) bool), caughtUp, loaded func()) error {
	v := s.view
	var once sync.Once
	f := kvcache.Follower{
		KV: kv, Conn: s.cfg.JS.Conn(), Log: s.cfg.Logger,
		Apply: func(e jetstream.KeyValueEntry) {
			v.mu.Lock()
			if ctx.Err() == nil {
				apply(e)
			}
			v.mu.Unlock()
		},
		Prune: func(keep func(string) bool) {
			v.mu.Lock()
			if ctx.Err() == nil {
				prune(keep)
			}
			v.mu.Unlock()
		},
		Loaded: func() {
			if caughtUp != nil {
				v.mu.Lock()
				if ctx.Err() == nil {
					caughtUp()
				}
				v.mu.Unlock()
			}
			once.Do(loaded)
		},
	}
	if s.tuneFollow != nil {
		s.tuneFollow(kv.Bucket(), &f)
	}
	follow, err := f.Start(ctx)
	if err != nil {
		return err
	}
	s.Go(func() {
		defer once.Do(loaded)
		follow()
	})
	return nil
}

// forget returns a prune for m: it deletes the keys keep refuses.
func forget[V any](m map[string]V) func(keep func(string) bool) {
	return func(keep func(string) bool) {
		maps.DeleteFunc(m, func(k string, _ V) bool { return !keep(k) })
	}
}

func (s *Service) watchAll(ctx context.Context) error {
	v := s.view
	if err := s.watch(ctx, s.tasks, func(e jetstream.KeyValueEntry) {
		if e.Operation() != jetstream.KeyValuePut {
			delete(v.specs, e.Key())
			delete(v.created, e.Key())
			delete(v.hostKeys, e.Key())
			return
		}
		var spec events.TaskSpec
		if json.Unmarshal(e.Value(), &spec) == nil {
			v.specs[e.Key()] = query.Expect(&spec)
			if at := storedCreatedAt(e.Value()); !at.IsZero() {
				v.created[e.Key()] = at
			} else {
				delete(v.created, e.Key())
			}
			if key := executor.BreakerKey(&spec); key != spec.ID {
				v.hostKeys[e.Key()] = key
			} else {
				delete(v.hostKeys, e.Key())
			}
		}
	}, func(keep func(string) bool) {
		forget(v.specs)(keep)
		forget(v.created)(keep)
		forget(v.hostKeys)(keep)
	}, nil, v.ready.Done); err != nil {
		return err
	}
	// Schedules start watched; pickScheduleSource may switch to scans.
	watchCtx, stop := context.WithCancel(ctx)
	if err := s.watchSchedules(watchCtx, v.ready.Done); err != nil {
		stop()
		return err
	}
	s.stopWatch = stop
	return s.watch(ctx, s.breakers, func(e jetstream.KeyValueEntry) {
		if e.Operation() != jetstream.KeyValuePut {
			delete(v.breakers, e.Key())
			return
		}
		var b breakerSeen
		if json.Unmarshal(e.Value(), &b) == nil {
			b.rev = e.Revision()
			v.breakers[e.Key()] = b
		}
	}, forget(v.breakers), nil, v.ready.Done)
}

// putSchedule records a written schedule. Callers hold v.mu.
func (v *view) putSchedule(key string, raw []byte) {
	if !v.caughtUp {
		// The initial load: every key arrives once, so decoding now costs
		// the same and holds no undecoded copies.
		v.decode(strings.Clone(key), raw)
		return
	}
	v.stale[strings.Clone(key)] = raw
	if len(v.stale) >= maxStale {
		v.decodeStale()
	}
}

// pruneSchedules forgets the schedules a replayed watch no longer holds.
// Callers hold v.mu.
func (v *view) pruneSchedules(keep func(string) bool) {
	forget(v.schedules)(keep)
	forget(v.stale)(keep)
}

// deleteSchedule forgets a deleted or purged schedule. Callers hold v.mu.
func (v *view) deleteSchedule(key string) {
	delete(v.schedules, key)
	delete(v.stale, key)
}

// decode stores one schedule. An unreadable value (written by hand or by
// another version, a bad restore) drops it: the task is one with no
// schedule, which the sweeper repairs (reschedule). Kept (as it was), the
// previous value hid it, and the task never ran again. Only the fields
// the sweeper reads (schedule) count: a wrong type in a field only the
// governor reads decodes here, and for the timer, which dispatches the
// slot; the governor rebuilds such a value at the slot's outcome (or the
// zombie re-dispatch's skip), and at any command. Decoding every write
// into the governor's whole state would cost each write for a value the
// governor mends at the task's next signal. Callers hold v.mu.
func (v *view) decode(key string, raw []byte) {
	st, ok := decodeSchedule(raw)
	if !ok {
		delete(v.schedules, key)
		return
	}
	v.schedules[key] = st
}

// decodeSchedule decodes a stored schedule, and reports whether it is
// one: a value that does not decode is not, nor one that decodes but
// names no decision (gov.Undecided: JSON null, {}), which the governor
// takes for unreadable too. Taken for a schedule with no next run (as it
// was), it was never repaired, and the task never ran again.
func decodeSchedule(raw []byte) (schedule, bool) {
	var st schedule
	if json.Unmarshal(raw, &st) != nil || gov.Undecided(st.NextRunAt, st.Source, st.Paused) {
		return schedule{}, false
	}
	return st, true
}

// decodeStale decodes the schedules written since the last call. Callers
// hold v.mu.
func (v *view) decodeStale() {
	for key, raw := range v.stale {
		v.decode(key, raw)
	}
	clear(v.stale)
}

// sweepTasks handles zombies, staleness, orphans and the breaker gauge,
// at clock, a reading of s.cfg.Now. Times of other hosts (a schedule's,
// a breaker's) are compared with its wall-clock reading; the sweeper's
// own elapsed times (unscheduledFor) are measured on its monotonic one,
// which UTC drops.
func (s *Service) sweepTasks(ctx context.Context, clock time.Time) {
	now := clock.UTC()
	v := s.view
	v.mu.Lock()
	v.decodeStale()
	var zombies []schedule
	var orphanSchedules, orphanBreakers []string
	judged := map[string]breakerSeen{} // orphan breaker → the record judged, and its revision
	maxScore, open := 0.0, 0
	scores := make(map[string]float64, len(v.schedules))
	pausedTasks := map[string]struct{}{}
	for id, st := range v.schedules {
		expected, ok := v.specs[id]
		if !ok {
			orphanSchedules = append(orphanSchedules, id)
			continue
		}
		score := expected.Hinted(st.IntervalHint, now).Planned(st.Source, st.LastScheduledAt, st.NextRunAt).Score(now, st.LastSuccessAt, st.CreatedAt)
		scores[id] = score
		// A paused task grows stale on purpose. A timed pause whose end
		// has passed stays in the state until the run after it: it no
		// longer counts as paused, for staleness or zombies.
		paused := gov.PausedAt(st.Paused, st.PausedUntil, now)
		if !paused {
			maxScore = max(maxScore, score)
		} else {
			pausedTasks[id] = struct{}{}
		}
		if s.zombie(st, now) {
			zombies = append(zombies, st)
		}
	}
	// A spec with no schedule, or an unreadable one, is never dispatched
	// (repair.go).
	var missing []string
	for id := range v.specs {
		if _, ok := v.schedules[id]; !ok {
			missing = append(missing, id)
		}
	}
	// A paused task is not dispatched, so nothing probes its breaker:
	// half-open, it stays so for the whole pause. It is not counted as
	// open (flyball_breakers_open, FlyballBreakerOpen), nor a host
	// breaker every task of which is paused.
	hostsInUse := make(map[string]struct{}, len(v.hostKeys))
	hostsActive := make(map[string]struct{}, len(v.hostKeys))
	for id, key := range v.hostKeys {
		hostsInUse[key] = struct{}{}
		if _, p := pausedTasks[id]; !p {
			hostsActive[key] = struct{}{}
		}
	}
	// Nor is a half-open breaker none of whose tasks has a run due: the
	// next call is the probe, and nothing is held back until it comes. A
	// daily task whose last attempt re-opened its breaker is half-open
	// from retryAt until its next run, and FlyballBreakerOpen fired for
	// hours. It counts while a task of it is due (its probe pending or in
	// flight, the other calls waiting for it: an open breaker flapping
	// through half-open stays counted), or has no schedule yet (the
	// sweeper repairs it, and its run comes).
	probing := make(map[string]struct{})
	for id := range v.specs {
		if _, p := pausedTasks[id]; p {
			continue
		}
		if st, ok := v.schedules[id]; ok && (st.NextRunAt.IsZero() || st.NextRunAt.After(now)) {
			continue
		}
		key := id
		if host, ok := v.hostKeys[id]; ok {
			key = host
		}
		probing[key] = struct{}{}
	}
	for key, b := range v.breakers {
		_, used := hostsInUse[key]
		switch {
		case !strings.HasPrefix(key, events.HostKeyPrefix):
			if _, ok := v.specs[key]; !ok {
				orphanBreakers = append(orphanBreakers, key)
				judged[key] = b
			} else if _, host := v.hostKeys[key]; host {
				// The task's own record, from before its switch to
				// breaker.scope: host: no outcome writes it again, and
				// it would stay half-open (and counted) for good. The
				// breaker service deletes it at the switch; this is the
				// backstop.
				orphanBreakers = append(orphanBreakers, key)
				judged[key] = b
				continue
			} else if gov.OtherCreatedAt(b.TaskCreatedAt, v.created[key]) {
				// The record of a deleted task of the same ID: the breaker
				// service deletes it when its watch sees the delete, and
				// missed it (down, or its watch ended: every reconnect
				// ends it). The executor does not apply it to the task
				// created again, whose first outcome starts from a closed
				// breaker; until then it would be counted open.
				orphanBreakers = append(orphanBreakers, key)
				judged[key] = b
				continue
			}
		case !used && now.Sub(b.UpdatedAt) > hostBreakerIdle:
			// No task names this host breaker any more: nothing probes
			// it, and it would stay half-open (and counted) for good.
			// Deleted only at the revision judged idle: one written
			// since (a new task, its spec not yet in the view, opened
			// it) is no orphan.
			orphanBreakers = append(orphanBreakers, key)
			judged[key] = b
			continue
		}
		if b.State == events.BreakerClosed {
			continue
		}
		if _, p := pausedTasks[key]; p {
			continue
		}
		if _, active := hostsActive[key]; used && !active {
			continue
		}
		if _, spec := v.specs[key]; b.State == events.BreakerHalfOpen && (used || spec) {
			if _, p := probing[key]; !p {
				continue
			}
		}
		open++
	}
	v.mu.Unlock()

	s.scores.Store(&scores)
	s.exportPerTask(scores)
	s.cfg.Metrics.StalenessMax.Set(maxScore)
	s.cfg.Metrics.BreakersOpen.Set(float64(open))
	floors := newAckFloors()
	for _, st := range zombies {
		s.renudge(ctx, floors, st, now)
	}
	for _, id := range s.unscheduledFor(missing, clock) {
		s.reschedule(ctx, floors, id, now)
	}
	s.removeOrphans(ctx, s.schedules, orphanSchedules, nil)
	s.removeOrphans(ctx, s.breakers, orphanBreakers, judged)
}

// Scores returns the staleness score of every task at the last sweep.
func (s *Service) Scores() map[string]float64 {
	if p := s.scores.Load(); p != nil {
		return *p
	}
	return nil
}

// zombie reports whether st names a slot more than ZombieAfter past due
// that was never dispatched or never finished. A paused task is not one;
// a timed pause whose end has passed no longer counts as paused.
func (s *Service) zombie(st schedule, now time.Time) bool {
	return !st.NextRunAt.IsZero() && !gov.PausedAt(st.Paused, st.PausedUntil, now) &&
		now.Sub(st.NextRunAt) > s.cfg.ZombieAfter && st.LastScheduledAt.Before(st.NextRunAt)
}

// renudge re-dispatches a run that fell due long ago and never completed,
// unless a dispatch is still pending, or a final outcome is on RUNS or the
// slot's dead letter on DEADLETTER that the governor has not acked yet
// (then it is just behind). An outcome it has acked, while its schedule
// still names the slot, is a decision that was lost (repair.go): the slot
// is dispatched again, and the executor reports it skipped without a call.
func (s *Service) renudge(ctx context.Context, floors *ackFloors, st schedule, now time.Time) {
	id := st.TaskID
	// The ack floors before the schedule re-read (ackFloors): an outcome
	// the governor applies after the re-read, moving the schedule on,
	// must not look applied to the slot the re-read names.
	if err := floors.need(ctx, s.runs, s.dead); err != nil {
		s.cfg.Logger.Warn("zombie check failed", "task", id, "err", err)
		return
	}
	st, ok := s.current(ctx, st, now)
	if !ok {
		return
	}
	if _, err := s.dispatch.GetLastMsgForSubject(ctx, events.DispatchSubject(id)); err == nil {
		return // still pending: the executor has it
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		s.cfg.Logger.Warn("zombie check failed", "task", id, "err", err)
		return
	}
	// A final outcome on RUNS, or the slot's dead letter (a max-deliveries
	// entry has no run.failed on RUNS): the governor is just behind, unless
	// it has acked it. Re-dispatching would otherwise call the target again
	// for a run that is done.
	lost := false
	// Watched: a direct get the sweeper's user may not make ends the read
	// at once, naming it, rather than holding the sweep for the JetStream
	// timeout, zombie after zombie.
	w := slotdone.Watched{Refusals: &s.refusals, JS: s.cfg.JS, Service: "sweeper"}
	if o, done, err := w.Find(ctx, s.runs, s.dead, id, st.NextRunAt, st.CreatedAt, slotdone.SlotOrLater); err != nil {
		s.cfg.Logger.Warn("zombie check failed", "task", id, "err", err)
		return // the next sweep looks again
	} else if done {
		if lost, err = s.governorApplied(floors, o); err != nil {
			s.cfg.Logger.Warn("zombie check failed", "task", id, "err", err)
			return
		} else if !lost {
			return
		}
	}
	reason := "zombie"
	if lost {
		reason = events.ReasonLostWrite
	}
	d := events.Dispatch{
		DispatchID: events.DispatchID(id, st.NextRunAt), TaskID: id, ScheduledAt: st.NextRunAt.UTC(),
		FiredAt: now, Source: string(st.Source), Reason: reason, TaskCreatedAt: st.CreatedAt.UTC(),
	}
	stored, err := jsutil.PublishNewEvent(ctx, s.cfg.JS, events.DispatchSubject(id), d.DispatchID, events.TypeRunDue, s.source, id, d, now)
	switch {
	case streams.IsSubjectFull(err):
		// A dispatch of the task was stored between the check above and
		// this publish (the timer's, say): as there, the executor has it,
		// and this sweep re-nudged nothing. Only the per-subject limit
		// says so: 10077 for DISPATCH full (max_msgs, max_bytes) or a
		// storage error is a failure, below.
		s.cfg.Logger.Debug("zombie re-nudge not needed: a dispatch of the task was stored since the check", "task", id, "due", st.NextRunAt)
		return
	case err != nil:
		s.cfg.Logger.Warn("zombie re-nudge failed; next sweep retries", "task", id, "err", err)
		return
	case !stored:
		// The same dispatch stored within DISPATCH's duplicate window by
		// another sweeper replica or the timer: this sweep added nothing, and counted again it
		// would show two repairs for one.
		// If that dispatch has left DISPATCH without an outcome (the slot
		// dispatched late, then taken off the work queue), the slot is
		// still a zombie, and the first sweep past the window stores it.
		// Logged at Info: at most one per sweep for each such slot while
		// the window lasts, and zombies are rare.
		s.cfg.Logger.Info("zombie re-nudge dropped: the slot was dispatched within DISPATCH's duplicate window; the next sweep tries again",
			"task", id, "due", st.NextRunAt, "reason", reason)
		return
	}
	if lost {
		s.cfg.Metrics.SchedulesRepaired.WithLabelValues(repairLostWrite).Inc()
		s.cfg.Logger.Warn("schedule write lost: the governor applied the outcome of this slot or a later one; dispatched the slot again for the executor to skip it", "task", id, "due", st.NextRunAt)
		return
	}
	s.cfg.Metrics.ZombiesRenudged.Inc()
	s.cfg.Logger.Warn("zombie run re-nudged: due long ago, never dispatched or never finished", "task", id, "due", st.NextRunAt)
}

// removeOrphans deletes the keys of kv a sweep judged orphans. judged,
// when it holds a key, is the breaker record the sweep judged, and its
// revision: a key written since is left for the next sweep to judge
// again.
func (s *Service) removeOrphans(ctx context.Context, kv jetstream.KeyValue, keys []string, judged map[string]breakerSeen) {
	bucket := kv.Bucket()
	for _, k := range keys {
		// The watches of the two buckets are independent: a sweep can see
		// a new task's schedule before its spec. Ask KV before deleting,
		// and delete only the revision read before asking: a task created
		// again meanwhile has written a new one, which a plain delete
		// would remove, leaving a spec that never runs. A key in judged
		// is deleted only at the revision the sweep judged: one written
		// since (a host breaker idle and named by no task, opened again
		// by a task whose spec the view has not seen yet; asking for the
		// spec of host_… says nothing of that) fails the delete as a
		// CAS conflict. A delete, not a purge: a purge needs roll-ups,
		// which no bucket allows (a key's writer could empty the bucket
		// with one; streams.validateKV). The marker goes with the hourly
		// compaction (compact.go).
		seen, ok := judged[k]
		rev := seen.rev
		if !ok {
			e, err := kv.Get(ctx, k)
			if err != nil {
				continue // gone already, or unreadable: the next sweep decides
			}
			rev = e.Revision()
		}
		what := "removed a host breaker that no task names"
		// No task has a host_ id (events.ValidateID): a host breaker the
		// sweep judged is no task's state, and asking for its spec would
		// only answer that.
		if !strings.HasPrefix(k, events.HostKeyPrefix) {
			spec, err := s.tasks.Get(ctx, k)
			switch {
			case jsutil.IsKeyMissing(err):
				what = "removed state of a deleted task"
			case err == nil && kv == s.breakers && executor.HostScoped(spec.Value()):
				what = "removed the own breaker record of a task switched to breaker scope host"
			case err == nil && kv == s.breakers && gov.OtherCreatedAt(seen.TaskCreatedAt, storedCreatedAt(spec.Value())):
				what = "removed the breaker record of a deleted task of the same ID"
			default:
				continue
			}
		}
		if err := kv.Delete(ctx, k, jetstream.LastRevision(rev)); jsutil.IsCASConflict(err) {
			continue // written since (or deleted already): the task is back, or the breaker open again
		} else if err != nil {
			s.cfg.Logger.Warn("orphan not removed", "bucket", bucket, "key", k, "err", err)
			continue
		}
		s.cfg.Metrics.OrphansRemoved.WithLabelValues(bucket).Inc()
		s.cfg.Logger.Info(what, "bucket", bucket, "key", k)
	}
}

// storedCreatedAt is the createdAt stored with a flyball-tasks value
// (gov.StoredSpec), or zero: none, or one that does not decode.
func storedCreatedAt(spec []byte) time.Time {
	var v struct {
		CreatedAt time.Time `json:"createdAt"`
	}
	if json.Unmarshal(spec, &v) != nil {
		return time.Time{}
	}
	return v.CreatedAt
}

// exportPerTask publishes per-task staleness when enabled and within the
// series limit; past the limit it drops every per-task series once.
func (s *Service) exportPerTask(scores map[string]float64) {
	if !s.cfg.PerTaskMetrics {
		return
	}
	g := s.cfg.Metrics.TaskStaleness
	if len(scores) > s.cfg.PerTaskLimit {
		if !s.perTaskOff {
			s.cfg.Logger.Warn("per-task metrics switched off: too many tasks", "tasks", len(scores), "limit", s.cfg.PerTaskLimit)
			g.Reset()
			s.perTaskOff = true
		}
		return
	}
	s.perTaskOff = false
	g.Reset()
	for id, score := range scores {
		g.WithLabelValues(id).Set(score)
	}
}
