// Package sweeper keeps the runtime registry honest. Every service instance
// heartbeats into KV flyball-runtime; the sweeper marks an instance offline
// once it has seen no new beat of it for OfflineAfter, by its own
// monotonic clock (never the instance's lastBeat: the two clocks may
// differ; nor its own wall clock, which NTP may step), and announces
// runtime.offline (a marked instance that beats again announces its
// return itself: package heartbeat). It also exports the registry as
// flyball_runtime_instances{status}.
//
// Each sweep also goes over every task: it re-dispatches zombie runs,
// scores staleness and removes the state of deleted tasks, from an
// in-memory view of flyball-tasks, flyball-schedules and flyball-breakers.
// The schedules are watched, or read whole at each sweep while they change
// faster than sweeps (source.go).
package sweeper

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/kvcache"
	"github.com/flyballhq/flyball/services/internal/lifecycle"
	"github.com/flyballhq/flyball/services/internal/repeatlog"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/streams"
)

// Config configures the sweeper.
type Config struct {
	svcconf.Common
	// Interval between sweeps. Defaults to 15s.
	Interval time.Duration
	// OfflineAfter is how long a sweep must be after the one that first
	// saw an entry's revision to mark its instance offline. Sweeps see a
	// beat up to an Interval after it is written and mark at the first
	// sweep past OfflineAfter: an instance that dies is marked between
	// OfflineAfter and OfflineAfter+2*Interval after its last beat (45 to
	// 75s by default; docs/operations.md, Runtime registry). A sweep that
	// cannot read the registry, or finds NATS reconnected since the
	// previous sweep, restarts it for every instance (blind).
	// Defaults to 45s.
	OfflineAfter time.Duration
	// ZombieAfter is how long past its nextRunAt a run may stay without
	// dispatch or outcome before it is re-dispatched, and how long a task
	// may have no schedule before its task.created is published again
	// (repair.go). Defaults to 5m. Keep it above the executor's
	// LateRedispatch (1m): a lost-write re-dispatch fired sooner after its
	// slot is not checked for a stored outcome, and calls the target.
	ZombieAfter time.Duration
	// PerTaskMetrics exports flyball_task_staleness_score{task}. Per-task
	// labels make one series per task, so they switch off by themselves
	// above PerTaskLimit tasks. Defaults to false.
	PerTaskMetrics bool
	// PerTaskLimit caps per-task series. Defaults to 1000.
	PerTaskLimit int
}

// DefaultZombieAfter is Config.ZombieAfter's default.
const DefaultZombieAfter = 5 * time.Minute

// Service is the sweeper service.
type Service struct {
	lifecycle.Base
	cfg      Config
	source   string
	runtime  jetstream.KeyValue
	dispatch jetstream.Stream
	runs     jetstream.Stream
	dead     jetstream.Stream // DEADLETTER
	commands jetstream.Stream // TASKS: the missing-schedule repair's task.created
	view     *view
	scores   atomic.Pointer[map[string]float64]
	// The buckets the view mirrors, bound once at Start.
	tasks, schedules, breakers jetstream.KeyValue
	// The schedule source (source.go); only Start and the sweep goroutine
	// touch these.
	schedStream jetstream.Stream   // KV_flyball-schedules, for its write rate
	stopWatch   context.CancelFunc // ends the schedules watch; nil while scanning
	lastSeq     uint64             // the bucket's last sequence at the previous sweep
	seqKnown    bool               // lastSeq was read (0 is an empty bucket's)
	// unscheduled holds, per spec with no schedule, when a sweep first saw
	// it so (a reading of the sweeper's clock that keeps its monotonic
	// part); only the sweep goroutine touches it.
	unscheduled map[string]time.Time
	// compacted is when the sweep last started a pass removing old
	// delete markers (compact.go); only the sweep goroutine touches it.
	// compacting is set while that pass runs, on its own goroutine, and
	// compactions counts it (tests wait on it).
	compacted   time.Time
	compacting  atomic.Bool
	compactions sync.WaitGroup
	compactCap  int // markers a pass removes from one bucket (maxCompactPerPass)
	// refusals ends a compaction's purge (compactBucket) or a zombie
	// check's read of a slot's outcome (renudge) the server refuses, at
	// once; Start installs it on the connection.
	refusals jsutil.PubWatch
	// perTaskOff records that per-task series were dropped for size; only
	// the sweep goroutine touches it.
	perTaskOff bool
	swept      chan struct{}
	// beats holds, per registry key, the revision of the last beat the
	// sweep saw and when (a reading of the sweeper's clock that keeps its
	// monotonic part); only the sweep goroutine touches it.
	beats map[string]beatSeen
	// reconnects is the connection's reconnect count at the previous
	// sweep's registry read (sweepRuntime); only the sweep goroutine
	// touches it.
	reconnects uint64
	// unannounced holds, per registry key, an offline mark whose
	// runtime.offline is not stored yet (HEALTH did not take it): each
	// sweep publishes it again while the entry stays so marked. Only the
	// sweep goroutine touches it.
	unannounced map[string]offlineMark
	// badKeys holds the registry keys that name no instance (not
	// <kind>.<name> of subject tokens), each warned of once while it
	// stays. Only the sweep goroutine touches it.
	badKeys map[string]bool
	// durables are the consumers the backlog report reads (backlog.go),
	// each with its log. The logs keep a NATS outage from logging every
	// failed backlog read of every sweep.
	durables   []durable
	accountLog *repeatlog.Log
	// tuneFollow, when set, adjusts each bucket's watch before it starts
	// (tests end a watch).
	tuneFollow func(bucket string, f *kvcache.Follower)
}

