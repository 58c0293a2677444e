package governor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/bufpool"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/kvcache"
	"github.com/flyballhq/flyball/services/internal/lifecycle"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/repeatlog"
	"github.com/flyballhq/flyball/services/internal/ssrf"
	"github.com/flyballhq/flyball/streams"
)

// Config configures the governor service.
type Config struct {
	// JS is the JetStream context. Required.
	JS jetstream.JetStream
	// Instance names this replica in event sources. Defaults to host-pid.
	Instance string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics defaults to a private set.
	Metrics *metrics.Set
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// CASAttempts bounds compare-and-set retries per decision. Defaults to 10.
	CASAttempts int
	// Workers is the number of messages handled at once per consumed
	// stream, sharded by task so each task's messages stay in order.
	// Defaults to 16.
	Workers int
	// StateCacheSize bounds the schedule states kept in memory to skip a
	// KV read per decision. Defaults to 100,000 (about 40 MB).
	StateCacheSize int
	// Guard is the executors' SSRF guard (give it the same settings): a
	// task.created or task.updated whose target.http.url is a literal
	// address or a well-known metadata hostname it refuses is rejected.
	// The zero value is the executor's default: loopback, link-local,
	// unspecified, multicast and metadata addresses are refused.
	Guard ssrf.Guard
}

func (c *Config) setDefaults() error {
	if c.JS == nil {
		return errors.New("governor: Config.JS is required")
	}
	if c.Instance == "" {
		c.Instance = DefaultInstance()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Metrics = metrics.OrNew(c.Metrics)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.CASAttempts <= 0 {
		c.CASAttempts = 10
	}
	if c.Workers <= 0 {
		c.Workers = 16
	}
	if c.StateCacheSize <= 0 {
		c.StateCacheSize = 100_000
	}
	return nil
}

// DefaultInstance is "<hostname>-<pid>".
func DefaultInstance() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "host"
	}
	return h + "-" + strconv.Itoa(os.Getpid())
}

// Service is the governor service.
type Service struct {
	lifecycle.Base
	cfg       Config
	log       *slog.Logger
	source    string
	tasks     jetstream.KeyValue
	schedules jetstream.KeyValue
	// commands is TASKS, for the last task.deleted of a task whose
	// creation is redelivered (deletedSince); commands and health (HEALTH)
	// for the message at a schedule's last sequence (resolveRestart).
	commands jetstream.Stream
	health   jetstream.Stream
	// refusals ends a read of those streams that the governor's NATS
	// user may not make at the server's refusal (resolveRestart), and
	// readErrors says so, once per readErrorWindow; and a delete's purge
	// of DISPATCH (purgeDispatch).
	refusals   jsutil.PubWatch
	readErrors *repeatlog.Log
	// specs is a watch-fed view of flyball-tasks for the outcome path;
	// commands read the bucket itself, as they decide whether a task exists.
	specs  *kvcache.Cache[*events.TaskSpec]
	states *stateCache
	// pauses holds a key per paused task (pauses.go); pauseHints is this
	// replica's view of it.
	pauses     jetstream.KeyValue
	pauseHints *kvcache.Cache[struct{}]
	// fault, when set (tests), is a transient failure to meet before a
	// command is applied.
	fault func(Step) error
	// stopping is closed when Stop has drained the consumers: untilSettled
	// hands back a message that still fails rather than keep Stop waiting.
	stopping chan struct{}
	// handedBack holds the keys (stream and taskKey) of messages handed
	// back while stopping: the messages behind them with the same key are
	// handed back unapplied, so they do not overtake them.
	handedMu   sync.Mutex
	handedBack map[string]bool
}

// New validates cfg and returns a service ready to Start.
func New(cfg Config) (*Service, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("service", "governor")
	return &Service{
		cfg:        cfg,
		log:        log,
		source:     jsutil.Source("governor", cfg.Instance),
		states:     newStateCache(cfg.StateCacheSize),
		readErrors: repeatlog.New(log, readErrorWindow),

		stopping:   make(chan struct{}),
		handedBack: map[string]bool{},
	}, nil
}

