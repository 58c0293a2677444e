package events

import (
	"strconv"
	"strings"
	"time"
)

// TaskRef is the data of commands that only name a task: task.deleted and
// task.resumed.
type TaskRef struct {
	ID     string `json:"id"`
	Reason string `json:"reason,omitempty"`
}

// MaxReasonBytes bounds the free-text reason of every command. The
// governor keeps a pause's or a hint's in the task's schedule (a hint with
// interval and at keeps it twice), which must fit in one KV value; the
// others stay in TASKS as history.
const MaxReasonBytes = 1024

// TaskPause is the data of task.paused. A nil Until pauses indefinitely.
type TaskPause struct {
	ID     string     `json:"id"`
	Until  *time.Time `json:"until,omitempty"`
	Reason string     `json:"reason,omitempty"`
}

// TaskHint is the data of task.hinted: an interval hint, a one-shot hint
// (At), or both, valid for TTL.
type TaskHint struct {
	ID       string     `json:"id"`
	Interval Duration   `json:"interval,omitempty"`
	At       *time.Time `json:"at,omitempty"`
	// TTL defaults to 60m for interval hints and 30m for one-shot hints.
	TTL    Duration `json:"ttl,omitempty"`
	Reason string   `json:"reason,omitempty"`
}

// TaskRequeue is the data of task.requeued: run a dead-lettered task again.
type TaskRequeue struct {
	ID string `json:"id"`
	// DeadLetterSeq is the DEADLETTER stream sequence being retried, if any.
	DeadLetterSeq uint64 `json:"deadLetterSeq,omitempty"`
	Reason        string `json:"reason,omitempty"`
	// TaskCreatedAt is the createdAt of the task the requeue is meant for:
	// the retried dead letter's Dispatch.TaskCreatedAt. The governor
	// rejects the requeue (naming this field) when the task of this ID now
	// was created at another time, deleted and created again since. Zero
	// (absent) runs whichever task has the ID, as every requeue did before
	// 2026-11-29 and as a forced retry does.
	TaskCreatedAt time.Time `json:"taskCreatedAt,omitzero"`
}

// TaskAccepted is the governor's answer to an accepted command.
type TaskAccepted struct {
	ID string `json:"id"`
	// Command is the type of the event that was accepted.
	Command string `json:"command"`
	// CommandID is the CloudEvents id of the accepted command.
	CommandID string     `json:"commandId"`
	NextRunAt *time.Time `json:"nextRunAt,omitempty"`
	Source    string     `json:"source,omitempty"`
	Trail     []string   `json:"trail,omitempty"`
	// SpecRevision is the KV revision of the stored spec.
	SpecRevision uint64 `json:"specRevision,omitempty"`
}

// TaskRejected is the governor's answer to a command it refused. Every
// reason names a field.
type TaskRejected struct {
	ID        string       `json:"id,omitempty"`
	Command   string       `json:"command,omitempty"`
	CommandID string       `json:"commandId,omitempty"`
	Subject   string       `json:"subject,omitempty"`
	Reasons   []FieldError `json:"reasons"`
	// SpecRevision, on the refusal of an update or a delete for a stale
	// ifRevision (Stale), is the revision the stored spec is at: the
	// ifRevision of a command made from it. Absent otherwise.
	SpecRevision uint64 `json:"specRevision,omitempty"`
}

// Stale reports whether r refuses an update or a delete for an
// ifRevision the stored spec is no longer at (its first reason names
// ifRevision and starts with StaleRevision): the HTTP API answers it 412,
// and the CLI says the task changed. Any other rejection naming
// ifRevision (an older governor's "unknown field") is not.
func (r *TaskRejected) Stale() bool {
	return len(r.Reasons) > 0 && r.Reasons[0].Field == "ifRevision" && strings.HasPrefix(r.Reasons[0].Rule, StaleRevision)
}

// Dispatch is a due run: the data of run.due on DISPATCH. It also travels
// embedded in final run.failed events and dead-letter entries, because a
// terminated work-queue message is deleted.
type Dispatch struct {
	// DispatchID is "<taskID>:<scheduledAt unix ms>", also the Nats-Msg-Id
	// and the Idempotency-Key sent to targets.
	DispatchID string `json:"dispatchId"`
	TaskID     string `json:"taskId"`
	// ScheduledAt is the nextRunAt that fell due.
	ScheduledAt time.Time `json:"scheduledAt"`
	// FiredAt is when the timer published it.
	FiredAt time.Time `json:"firedAt"`
	// Source is the governor source that chose ScheduledAt.
	Source string `json:"source,omitempty"`
	// Reason says why a dispatch was made outside the normal cycle:
	// "requeue", "zombie", ReasonLostWrite.
	Reason string `json:"reason,omitempty"`
	// TaskCreatedAt is the createdAt of the schedule the slot was read
	// from: which task of this ID the run belongs to. A task deleted and
	// created again under the same ID gets a new createdAt, and the
	// governor ignores outcomes and dead letters of the old one's runs.
	// Zero in dispatches of flyball before 2026-11-27.
	TaskCreatedAt time.Time `json:"taskCreatedAt,omitzero"`
}

