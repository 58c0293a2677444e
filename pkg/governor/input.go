package governor

import (
	"strings"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
)

// Kind is the kind of event an Input carries.
type Kind string

// Input kinds.
const (
	// KindAccepted is a newly created task (or the first decision after an
	// update replaced the spec).
	KindAccepted Kind = "accepted"
	// KindUpdated is a spec update of an existing task.
	KindUpdated Kind = "updated"
	// KindOutcome is the final outcome of a run: succeeded, failed (final)
	// or skipped.
	KindOutcome Kind = "outcome"
	KindPaused  Kind = "paused"
	KindResumed Kind = "resumed"
	KindHinted  Kind = "hinted"
	KindDeleted Kind = "deleted"
	// KindBreaker is a breaker transition of the task's breaker.
	KindBreaker Kind = "breaker"
	// KindDeadLettered is a dead-letter entry written for one of the task's
	// runs: the governor schedules the recheck.
	KindDeadLettered Kind = "deadlettered"
	// KindRequeued is an operator's request to run a dead-lettered task
	// again now.
	KindRequeued Kind = "requeued"
)

// Input is one event applied to a task's state.
type Input struct {
	Kind Kind
	// Outcome is set for KindOutcome.
	Outcome *Outcome
	// Pause is set for KindPaused.
	Pause *Pause
	// Hint is set for KindHinted.
	Hint *Hint
	// Breaker is set for KindBreaker.
	Breaker *BreakerSignal
	// BreakerKey is the task's breaker key under the spec the input is
	// decided with: the flyball-breakers key the executor defers its
	// calls by (services/executor.BreakerKey: the task's ID, or
	// host_<host> for breaker.scope host, of the host canonicalized as
	// this package cannot). The caller sets it at least for a breaker
	// transition and while the state holds a breaker (State.BreakerKey);
	// empty, it is not known, and nothing is compared. A hold set by another key's
	// breaker (State.BreakerKey) is lifted, and another key's transition
	// changes nothing (OtherBreaker): the task moved to another breaker
	// since, by an update.
	BreakerKey string
	// DeadLetter is set for KindDeadLettered.
	DeadLetter *DeadLetterSignal
	// Replaced is, for KindUpdated, the spec the update replaces: the
	// one the state was decided with last. The adaptive cadence and
	// change detection restart only when the update changes what they
	// rest on (AdaptiveRestarts). Nil when it is not known: they
	// restart.
	Replaced *events.TaskSpec
	// ReplacesUnreadable is set, for KindUpdated, when the spec the
	// update replaces did not decode. The governor terminated the task's
	// outcomes while it was stored (cannot be applied), so the slot in
	// flight may have run and its outcome be lost: it is not kept
	// (inFlight), and the update plans after it. Kept, the task waited
	// for an outcome that never came, until the sweeper's lost-write
	// repair 5 minutes later.
	ReplacesUnreadable bool
}

// BreakerSignal is a transition of the task's circuit breaker.
type BreakerSignal struct {
	// State is "closed", "open" or "half-open".
	State string
	// RetryAt is when an open breaker lets the next probe through.
	RetryAt time.Time
	// TaskCreatedAt is the transition's task's (zero if unknown): a
	// transition of a deleted task of the same ID is ignored (see
	// Outcome.TaskCreatedAt).
	TaskCreatedAt time.Time
	// Key is the breaker's flyball-breakers key (the transition's): the
	// task's ID, or host_<host> for breaker.scope host. Empty when not
	// known: the transition is taken for the task's breaker.
	Key string
}

// OtherBreaker reports whether in is a transition of a breaker the task
// does not use: its key is not the task's breaker key (in.BreakerKey),
// both known. The task moved to another breaker by an update (a switch of
// breaker.scope, or a host-scoped task's URL to another host), and the
// old breaker's transition came late (HEALTH and TASKS are not ordered
// with each other), or names the task as the last one whose call moved
// the old host's breaker. The executor does not defer the task's calls
// by that breaker, so it neither holds nor lifts anything.
func OtherBreaker(in Input) bool {
	b := in.Breaker
	return b != nil && b.Key != "" && in.BreakerKey != "" && b.Key != in.BreakerKey
}