// Start binds the KV buckets and starts consuming TASKS and RUNS. After
// an error, call Stop: it ends whatever Start started before it failed
// (a TASKS consumer when the one on RUNS is missing).
func (s *Service) Start(ctx context.Context) error {
	runCtx, err := s.Begin(ctx)
	if err != nil {
		return fmt.Errorf("governor: %w", err)
	}
	if err := jsutil.BindBuckets(ctx, s.cfg.JS,
		jsutil.Bucket{Name: streams.BucketTasks, KV: &s.tasks},
		jsutil.Bucket{Name: streams.BucketSchedules, KV: &s.schedules},
		jsutil.Bucket{Name: streams.BucketPauses, KV: &s.pauses},
	); err != nil {
		return fmt.Errorf("governor: %w", err)
	}
	if s.commands, err = s.cfg.JS.Stream(ctx, streams.StreamTasks); err != nil {
		return fmt.Errorf("governor: stream %s: %w", streams.StreamTasks, err)
	}
	if err := streams.Check(&s.commands.CachedInfo().Config); err != nil {
		return fmt.Errorf("governor: %w", err)
	}
	if s.health, err = s.cfg.JS.Stream(ctx, streams.StreamHealth); err != nil {
		return fmt.Errorf("governor: stream %s: %w", streams.StreamHealth, err)
	}
	// Before the consumers: a redelivery's read needs it (resolveRestart),
	// and so does a delete's purge (purgeDispatch).
	s.refusals.Install(s.cfg.JS.Conn())
	s.specs = kvcache.Specs(s.tasks, s.log)
	s.pauseHints = kvcache.Keys(s.pauses, s.log)
	s.specs.Conn, s.pauseHints.Conn = s.cfg.JS.Conn(), s.cfg.JS.Conn()
	s.Go(func() { s.specs.Run(runCtx) })
	s.Go(func() { s.pauseHints.Run(runCtx) })
	workers := jsutil.Workers{N: s.cfg.Workers, Key: taskKey}
	var consumers []*jsutil.WorkerConsume
	// Let decisions in flight finish before Stop cancels their context:
	// a cancelled one is only redelivered, but there is no need for that.
	// One that meets a transient failure is handed back rather than tried
	// again (untilSettled), or Stop would wait as long as NATS or KV is down.
	// Registered before the first consumer starts: a Start that fails on
	// a later one leaves Stop (which the caller owes a failed Start) the
	// ones it started.
	s.OnDrained(func() { close(s.stopping) })
	s.OnDrained(func() {
		for _, cc := range consumers {
			<-cc.Done()
		}
	})
	for _, c := range []struct {
		stream string
		h      func(context.Context, jetstream.Msg)
	}{
		{streams.StreamTasks, s.handleCommand},
		{streams.StreamRuns, s.handleSignal},
		{streams.StreamHealth, s.handleSignal},
		{streams.StreamDeadLetter, s.handleSignal},
	} {
		workers.PullFailures = s.cfg.Metrics.PullFailures.WithLabelValues(c.stream)
		workers.PullStalls = s.cfg.Metrics.PullStalls.WithLabelValues(c.stream)
		cc, err := jsutil.ConsumeWorkers(ctx, s.cfg.JS, c.stream, streams.ConsumerGovernor, s.log, workers,
			func(m jetstream.Msg) { c.h(runCtx, m) })
		if err != nil {
			return fmt.Errorf("governor: %w", err)
		}
		s.Track(cc, s.cfg.JS.Conn())
		consumers = append(consumers, cc)
	}
	return nil
}

// taskKey shards messages by their subject's last token: the task ID for
// commands, outcomes and dead letters, the breaker key for transitions.
func taskKey(m jetstream.Msg) string {
	subj := m.Subject()
	return subj[strings.LastIndexByte(subj, '.')+1:]
}