// Run returns a run event of d with the fields that name the run set:
// its dispatch, task, slot and the task's createdAt. Every outcome the
// executor (or the dead-letter service, for a dispatch it gave up on)
// reports starts from it.
func (d *Dispatch) Run() Run {
	return Run{DispatchID: d.DispatchID, TaskID: d.TaskID, ScheduledAt: d.ScheduledAt, TaskCreatedAt: d.TaskCreatedAt}
}

// ReasonLostWrite is the Reason of the sweeper's lost-write repair: a
// slot its schedule still names while the governor has applied (acked)
// the final outcome of that slot or of a later one. The executor skips it
// when either is stored (slotdone.SlotOrLater), never calling the target:
// the dispatch only gives the governor a run.skipped to plan from.
const ReasonLostWrite = "lost-write"

// RepairCreatePrefix starts the id of a task.created that the sweeper
// publishes for a task it found with a spec and no schedule
// ("sweeper:unscheduled:<task>:<spec revision>"). The revision makes the id
// deterministic (two sweepers, or two sweeps, store it once within TASKS's
// duplicate window) and new once the governor has written the spec again.
// It finishes a creation whose schedule write was lost; it never creates a
// task, so the governor refuses it once the spec is gone (the task was
// deleted meanwhile). Its spec is held to the rules of a stored spec
// (TaskSpec.ValidateStored) when it is the spec stored, and to those of a
// new one otherwise: the prefix alone, which anyone may choose, lets
// nothing through.
const RepairCreatePrefix = "sweeper:unscheduled:"

// DispatchID builds the ID of the run of task id due at t.
func DispatchID(id string, t time.Time) string {
	return id + ":" + strconv.FormatInt(t.UnixMilli(), 10)
}

// AttemptKey is the flyball-attempts key of the run with dispatch ID did
// ("<task>:<unix ms>"): "<task>.<unix ms>", as the executor writes it and
// the dead-letter service reads it.
func AttemptKey(did string) string { return strings.Replace(did, ":", ".", 1) }

// IsDispatchID reports whether did is DispatchID(id, t), without building
// it (the executor checks every dispatch).
func IsDispatchID(did, id string, t time.Time) bool {
	if len(did) <= len(id) || did[:len(id)] != id || did[len(id)] != ':' {
		return false
	}
	var buf [20]byte
	return did[len(id)+1:] == string(strconv.AppendInt(buf[:0], t.UnixMilli(), 10))
}

// RequestRecord is what a run sent, with secret headers redacted.
type RequestRecord struct {
	Method  string            `json:"method,omitempty"`
	URL     string            `json:"url,omitempty"`
	Subject string            `json:"subject,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// Error kinds on failed runs.
const (
	ErrorTransient = "transient"
	ErrorPermanent = "permanent"
)

// Run is the data of every run.* event on RUNS.
type Run struct {
	DispatchID  string    `json:"dispatchId"`
	TaskID      string    `json:"taskId"`
	ScheduledAt time.Time `json:"scheduledAt"`
	// Attempt counts calls of this dispatch, from 1.
	Attempt    int       `json:"attempt,omitempty"`
	StartedAt  time.Time `json:"startedAt,omitzero"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	Duration   Duration  `json:"duration,omitempty"`
	// Status is the HTTP status, when there was a response.
	Status int `json:"status,omitempty"`
	// Body is the response body, cut at maxResponseBytes.
	Body          string `json:"body,omitempty"`
	BodyTruncated bool   `json:"bodyTruncated,omitempty"`
	// Fingerprint is a hash of the response body for change detection: of
	// the kept (possibly truncated) body for HTTP, of the whole reply for NATS.
	Fingerprint string         `json:"fingerprint,omitempty"`
	Request     *RequestRecord `json:"request,omitempty"`
	Error       string         `json:"error,omitempty"`
	ErrorKind   string         `json:"errorKind,omitempty"`
	// Final marks the last word on a dispatch: no retry follows.
	Final bool `json:"final,omitempty"`
	// RetryIn is the delay before the next attempt of a non-final failure.
	RetryIn Duration `json:"retryIn,omitempty"`
	// Reason explains a skip.
	Reason string `json:"reason,omitempty"`
	// Source names the governor rule that chose ScheduledAt (the whole
	// decision trail is in KV flyball-schedules and `flyball explain`).
	Source string `json:"source,omitempty"`
	// Trail was the decision trail. Executors no longer send it (it made
	// every run event ~0.5 KB larger); it stays so older events decode.
	Trail []string `json:"trail,omitempty"`
	// BreakerKey is the flyball-breakers key of the task's breaker, so the
	// breaker service needs no spec read per outcome.
	BreakerKey string `json:"breakerKey,omitempty"`
	// TaskCreatedAt is the dispatch's (see Dispatch.TaskCreatedAt).
	TaskCreatedAt time.Time `json:"taskCreatedAt,omitzero"`
	// Dispatch is embedded on final failures.
	Dispatch *Dispatch `json:"dispatch,omitempty"`
}