// New validates cfg.
func New(cfg Config) (*Service, error) {
	if err := cfg.SetDefaults("sweeper"); err != nil {
		return nil, err
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 15 * time.Second
	}
	if cfg.OfflineAfter <= 0 {
		cfg.OfflineAfter = 45 * time.Second
	}
	if cfg.ZombieAfter <= 0 {
		cfg.ZombieAfter = DefaultZombieAfter
	}
	if cfg.PerTaskLimit <= 0 {
		cfg.PerTaskLimit = 1000
	}
	if cfg.PerTaskMetrics {
		if err := cfg.Metrics.Registry.Register(cfg.Metrics.TaskStaleness); err != nil {
			return nil, fmt.Errorf("sweeper: per-task metrics: %w", err)
		}
	}
	ds, err := streams.Durables()
	if err != nil {
		return nil, err
	}
	durables := make([]durable, len(ds))
	for i, d := range ds {
		durables[i] = durable{Durable: d, log: repeatlog.New(cfg.Logger.With("stream", d.Stream, "consumer", d.Name), backlogLogWindow)}
	}
	return &Service{
		cfg: cfg, source: jsutil.Source("sweeper", cfg.Instance), swept: make(chan struct{}, 1), view: newView(), compactCap: maxCompactPerPass,
		beats: map[string]beatSeen{}, unannounced: map[string]offlineMark{}, badKeys: map[string]bool{},
		durables: durables, accountLog: repeatlog.New(cfg.Logger, backlogLogWindow),
	}, nil
}

// Start binds KV and sweeps every Interval.
func (s *Service) Start(ctx context.Context) error {
	runCtx, err := s.Begin(ctx)
	if err != nil {
		return fmt.Errorf("sweeper: %w", err)
	}
	if err := jsutil.BindBuckets(ctx, s.cfg.JS,
		jsutil.Bucket{Name: streams.BucketRuntime, KV: &s.runtime},
		jsutil.Bucket{Name: streams.BucketTasks, KV: &s.tasks},
		jsutil.Bucket{Name: streams.BucketSchedules, KV: &s.schedules},
		jsutil.Bucket{Name: streams.BucketBreakers, KV: &s.breakers},
	); err != nil {
		return fmt.Errorf("sweeper: %w", err)
	}
	// Each names what is missing: the server's "stream not found" does not.
	for _, st := range []struct {
		name string
		to   *jetstream.Stream
	}{
		{streams.StreamDispatch, &s.dispatch},
		{streams.StreamRuns, &s.runs},
		{streams.StreamDeadLetter, &s.dead},
		{streams.StreamTasks, &s.commands},
		{"KV_" + streams.BucketSchedules, &s.schedStream},
	} {
		if *st.to, err = s.cfg.JS.Stream(ctx, st.name); err != nil {
			return fmt.Errorf("sweeper: stream %s: %w (run flyball provision, or flyball serve with --ensure-streams)", st.name, err)
		}
		if err := streams.Check(&(*st.to).CachedInfo().Config); err != nil {
			return fmt.Errorf("sweeper: %w", err)
		}
	}
	if err := s.watchAll(runCtx); err != nil {
		return fmt.Errorf("sweeper: %w", err)
	}
	// Before the first sweep, whose compaction pass purges and whose
	// zombie checks read.
	s.refusals.Install(s.cfg.JS.Conn())
	s.Go(func() {
		s.view.ready.Wait() // sweep only a complete picture: no false orphans
		t := time.NewTicker(s.cfg.Interval)
		defer t.Stop()
		defer s.flushBacklogLogs(true) // the counts of failed reads not written yet
		for {
			if err := s.Sweep(runCtx); err != nil && runCtx.Err() == nil {
				s.cfg.Logger.Warn("sweep failed; retrying next interval", "err", err)
			}
			select {
			case s.swept <- struct{}{}:
			default:
			}
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
			}
		}
	})
	return nil
}