// ack acknowledges m, logging (not failing) on error: an unacked message is
// redelivered, and every handler here is idempotent.
func (s *Service) ack(m jetstream.Msg) {
	if err := m.Ack(); err != nil {
		s.log.Warn("ack failed; message will be redelivered", "subject", m.Subject(), "err", err)
	}
}

// Pauses between tries of a message that met a transient failure: from
// retryFirst, doubling up to retryMax.
const (
	retryFirst = 250 * time.Millisecond
	retryMax   = 5 * time.Second
)

// untilSettled runs apply, which settles m or returns a transient error
// (NATS or KV trouble), until it settles m. It tries again here, on the
// same worker, rather than nakking m: a nakked message is redelivered
// after the ones behind it, and the worker handles one task's messages
// (key) in stream order, so a command or breaker transition applied late
// would undo the ones published after it (a pause retried after the
// resume that followed it leaves the task paused). Between tries it marks
// m in progress, so it is not redelivered to another replica. Only when
// the service stops does it give m back (nak), for whichever replica
// reads the durable next, after at most one more try: Stop waits for the
// messages in hand, and would wait as long as the failure lasts. The
// messages of the same task behind it are then handed back unapplied.
func (s *Service) untilSettled(ctx context.Context, m jetstream.Msg, apply func() error) {
	if s.isStopping() && s.wasHandedBack(handKey(m)) {
		s.handBack(m, errors.New("a message of the same task ahead of it was handed back"))
		return
	}
	wait := retryFirst
	for try := 1; ; try++ {
		err := apply()
		if err == nil {
			return
		}
		if ctx.Err() != nil || s.isStopping() {
			s.handBack(m, err)
			return
		}
		if stream := streamOf(m); stream != "" {
			s.cfg.Metrics.GovernorRetries.WithLabelValues(stream).Inc()
		}
		s.log.Warn("transient failure; trying again before the messages behind it", "subject", m.Subject(), "try", try, "in", wait, "err", err)
		if ierr := m.InProgress(); ierr != nil {
			s.log.Debug("in-progress not sent", "subject", m.Subject(), "err", ierr)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-s.stopping:
			t.Stop()
		case <-t.C:
		}
		wait = min(2*wait, retryMax)
	}
}

// isStopping reports whether Stop has drained the consumers.
func (s *Service) isStopping() bool {
	select {
	case <-s.stopping:
		return true
	default:
		return false
	}
}

// handBack naks m while stopping, and records its key so the messages
// behind it with the same key are handed back too (untilSettled). A
// message published since may still reach the next replica before them
// (docs/architecture.md, known gaps).
func (s *Service) handBack(m jetstream.Msg, err error) {
	s.handedMu.Lock()
	s.handedBack[handKey(m)] = true
	s.handedMu.Unlock()
	s.log.Warn("transient failure while stopping; handing the message back", "subject", m.Subject(), "err", err)
	if nerr := m.NakWithDelay(time.Second); nerr != nil {
		s.log.Warn("nak failed", "subject", m.Subject(), "err", nerr)
	}
}

// handKey is the key of m in handedBack: its stream and task (taskKey).
// It is built only while stopping, off the path of every message.
func handKey(m jetstream.Msg) string { return streamOf(m) + " " + taskKey(m) }

// wasHandedBack reports whether a message with key was handed back.
func (s *Service) wasHandedBack(key string) bool {
	s.handedMu.Lock()
	defer s.handedMu.Unlock()
	return s.handedBack[key]
}

// streamOf is the stream m was stored in ("" if its metadata is unreadable).
func streamOf(m jetstream.Msg) string {
	if md, err := m.Metadata(); err == nil {
		return md.Stream
	}
	return ""
}

// loadSpec reads a spec from the bucket (commands: they decide whether a
// task exists, so they must not see a lagging view).
func (s *Service) loadSpec(ctx context.Context, id string) (*events.TaskSpec, error) {
	e, err := s.tasks.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return kvcache.DecodeSpec(id, e.Value())
}

