package governor

import "time"

// State is everything the governor remembers about one task between
// decisions. It is the value stored under the task's key in KV
// flyball-schedules, so its JSON shape is part of the contract.
type State struct {
	// TaskID is the task this state belongs to.
	TaskID string `json:"taskId"`
	// NextRunAt is when the timer dispatches the next run. Zero means no run
	// is scheduled (an indefinitely paused or deleted task).
	NextRunAt time.Time `json:"nextRunAt,omitzero"`
	// Source and Trail explain NextRunAt.
	Source Source   `json:"source,omitempty"`
	Trail  []string `json:"trail,omitempty"`
	// DecidedAt is the `now` of the decision that produced this state.
	DecidedAt time.Time `json:"decidedAt,omitzero"`
	// CreatedAt is when the task was accepted; staleness of a task that
	// never succeeded is measured from it.
	CreatedAt time.Time `json:"createdAt,omitzero"`
	// Input names the input kind that produced this state.
	Input Kind `json:"input,omitempty"`

	// Failures counts consecutive failed runs (not attempts).
	Failures int `json:"failures,omitempty"`
	// Runs counts completed runs; it seeds deterministic jitter.
	Runs uint64 `json:"runs,omitempty"`
	// LastScheduledAt is the slot of the last completed run: the grid anchor.
	LastScheduledAt time.Time `json:"lastScheduledAt,omitzero"`
	// LastDispatchID is the dispatch whose outcome was applied last; a
	// redelivered outcome with the same ID is ignored.
	LastDispatchID string    `json:"lastDispatchId,omitempty"`
	LastOutcome    string    `json:"lastOutcome,omitempty"`
	LastSuccessAt  time.Time `json:"lastSuccessAt,omitzero"`
	LastFailureAt  time.Time `json:"lastFailureAt,omitzero"`

	// Paused is set while the task is paused; PausedUntil is its end, or
	// zero for an indefinite pause.
	Paused      bool      `json:"paused,omitempty"`
	PausedUntil time.Time `json:"pausedUntil,omitzero"`
	PauseReason string    `json:"pauseReason,omitempty"`

	// IntervalHint and OneShotHint are the active hints, if any.
	IntervalHint *IntervalHint `json:"intervalHint,omitempty"`
	OneShotHint  *OneShotHint  `json:"oneShotHint,omitempty"`

	// LastCommandID is the CloudEvents id of the last control command
	// applied, so a redelivered command is recognised and not applied twice.
	LastCommandID string `json:"lastCommandId,omitempty"`

	// Deleted marks a task whose delete was applied; NextRunAt is zero.
	Deleted bool `json:"deleted,omitempty"`
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