// Swept receives a value after each sweep; tests use it instead of sleeping.
func (s *Service) Swept() <-chan struct{} { return s.swept }

// Sweep runs one pass: zombies, staleness and orphans, old delete markers
// (hourly), the consumers' backlog, then the runtime registry.
func (s *Service) Sweep(ctx context.Context) error {
	s.pickScheduleSource(ctx)
	if s.scanning() {
		if err := s.scanSchedules(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("schedule scan failed; sweeping the previous one", "err", err)
		}
	}
	s.sweepTasks(ctx, s.cfg.Now())
	s.compactDue(ctx, s.cfg.Now())
	s.reportBacklog(ctx)
	return s.sweepRuntime(ctx)
}

// beatSeen is a registry entry's revision and when a sweep first saw it:
// a reading of Now as it returns it, whose monotonic part (time.Now's)
// Sub measures elapsed time on. UTC drops that part, and a wall-clock
// step (NTP) then moved every elapsed time by the step.
type beatSeen struct {
	rev uint64
	at  time.Time
	// announced: this revision is an offline mark whose runtime.offline
	// this sweeper published, or keeps in unannounced.
	announced bool
}

func (s *Service) sweepRuntime(ctx context.Context) error {
	clock := s.cfg.Now() // not UTC: it keeps the monotonic reading (beatSeen)
	lister, err := s.runtime.ListKeys(ctx)
	if err != nil {
		s.blind(clock)
		return err
	}
	// Read after the list is open: a reconnect that let it through is
	// counted. The sweep's earlier steps can wait out a whole outage on
	// their timeouts, and NATS be back by the time the registry is read.
	if n := s.reconnectCount(); n != s.reconnects {
		s.reconnects = n
		s.blind(clock)
	}
	counts := map[events.RuntimeStatus]int{}
	listed := map[string]bool{}
	for key := range lister.Keys() {
		listed[key] = true
		if kind, name, _ := strings.Cut(key, "."); !events.ValidToken(kind) || !validName(name) {
			// Written by hand: it names no instance, and its offline mark
			// would go to no valid subject (flyball.runtime.offline.. for
			// host_x), timing out at every sweep.
			if !s.badKeys[key] {
				s.badKeys[key] = true
				s.cfg.Logger.Warn(msgBadRegistryKey, "key", key)
			}
			continue
		}
		st, err := s.sweepOne(ctx, key, clock)
		if err != nil {
			s.cfg.Logger.Warn("sweeping instance failed", "key", key, "err", err)
			continue
		}
		if st != "" {
			counts[st]++
		}
	}
	maps.DeleteFunc(s.beats, func(k string, _ beatSeen) bool { return !listed[k] })
	maps.DeleteFunc(s.unannounced, func(k string, _ offlineMark) bool { return !listed[k] })
	maps.DeleteFunc(s.badKeys, func(k string, _ bool) bool { return !listed[k] })
	// The lister stops itself after the last key; no Stop needed.
	for _, st := range []events.RuntimeStatus{events.RuntimeOnline, events.RuntimeOffline} {
		s.cfg.Metrics.RuntimeInstances.WithLabelValues(string(st)).Set(float64(counts[st]))
	}
	return nil
}