// decide applies step to the task's stored state with compare-and-set and
// returns the decision that was stored. It starts from the state this
// replica last wrote when it has one (one Update, no Get) and re-reads KV
// only after a revision mismatch.
func (s *Service) decide(ctx context.Context, spec *events.TaskSpec, step Step) (gov.Decision, error) {
	id := spec.ID
	// hinted is the revision of the pause hint this decision wrote, if it
	// wrote one: removed again when the task turns out to be gone.
	var hinted uint64
	for attempt := range s.cfg.CASAttempts {
		st, rev, ok := s.states.get(id)
		if ok && attempt == 0 && gov.OtherTask(step.TaskCreatedAt(), st) {
			// Either a run of a deleted task of the same ID, or this
			// replica's copy is of one (another replica applied the delete
			// and the creation): KV tells which.
			ok = false
		}
		// scheduled: a readable schedule is stored (a cached state is one
		// this replica wrote). An unreadable one (rev not 0) is rebuilt,
		// and the write replaces it at its revision (rev).
		scheduled, rebuilt := ok, false
		if !ok || attempt > 0 {
			var err error
			if st, rev, scheduled, err = s.readState(ctx, id); err != nil {
				return gov.Decision{}, err
			}
		}
		if step.CommandID == "" && !scheduled && rev != 0 {
			// A signal of a task whose schedule is stored and does not
			// decode here: the timer and the sweeper, which read fewer
			// fields, may read it (a wrong type in failures, say), so
			// the timer dispatches its slot and the sweeper repairs
			// nothing. Acked without effect (as it was), the outcome left
			// the slot due for ever: re-dispatched by the sweeper, skipped
			// by the executor, and the skip dropped again. The signal is
			// applied to the schedule as the task's creation writes it.
			var err error
			if spec, st, err = s.rebuildFor(ctx, &step); err != nil {
				return gov.Decision{}, s.gone(ctx, id, hinted, err)
			}
			scheduled, rebuilt = true, true
		}
		if step.CommandID == "" && !scheduled {
			// A signal never creates a schedule. With no schedule the task
			// is deleted, or its creation was interrupted between its spec
			// and schedule writes (a crash): the creation's redelivery, or
			// the sweeper's repair of a spec with no schedule, writes it
			// with the task's createdAt. Created here from a zero state, it
			// took on a deleted namesake's late outcome (its failures, its
			// dead-letter hold), had no createdAt and no lastCommandId, and
			// the redelivered creation was rejected as a duplicate.
			return gov.Decision{}, s.gone(ctx, id, hinted, errNoSchedule)
		}
		if !scheduled && step.completesCreation() {
			// A command of a task whose spec is stored and whose schedule
			// is not: it completes the creation from the stored spec, then
			// applies (completeCreation). The sweeper's repair, should it
			// come after, finds the schedule and changes nothing.
			s.log.Info("command of a task with no schedule; completing its creation from its spec first",
				"task", id, "command", step.CommandID, "createdAt", step.completedCreatedAt())
			st = completeCreation(spec, &step)
		}
		if step.CommandID == "" && st.SpecRevision > step.SpecRevision {
			// A signal read its spec (from the view) before this state,
			// which a task.updated decided with a newer spec since: by
			// this replica's TASKS worker, or by another replica whose
			// write the view has not delivered yet. Decided with the old
			// spec, the update's plan was undone (a 24h task changed to
			// 1m ran again only a day later). The spec is read from KV;
			// a view that is current costs nothing.
			fresh, err := s.loadSpec(ctx, id)
			if err != nil {
				// Gone since (deleted between a try that wrote a pause
				// hint and this one): the hint goes too.
				return gov.Decision{}, s.gone(ctx, id, hinted, err)
			}
			spec = fresh
		}
		if err := step.otherCreation(&st); err != nil {
			// Judged on the schedule read from KV (a cached copy of
			// another task was re-read above); a copy that agrees with
			// the requeue but is stale fails the compare-and-set below,
			// and the requeue is judged again on KV.
			return gov.Decision{}, err
		}
		if err := s.resolveRestart(ctx, &step, &st); err != nil {
			return gov.Decision{}, err
		}
		dec := Apply(spec, st, step)
		if dec.Ignored && rebuilt {
			// A rebuilt schedule is written even when its signal is
			// ignored (a deleted namesake's): the unreadable value goes.
			dec.Ignored = false
		}
		if dec.Ignored && ok && attempt == 0 {
			// An input is ignored without a write, so no compare-and-set
			// checks the cached state it was judged on; KV does. A copy
			// cached by a decision that raced a delete named the deleted
			// task's last command, and a re-creation sending the same
			// command id was taken for a redelivery and never scheduled.
			s.states.drop(id)
			continue
		}
		if dec.Ignored {
			// A redelivered input: its decision is stored, but a crash may
			// have come between that write and the pause hint's.
			if _, err := s.hintPause(ctx, id, st, dec.State); err != nil {
				return dec, err
			}
			return dec, s.unhintPause(ctx, id, st, dec.State)
		}
		if wrote, err := s.hintPause(ctx, id, st, dec.State); err != nil {
			return dec, err
		} else if wrote != 0 {
			hinted = wrote
		}
		buf := stateBufs.Get()
		body, err := dec.State.AppendJSON(*buf)
		if err != nil {
			return dec, permanent("", fmt.Errorf("encode schedule %s: %w", id, err), true)
		}
		var wrote uint64
		if rev == 0 {
			wrote, err = s.schedules.Create(ctx, id, body)
		} else {
			wrote, err = s.schedules.Update(ctx, id, body, rev)
		}
		size := len(body)
		stateBufs.Put(buf, body)
		if jsutil.IsCASConflict(err) {
			s.states.drop(id)
			continue
		}
		if err != nil {
			s.states.drop(id)
			return dec, permanent("", fmt.Errorf("write schedule %s (%d bytes): %w", id, size, err), false)
		}
		s.states.put(id, dec.State, wrote)
		if err := s.unhintPause(ctx, id, st, dec.State); err != nil {
			// The decision is stored; a hint left behind costs the executor
			// a schedule read per run until the task's next decision.
			s.log.Warn("pause hint not deleted; the next decision retries", "task", id, "err", err)
		}
		s.cfg.Metrics.Decisions.WithLabelValues(string(dec.Source)).Inc()
		if s.log.Enabled(ctx, slog.LevelDebug) {
			// Guarded: the arguments alone cost 7 allocations per decision
			// even when debug logging is off.
			s.log.Debug("decision", "task", id, "input", step.Input.Kind, "nextRunAt", dec.NextRunAt, "source", dec.Source)
		}
		return dec, nil
	}
	return gov.Decision{}, fmt.Errorf("write schedule %s: %d CAS conflicts in a row: %w", id, s.cfg.CASAttempts, jetstream.ErrKeyRevisionMismatch)
}

