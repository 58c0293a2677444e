package governor

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/control"
)

// ErrNoEffect marks a message that does not change any schedule: a
// run.started, a run.recovered (a success repeated for the breaker), a
// non-final run.failed, a host breaker's half-open (which names no
// task), or the governor's own task.accepted /
// task.rejected answers.
var ErrNoEffect = errors.New("no effect on the schedule")

// Step is one stored message translated into what it means for a task's
// schedule. The governor service and `flyball explain` both build steps
// with Translate and apply them with Apply, so a replay of the streams
// reproduces exactly the decisions that were stored.
type Step struct {
	TaskID string
	// At is the message's stored timestamp (assigned by the JetStream
	// server). It is the `now` of the decision: replaying the stream gives
	// the same clock readings the governor had.
	At      time.Time
	Subject string
	Input   gov.Input
	// Spec is the new spec of a created or updated command.
	Spec *events.TaskSpec
	// IfRevision is an update's or a delete's expected flyball-tasks
	// revision of the spec it replaces or removes (events.TaskUpdate,
	// events.TaskDelete), zero for none.
	IfRevision uint64
	// SpecRevision is the flyball-tasks revision of the spec: the one a
	// created or updated command stored, or the one of the spec a signal
	// was read with (State.SpecRevision).
	SpecRevision uint64
	// CommandID and CommandType identify a control command.
	CommandID   string
	CommandType string
	// Summary is a one-line description for timelines.
	Summary string
	// Seq is the message's stream sequence, and Redelivered is set when
	// the server delivered it before (metadata; the service sets both, a
	// replay leaves them zero). A redelivered command (TASKS) or breaker
	// transition (HEALTH) at or below the last one applied to the task
	// (State.LastCommandSeq, LastBreakerSeq) is a copy of an input applied
	// before later ones, and is ignored (Apply), unless the stream's
	// sequences started over (SequencesRestarted). A first delivery is
	// never judged so: a pinned durable delivers each message first in
	// stream order.
	Seq         uint64
	Redelivered bool
	// SequencesRestarted is set by the service (Service.resolveRestart)
	// when the stream no longer holds, at the last sequence applied from
	// it to the task, the message stored then (State.LastCommandAt,
	// LastBreakerAt): missing, or stored at another time. Its sequences
	// started over below the schedule's (a schedule restored from a
	// backup that snapshotted the stream before the bucket, a stream
	// created again from scratch), and a redelivery at or below the
	// sequence is a copy only if it was stored no later than that time
	// (olderThan). The service reads the stream only for a redelivery the
	// two rules judge differently (disagrees): judged by the time alone,
	// a copy stored by a stream leader whose clock ran ahead of the next
	// one's (or before an NTP step back) undid the commands applied after
	// it. A replay leaves it false: explain judges by the sequence.
	SequencesRestarted bool
	// restartSeq and restartAt are the sequence and stored time
	// SequencesRestarted was resolved for (zero: not resolved), so a
	// decision tried again on the same state reads the stream once.
	restartSeq uint64
	restartAt  time.Time
	// RequeueFor is the taskCreatedAt of a task.requeued: the createdAt of
	// the task it is meant for (the retried dead letter's). Zero: any task
	// of the ID. A requeue meant for a task deleted since is rejected
	// (otherCreation).
	RequeueFor time.Time
	// specCreatedAt is the createdAt stored with the task's spec
	// (gov.StoredSpec) when a command other than a creation or a delete
	// is applied; zero when the spec has none. A command that finds the
	// task's spec but no schedule completes its creation with it
	// (Service.decide, completeCreation).
	specCreatedAt time.Time
	// newSpecRules is what the rules for new specs (TaskSpec.Validate)
	// refuse in a sweeper's repair (a task.created whose command ID
	// starts events.RepairCreatePrefix) that the stored-spec rules
	// (TaskSpec.ValidateStored) accept; nil for every other step. Such a
	// repair applies only when its spec is the one stored
	// (repairsStoredSpec): a command ID is anyone's to choose, and any
	// other spec is refused with these reasons, as it was before.
	newSpecRules error
	// replaced is the spec an update replaces (gov.Input.Replaced), and
	// replacedRevision its flyball-tasks revision: the service reads both
	// from the bucket; a replay (ReplayAnswers) knows the spec it decided
	// with last, and leaves the revision zero. See replacedOf.
	replaced         *events.TaskSpec
	replacedRevision uint64
}

// repeats reports whether the step is an input already applied to st: the
// command named by LastCommandID, or a redelivered command or breaker
// transition at or below the last sequence applied from its stream
// (olderThan).
func (s *Step) repeats(st *gov.State) bool {
	switch {
	case s.CommandID != "":
		return st.LastCommandID == s.CommandID || s.olderThan(st.LastCommandSeq, st.LastCommandAt)
	case s.Input.Kind == gov.KindBreaker:
		return s.olderThan(st.LastBreakerSeq, st.LastBreakerAt)
	}
	return false
}

