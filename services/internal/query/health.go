package query

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/cron"
	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/lease"
	"github.com/flyballhq/flyball/streams"
)

// Health summary constants.
const (
	// DueWindow is the horizon of Health.Queue.DueWithinSeconds.
	DueWindow = 12 * time.Second
	// HealthDeadLetters is how many recent dead letters Health lists.
	HealthDeadLetters = 25
	// DefaultJob is the perType key of tasks without a job.
	DefaultJob = "default"
	// MaxStaleness is the most staleness entries Health lists, and the
	// API's default: at 100,000 tasks, listing every one built tens of MB
	// in the API's memory and printed 100,000 lines in flyball status.
	MaxStaleness = 1000
)

// Health is the scheduler-health summary: the shape of Pulse's
// GET /api/monitoring/scheduler/health, with flyball's names.
type Health struct {
	UpdatedAt  time.Time        `json:"updatedAt"`
	Enabled    bool             `json:"enabled"`
	Queue      QueueHealth      `json:"queue"`
	DeadLetter DeadLetterHealth `json:"deadLetter"`
	// Breakers lists breakers that are not closed.
	Breakers []BreakerHealth `json:"breakers"`
	// Staleness lists the stalest tasks, stalest first: at most the
	// number Health was asked for.
	Staleness []StalenessEntry `json:"staleness"`
	// StalenessCount is how many tasks were scored: those not in
	// Staleness were left out as less stale.
	StalenessCount int `json:"stalenessCount"`
	// Services is what the runtime registry (KV flyball-runtime) says
	// of flyball's own services.
	Services ServicesHealth `json:"services"`
	// Backlog is every durable consumer's state, sorted by stream, then
	// consumer: the work waiting in NATS for each service.
	Backlog []ConsumerBacklog `json:"backlog"`
}

// ConsumerBacklog is one durable consumer's state as JetStream reports
// it.
type ConsumerBacklog struct {
	Stream   string `json:"stream"`
	Consumer string `json:"consumer"`
	// Pending counts the messages stored and not yet delivered to it.
	Pending uint64 `json:"pending"`
	// AckPending counts those delivered and not yet acked, and
	// MaxAckPending is the consumer's limit on them.
	AckPending    int `json:"ackPending"`
	MaxAckPending int `json:"maxAckPending"`
	// Redelivered counts those delivered more than once and not yet
	// acked.
	Redelivered int `json:"redelivered"`
	// Error says why the state could not be read (the counts are then
	// zero): the consumer does not exist, or the user may not read it.
	Error string `json:"error,omitempty"`
}

// ServicesHealth summarizes the runtime registry.
type ServicesHealth struct {
	// Online counts the instances beating, by kind.
	Online map[string]int `json:"online"`
	// Missing are the services scheduling needs that have no instance
	// online, with what stops until one starts.
	Missing []MissingService `json:"missing"`
	// Offline are the registered instances that stopped beating: marked
	// offline by the sweeper, or silent for three heartbeat intervals
	// since NATS stored their last beat (their lastBeat when that time is
	// unknown).
	Offline []Instance `json:"offline"`
	// TimerLease names the timer that holds the timers' lease (KV
	// flyball-leases, --timer-lease): the one that dispatches. Empty when
	// the timers run without a lease, or none holds it.
	TimerLease string `json:"timerLease,omitempty"`
}

// MissingService is a kind of service with no instance online.
type MissingService struct {
	Kind   string `json:"kind"`
	Effect string `json:"effect"`
}

// RequiredServices are the kinds every deployment runs, in the order a
// run goes through them, with what stops while none is online (the api
// is optional).
var RequiredServices = []MissingService{
	{"timer", "no run is dispatched"},
	{"executor", "dispatched runs wait in DISPATCH"},
	{"governor", "commands, outcomes and transitions wait in their streams; no next run is planned"},
	{"breaker", "breakers neither open nor close"},
	{"deadletter", "final failures are not dead-lettered"},
	{"sweeper", "no zombie re-dispatch, offline marking or orphan removal"},
}