// DeadLetterSignal is a dead-letter entry for one of the task's runs.
type DeadLetterSignal struct {
	DispatchID string
	Reason     string
	// At is when DEADLETTER stored the entry, by the NATS server's clock
	// (as RequeuedAt is), not the entry's deadLetteredAt, which is the
	// dead-letter host's clock.
	At time.Time
	// TaskCreatedAt is the dead-lettered dispatch's (zero if unknown): an
	// entry of a deleted task of the same ID is ignored (see
	// Outcome.TaskCreatedAt).
	TaskCreatedAt time.Time
	// ScheduledAt is the dead-lettered dispatch's slot (zero if unknown).
	ScheduledAt time.Time
}

// Outcome is the final result of one run.
type Outcome struct {
	DispatchID  string
	ScheduledAt time.Time
	// Result is "succeeded", "failed" or "skipped".
	Result string
	// Skip is, for a skipped run, what its reason says of the slot
	// (SkipOf): whether it ran after all, or why it did not.
	Skip Skip
	// StartedAt is when the run's call started (zero if unknown, or for a
	// skipped run). A run that started after slots it was late for (the
	// timer fires an overdue slot at once after a downtime) is the run
	// catch-up "skip" asks for, and a backfill waits MinGap after it.
	StartedAt   time.Time
	FinishedAt  time.Time
	Fingerprint string
	// DeadLetterReason is set on a failure that is the last word on its
	// dispatch (final: permanent, or out of attempts), which the
	// dead-letter service turns into an entry with this reason. The task
	// is held for its recheck at once, as the entry would hold it: a slot
	// planned from the failure alone could run before the entry arrives.
	DeadLetterReason string
	// TaskCreatedAt is the createdAt of the schedule the run was
	// dispatched from (zero from flyball before 2026-11-27). An outcome
	// whose time differs from the state's CreatedAt is of a task deleted
	// and created again under the same ID, and is ignored: applied, the
	// old task's final failure held the new one for a dead-letter recheck,
	// and its failures put the new one into backoff.
	TaskCreatedAt time.Time
}

// Skip is what the reason of a run.skipped says of its slot, as far as
// a requeue or a one-shot hint cares: a skip is no run, but for a slot
// that ran already.
type Skip string

// Kinds of skip.
const (
	// SkipNotRun is a slot that did not run, for a reason a run planned
	// at once may meet again: an open breaker with no room left to wait
	// for its retryAt, a stored spec that does not validate, a catchUp
	// "none" slot missed, a reason not known.
	SkipNotRun Skip = ""
	// SkipPaused is a slot that fell in a pause.
	SkipPaused Skip = "paused"
	// SkipRan is a slot dispatched again after it ran: its outcome is
	// stored, and the skip stands for that run.
	SkipRan Skip = "already-ran"
)

// SkipOf is the kind of skip of a run.skipped with reason.
func SkipOf(reason string) Skip {
	switch {
	case reason == events.SkipReasonPaused:
		return SkipPaused
	case strings.HasPrefix(reason, events.SkipReasonAlreadyRan):
		return SkipRan
	}
	return SkipNotRun
}

// Pause pauses a task until Until, or indefinitely when Until is zero.
type Pause struct {
	Until  time.Time
	Reason string
}

// Hint is an interval hint, a one-shot hint, or both. TTL zero takes the
// defaults: 60m for interval hints, 30m for one-shots.
type Hint struct {
	Interval time.Duration
	At       time.Time
	TTL      time.Duration
	Reason   string
}

// Default hint lifetimes.
const (
	DefaultIntervalHintTTL = 60 * time.Minute
	DefaultOneShotHintTTL  = 30 * time.Minute
)