// repeatsApplied reports whether the step is another stored copy of the
// last command applied to st: a command other than a delete with its id
// at another stream sequence (Service.repeatedCommand answers it without
// applying it again; ReplayAnswers lists it unapplied). The applied
// message delivered again (same sequence) is not one, nor a step read
// from no stream (Seq 0).
func (s *Step) repeatsApplied(st *gov.State) bool {
	return s.CommandID != "" && s.Seq != 0 && s.Input.Kind != gov.KindDeleted &&
		st.LastCommandID == s.CommandID && st.LastCommandSeq != s.Seq
}

// olderThan reports whether the step is a redelivery at or below seq, the
// last sequence applied from its stream, whose stored time was at (zero:
// not known, none applied since 2026-12-02): a copy of an input applied
// before that one. Only when the stream's sequences started over
// (SequencesRestarted) is one stored after at new, whatever its
// sequence: a backup snapshots TASKS and HEALTH before the buckets, so a
// restored schedule can hold a sequence past the restored stream's last,
// which the messages published after the restore take again. In the
// same history the sequence decides: stored times follow the stream
// leader's clock, which may step back.
func (s *Step) olderThan(seq uint64, at time.Time) bool {
	return s.Redelivered && s.Seq != 0 && s.Seq <= seq && (!s.SequencesRestarted || at.IsZero() || !s.At.After(at))
}

// within reports whether the step, read from a stream, is at or below
// seq and stored no later than at (zero: judged by the sequence alone).
// Unlike olderThan it cannot read the stream to learn whether its
// sequences started over, so it takes the stored time's word: after a
// restore that is right, and only a stream leader's clock stepping back
// makes it call an applied input unapplied.
func (s *Step) within(seq uint64, at time.Time) bool {
	return s.Seq != 0 && s.Seq <= seq && (at.IsZero() || !s.At.After(at))
}

// AppliedBy reports whether st records the step as applied: a command or
// breaker transition at or below the last sequence applied from its
// stream (LastCommandSeq, LastBreakerSeq) and stored no later than that
// message (LastCommandAt, LastBreakerAt). A replay (explain), which reads each message once in
// stream order, asks it of the stored schedule; it judges by stored
// time too (within), where the service reads the stream first.
func (s *Step) AppliedBy(st *gov.State) bool {
	switch {
	case s.CommandID != "":
		return s.within(st.LastCommandSeq, st.LastCommandAt)
	case s.Input.Kind == gov.KindBreaker:
		return s.within(st.LastBreakerSeq, st.LastBreakerAt)
	}
	return false
}

// disagrees reports whether the sequence rule and the stored-time rule
// judge the step differently against seq and at (olderThan): a
// redelivery at or below seq stored after at. Only then does
// SequencesRestarted matter.
func (s *Step) disagrees(seq uint64, at time.Time) bool {
	return s.Redelivered && s.Seq != 0 && s.Seq <= seq && !at.IsZero() && s.At.After(at)
}