// rebuildFor is the schedule a signal of a task whose stored schedule
// does not decode (readState) is applied to, and the spec it is decided
// with: both read from KV, the schedule as the task's creation writes it
// (completeCreation), with the createdAt stored with the spec, or, for a
// spec stored with none, the signal's (the timer read it from the value),
// else the signal's time. A spec gone is the task deleted (gone); one that
// does not decode cannot be applied.
func (s *Service) rebuildFor(ctx context.Context, step *Step) (*events.TaskSpec, gov.State, error) {
	ent, err := s.tasks.Get(ctx, step.TaskID)
	if err != nil {
		return nil, gov.State{}, err
	}
	spec, createdAt, err := kvcache.DecodeStoredSpec(step.TaskID, ent.Value())
	if err != nil {
		return nil, gov.State{}, permanent("", err, true)
	}
	if createdAt.IsZero() {
		createdAt = step.TaskCreatedAt()
	}
	step.specCreatedAt, step.SpecRevision = createdAt, ent.Revision()
	st := completeCreation(spec, step)
	st.SpecRevision = ent.Revision()
	s.log.Info("signal of a task whose schedule is unreadable; rebuilding it from its spec first",
		"task", step.TaskID, "createdAt", st.CreatedAt)
	return spec, st, nil
}

// errNoSchedule ends the decision of a signal of a task with no schedule
// (decide): acked without effect.
var errNoSchedule = errors.New("no schedule: a signal does not create one")