// beatsMissed is how many heartbeat intervals of silence make an instance
// offline, as the sweeper counts (15s beats, offline after 45s).
const beatsMissed = 3

// online reports whether an instance is beating at now. Its silence runs
// from lastSeen: the time NATS stored its beat, by the server's clock, so
// neither an instance whose clock runs behind (its fresh beat stamped as
// old, listed offline while it beat) nor one whose clock runs ahead (its
// last beat stamped in the future, listed online for its skew past 45 s
// after it died) is misjudged (the sweeper measures silence by its own
// clock for the same reason).
func online(in *Instance, now time.Time) bool {
	every := in.Interval.D()
	if every <= 0 {
		every = 15 * time.Second
	}
	return in.Status != events.RuntimeOffline && now.Sub(in.lastSeen()) <= beatsMissed*every
}

// lastSeen is when the instance last beat: the time NATS stored that beat
// (online). LastBeatAge runs from it too: from lastBeat, an instance
// whose clock runs ahead was listed as beating in the future ("-1m50s
// ago"), one whose clock runs behind as silent longer than it was. An
// entry stored offline is the sweeper's mark, stored at least 45 s after
// the beat: its StoredAt is the mark's, and lastBeat alone tells the beat.
func (in *Instance) lastSeen() time.Time {
	if in.Status == events.RuntimeOffline {
		return in.LastBeat
	}
	return in.StoredAt
}

// QueueHealth describes the scheduled runs.
type QueueHealth struct {
	// Depth counts tasks with a next run scheduled.
	Depth int `json:"depth"`
	// DueWithinSeconds counts those due within DueWindow (12s), overdue included.
	DueWithinSeconds int `json:"dueWithinSeconds"`
	// PerType counts scheduled tasks by job ("default" for tasks without one).
	PerType map[string]int `json:"perType"`
}

// DeadLetterHealth describes the DEADLETTER stream.
type DeadLetterHealth struct {
	// Count is the number of stored dead-letter entries.
	Count uint64 `json:"count"`
	// Tasks are the most recent entries (at most 25), newest first.
	Tasks []DeadLetterSummary `json:"tasks"`
}

// DeadLetterSummary is one dead-letter entry in the health summary.
type DeadLetterSummary struct {
	Seq            uint64    `json:"seq"`
	TaskID         string    `json:"taskId"`
	Reason         string    `json:"reason"`
	Attempts       int       `json:"attempts"`
	LastError      string    `json:"lastError,omitempty"`
	DeadLetteredAt time.Time `json:"deadLetteredAt"`
}

// BreakerHealth is one breaker that is open or half-open.
type BreakerHealth struct {
	Key string `json:"key"`
	// TaskID is set for task-scoped breakers (host-scoped keys start with "host_").
	TaskID   string              `json:"taskId,omitempty"`
	State    events.BreakerState `json:"state"`
	Failures int                 `json:"failures"`
	RetryAt  *time.Time          `json:"retryAt,omitempty"`
}

// StalenessEntry scores how overdue a task's last success is.
type StalenessEntry struct {
	TaskID string `json:"taskId"`
	// Score is min(1, max(0, (age - expected) / (4 × expected))), where age
	// is the time since the last success (or since the task was created if
	// it never succeeded) and expected the task's interval: an active
	// interval hint's, else the baseline (for cron, the gap between its next
	// two occurrences). 0 while the last success is at most one interval
	// old, 1 at five intervals.
	Score       float64         `json:"score"`
	LastSuccess *time.Time      `json:"lastSuccess"`
	Expected    events.Duration `json:"expectedInterval"`
	Paused      bool            `json:"paused,omitempty"`
}