// Translate decodes one stored message. Commands that break a rule return
// a *rejection (its reasons name fields); other malformed messages return an
// error wrapping events.ErrMalformed; messages that change nothing return
// ErrNoEffect.
func Translate(subject string, header map[string][]string, data []byte, at time.Time) (Step, error) {
	// The governor's own answers come first: one on their subject is
	// never answered, whatever it holds (an answer to an answer could be
	// answered again), nor counted.
	if answerSubject(subject) {
		return Step{}, ErrNoEffect
	}
	subj, err := events.ParseSubject(subject)
	if err != nil {
		if len(subject) > len(taskSubjectPrefix) && strings.HasPrefix(subject, taskSubjectPrefix) {
			return Step{}, reject("subject", err.Error())
		}
		return Step{}, fmt.Errorf("%w: %w", events.ErrMalformed, err)
	}
	e, err := events.Decode(header, data)
	if err != nil {
		if subj.Family == events.FamilyTask {
			return Step{}, rejectErr(err)
		}
		return Step{}, err
	}
	step := Step{TaskID: subj.ID, At: at.UTC(), Subject: subject}
	if subj.Family != events.FamilyTask {
		// A command's type is checked with its verb, and answered.
		if err := events.CheckType(subj, e); err != nil {
			return Step{}, err
		}
	}
	switch subj.Family {
	case events.FamilyTask:
		return translateCommand(step, events.Verb(subj.Action), e)
	case events.FamilyRun:
		return translateRun(step, events.Outcome(subj.Action), e)
	case events.FamilyBreaker:
		var tr events.BreakerTransition
		if err := events.DecodeData(e, &tr); err != nil {
			return Step{}, err
		}
		if string(tr.To) != subj.Action {
			return Step{}, &events.ValidationError{Errors: []events.FieldError{{Field: "to", Rule: fmt.Sprintf("must be %q on subject %s, got %q", subj.Action, subject, tr.To)}}}
		}
		// The breaker service publishes a transition on its key's
		// subject, naming the key in the data too.
		if tr.Key != subj.ID {
			return Step{}, &events.ValidationError{Errors: []events.FieldError{{Field: "key", Rule: fmt.Sprintf("must be the breaker key %q of subject %s, got %q", subj.ID, subject, clip(tr.Key))}}}
		}
		// A task's own breaker key is its task ID: a transition of it
		// naming another task is no breaker's (a host breaker's names the
		// task whose call moved it).
		host := strings.HasPrefix(subj.ID, events.HostKeyPrefix)
		if tr.TaskID != "" && tr.TaskID != subj.ID && !host {
			return Step{}, &events.ValidationError{Errors: []events.FieldError{{Field: "taskId", Rule: fmt.Sprintf("must be the breaker key's task %q on subject %s, got %q", subj.ID, subject, clip(tr.TaskID))}}}
		}
		// Only a host breaker's half-open names no task. Any other
		// transition without one (or with one that is no task ID) is no
		// breaker service's: acked, it changed nothing and went uncounted.
		if tr.TaskID == "" && host && tr.To == events.BreakerHalfOpen {
			return Step{}, ErrNoEffect
		}
		if !events.ValidToken(tr.TaskID) {
			return Step{}, &events.ValidationError{Errors: []events.FieldError{{Field: "taskId", Rule: fmt.Sprintf(
				"must be a task ID on subject %s (only a host breaker's half-open names none), got %q", subject, clip(tr.TaskID))}}}
		}
		// A breaker opens for at most 24h (breaker.maxOpenDelay); nothing
		// but the breaker service's next transition lifts the hold.
		if tr.RetryAt != nil {
			if ahead := tr.RetryAt.Sub(step.At); ahead > MaxRetryAhead {
				return Step{}, &events.ValidationError{Errors: []events.FieldError{{Field: "retryAt", Rule: fmt.Sprintf(
					"%s is %s after the transition was stored, more than %s: a breaker opens for at most 24h", tr.RetryAt.UTC().Format(time.RFC3339), ahead.Round(time.Second), MaxRetryAhead)}}}
			}
		}
		sig := &gov.BreakerSignal{State: string(tr.To), TaskCreatedAt: tr.TaskCreatedAt, Key: subj.ID}
		if tr.RetryAt != nil {
			sig.RetryAt = *tr.RetryAt
		}
		step.TaskID = tr.TaskID
		step.Input = gov.Input{Kind: gov.KindBreaker, Breaker: sig}
		step.Summary = fmt.Sprintf("breaker %s → %s", tr.From, tr.To)
		return step, nil
	case events.FamilyDeadLetter:
		var dl events.DeadLetter
		if err := events.DecodeData(e, &dl); err != nil {
			return Step{}, err
		}
		if dl.TaskID != subj.ID {
			return Step{}, fmt.Errorf("%w: taskId %q does not match the subject", events.ErrMalformed, dl.TaskID)
		}
		// The dead-letter service copies into every entry the dispatch it
		// gave up on (a final run.failed's, or one that exhausted its
		// deliveries), and terminates a final failure without one. An
		// entry naming no dispatch of this task is no failure of its runs:
		// applied, it held a healthy task for a recheck.
		if err := checkEntryDispatch(subj.ID, &dl.Dispatch); err != nil {
			return Step{}, err
		}
		// The dead-letter service writes one of three short reasons. The
		// schedule holds it twice (the hold and its trail line): a long
		// one would make every later write of the task too large to store.
		if err := control.ValidateReason(dl.Reason); err != nil {
			return Step{}, err // a *ValidationError, malformed
		}
		// At is when DEADLETTER stored the entry, by the NATS server's
		// clock, as requeuedAt is: deadLetteredAt is the dead-letter
		// host's clock, and one running ahead made an entry stored before
		// a requeue (delivered again, or late) look newer and undo it.
		step.Input = gov.Input{Kind: gov.KindDeadLettered, DeadLetter: &gov.DeadLetterSignal{
			DispatchID: dl.Dispatch.DispatchID, Reason: dl.Reason, At: step.At, TaskCreatedAt: dl.Dispatch.TaskCreatedAt,
			ScheduledAt: dl.Dispatch.ScheduledAt,
		}}
		step.Summary = fmt.Sprintf("dead-lettered (%s, %d attempts)", dl.Reason, dl.Attempts)
		return step, nil
	}
	return Step{}, ErrNoEffect
}