// blind restarts, at clock, the silence of every instance the sweeper
// knows, after a sweep that could not read the registry (NATS
// unreachable) or that finds the connection reconnected since the
// previous sweep (NATS was unreachable in between, maybe while an earlier
// step of this sweep waited out its timeouts): their silence cannot be
// judged across a time it could not see. Without it, the first sweep
// after an outage longer than OfflineAfter marked offline every live
// instance that had not beaten since NATS came back (runtime.offline, a
// warning, then its return at its next beat). The price: a dead instance
// is marked OfflineAfter after the last such sweep, up to the outage and
// an Interval later than it would have been.
func (s *Service) blind(clock time.Time) {
	for key, seen := range s.beats {
		seen.at = clock
		s.beats[key] = seen
	}
}

// reconnectCount is how many times the sweeper's NATS connection has
// reconnected.
func (s *Service) reconnectCount() uint64 {
	nc := s.cfg.JS.Conn()
	if nc == nil {
		return 0
	}
	return nc.Stats().Reconnects
}

// sweepOne sweeps the registry entry under key at clock, a reading of
// s.cfg.Now that keeps its monotonic part, and reports the instance's
// status: none for a key deleted since it was listed (the instance's
// clean stop), which is no failure.
func (s *Service) sweepOne(ctx context.Context, key string, clock time.Time) (events.RuntimeStatus, error) {
	ent, hb, err := s.readEntry(ctx, key)
	if jsutil.IsKeyMissing(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	// The key, <kind>.<name> (sweepRuntime skips any other), names the
	// instance: a value written by hand may lack them, and its mark would
	// go to flyball.runtime.offline.. , where the publish times out on
	// every sweep.
	hb.Kind, hb.Name, _ = strings.Cut(key, ".")
	// Silent is measured by the sweeper's clock alone: how long since it
	// first saw this revision of the entry. Comparing its clock with the
	// lastBeat the instance wrote by its own marked every live instance
	// offline once the two clocks were OfflineAfter apart. It is measured
	// on the monotonic clock: on wall-clock readings a step back by X
	// held a dead instance's mark for X more, and a step forward by over
	// OfflineAfter-Interval marked live instances offline. A sweeper that
	// starts waits OfflineAfter before it marks anyone.
	seen, ok := s.beats[key]
	if !ok || seen.rev != ent.Revision() {
		seen = beatSeen{rev: ent.Revision(), at: clock}
		s.beats[key] = seen
	}
	if hb.Status == events.RuntimeOffline {
		if m, ok := s.unannounced[key]; ok {
			if m.lastBeat.Equal(hb.LastBeat) {
				s.announceOffline(ctx, key, hb, m.at)
				return hb.Status, nil
			}
			delete(s.unannounced, key) // marked again since, by someone else
		}
		s.announceFound(ctx, key, hb, ent, clock)
		return hb.Status, nil
	}
	if clock.Sub(seen.at) <= s.cfg.OfflineAfter {
		delete(s.unannounced, key) // beating again
		return hb.Status, nil      // an instance back from a mark announces its return itself (heartbeat)
	}
	hb.Status = events.RuntimeOffline
	body, err := json.Marshal(hb)
	if err != nil {
		return "", err
	}
	rev, err := s.runtime.Update(ctx, key, body, ent.Revision())
	if err != nil {
		if jsutil.IsCASConflict(err) {
			// Written since: a beat, another sweeper's mark of the same
			// stale revision, or a stop's delete. Its status is counted.
			return s.statusOf(ctx, key)
		}
		return "", err
	}
	// Announced below, or kept in unannounced: announceFound leaves it.
	s.beats[key] = beatSeen{rev: rev, at: clock, announced: true}
	s.cfg.Logger.Warn("instance offline: heartbeat too old", "kind", hb.Kind, "name", hb.Name, "lastBeat", hb.LastBeat)
	s.announceOffline(ctx, key, hb, clock.UTC())
	return events.RuntimeOffline, nil
}

// statusOf reads the status of the instance under key once more (none
// without an entry). Its next sweep deals with what it finds.
func (s *Service) statusOf(ctx context.Context, key string) (events.RuntimeStatus, error) {
	_, hb, err := s.readEntry(ctx, key)
	if jsutil.IsKeyMissing(err) {
		return "", nil
	}
	return hb.Status, err
}

// readEntry reads and decodes the registry entry under key; the error of
// a key deleted since it was listed is the Get's (jsutil.IsKeyMissing).
func (s *Service) readEntry(ctx context.Context, key string) (jetstream.KeyValueEntry, events.Heartbeat, error) {
	var hb events.Heartbeat
	ent, err := s.runtime.Get(ctx, key)
	if err != nil {
		return nil, hb, err
	}
	if err := json.Unmarshal(ent.Value(), &hb); err != nil {
		return nil, hb, fmt.Errorf("unreadable heartbeat: %w", err)
	}
	return ent, hb, nil
}

// offlineAnnounceFor is how long after an offline mark was stored (the
// server's stamp) a sweep that finds it publishes its runtime.offline
// (announceFound): half of HEALTH's 2-minute duplicate window, so that a
// sweeper clock up to a minute behind the server's still publishes only
// within the window, where every copy but the first is dropped. A mark
// stands until its instance beats again (flyball-runtime keeps entries
// for good); publishing at every sweep past the window would store a
// copy per sweep.
const offlineAnnounceFor = time.Minute

// announceFound publishes the runtime.offline of an offline mark that
// this sweeper did not write (ent, its entry, found at clock), while the
// mark is younger than offlineAnnounceFor, once per mark and sweeper. The
// sweeper that wrote it kept the retry of a failed publish in its memory
// (unannounced): stopped before HEALTH took it (a restart, a replica
// taking over), it left the mark with no event, and the sweepers after
// it found the mark standing and published nothing. The event ID is the
// marking sweeper's (announceOffline), so HEALTH stores one copy. A
// failure here is retried by the next sweep while the mark is young, not
// kept in unannounced: that retry has no end in time, and a mark another
// sweeper announced long ago would be stored again.
func (s *Service) announceFound(ctx context.Context, key string, hb events.Heartbeat, ent jetstream.KeyValueEntry, clock time.Time) {
	seen := s.beats[key]
	if seen.announced || clock.Sub(ent.Created()) >= offlineAnnounceFor {
		return
	}
	if err := s.publishOffline(ctx, key, hb, ent.Created().UTC()); err != nil {
		s.cfg.Logger.Warn("runtime.offline of a mark found unannounced not published; next sweep retries", "kind", hb.Kind, "name", hb.Name, "err", err)
		return
	}
	seen.announced = true
	s.beats[key] = seen
}

// msgBadRegistryKey is the warning for a flyball-runtime key that names
// no instance.
const msgBadRegistryKey = "runtime registry key is not <kind>.<name> of subject tokens ([A-Za-z0-9_-]); not swept: delete it"

// validName reports whether a registry key's <name> part forms subject
// tokens: one or more of [A-Za-z0-9_-], separated by dots. Instances
// write names of one token (heartbeat sanitizes them), but a name of
// several (a.b, by hand or an older version) is an instance still, and
// its runtime.offline goes to flyball.runtime.offline.<kind>.a.b.
func validName(name string) bool {
	for tok := range strings.SplitSeq(name, ".") {
		if !events.ValidToken(tok) {
			return false
		}
	}
	return true
}

// offlineMark is an offline mark the sweeper wrote at at, of the entry
// whose last beat was lastBeat.
type offlineMark struct {
	lastBeat, at time.Time
}

// announceOffline publishes runtime.offline for the instance under key,
// marked offline at at. A failure is logged and kept in s.unannounced:
// the next sweep publishes it again while the mark stands (the event ID
// is the same, so HEALTH stores it once). Before, the mark stayed in KV
// and the event was never published.
func (s *Service) announceOffline(ctx context.Context, key string, hb events.Heartbeat, at time.Time) {
	if err := s.publishOffline(ctx, key, hb, at); err != nil {
		s.unannounced[key] = offlineMark{lastBeat: hb.LastBeat, at: at}
		s.cfg.Logger.Warn("runtime.offline not published; next sweep retries", "kind", hb.Kind, "name", hb.Name, "err", err)
		return
	}
	delete(s.unannounced, key)
}

// publishOffline publishes runtime.offline for hb's instance, marked at
// at, with an ID made of its registry key and last beat: every sweeper
// and every try publishes the same mark under the same ID. A duplicate,
// stored or being stored (error 10158: an earlier try, still being
// replicated), is no error.
func (s *Service) publishOffline(ctx context.Context, key string, hb events.Heartbeat, at time.Time) error {
	id := fmt.Sprintf("sweeper:offline:%s:%d", key, hb.LastBeat.UnixNano())
	return jsutil.PublishEvent(ctx, s.cfg.JS, events.RuntimeSubject(events.RuntimeOffline, hb.Kind, hb.Name), id,
		events.TypeRuntimeOffline, s.source, hb.Name, hb, at)
}
