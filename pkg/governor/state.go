package governor

import (
	"errors"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
)

// State is everything the governor remembers about one task between
// decisions. It is the value stored under the task's key in KV
// flyball-schedules, so its JSON shape is part of the contract. Every field
// is optional: a state written by an older flyball decodes into a valid
// State.
type State struct {
	// TaskID is the task this state belongs to.
	TaskID string `json:"taskId"`
	// NextRunAt is when the timer dispatches the next run. Zero means no run
	// is scheduled (an indefinitely paused or deleted task).
	NextRunAt time.Time `json:"nextRunAt,omitzero"`
	// Source and Trail explain NextRunAt.
	Source Source `json:"source,omitempty"`
	// CreatedAt is when the task was accepted; staleness of a task that
	// never succeeded is measured from it. It also tells the task apart
	// from a deleted one of the same ID: the timer copies it into every
	// dispatch (events.Dispatch.TaskCreatedAt), and outcomes and dead
	// letters carrying another time are ignored. It is written right after
	// source, so the timer reads it without scanning the trail.
	CreatedAt time.Time `json:"createdAt,omitzero"`
	Trail     []string  `json:"trail,omitempty"`
	// DecidedAt is the `now` of the decision that produced this state.
	DecidedAt time.Time `json:"decidedAt,omitzero"`
	// Input names the input kind that produced this state.
	Input Kind `json:"input,omitempty"`

	// Failures counts consecutive failed runs (not attempts).
	Failures int `json:"failures,omitempty"`
	// Runs counts completed runs; it seeds deterministic jitter.
	Runs uint64 `json:"runs,omitempty"`
	// LastScheduledAt is the slot of the last completed run: the grid anchor.
	LastScheduledAt time.Time `json:"lastScheduledAt,omitzero"`
	// RunningSlot is the slot in flight (due, its outcome not applied)
	// that a decision planned NextRunAt after: an input during a run (a
	// hint, a requeue) plans the slot after the running one, and from then
	// on NextRunAt no longer names it. Later decisions measure from it and
	// do not plan again the request it serves (a requeue, a one-shot, a
	// recheck, the next backfill run), as the first one did. The outcome of
	// that slot or a later one clears it (it is then at or before
	// LastScheduledAt), and so does an acceptance or a delete; a pause and
	// a resume keep it (the run goes on). Zero when no such slot is known,
	// and in states written before 2026-12-02.
	RunningSlot time.Time `json:"runningSlot,omitzero"`
	// LastDispatchID is the dispatch whose outcome was applied last; a
	// redelivered outcome with the same ID is ignored.
	LastDispatchID string `json:"lastDispatchId,omitempty"`
	// RecentDispatchIDs are dispatches applied before LastDispatchID,
	// newest first, at most MaxRecentDispatchIDs, whose outcomes the
	// outdated check (a finish before LastScheduledAt) would not tell
	// from a first delivery: runs that ended at or after the slot applied
	// after them began (two runs of the task overlapped: a run-now hint
	// or a requeue planned a slot while a run was in flight), or whose
	// end the state does not record (a skip). A redelivered outcome of
	// one of them is ignored. It is empty for a task whose runs never
	// overlapped, and absent from states written before 2026-11-30.
	RecentDispatchIDs []string  `json:"recentDispatchIds,omitempty"`
	LastOutcome       string    `json:"lastOutcome,omitempty"`
	LastSuccessAt     time.Time `json:"lastSuccessAt,omitzero"`
	LastFailureAt     time.Time `json:"lastFailureAt,omitzero"`

	// Paused is set while the task is paused; PausedUntil is its end, or
	// zero for an indefinite pause.
	Paused      bool      `json:"paused,omitempty"`
	PausedUntil time.Time `json:"pausedUntil,omitzero"`
	PauseReason string    `json:"pauseReason,omitempty"`

	// IntervalHint and OneShotHint are the active hints, if any. Expired
	// hints are removed by the next decision. A one-shot is cleared by the
	// outcome of a run scheduled at or after its At; a skip is no run (but
	// for a slot that ran already: Outcome.Skip), and leaves it.
	IntervalHint *IntervalHint `json:"intervalHint,omitempty"`
	OneShotHint  *OneShotHint  `json:"oneShotHint,omitempty"`

	// LastCommandID is the CloudEvents id of the last control command
	// applied, so a redelivered command is recognised and not applied twice.
	LastCommandID string `json:"lastCommandId,omitempty"`
	// LastCommandSeq is the TASKS stream sequence of that command, and
	// LastBreakerSeq the HEALTH stream sequence of the last breaker
	// transition applied. A redelivered command or transition at or
	// below it (a copy of one applied before later ones) is ignored: it
	// would undo them. Zero (a state written before 2026-11-29, or by a
	// replay that has no sequences) judges nothing.
	LastCommandSeq uint64 `json:"lastCommandSeq,omitempty"`
	LastBreakerSeq uint64 `json:"lastBreakerSeq,omitempty"`
	// LastCommandAt and LastBreakerAt are when that command and that
	// transition were stored (their stream timestamps). A redelivery at or
	// below the sequence but stored after it is not a copy if the stream
	// no longer holds, at the sequence, the message stored then: its
	// sequences started over below the schedule's (a schedule restored
	// from a backup that snapshotted the stream before the bucket, a
	// stream created again from scratch). If it does, the stream
	// leader's clock stepped back, and the sequence decides (the
	// governor service reads the stream: services/governor
	// Step.SequencesRestarted). Zero (no command, or no transition,
	// applied since 2026-12-02) judges by the sequence alone.
	LastCommandAt time.Time `json:"lastCommandAt,omitzero"`
	LastBreakerAt time.Time `json:"lastBreakerAt,omitzero"`
	// SpecRevision is the flyball-tasks revision of the spec the last
	// command that wrote one stored (task.created, task.updated). A signal
	// whose view of the spec is older reads it again before deciding:
	// decided with the spec it held, it undid the update. Zero (a state
	// written before 2026-11-30, or by Decide alone) judges nothing.
	SpecRevision uint64 `json:"specRevision,omitempty"`

	// Deleted marks a task whose delete was applied; NextRunAt is zero.
	Deleted bool `json:"deleted,omitempty"`

	// LastActivityAt is the last activity signal: acceptance, a hint, or a
	// response whose fingerprint changed. Activity modes measure idleness
	// from it.
	LastActivityAt time.Time `json:"lastActivityAt,omitzero"`
	// LastFingerprint is the fingerprint of the last successful response
	// that had one (kept when the spec uses adaptive cadence or activity
	// modes).
	LastFingerprint string `json:"lastFingerprint,omitempty"`
	// UnchangedRuns counts successful runs in a row whose fingerprint did
	// not change (adaptive mode "change").
	UnchangedRuns int `json:"unchangedRuns,omitempty"`
	// FingerprintFrom is set by a spec update that restarts change
	// detection: a run that started before it (plus FingerprintMargin) was
	// made under the old spec, and its fingerprint is neither compared nor
	// recorded. Cleared by the first fingerprint recorded after it.
	FingerprintFrom time.Time `json:"fingerprintFrom,omitzero"`
	// AdaptiveInterval is the smoothed (EMA) adaptive interval; zero means
	// the baseline interval. It is stored in nanoseconds, like
	// IntervalHint.Interval.
	AdaptiveInterval time.Duration `json:"adaptiveInterval,omitempty"`

	// BreakerOpenUntil is the retryAt of the task's open breaker; zero
	// while the breaker is closed or half-open.
	BreakerOpenUntil time.Time `json:"breakerOpenUntil,omitzero"`
	// BreakerKey is the key of the breaker whose breaker.open set
	// BreakerOpenUntil (BreakerSignal.Key). It is empty without a hold,
	// and for a hold set before 2026-12-02 (or by a transition naming no
	// key). A decision whose spec keys the task's breaker otherwise
	// (Input.BreakerKey: an update switched breaker.scope, or a
	// host-scoped task's URL to another host) lifts the hold: the
	// executor calls under the new key at once, and no transition of the
	// old breaker would lift it before its retryAt (the task's own record
	// is deleted at a switch to scope host, without a transition; a host
	// breaker's transitions name the task whose call moved it).
	BreakerKey string `json:"breakerKey,omitempty"`
	// DeadLetter is set from a dead-letter entry until a run succeeds or
	// the task is requeued.
	DeadLetter *DeadLetterHold `json:"deadLetter,omitempty"`
	// RequeuedAt is when an operator requeued the task; it is cleared by
	// the outcome of a run scheduled at or after it. A skip is no run
	// (but for a slot that ran already: Outcome.Skip), and leaves it.
	RequeuedAt time.Time `json:"requeuedAt,omitzero"`

	// CatchUpPending is the number of backfill runs still owed after a
	// downtime (catchUp "all"), including the one scheduled next.
	CatchUpPending int `json:"catchUpPending,omitempty"`

	// Budget counts recent runs for the daily budget (only kept while the
	// spec has a budget).
	Budget RunLedger `json:"budget,omitzero"`
	// LastStartedAt is when the latest run that made a call started (its
	// last attempt, on the executor's clock, at most the decision's now
	// and not before its slot; its slot when the start is unknown), of
	// whichever slot. The budget's pacing measures from it when it is
	// later than LastScheduledAt by more than half the budget's spacing: a
	// run fired long after its slot (an overdue slot after a restart) was
	// paced from the slot, and the next run followed it at once. A run
	// started within half the spacing (a retry, executor lag) is paced
	// from its slot. Only kept while the spec has a budget; absent from
	// states written by an older flyball (the slot is used).
	LastStartedAt time.Time `json:"lastStartedAt,omitzero"`
	// GridStep is the step of the interval grid NextRunAt is on (the
	// cadence in force, with backoff and jitter): NextRunAt may lie
	// several steps past LastScheduledAt when late slots were skipped.
	// The executor judges a late slot under catchUp "none" by it
	// (MissedUnderNone). Zero when NextRunAt is not a grid slot, and in
	// older states (the gap from LastScheduledAt is used). Stored in
	// nanoseconds, like AdaptiveInterval. Not the planner's cadenceStep,
	// the interval before backoff and jitter.
	GridStep time.Duration `json:"gridStep,omitempty"`
}