// checkEntryDispatch is the error of a dead-letter entry of task id
// whose dispatch lacks its dispatchId, taskId (id's) or scheduledAt, as
// every dispatch the timer and the sweeper write carries them; nil when
// it has them.
func checkEntryDispatch(id string, d *events.Dispatch) error {
	var errs []events.FieldError
	if d.DispatchID == "" {
		errs = append(errs, events.FieldError{Field: "dispatch.dispatchId", Rule: "required: an entry names the dispatch whose run failed"})
	}
	if d.TaskID != id {
		errs = append(errs, events.FieldError{Field: "dispatch.taskId", Rule: fmt.Sprintf("must be the entry's task %q, got %q", id, clip(d.TaskID))})
	}
	if d.ScheduledAt.IsZero() {
		errs = append(errs, events.FieldError{Field: "dispatch.scheduledAt", Rule: "required: an entry names the slot whose run failed"})
	}
	if errs != nil {
		return &events.ValidationError{Errors: errs}
	}
	return nil
}

// taskSubjectPrefix starts every command subject, and the answers'.
const taskSubjectPrefix = events.SubjectRoot + "." + string(events.FamilyTask) + "."

// answerSubject reports whether subject is one of the governor's own
// answer verbs (flyball.task.accepted.…, flyball.task.rejected.…), with
// whatever tokens follow: docs/events.md says such a message is never
// answered. Before, one that did not decode, or had a token too many or
// too few, was rejected before its verb was looked at.
func answerSubject(subject string) bool {
	rest, ok := strings.CutPrefix(subject, taskSubjectPrefix)
	if !ok {
		return false
	}
	verb, _, _ := strings.Cut(rest, ".")
	return verb == string(events.VerbAccepted) || verb == string(events.VerbRejected)
}

// TaskCreatedAt is the createdAt of the schedule the step's run was
// dispatched from (see gov.Outcome.TaskCreatedAt), or of the task a
// requeue is meant for (RequeueFor), or zero.
func (s *Step) TaskCreatedAt() time.Time {
	switch {
	case s.Input.Kind == gov.KindRequeued:
		return s.RequeueFor
	case s.Input.Outcome != nil:
		return s.Input.Outcome.TaskCreatedAt
	case s.Input.DeadLetter != nil:
		return s.Input.DeadLetter.TaskCreatedAt
	case s.Input.Breaker != nil:
		return s.Input.Breaker.TaskCreatedAt
	}
	return time.Time{}
}

func translateRun(step Step, outcome events.Outcome, e events.Event) (Step, error) {
	var run events.Run
	if err := events.DecodeRun(e, &run); err != nil {
		return Step{}, err
	}
	if run.TaskID != step.TaskID {
		return Step{}, fmt.Errorf("%w: taskId %q does not match the subject", events.ErrMalformed, run.TaskID)
	}
	// A run ends after its slot: the executor holds a dispatch until then
	// and refuses one due further ahead than MaxSlotAhead. Applied, a slot
	// far ahead would become the task's last slot, and every real outcome
	// would then be ignored as ending before it.
	if ahead := run.ScheduledAt.Sub(step.At); ahead > MaxSlotAhead {
		return Step{}, &events.ValidationError{Errors: []events.FieldError{{Field: "scheduledAt", Rule: fmt.Sprintf(
			"%s is %s after the run was stored, more than %s: a run ends after its slot", run.ScheduledAt.UTC().Format(time.RFC3339), ahead.Round(time.Second), MaxSlotAhead)}}}
	}
	if outcome == events.OutcomeStarted || outcome == events.OutcomeRecovered || (outcome == events.OutcomeFailed && !run.Final) {
		return Step{}, ErrNoEffect
	}
	step.Input = gov.Input{Kind: gov.KindOutcome, Outcome: &gov.Outcome{
		DispatchID:    run.DispatchID,
		ScheduledAt:   run.ScheduledAt,
		Result:        string(outcome),
		StartedAt:     run.StartedAt,
		FinishedAt:    run.FinishedAt,
		Fingerprint:   run.Fingerprint,
		TaskCreatedAt: run.TaskCreatedAt,
	}}
	switch outcome {
	case events.OutcomeFailed:
		step.Input.Outcome.DeadLetterReason = run.DeadLetterReason()
	case events.OutcomeSkipped:
		step.Input.Outcome.Skip = gov.SkipOf(run.Reason)
	}
	// Built by hand: one allocation, where Sprintf took a sixth of the
	// governor's decode time per outcome.
	b := make([]byte, 0, 96)
	b = append(append(append(b, "run "...), outcome...), " (slot "...)
	b = run.ScheduledAt.UTC().AppendFormat(b, time.RFC3339Nano)
	b = strconv.AppendInt(append(b, ", attempt "...), int64(run.Attempt), 10)
	step.Summary = string(append(b, ')'))
	return step, nil
}