// Reasons of a run.skipped (Run.Reason) that the governor tells apart
// (governor.SkipOf); the executor writes them.
const (
	// SkipReasonPaused is the reason of a slot that fell in a pause.
	SkipReasonPaused = "task paused"
	// SkipReasonAlreadyRan begins the reason of a slot dispatched again
	// after it ran (its outcome is stored): the skip is no loss of a run.
	SkipReasonAlreadyRan = "already ran: "
)

// Dead-letter reasons.
const (
	DeadLetterPermanent     = "permanent"
	DeadLetterMaxAttempts   = "max-attempts"
	DeadLetterMaxDeliveries = "max-deliveries"
)

// DeadLetterReason is the reason the dead-letter service gives the entry
// it writes for a final run.failed: permanent for a permanent error, else
// max-attempts. It is "" for a run that is not final.
func (r *Run) DeadLetterReason() string {
	switch {
	case !r.Final:
		return ""
	case r.ErrorKind == ErrorPermanent:
		return DeadLetterPermanent
	}
	return DeadLetterMaxAttempts
}

// AttemptError is one failed attempt of a dead-lettered run.
type AttemptError struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Status  int       `json:"status,omitempty"`
	Error   string    `json:"error"`
}

// DeadLetter is the data of io.flyball.deadlettered on DEADLETTER.
type DeadLetter struct {
	TaskID         string         `json:"taskId"`
	Reason         string         `json:"reason"`
	Dispatch       Dispatch       `json:"dispatch"`
	Attempts       int            `json:"attempts"`
	Errors         []AttemptError `json:"errors"`
	FirstFailedAt  time.Time      `json:"firstFailedAt,omitzero"`
	LastFailedAt   time.Time      `json:"lastFailedAt,omitzero"`
	DeadLetteredAt time.Time      `json:"deadLetteredAt"`
}

// BreakerTransition is the data of io.flyball.breaker.* on HEALTH.
type BreakerTransition struct {
	Key      string       `json:"key"`
	TaskID   string       `json:"taskId,omitempty"`
	From     BreakerState `json:"from"`
	To       BreakerState `json:"to"`
	Failures int          `json:"failures"`
	// RetryAt is when an open breaker lets the next probe through.
	RetryAt   *time.Time `json:"retryAt,omitempty"`
	OpenDelay Duration   `json:"openDelay,omitempty"`
	At        time.Time  `json:"at"`
	Reason    string     `json:"reason,omitempty"`
	// TaskCreatedAt is the createdAt of the task TaskID names, when known:
	// a task deleted and created again under the same ID is another, and
	// the governor ignores its namesake's transitions (zero: unknown, as
	// from flyball before 2026-11-29).
	TaskCreatedAt time.Time `json:"taskCreatedAt,omitzero"`
}

// Heartbeat is a service instance's entry in KV flyball-runtime and the data
// of io.flyball.runtime.* on HEALTH.
type Heartbeat struct {
	Kind      string        `json:"kind"`
	Name      string        `json:"name"`
	PID       int           `json:"pid"`
	Host      string        `json:"host"`
	Version   string        `json:"version"`
	Capacity  int           `json:"capacity,omitempty"`
	Status    RuntimeStatus `json:"status"`
	StartedAt time.Time     `json:"startedAt"`
	LastBeat  time.Time     `json:"lastBeat"`
	Interval  Duration      `json:"interval"`
}

// GetID returns the task ID named in the command data.
func (r *TaskRef) GetID() string { return r.ID }

// GetID returns the task ID named in the command data.
func (p *TaskPause) GetID() string { return p.ID }

// GetID returns the task ID named in the command data.
func (h *TaskHint) GetID() string { return h.ID }

// GetID returns the task ID named in the command data.
func (r *TaskRequeue) GetID() string { return r.ID }