// IntervalHint overrides the baseline interval until ExpiresAt.
type IntervalHint struct {
	Interval  time.Duration `json:"interval"`
	ExpiresAt time.Time     `json:"expiresAt"`
	Reason    string        `json:"reason,omitempty"`
}

// OneShotHint asks for one run at At, if received before ExpiresAt.
type OneShotHint struct {
	At        time.Time `json:"at"`
	ExpiresAt time.Time `json:"expiresAt"`
	Reason    string    `json:"reason,omitempty"`
}

// DeadLetterHold is a dead-lettered run and the recheck it schedules.
type DeadLetterHold struct {
	DispatchID string    `json:"dispatchId,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	At         time.Time `json:"at"`
	// RecheckAt is At + deadLetter.recheckAfter: the task's next run, until
	// a run at or after it completes.
	RecheckAt time.Time `json:"recheckAt"`
}

// RunLedger counts runs (succeeded or failed; skips make no call) per UTC
// hour of their start (of their slot when the start is unknown), for the
// 24 hours up to Hour. It is a fixed-size ring, so a state
// never grows with the number of runs.
type RunLedger struct {
	// Hour is the newest hour counted, in hours since the Unix epoch.
	Hour int64 `json:"hour,omitempty"`
	// Counts[h mod 24] is the number of runs started in hour h, for h in
	// (Hour-24, Hour].
	Counts [24]uint32 `json:"counts"`
}

// Undecided reports whether the state names no decision: no next run, no
// source and no pause. Every state the governor writes names its
// decision's source, one with no next run too (a task paused
// indefinitely, or whose cron expression never fires), so such a value
// (JSON null or {}, a taskId alone: written by hand, a bad restore) was
// not written by a decision. The readers take it for an unreadable
// schedule: the governor rebuilds it from the task's spec, and the
// sweeper repairs it. Taken for a state with no next run (as it was),
// the task never ran again, and nothing repaired it.
func (s *State) Undecided() bool { return Undecided(s.NextRunAt, s.Source, s.Paused) }

// ErrUndecided is why a reader refused an Undecided state.
var ErrUndecided = errors.New("it names no decision: no nextRunAt, no source, not paused")

// Undecided is State.Undecided for a reader that decodes only the three
// fields of a stored schedule (the sweeper, the timer).
func Undecided(next time.Time, source Source, paused bool) bool {
	return next.IsZero() && source == "" && !paused
}

// StoredSpec is a flyball-tasks value: the spec as the governor accepted
// it, its defaults filled in, and the createdAt of the task it belongs to.
//
// CreatedAt is the task's identity across a delete and a re-creation
// under the same ID: the governor writes the same time into the task's
// schedule (State.CreatedAt; the func CreatedAt gives it), the timer
// copies it into every dispatch (events.Dispatch.TaskCreatedAt), and the
// executor compares the two so that a dispatch of a deleted task never
// calls the target of its namesake. A task update keeps it. It is zero in values written before
// 2026-11-27, or by hand: then nothing is compared. It is not part of
// events.TaskSpec: a client never sends it, and the API shows it as the
// schedule's createdAt.
type StoredSpec struct {
	*events.TaskSpec
	CreatedAt time.Time `json:"createdAt,omitzero"`
}