func translateCommand(step Step, verb events.Verb, e events.Event) (Step, error) {
	id := step.TaskID
	if e.Type() != verb.Type() {
		return Step{}, reject("type", fmt.Sprintf("must be %q on subject %s, got %q", verb.Type(), events.TaskSubject(verb, id), clip(e.Type())))
	}
	if e.Subject() != "" && e.Subject() != id {
		return Step{}, reject("subject", fmt.Sprintf("CloudEvents subject %q must equal the task id in the NATS subject, %q", clip(e.Subject()), id))
	}
	if len(e.ID()) > MaxCommandID {
		return Step{}, reject("id", fmt.Sprintf("a command's id must be at most %d bytes, got %d", MaxCommandID, len(e.ID())))
	}
	step.CommandID, step.CommandType = e.ID(), e.Type()
	step.Summary = "task." + string(verb)
	switch verb {
	case events.VerbCreated, events.VerbUpdated:
		var spec events.TaskSpec
		var err error
		if verb == events.VerbUpdated {
			var u events.TaskUpdate
			u, err = events.DecodeTaskUpdate(e)
			spec, step.IfRevision = u.TaskSpec, u.IfRevision
		} else {
			spec, err = events.DecodeTaskSpec(e)
			if err != nil && strings.HasPrefix(step.CommandID, events.RepairCreatePrefix) {
				// The sweeper's repair of a task with no schedule carries
				// the spec stored, which the executor runs if it passes
				// the stored-spec rules (a spec stored before a newer
				// rule). Refused by the rules for new specs, it was
				// published again every ZombieAfter, and the task never
				// ran again. It is applied only as the spec stored
				// (applyCommand), which newSpecRules tells.
				if stored, serr := events.DecodeStoredTaskSpec(e); serr == nil {
					spec, step.newSpecRules, err = stored, err, nil
				}
			}
		}
		if err != nil {
			return Step{}, rejectErr(err)
		}
		if spec.ID != id {
			return Step{}, reject("id", fmt.Sprintf("must equal the task id in the subject %q, got %q", id, spec.ID))
		}
		step.Spec = &spec
		step.Input = gov.Input{Kind: gov.KindAccepted}
		if verb == events.VerbUpdated {
			step.Input.Kind = gov.KindUpdated
		}
	case events.VerbDeleted:
		var d events.TaskDelete
		if err := decodeOptional(e, &d, id); err != nil {
			return Step{}, err
		}
		if err := control.ValidateReason(d.Reason); err != nil {
			return Step{}, rejectErr(err)
		}
		step.IfRevision = d.IfRevision
		step.Input = gov.Input{Kind: gov.KindDeleted}
	case events.VerbPaused:
		var p events.TaskPause
		if err := decodeOptional(e, &p, id); err != nil {
			return Step{}, err
		}
		if err := control.ValidatePause(&p); err != nil {
			return Step{}, rejectErr(err)
		}
		step.Input = gov.Input{Kind: gov.KindPaused, Pause: &gov.Pause{Reason: p.Reason}}
		if p.Until != nil {
			step.Input.Pause.Until = pastIsNow(*p.Until, step.At)
			step.Summary += " until " + p.Until.UTC().Format(time.RFC3339)
		}
	case events.VerbResumed:
		var r events.TaskRef
		if err := decodeOptional(e, &r, id); err != nil {
			return Step{}, err
		}
		if err := control.ValidateReason(r.Reason); err != nil {
			return Step{}, rejectErr(err)
		}
		step.Input = gov.Input{Kind: gov.KindResumed}
	case events.VerbHinted:
		var h events.TaskHint
		if err := decodeOptional(e, &h, id); err != nil {
			return Step{}, err
		}
		if err := control.ValidateHint(&h); err != nil {
			return Step{}, rejectErr(err)
		}
		if h.At != nil && !h.At.IsZero() {
			// A one-shot whose time comes at or after its expiry never
			// runs (it expires unused): refuse it rather than accept a
			// hint that does nothing.
			ttl := h.TTL.D()
			if ttl <= 0 {
				ttl = gov.DefaultOneShotHintTTL
			}
			if expires := step.At.Add(ttl); !h.At.Before(expires) {
				ahead := h.At.Sub(step.At).Truncate(time.Second)
				fix := fmt.Sprintf("set ttl to more than %s", events.Duration(ahead))
				if ahead >= control.MaxHintTTL {
					fix = fmt.Sprintf("a one-shot can be at most %s ahead (the longest ttl)", events.Duration(control.MaxHintTTL))
				}
				return Step{}, reject("at", fmt.Sprintf("%s is at or after the hint expires, %s after the command (ttl, default %s for a one-shot): it would never run; %s",
					h.At.UTC().Format(time.RFC3339), events.Duration(ttl), events.Duration(gov.DefaultOneShotHintTTL), fix))
			}
		}
		step.Input = gov.Input{Kind: gov.KindHinted, Hint: &gov.Hint{Interval: h.Interval.D(), TTL: h.TTL.D(), Reason: h.Reason}}
		if h.At != nil {
			step.Input.Hint.At = pastIsNow(*h.At, step.At)
		}
		if h.Interval > 0 {
			step.Summary += " interval " + h.Interval.String()
		}
		if h.At != nil {
			step.Summary += " at " + step.Input.Hint.At.UTC().Format(time.RFC3339)
		}
	case events.VerbRequeued:
		var r events.TaskRequeue
		if err := decodeOptional(e, &r, id); err != nil {
			return Step{}, err
		}
		if err := control.ValidateReason(r.Reason); err != nil {
			return Step{}, rejectErr(err)
		}
		step.Input = gov.Input{Kind: gov.KindRequeued}
		step.RequeueFor = r.TaskCreatedAt
		if !r.TaskCreatedAt.IsZero() {
			step.Summary += " for the task created at " + r.TaskCreatedAt.UTC().Format(time.RFC3339Nano)
		}
	default:
		return Step{}, reject("type", fmt.Sprintf("%q is not a command", e.Type()))
	}
	return step, nil
}