// Health computes the scheduler-health summary. Its Staleness lists the
// stale stalest tasks, in [0, MaxStaleness] (0 lists none), held in a
// bounded heap as the tasks are scored; StalenessCount counts them all.
func (r *Reader) Health(ctx context.Context, stale int) (*Health, error) {
	if stale < 0 || stale > MaxStaleness {
		return nil, fmt.Errorf("staleness: must be in [0, %d], got %d", MaxStaleness, stale)
	}
	now := r.now()
	tasks, err := r.healthTasks(ctx, now)
	if err != nil {
		return nil, err
	}
	h := &Health{
		UpdatedAt: now, Enabled: true,
		Queue: QueueHealth{PerType: map[string]int{}},
	}
	top := stalest{max: stale}
	for id, t := range tasks {
		if !t.scored {
			continue // no state, or that of a deleted task
		}
		if t.queued {
			h.Queue.Depth++
			if t.due {
				h.Queue.DueWithinSeconds++
			}
			h.Queue.PerType[t.job]++
		}
		h.StalenessCount++
		e := StalenessEntry{TaskID: id, Score: t.score}
		if !top.admits(&e) {
			continue
		}
		e.Expected, e.Paused = events.Duration(t.x.Interval(now)), t.paused
		if !t.lastSuccess.IsZero() {
			ls := t.lastSuccess
			e.LastSuccess = &ls
		}
		top.add(e)
	}
	h.Staleness = top.sorted()
	if h.Breakers, err = r.openBreakers(ctx); err != nil {
		return nil, err
	}

	if h.Services, err = r.servicesHealth(ctx); err != nil {
		return nil, err
	}
	if h.Backlog, err = r.backlog(ctx); err != nil {
		return nil, err
	}
	if h.DeadLetter.Count, err = r.CountDeadLetters(ctx, ""); err != nil {
		return nil, err
	}
	recent, err := r.DeadLetters(ctx, "", HealthDeadLetters)
	if err != nil {
		return nil, err
	}
	h.DeadLetter.Tasks = make([]DeadLetterSummary, 0, len(recent))
	for i := len(recent) - 1; i >= 0; i-- {
		d := &recent[i]
		h.DeadLetter.Tasks = append(h.DeadLetter.Tasks, DeadLetterSummary{
			Seq: d.Seq, TaskID: d.Entry.TaskID, Reason: d.Entry.Reason, Attempts: d.Entry.Attempts,
			LastError: d.LastError(), DeadLetteredAt: d.Entry.DeadLetteredAt,
		})
	}
	return h, nil
}

// healthTask is what Health keeps of a task: not its spec, which it
// decodes and drops, but its job and expectation, then what its state
// scores. At a million tasks, holding every spec and state whole took
// gigabytes on each health poll.
type healthTask struct {
	job     string    // the spec's job, or DefaultJob
	created time.Time // when the spec was stored: the age of a state without CreatedAt
	expect  Expectation
	// Set from the task's state. scored is false until one is read, and
	// for a deleted task's.
	scored, queued, due, paused bool
	score                       float64
	x                           Expectation // expect, hinted and planned
	lastSuccess                 time.Time
}

// healthTasks reads the tasks (KV flyball-tasks), then scores each one's
// state (KV flyball-schedules) at now.
func (r *Reader) healthTasks(ctx context.Context, now time.Time) (map[string]healthTask, error) {
	s := healthScan{now: now, tasks: map[string]healthTask{}, jobs: map[string]string{}}
	if err := eachEntry(ctx, r.tasks, s.spec); err != nil {
		return nil, err
	}
	if err := eachEntry(ctx, r.schedules, s.state); err != nil {
		return nil, err
	}
	return s.tasks, nil
}

// healthScan collects healthTasks one entry at a time. A key delivered
// twice (updated while the watch reads) keeps its last value, as a map of
// the entries did.
type healthScan struct {
	now   time.Time
	tasks map[string]healthTask
	jobs  map[string]string // one copy of each job name
}

// spec keeps a task's job, expectation and creation time. A spec that
// does not decode leaves its task out.
func (s *healthScan) spec(e jetstream.KeyValueEntry) {
	var spec events.TaskSpec
	if json.Unmarshal(e.Value(), &spec) != nil {
		delete(s.tasks, e.Key())
		return
	}
	job := cmp.Or(spec.Job, DefaultJob)
	if j, ok := s.jobs[job]; ok {
		job = j
	} else {
		s.jobs[job] = job
	}
	s.tasks[e.Key()] = healthTask{job: job, created: e.Created(), expect: Expect(&spec)}
}

