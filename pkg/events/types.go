package events

// TypePrefix starts every flyball CloudEvents type.
const TypePrefix = "io.flyball."

// CloudEvents types of the whole catalog. The subject each travels on is
// given by the builders in subjects.go; docs/events.md is the reference.
const (
	TypeTaskCreated  = "io.flyball.task.created"
	TypeTaskUpdated  = "io.flyball.task.updated"
	TypeTaskDeleted  = "io.flyball.task.deleted"
	TypeTaskPaused   = "io.flyball.task.paused"
	TypeTaskResumed  = "io.flyball.task.resumed"
	TypeTaskHinted   = "io.flyball.task.hinted"
	TypeTaskRequeued = "io.flyball.task.requeued"
	TypeTaskAccepted = "io.flyball.task.accepted"
	TypeTaskRejected = "io.flyball.task.rejected"

	TypeRunDue       = "io.flyball.run.due"
	TypeRunStarted   = "io.flyball.run.started"
	TypeRunSucceeded = "io.flyball.run.succeeded"
	TypeRunFailed    = "io.flyball.run.failed"
	TypeRunSkipped   = "io.flyball.run.skipped"
	TypeRunRecovered = "io.flyball.run.recovered"

	TypeDeadLettered = "io.flyball.deadlettered"

	TypeBreakerOpen     = "io.flyball.breaker.open"
	TypeBreakerHalfOpen = "io.flyball.breaker.half-open"
	TypeBreakerClosed   = "io.flyball.breaker.closed"

	TypeRuntimeOnline  = "io.flyball.runtime.online"
	TypeRuntimeOffline = "io.flyball.runtime.offline"
)

// Verb is the action of a control-plane event on the TASKS stream.
type Verb string

// Control-plane verbs. The first seven are commands from users; accepted and
// rejected are the governor's answers.
const (
	VerbCreated  Verb = "created"
	VerbUpdated  Verb = "updated"
	VerbDeleted  Verb = "deleted"
	VerbPaused   Verb = "paused"
	VerbResumed  Verb = "resumed"
	VerbHinted   Verb = "hinted"
	VerbRequeued Verb = "requeued"
	VerbAccepted Verb = "accepted"
	VerbRejected Verb = "rejected"
)

// CommandVerbs are the verbs users publish; the governor consumes exactly these.
var CommandVerbs = []Verb{VerbCreated, VerbUpdated, VerbDeleted, VerbPaused, VerbResumed, VerbHinted, VerbRequeued}

// Type returns the CloudEvents type for the verb.
func (v Verb) Type() string { return TypePrefix + "task." + string(v) }

// Valid reports whether v is one of the known verbs.
func (v Verb) Valid() bool {
	switch v {
	case VerbCreated, VerbUpdated, VerbDeleted, VerbPaused, VerbResumed, VerbHinted, VerbRequeued, VerbAccepted, VerbRejected:
		return true
	}
	return false
}

// Outcome is the state of a run as published on the RUNS stream.
type Outcome string

// Run outcomes.
const (
	OutcomeStarted   Outcome = "started"
	OutcomeSucceeded Outcome = "succeeded"
	OutcomeFailed    Outcome = "failed"
	OutcomeSkipped   Outcome = "skipped"
	// OutcomeRecovered is not an attempt of its own: it repeats a
	// run.succeeded for the breaker service, whose consumer takes failures
	// and these instead of every success. The executor publishes one right
	// after the success's event when the success may change the breaker:
	// the breaker for its key is not closed with no failures counted, as
	// far as the executor's view shows, or the executor published a
	// failure for the key since its last recovered. Count successes on
	// run.succeeded, never on these.
	OutcomeRecovered Outcome = "recovered"
)

// Type returns the CloudEvents type for the outcome.
func (o Outcome) Type() string { return TypePrefix + "run." + string(o) }

// Valid reports whether o is one of the known outcomes.
func (o Outcome) Valid() bool {
	switch o {
	case OutcomeStarted, OutcomeSucceeded, OutcomeFailed, OutcomeSkipped, OutcomeRecovered:
		return true
	}
	return false
}

// BreakerState is the state of a circuit breaker.
type BreakerState string

// Breaker states.
const (
	BreakerClosed   BreakerState = "closed"
	BreakerOpen     BreakerState = "open"
	BreakerHalfOpen BreakerState = "half-open"
)

// Type returns the CloudEvents type of a transition into the state.
func (s BreakerState) Type() string { return TypePrefix + "breaker." + string(s) }

// Valid reports whether s is one of the known states.
func (s BreakerState) Valid() bool {
	return s == BreakerClosed || s == BreakerOpen || s == BreakerHalfOpen
}

// RuntimeStatus is the liveness of a service instance.
type RuntimeStatus string

// Runtime statuses; online and offline are also the event names.
const (
	RuntimeOnline  RuntimeStatus = "online"
	RuntimeOffline RuntimeStatus = "offline"
)

// Type returns the CloudEvents type of a change into the status.
func (s RuntimeStatus) Type() string { return TypePrefix + "runtime." + string(s) }