// MaxSlotAhead is how far the slot of a run outcome may lie after the
// time the outcome was stored: room for clock skew between the executor's
// host and the NATS server, as executor.MaxDispatchAhead allows a
// dispatch.
const MaxSlotAhead = 5 * time.Minute

// MaxRetryAhead is how far the retryAt of a breaker.open may lie after
// the time it was stored: the longest open period (24h) and the same
// room for clock skew.
const MaxRetryAhead = 24*time.Hour + MaxSlotAhead

// MaxCommandID bounds the id of a command: its answer carries the id
// twice (its Nats-Msg-Id and commandId), and must fit in a NATS message.
const MaxCommandID = 256

// clip cuts an attribute echoed in an answer to MaxCommandID bytes,
// marked with …, as events.PeekAttributes cuts what it reads.
func clip(s string) string { return cut(s, MaxCommandID) }

// cut cuts s to at most n bytes, at a rune boundary, marked with ….
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// pastIsNow maps the zero time given explicitly (0001-01-01T00:00:00Z,
// what Go marshals for an unset time.Time) to now: it is a time in the
// past, which ends a pause at once and makes a one-shot hint run now,
// whereas the governor reads a zero Pause.Until as "indefinitely" and a
// zero Hint.At as "no one-shot".
func pastIsNow(t, now time.Time) time.Time {
	if t.IsZero() {
		return now
	}
	return t
}

// completesCreation reports whether the step, decided on a task with no
// schedule, first completes the task's creation (completeCreation): a
// command other than a creation (a delete never reaches a decision).
func (s *Step) completesCreation() bool {
	return s.CommandID != "" && s.Input.Kind != gov.KindAccepted && s.Input.Kind != gov.KindDeleted
}

// completedCreatedAt is the createdAt of the creation a command completes
// (completeCreation): the one stored with the task's spec, or, when the
// spec has none (written by hand, or by a version before 2026-11-27), the
// command's time.
func (s *Step) completedCreatedAt() time.Time {
	if !s.specCreatedAt.IsZero() {
		return s.specCreatedAt.UTC()
	}
	return gov.CreatedAt(s.At)
}

// completeCreation is the schedule of a task whose spec is stored and
// whose schedule is not (a restore, a key deleted by hand, a crash
// between a creation's spec and schedule writes), as its creation writes
// it, with the createdAt stored with its spec: the state a command other
// than a creation (completesCreation) is applied to. Applied to a zero
// state (as it was), a pause, resume, hint, update or requeue wrote a
// schedule with no taskId and no createdAt: the executor compared no
// createdAt, the sweeper never dispatched a zombie of it again, and the
// sweeper's repair was rejected as "already exists".
func completeCreation(spec *events.TaskSpec, step *Step) gov.State {
	st := gov.Decide(step.At, spec, gov.State{}, gov.Input{Kind: gov.KindAccepted}).State
	st.CreatedAt = step.completedCreatedAt()
	return st
}

// otherCreation is the rejection of a task.requeued meant for another
// task than st's: its taskCreatedAt (RequeueFor) names a task of the same
// ID deleted since, and st's was created again (gov.OtherCreatedAt: both
// times known, and they differ). Applied, it would run the new task and
// clear its dead-letter mark. It is nil for every other step, and for a requeue
// that names no creation or the schedule's, or whose schedule has no
// createdAt (written before 2026-11-27, or by hand), which tells nothing.
func (s *Step) otherCreation(st *gov.State) error {
	if s.Input.Kind != gov.KindRequeued || !gov.OtherCreatedAt(s.RequeueFor, st.CreatedAt) {
		return nil
	}
	return reject("taskCreatedAt", fmt.Sprintf("the requeue is meant for task %q created at %s, but that task was deleted and the task of this id now was created at %s: "+
		"retrying the deleted task's dead letter would run the new task; send the requeue without taskCreatedAt (flyball dlq retry --force, ?force=true) to run it anyway",
		s.TaskID, s.RequeueFor.UTC().Format(time.RFC3339Nano), st.CreatedAt.UTC().Format(time.RFC3339Nano)))
}