// state scores a task's state. A state without a task (an orphan) is
// skipped; one that does not decode, or is a deleted task's, leaves its
// task unscored.
func (s *healthScan) state(e jetstream.KeyValueEntry) {
	t, ok := s.tasks[e.Key()]
	if !ok {
		return
	}
	var st gov.State
	if json.Unmarshal(e.Value(), &st) != nil || st.Deleted {
		t.scored = false
		s.tasks[e.Key()] = t
		return
	}
	since := st.CreatedAt
	if since.IsZero() {
		since = t.created
	}
	t.x = t.expect.Hinted(st.IntervalHint, s.now).Planned(st.Source, st.LastScheduledAt, st.NextRunAt)
	t.scored, t.score = true, t.x.Score(s.now, st.LastSuccessAt, since)
	t.queued = !st.NextRunAt.IsZero()
	t.due = t.queued && !st.NextRunAt.After(s.now.Add(DueWindow))
	t.paused, t.lastSuccess = st.PausedAt(s.now), st.LastSuccessAt
	s.tasks[e.Key()] = t
}

// openBreakers lists the breakers that are not closed (KV
// flyball-breakers), sorted by key.
func (r *Reader) openBreakers(ctx context.Context) ([]BreakerHealth, error) {
	open := breakerSet{}
	if err := eachEntry(ctx, r.breakers, open.add); err != nil {
		return nil, err
	}
	out := make([]BreakerHealth, 0, len(open))
	for _, bh := range open {
		out = append(out, bh)
	}
	slices.SortFunc(out, func(a, b BreakerHealth) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// breakerSet holds the breakers that are not closed, by key. A key
// delivered twice keeps its last record.
type breakerSet map[string]BreakerHealth

// add keeps a breaker that is open or half-open, and forgets one that is
// closed or whose record does not decode.
func (s breakerSet) add(e jetstream.KeyValueEntry) {
	key := e.Key()
	var b executor.BreakerRecord
	if json.Unmarshal(e.Value(), &b) != nil || b.State == events.BreakerClosed || b.State == "" {
		delete(s, key)
		return
	}
	bh := BreakerHealth{Key: key, State: b.State, Failures: b.Failures}
	if !strings.HasPrefix(key, events.HostKeyPrefix) {
		bh.TaskID = key
	}
	if !b.RetryAt.IsZero() {
		t := b.RetryAt
		bh.RetryAt = &t
	}
	s[key] = bh
}

// staler orders staleness entries stalest first, then by task id.
func staler(a, b *StalenessEntry) int {
	return cmp.Or(cmp.Compare(b.Score, a.Score), strings.Compare(a.TaskID, b.TaskID))
}

// stalest keeps the max stalest entries it is given in a heap whose root
// is the least stale of them, so that memory stays bounded by max rather
// than by the number of tasks.
type stalest struct {
	max int
	h   []StalenessEntry
}

// admits reports whether e would be kept: there is room, or it is staler
// than the least stale entry kept.
func (s *stalest) admits(e *StalenessEntry) bool {
	return len(s.h) < s.max || (s.max > 0 && staler(e, &s.h[0]) < 0)
}

// add keeps e, which admits accepted, dropping the least stale entry if
// the heap is full.
func (s *stalest) add(e StalenessEntry) {
	if len(s.h) < s.max {
		s.h = append(s.h, e)
		for i := len(s.h) - 1; i > 0; {
			p := (i - 1) / 2
			if staler(&s.h[p], &s.h[i]) < 0 { // parent staler: swap the less stale up
				s.h[p], s.h[i] = s.h[i], s.h[p]
				i = p
				continue
			}
			break
		}
		return
	}
	s.h[0] = e
	for i := 0; ; {
		l, r, least := 2*i+1, 2*i+2, i
		if l < len(s.h) && staler(&s.h[l], &s.h[least]) > 0 {
			least = l
		}
		if r < len(s.h) && staler(&s.h[r], &s.h[least]) > 0 {
			least = r
		}
		if least == i {
			return
		}
		s.h[i], s.h[least] = s.h[least], s.h[i]
		i = least
	}
}

// sorted returns the entries kept, stalest first.
func (s *stalest) sorted() []StalenessEntry {
	out := s.h
	if out == nil {
		out = []StalenessEntry{}
	}
	slices.SortFunc(out, func(a, b StalenessEntry) int { return staler(&a, &b) })
	return out
}

// backlog reads every durable consumer's state. A consumer that cannot
// be read has its Error set; the rest are still read.
func (r *Reader) backlog(ctx context.Context) ([]ConsumerBacklog, error) {
	ds, err := streams.Durables()
	if err != nil {
		return nil, err
	}
	out := make([]ConsumerBacklog, len(ds))
	for i, d := range ds {
		if out[i], err = ReadBacklog(ctx, r.js, d); err != nil && ctx.Err() != nil {
			return nil, err
		}
	}
	return out, nil
}

// ReadBacklog reads one durable consumer's state (a JetStream consumer
// info request). On error the counts are zero and Error says why.
func ReadBacklog(ctx context.Context, js jetstream.JetStream, d streams.Durable) (ConsumerBacklog, error) {
	b := ConsumerBacklog{Stream: d.Stream, Consumer: d.Name}
	c, err := js.Consumer(ctx, d.Stream, d.Name)
	if err != nil {
		b.Error = err.Error()
		return b, err
	}
	info := c.CachedInfo()
	b.Pending, b.AckPending, b.MaxAckPending, b.Redelivered = info.NumPending, info.NumAckPending, info.Config.MaxAckPending, info.NumRedelivered
	return b, nil
}

func (r *Reader) servicesHealth(ctx context.Context) (ServicesHealth, error) {
	list, err := r.Runtime(ctx)
	if err != nil {
		return ServicesHealth{}, err
	}
	now := r.now()
	sh := ServicesHealth{Online: map[string]int{}, Missing: []MissingService{}, Offline: []Instance{}}
	for i := range list {
		if online(&list[i], now) {
			sh.Online[list[i].Kind]++
		} else {
			sh.Offline = append(sh.Offline, list[i])
		}
	}
	for _, m := range RequiredServices {
		if sh.Online[m.Kind] == 0 {
			sh.Missing = append(sh.Missing, m)
		}
	}
	if sh.TimerLease, err = r.timerLease(ctx); err != nil {
		return ServicesHealth{}, err
	}
	return sh, nil
}

// timerLease reads the name of the timer holding the lease, without its
// run's token (lease.HolderOf): "" when no timer holds it, or the bucket
// does not exist (streams ensured by a version before the lease). It is
// bound on each call, so a reader that started before the bucket existed
// sees it once it does.
func (r *Reader) timerLease(ctx context.Context) (string, error) {
	kv, err := r.js.KeyValue(ctx, streams.BucketLeases)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("bind KV %s: %w", streams.BucketLeases, err)
	}
	e, err := kv.Get(ctx, streams.LeaseTimer)
	if jsutil.IsKeyMissing(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read KV %s: %w", streams.BucketLeases, err)
	}
	return lease.HolderOf(e.Value()), nil
}

// Expectation is the cadence a task's staleness is measured against: its
// interval, or its cron calendar, parsed once.
type Expectation struct {
	interval time.Duration
	// planned, when longer than interval, is the gap to the next run the
	// task's settings chose (Planned): the score stays 0 until it passes,
	// then grows by a quarter per interval.
	planned time.Duration
	sched   *cron.Schedule
	loc     *time.Location
}

// Expect reads the expectation of a spec. A cron expression or time zone
// that does not parse leaves a zero Expectation, which scores 0.
func Expect(spec *events.TaskSpec) Expectation {
	if spec.Schedule.Interval > 0 {
		return Expectation{interval: spec.Schedule.Interval.D()}
	}
	sched, err := cron.Parse(spec.Schedule.Cron)
	if err != nil {
		return Expectation{}
	}
	loc, err := events.LoadLocation(cmp.Or(spec.Schedule.Timezone, "UTC"))
	if err != nil {
		return Expectation{}
	}
	return Expectation{sched: sched, loc: loc}
}

// Hinted is the expectation while the task has an interval hint h that
// has not expired at now: the hint's interval, the cadence the operator
// asked for. A cron task keeps its calendar: an interval hint has no
// effect on it.
func (x Expectation) Hinted(h *gov.IntervalHint, now time.Time) Expectation {
	if h == nil || h.Interval <= 0 || !h.ExpiresAt.After(now) || x.sched != nil || x.interval <= 0 {
		return x
	}
	return Expectation{interval: h.Interval}
}

// relaxedOnPurpose are the sources of a next run that a task's own
// settings put further out than its interval: it is not late for them.
// Failure-driven holds (backoff, breaker, dead-letter recheck) are not
// among them: a failing task is stale.
var relaxedOnPurpose = map[gov.Source]bool{
	gov.SourceActivityIdle: true, gov.SourceActivityDormant: true, gov.SourceAdaptiveRelax: true,
	gov.SourceQuietHours: true, gov.SourceBudget: true, gov.SourceClampedMin: true, gov.SourceHintInterval: true,
}

// Planned is the expectation of an interval task whose next run, at next
// from its last slot lastSlot, was put further out than its interval on
// purpose (source: activity, adaptive relax, quiet hours, budget,
// bounds.min, an interval hint): the score stays 0 for that gap, then
// grows as it would have after one interval. A task relaxed to six times
// its interval by activity.dormantMultiplier scored 1 at five intervals
// and kept FlyballTaskStale firing while it ran exactly as configured.
// A cron task keeps its calendar.
func (x Expectation) Planned(source gov.Source, lastSlot, next time.Time) Expectation {
	if x.sched != nil || x.interval <= 0 || !relaxedOnPurpose[source] || lastSlot.IsZero() {
		return x
	}
	if gap := next.Sub(lastSlot); gap > x.interval {
		x.planned = gap
	}
	return x
}

// Interval is the cadence shown next to a score: the interval, or for a
// cron task the gap between its next two occurrences after now. Zero if
// the schedule cannot be evaluated.
func (x Expectation) Interval(now time.Time) time.Duration {
	if x.sched == nil {
		return max(x.interval, x.planned)
	}
	a := x.sched.Next(now, x.loc)
	b := x.sched.Next(a, x.loc)
	if a.IsZero() || b.IsZero() {
		return 0
	}
	return b.Sub(a)
}

// staleAt is how many runs due since the last success make a task fully
// stale (score 1), the first one included: the score is 0 until one is
// due and grows by a quarter with each one after it.
const staleAt = 5

// Score is the task's staleness in [0, 1], from its last success (or,
// never having succeeded, since it was created). An interval task scores
// (age − interval) / (4 × interval). A cron task counts the occurrences
// due since then, as that formula does for an interval task's slots: 0
// until the first, a quarter more with each later one (in proportion
// between two), 1 at the fifth. An irregular calendar ("0 9 1,2 * *", a
// weekday schedule) is not stale in its long gaps.
func (x Expectation) Score(now, lastSuccess, since time.Time) float64 {
	if x.sched == nil {
		if x.planned > x.interval {
			// Scored from the planned run on, at the interval's pace.
			return gov.Staleness(now.Add(x.interval-x.planned), lastSuccess, since, x.interval)
		}
		return gov.Staleness(now, lastSuccess, since, x.interval)
	}
	ref := cmp.Or(lastSuccess, since)
	if ref.IsZero() {
		return 0
	}
	due := x.sched.Next(ref, x.loc) // the first occurrence due after ref
	for n := 1; !due.IsZero() && !due.After(now); n++ {
		if n >= staleAt {
			return 1
		}
		next := x.sched.Next(due, x.loc)
		if next.IsZero() || next.After(now) {
			frac := 0.0
			if !next.IsZero() {
				frac = float64(now.Sub(due)) / float64(next.Sub(due))
			}
			return (float64(n-1) + frac) / (staleAt - 1)
		}
		due = next
	}
	return 0
}