// gone ends a decision that found its task gone (err: errNoSchedule, or
// the spec missing) and returns err. A pause hint the decision wrote
// before it found out (a signal of a paused task decided on a cached
// state while task.deleted removed the spec, the schedule and the hint)
// is removed again, at the revision it was written: left, it outlived the
// task for ever, listed by `nats kv ls flyball-pauses`, and cost the
// executor a schedule read per dispatch of a new task of the ID. A hint
// written since (a new task of the ID paused) is kept.
func (s *Service) gone(ctx context.Context, id string, hinted uint64, err error) error {
	if hinted == 0 || !errors.Is(err, errNoSchedule) && !jsutil.IsKeyMissing(err) {
		return err
	}
	derr := s.pauses.Delete(ctx, id, jetstream.LastRevision(hinted))
	switch {
	case derr == nil:
		s.pauseHints.Delete(id, 0)
	case jsutil.IsCASConflict(derr) || jsutil.IsKeyMissing(derr):
	default:
		s.log.Warn("pause hint of a deleted task not removed", "task", id, "err", derr)
	}
	return err
}

// stateBufs hold a schedule state's encoding while it is written. KV's
// Create and Update copy the value into the connection's buffer before
// they return, so the next decision reuses it: grown from 512 bytes, each
// decision allocated twice, 1.4 KB for a plain task's 570-byte state. A
// state with a long trail or dead-letter reason (over 16 KB) is written,
// then dropped.
var stateBufs = bufpool.New(stateBufSize, 16<<10)

// stateBufSize is a pooled buffer's first size: every state a plain task
// has fits (TestPlainStatesFitTheirBuffer).
const stateBufSize = 1024

// readState reads a task's schedule state and revision from KV, and
// whether a readable schedule is stored (scheduled). A missing key is the
// zero state at revision 0 (the write will be a Create). An unreadable
// value (written by hand or by another version, a bad restore) is taken
// for a missing schedule at its revision, which the write replaces: a
// command completes the creation (decide), as does the sweeper's repair,
// and a signal is applied to the schedule rebuilt from the spec
// (rebuildFor). Taken for a schedule written by another command (as it
// was), it was never rebuilt: the sweeper's repair was acked without
// effect every 5 minutes, and the timer never dispatched the task again.
// A value whose fields the timer and the sweeper read decodes for them
// (they repair nothing) while a governor-only field may not: its signals
// rebuild it. A value that decodes but names no decision (State.Undecided:
// JSON null, {}) is unreadable too: applied to as a zero state (as it
// was), a signal or command wrote a schedule with no taskId and no
// createdAt, and a repair was acked without effect.
func (s *Service) readState(ctx context.Context, id string) (st gov.State, rev uint64, scheduled bool, err error) {
	ent, err := s.schedules.Get(ctx, id)
	if jsutil.IsKeyMissing(err) {
		return gov.State{}, 0, false, nil
	}
	if err != nil {
		return gov.State{}, 0, false, fmt.Errorf("get schedule %s: %w", id, err)
	}
	err = json.Unmarshal(ent.Value(), &st)
	if err == nil && st.Undecided() {
		err = gov.ErrUndecided
	}
	if err != nil {
		s.log.Error("stored schedule is unreadable; rebuilding it from the task's spec", "task", id, "revision", ent.Revision(), "err", err)
		return gov.State{}, ent.Revision(), false, nil
	}
	return st, ent.Revision(), true, nil
}