// Apply applies one step to a task's state: the decision the service stores
// and the one explain replays. A command already applied (redelivered) is
// ignored.
func Apply(spec *events.TaskSpec, st gov.State, step Step) gov.Decision {
	if step.repeats(&st) {
		return gov.Decision{NextRunAt: st.NextRunAt, Source: st.Source, Trail: st.Trail, State: st, Ignored: true}
	}
	in := inputFor(spec, &st, step.Input)
	if in.Kind == gov.KindUpdated {
		in.Replaced = step.replacedOf(&st)
	}
	dec := gov.Decide(step.At, spec, st, in)
	if !dec.Ignored {
		switch {
		case step.CommandID != "":
			dec.State.LastCommandID, dec.State.LastCommandSeq, dec.State.LastCommandAt = step.CommandID, step.Seq, step.At
			if step.Spec != nil && step.SpecRevision != 0 {
				dec.State.SpecRevision = step.SpecRevision
			}
		case step.Input.Kind == gov.KindBreaker:
			dec.State.LastBreakerSeq, dec.State.LastBreakerAt = step.Seq, step.At
		}
	}
	return dec
}

// replacedOf is the spec an update replaces, as Decide compares the
// update with it (gov.Input.Replaced): the one st was decided with last,
// or nil when that is not known (the adaptive cadence restarts). The
// spec the service read from the bucket is st's only when st was decided
// with its revision: an update tried again after its spec write (a crash,
// a failed schedule write) finds its own spec stored, while st was
// decided with the one before, which is gone.
func (s *Step) replacedOf(st *gov.State) *events.TaskSpec {
	if s.replacedRevision != 0 && s.replacedRevision != st.SpecRevision {
		return nil
	}
	return s.replaced
}

// inputFor is in as Decide takes it for spec and st: with the task's
// breaker key under spec (gov.Input.BreakerKey), which the executor
// defers its calls by, when Decide compares it: for a breaker transition
// (one of another key holds nothing) and while st holds the task for a
// breaker (one of another key is lifted: an update moved the task to
// another breaker). Other decisions, nearly all, skip the derivation (a
// URL parse for a host-scoped task).
func inputFor(spec *events.TaskSpec, st *gov.State, in gov.Input) gov.Input {
	if in.Kind == gov.KindBreaker || st.BreakerKey != "" {
		in.BreakerKey = executor.BreakerKey(spec)
	}
	return in
}

// Entry is one line of a replayed timeline.
type Entry struct {
	// Index is the step's position in the slice given to ReplayAnswers.
	Index    int
	Step     Step
	Decision gov.Decision
	// NoChange says why an input changed nothing (Decision.Ignored): the
	// governor read it and kept the schedule.
	NoChange string
}

// Answer is what the governor answered a command, as its task.accepted or
// task.rejected says.
type Answer struct {
	// Known is set when the answer was read; Accepted tells which.
	Known, Accepted bool
	// NoChange, on an accepted command, is the why of an answer that
	// says it changed nothing (unapplied: its trail's only line, starting
	// "no change:"): the governor wrote neither its spec nor a decision.
	NoChange string
}

// UnappliedWhy is the why of a task.accepted that says its command
// changed nothing (the governor's unapplied answer: one trail line
// starting "no change:"), or "" for an answer that applied it.
func UnappliedWhy(acc *events.TaskAccepted) string {
	if len(acc.Trail) == 1 && strings.HasPrefix(acc.Trail[0], "no change:") {
		return acc.Trail[0]
	}
	return ""
}

// repeatedWhy is the why of the answer to a command stored again with
// the id of the task's last applied command (repeatedCommand).
func repeatedWhy(cmdID string, lastSeq uint64) string {
	return fmt.Sprintf("no change: command %q was applied already (stream sequence %d); one event id is one command, send a new id for another", cmdID, lastSeq)
}

