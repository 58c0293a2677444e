package governor

import "time"

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
}

// Outcome is the final result of one run.
type Outcome struct {
	DispatchID  string
	ScheduledAt time.Time
	// Result is "succeeded", "failed" or "skipped".
	Result      string
	FinishedAt  time.Time
	Fingerprint string
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