// ReplayAnswers applies steps (in stored order) to an empty state and
// returns the timeline. answer tells what the governor answered the
// command of steps[i] (Answer.Known: it answered it with task.accepted or
// task.rejected); rejected commands are skipped, exactly as the service
// skipped them. A command whose answer is not known is judged as the
// service judges it (applyCommand): a create is refused if the task
// exists under another command, any other command but a delete if it
// does not, and a requeue meant for another creation of the task than the
// one replayed (otherCreation). A command answered as changing nothing
// (Answer.NoChange), or stored again with the id of the last command
// applied to the replayed schedule (Step.repeatsApplied; JetStream may
// have dropped its answer as a duplicate of the first one's), is listed
// unapplied, as the governor left it: its spec is not taken.
// Taken (as it was), a task.created sent twice with one id and another
// interval replayed every later run with the copy's interval.
func ReplayAnswers(steps []Step, answer func(i int) Answer) []Entry {
	var spec *events.TaskSpec
	var st gov.State
	var out []Entry
	for i, step := range steps {
		if step.CommandID != "" {
			a := answer(i)
			accepted, known := a.Accepted, a.Known
			if known && accepted && a.NoChange != "" {
				if spec != nil {
					out = append(out, unappliedEntry(i, step, st, a.NoChange))
				}
				continue
			}
			if !known {
				switch step.Input.Kind {
				case gov.KindAccepted:
					accepted = spec == nil || st.LastCommandID == step.CommandID
				case gov.KindDeleted:
					accepted = true
				case gov.KindRequeued:
					accepted = spec != nil && step.otherCreation(&st) == nil
				default:
					accepted = spec != nil
				}
			}
			if !accepted {
				continue
			}
			if spec != nil && step.repeatsApplied(&st) {
				out = append(out, unappliedEntry(i, step, st, repeatedWhy(step.CommandID, st.LastCommandSeq)))
				continue
			}
		}
		if step.Spec != nil {
			step.replaced, spec = spec, step.Spec
		}
		if spec == nil {
			continue // before the task existed, or after it was deleted
		}
		if step.Input.Kind == gov.KindDeleted {
			out = append(out, Entry{Index: i, Step: step, Decision: gov.Decision{Source: gov.SourceDeleted, Trail: []string{"task deleted: nothing scheduled"}}})
			spec, st = nil, gov.State{}
			continue
		}
		dec := Apply(spec, st, step)
		if dec.Ignored {
			out = append(out, Entry{Index: i, Step: step, Decision: dec, NoChange: noChange(&st, inputFor(spec, &st, step.Input))})
			continue
		}
		st = dec.State
		out = append(out, Entry{Index: i, Step: step, Decision: dec})
	}
	return out
}

// unappliedEntry is the line of a command the governor acked without
// effect, for why: the schedule st as it stands.
func unappliedEntry(i int, step Step, st gov.State, why string) Entry {
	dec := gov.Decision{NextRunAt: st.NextRunAt, Source: st.Source, Trail: st.Trail, State: st, Ignored: true}
	return Entry{Index: i, Step: step, Decision: dec, NoChange: why}
}

// noChange says why Decide ignored in given state st.
func noChange(st *gov.State, in gov.Input) string {
	switch in.Kind {
	case gov.KindOutcome:
		o := in.Outcome
		switch {
		case o == nil:
			return "no change: an outcome without its run"
		case gov.OtherTask(o.TaskCreatedAt, *st):
			return otherTask(o.TaskCreatedAt, st)
		case o.DispatchID != "" && o.DispatchID == st.LastDispatchID:
			return "no change: the slot's outcome is applied already (this one is a redelivery, or the executor's skip of the slot dispatched again after it ran)"
		case gov.Applied(o.DispatchID, *st):
			return "no change: the slot's outcome was applied before the outcome of " + st.LastDispatchID + " (this one is a redelivery after later outcomes, of a run that overlapped a later one)"
		}
		return "no change: the run finished before the slot of " + st.LastScheduledAt.UTC().Format(time.RFC3339Nano) + " began (a redelivery after later outcomes)"
	case gov.KindDeadLettered:
		dl := in.DeadLetter
		switch {
		case dl == nil:
			return "no change: an entry without its dispatch"
		case gov.OtherTask(dl.TaskCreatedAt, *st):
			return otherTask(dl.TaskCreatedAt, st)
		case st.DeadLetter != nil && st.DeadLetter.DispatchID == dl.DispatchID:
			return "no change: the task was already held for this run's recheck (since its final failure)"
		case gov.HeldAlready(dl, *st):
			// The entry came late: a requeue, a success or a later run's
			// hold has replaced the one its final failure made.
			return "no change: this run's final failure held the task already, before its entry arrived"
		case !st.RequeuedAt.IsZero():
			return "no change: the task was requeued since"
		}
		return "no change: a run succeeded since"
	case gov.KindBreaker:
		switch {
		case in.Breaker == nil:
			return "no change: a transition without its state"
		case gov.OtherTask(in.Breaker.TaskCreatedAt, *st):
			return otherTask(in.Breaker.TaskCreatedAt, st)
		case gov.OtherBreaker(in):
			return "no change: a transition of breaker " + strconv.Quote(in.Breaker.Key) + ", which the task does not use (its spec keys its breaker " + strconv.Quote(in.BreakerKey) + ")"
		}
		return "no change: a transition without its state"
	}
	return "no change: the input left the schedule as it was"
}

func otherTask(created time.Time, st *gov.State) string {
	return "no change: a run of the task of the same id created at " + created.UTC().Format(time.RFC3339Nano) +
		", deleted since (this one was created at " + st.CreatedAt.UTC().Format(time.RFC3339Nano) + ")"
}
