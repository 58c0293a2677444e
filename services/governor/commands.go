package governor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/kvcache"
	"github.com/flyballhq/flyball/streams"
)

// rejection is a refused command; it becomes a task.rejected event.
type rejection struct {
	reasons []events.FieldError
	// specRevision is the stored spec's revision, for a stale ifRevision
	// (TaskRejected.SpecRevision).
	specRevision uint64
}

func (r *rejection) Error() string {
	msgs := make([]string, len(r.reasons))
	for i := range r.reasons {
		msgs[i] = r.reasons[i].Error()
	}
	return strings.Join(msgs, "; ")
}

func reject(field, rule string) error {
	return &rejection{reasons: []events.FieldError{{Field: field, Rule: rule}}}
}

func rejectErr(err error) error { return &rejection{reasons: events.Reasons(err)} }

// rejectStale refuses an update or a delete whose ifRevision the stored
// spec, at stored, is no longer at; what to do names the next step.
func rejectStale(id string, stored, ifRevision uint64, what string) error {
	return &rejection{
		reasons:      []events.FieldError{{Field: "ifRevision", Rule: events.StaleRevision + fmt.Sprintf("the spec of task %q is at revision %d, not %d: it changed since it was read; read it again and %s", id, stored, ifRevision, what)}},
		specRevision: stored,
	}
}

// permanentError is a failure that no redelivery mends: a value that
// cannot be encoded, or a KV write too large for the server. Commands
// fail with max_deliver -1, so taking it for a transient failure meant a
// command redelivered every second forever, never answered. A command
// failing so is rejected; a signal is terminated and counted.
type permanentError struct {
	// field names the input the failure is down to, when known.
	field string
	err   error
}

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// permanent marks err as permanent (naming field when known) when it is an
// encoding failure (pass encoding true) or a write the server refuses for
// its size; other errors are returned as they are.
func permanent(field string, err error, encoding bool) error {
	if err == nil {
		return nil
	}
	if encoding || jsutil.TooLarge(err) {
		return &permanentError{field: field, err: err}
	}
	return err
}

// asRejection turns a permanent failure into the command's answer.
func asRejection(p *permanentError) *rejection {
	rule := "cannot be applied: " + p.err.Error()
	if jsutil.TooLarge(p.err) {
		rule = "cannot be stored, it is too large for the NATS server (" + p.err.Error() + ")"
	}
	return &rejection{reasons: []events.FieldError{{Field: p.field, Rule: rule}}}
}

// decodeOptional decodes command data when present and checks its id.
func decodeOptional(e events.Event, v interface{ GetID() string }, id string) error {
	if len(e.Data()) == 0 {
		return nil
	}
	if err := events.DecodeData(e, v); err != nil {
		return rejectErr(err)
	}
	if got := v.GetID(); got != "" && got != id {
		return reject("id", fmt.Sprintf("must equal the task id in the subject %q, got %q", id, got))
	}
	return nil
}

// handleCommand applies one control command and answers it with
// task.accepted or task.rejected. Only a transient NATS/KV failure leads to
// redelivery; everything else is answered and acked.
func (s *Service) handleCommand(ctx context.Context, m jetstream.Msg) {
	s.untilSettled(ctx, m, func() error { return s.command(ctx, m) })
}

// command applies one command and settles it (ack, or an answered
// rejection). A transient error (NATS or KV trouble) leaves it unsettled,
// for untilSettled to try again.
func (s *Service) command(ctx context.Context, m jetstream.Msg) error {
	md, _ := m.Metadata()
	at := stampOf(md)
	step, err := Translate(m.Subject(), m.Headers(), m.Data(), at)
	var acc *events.TaskAccepted
	if err == nil {
		step.Seq, step.Redelivered = deliveryOf(md)
		acc, err = s.applyCommand(ctx, step)
	}
	var rej *rejection
	var perm *permanentError
	switch {
	case errors.Is(err, ErrNoEffect):
		s.ack(m)
	case errors.As(err, &rej):
		return s.answerRejected(ctx, m, rej, at)
	case errors.As(err, &perm):
		s.log.Warn("command cannot be applied; rejecting it", "subject", m.Subject(), "err", err)
		return s.answerRejected(ctx, m, asRejection(perm), at)
	case err != nil:
		return err
	default:
		id := answerID(events.VerbAccepted, step.CommandID, m)
		if err := jsutil.PublishEvent(ctx, s.cfg.JS, events.TaskSubject(events.VerbAccepted, acc.ID), id,
			events.TypeTaskAccepted, s.source, acc.ID, acc, at); err != nil {
			return err
		}
		s.ack(m)
	}
	return nil
}

// answerRejected publishes task.rejected for m and acks it; an error
// leaves m unsettled (the answer was not stored).
func (s *Service) answerRejected(ctx context.Context, m jetstream.Msg, r *rejection, at time.Time) error {
	subj, subjErr := events.ParseSubject(m.Subject())
	id := subj.ID
	if subjErr != nil {
		id = ""
	}
	// The command may be too broken to read its id and type; take what
	// can be had, so the sender can match the answer to what it sent.
	e, _ := events.Decode(m.Headers(), m.Data())
	cmdType, cmdID := e.Type(), e.ID()
	if cmdID == "" {
		cmdType, cmdID = events.PeekAttributes(m.Headers(), m.Data())
	}
	// A reason may quote what it refuses (an unknown key, a cron
	// expression), which JSON can make longer than it came: the answer
	// must fit in a NATS message.
	reasons := make([]events.FieldError, len(r.reasons))
	for i, fe := range r.reasons {
		reasons[i] = events.FieldError{Field: cut(fe.Field, events.MaxReasonBytes), Rule: cut(fe.Rule, events.MaxReasonBytes)}
	}
	body := events.TaskRejected{ID: id, Command: clip(cmdType), CommandID: clip(cmdID), Subject: m.Subject(), Reasons: reasons, SpecRevision: r.specRevision}
	token := id
	if token == "" {
		token = "_invalid"
	}
	// The answer's id names the command's whatever check refused it (an
	// envelope that does not decode too: PeekAttributes reads only an id
	// given once, as a UTF-8 string).
	msgID := answerID(events.VerbRejected, cmdID, m)
	label := "invalid"
	if len(r.reasons) > 0 && r.reasons[0].Field != "" {
		label = rejectionLabel(r.reasons[0])
	}
	if err := jsutil.PublishEvent(ctx, s.cfg.JS, events.TaskSubject(events.VerbRejected, token), msgID,
		events.TypeTaskRejected, s.source, id, body, at); err != nil {
		return err
	}
	s.cfg.Metrics.RejectedEvents.WithLabelValues(label).Inc()
	s.log.Info("command rejected", "subject", m.Subject(), "reasons", r.Error())
	s.ack(m)
	return nil
}

// answerID is the id, and Nats-Msg-Id, of the answer verb (accepted or
// rejected) to the command m whose id is cmdID: <verb>:<cmdID>, so that a
// command sent again is answered once. Without such an id, or with one
// too long, holding a control character or ending in white space, the
// command's stream sequence takes its place (<verb>:TASKS:<sequence>):
// nats.go writes a header value with each CR or LF replaced by a space and
// its ends trimmed, and events.Marshal trims the id, so the stored
// Nats-Msg-Id would differ from the event's id, and two commands ("a\nb"
// and "a b", "c " and "c") would share one answer, the second dropped as
// a duplicate.
func answerID(verb events.Verb, cmdID string, m jetstream.Msg) string {
	last, _ := utf8.DecodeLastRuneInString(cmdID)
	if cmdID == "" || len(cmdID) > MaxCommandID || strings.ContainsFunc(cmdID, unicode.IsControl) || unicode.IsSpace(last) {
		if md, err := m.Metadata(); err == nil {
			return fmt.Sprintf("%s:%s:%d", verb, md.Stream, md.Sequence.Stream)
		}
	}
	return string(verb) + ":" + cmdID
}

// rejectionLabel is the flyball_rejected_events_total label of a
// rejection whose first problem is fe: its field, without what a sender
// chooses (an unknown key, a map key, an index), so the series stay few.
// A field that is neither a path of command data nor a CloudEvents
// context attribute is an envelope attribute the sender named (an
// extension, "x-foo", a 5000-byte name): all of them are
// "field:extension".
func rejectionLabel(fe events.FieldError) string {
	if strings.HasPrefix(fe.Rule, "unknown field") {
		return "unknown field"
	}
	field, _, _ := strings.Cut(fe.Field, "[")
	for _, m := range []string{"labels", "target.http.headers"} {
		if strings.HasPrefix(field, m+".") {
			return "field:" + m
		}
	}
	if !knownFields[field] && !events.IsContextAttribute(field) {
		return "field:extension"
	}
	return "field:" + field
}

// knownFields holds every field a rejection may name that is not a
// context attribute: the dotted JSON paths of the command payloads
// (slice elements and map values under their parent's path) and data
// itself.
var knownFields = func() map[string]bool {
	m := events.FieldPaths(events.TaskSpec{}, events.TaskUpdate{}, events.TaskRef{}, events.TaskDelete{}, events.TaskPause{}, events.TaskHint{}, events.TaskRequeue{})
	m["data"] = true
	return m
}()

// repairsStoredTarget reports whether step is the sweeper's repair of a
// spec stored with no schedule (a task.created whose command ID has its
// prefix) carrying stored's target, the one already stored for the task
// (nil when there is none): the one command the create-time guard lets
// through. The prefix alone is not enough: anyone who may publish
// commands can choose an ID, and an update, or a creation with another
// target, under it would get past the guard.
func repairsStoredTarget(step Step, stored *events.TaskSpec) bool {
	return step.Input.Kind == gov.KindAccepted && strings.HasPrefix(step.CommandID, events.RepairCreatePrefix) &&
		stored != nil && reflect.DeepEqual(stored.Target, step.Spec.Target)
}

// repairsStoredSpec reports whether step carries stored, the spec
// stored for the task (nil when there is none, or it is unreadable), as
// the sweeper's repair does: the one task.created that the stored-spec
// rules let through (Step.newSpecRules). Both are normalized; they are
// compared as they encode, so a map or a list stored empty matches one
// left out.
func repairsStoredSpec(step Step, stored *events.TaskSpec) bool {
	if stored == nil || step.Spec == nil {
		return false
	}
	a, errA := json.Marshal(stored)
	b, errB := json.Marshal(step.Spec)
	return errA == nil && errB == nil && bytes.Equal(a, b)
}

// applyCommand checks a translated command against the stored task and
// applies it. It returns a *rejection for commands that cannot apply and
// any other error for transient failures.
func (s *Service) applyCommand(ctx context.Context, step Step) (*events.TaskAccepted, error) {
	if s.fault != nil {
		if err := s.fault(step); err != nil {
			return nil, err
		}
	}
	id := step.TaskID
	if step.Redelivered {
		// A copy of a command applied before later ones (redelivered after
		// its ack was lost, or after AckWait while it waited) must not
		// undo them: not even its spec may be written again.
		if acc, err := s.staleCommand(ctx, &step); acc != nil || err != nil {
			return acc, err
		}
	}
	if acc, err := s.repeatedCommand(ctx, step); acc != nil || err != nil {
		return acc, err
	}
	// The entry too, not only the spec: a conditional update compares its
	// revision and value below.
	stored, err := s.tasks.Get(ctx, id)
	var (
		existing      *events.TaskSpec
		specCreatedAt time.Time // the createdAt stored with the spec
	)
	if err == nil {
		existing, specCreatedAt, err = kvcache.DecodeStoredSpec(id, stored.Value())
	}
	unreadable := errors.Is(err, kvcache.ErrUnreadable)
	if err != nil && !jsutil.IsKeyMissing(err) && !unreadable {
		return nil, err
	}
	// A target the executor's SSRF guard refuses by its URL alone would
	// fail every run: refuse it now, naming the field. The sweeper's
	// repair re-creates a spec accepted before (perhaps under another
	// guard configuration): the executor still refuses it at dial time.
	if step.Spec != nil && !repairsStoredTarget(step, existing) {
		if err := s.cfg.Guard.CheckTarget(step.Spec); err != nil {
			return nil, rejectErr(err)
		}
	}
	exists := err == nil || unreadable
	if err == nil && step.completesCreation() {
		// Should the task have no schedule, the command completes its
		// creation with the createdAt its spec was stored with.
		step.specCreatedAt = specCreatedAt
	}
	if unreadable && step.Input.Kind != gov.KindUpdated && step.Input.Kind != gov.KindDeleted && step.Input.Kind != gov.KindAccepted {
		// Written by hand or by another version: nothing can be decided
		// from it, and no retry will change that. An update replaces it
		// and a delete removes it.
		return nil, reject("id", fmt.Sprintf("%v; publish task.updated to replace it, or task.deleted", err))
	}
	var (
		body []byte // the flyball-tasks value this command stores, once built
		// unchanged: the entry stored holds body's spec already
		// (sameSpecStored), once body is built.
		unchanged bool
	)
	switch step.Input.Kind {
	case gov.KindAccepted:
		// A spec with no schedule is a creation interrupted between its two
		// writes (this command redelivered): finish it. A spec with a
		// schedule written by another command is a real duplicate (a copy
		// of the one that wrote it was answered by repeatedCommand).
		if exists {
			// A read that failed is retried, never taken for a missing
			// schedule: taken so (as it once was), a second creation
			// replaced the task and reset its state.
			st, _, scheduled, err := s.readState(ctx, id)
			if err != nil {
				return nil, err
			}
			if scheduled && st.LastCommandID != step.CommandID && strings.HasPrefix(step.CommandID, events.RepairCreatePrefix) {
				// The sweeper's repair of a spec it saw with no schedule,
				// which a command of the task has written since (a command
				// completes the creation of a task with no schedule,
				// decide): nothing is left to repair. Rejected (as it
				// was), the sweeper's log said it re-published the
				// creation and the answer said the task already exists.
				s.log.Info("repair of a task with no schedule found its schedule written since; acknowledged without applying it",
					"task", id, "command", step.CommandID, "lastCommandId", st.LastCommandID)
				return unapplied(step, &st, fmt.Sprintf("no change: the sweeper's repair of task %q, seen with no schedule, found its schedule written since (by command %q); nothing to repair",
					id, st.LastCommandID)), nil
			}
			if scheduled && st.LastCommandID != step.CommandID {
				return nil, reject("id", fmt.Sprintf("task %q already exists; publish task.updated to change it", id))
			}
		} else if strings.HasPrefix(step.CommandID, events.RepairCreatePrefix) {
			// The sweeper's repair of a spec with no schedule, stored behind
			// a task.deleted: applied, it would bring the deleted task back.
			return nil, reject("id", fmt.Sprintf("no task %q: it was deleted after the sweeper found it with no schedule, and a repair does not create a task", id))
		}
		// A repair that only the stored-spec rules accept re-creates the
		// spec stored, or nothing: under its command ID, which anyone may
		// choose, another spec would get past the rules for new specs.
		if step.newSpecRules != nil && !repairsStoredSpec(step, existing) {
			return nil, rejectErr(step.newSpecRules)
		}
	case gov.KindUpdated:
		if !exists {
			return nil, reject("id", fmt.Sprintf("no task %q; publish task.created first", id))
		}
		if step.IfRevision != 0 {
			// A conditional update (the API's If-Match): another update
			// stored since the client read the spec would be undone.
			// Commands of a task are applied one at a time, so the spec
			// does not change between this read and the write below.
			// stored is the entry read above: it exists (exists).
			if stored.Revision() != step.IfRevision {
				// Unless the spec stored is the one this update writes:
				// this same command, tried again after its spec write (a
				// failed schedule write or answer, a crash before the
				// ack), found its own write. Rejected, it was answered
				// 412 while its spec stayed, and its schedule was never
				// decided with it.
				if body, err = s.storedBody(ctx, step); err != nil {
					return nil, err
				}
				// The same spec sent by another client on a revision it
				// read before is taken alike: it changes nothing, so it
				// loses no change, and it is accepted at the stored
				// revision (unchanged below).
				if unchanged = sameSpecStored(stored, existing, specCreatedAt, body); !unchanged {
					return nil, rejectStale(id, stored.Revision(), step.IfRevision, "apply the change to it")
				}
			}
		}
	case gov.KindDeleted:
		// A conditional delete (the API's If-Match) of a spec that changed
		// since it was read. With no spec stored there is no change to
		// lose: the task is gone already, or this same delete, tried again
		// after it removed the spec, finishes.
		if step.IfRevision != 0 && exists && stored.Revision() != step.IfRevision {
			return nil, rejectStale(id, stored.Revision(), step.IfRevision, "decide again whether to delete it")
		}
		return s.applyDelete(ctx, step)
	default:
		if !exists {
			return nil, reject("id", fmt.Sprintf("no task %q", id))
		}
	}
	spec := existing
	var rev uint64
	if step.Spec != nil {
		if body == nil {
			if body, err = s.storedBody(ctx, step); err != nil {
				return nil, err
			}
			unchanged = sameSpecStored(stored, existing, specCreatedAt, body)
		}
		if unchanged {
			// A creation or an update to the spec stored (the same file
			// applied again, a command tried again after its spec write)
			// keeps its revision: written again, it moved the revision
			// on, and every other client's If-Match on the one it had
			// read was rejected as stale though nothing had changed. The
			// schedule is still decided with it and the command
			// answered, at the stored revision. A value stored with an
			// offset time stays as it is: every reader normalizes it.
			//
			// A creation reaches here over a stored spec only when it
			// completes a creation whose schedule was not written (or is
			// its own, tried again after its ack was lost): another
			// command's creation of an existing task was rejected above.
			// Tried again, it is the same message, whose timestamp is its
			// createdAt (createdAt), so its bytes are those of its first
			// write. The sweeper's repair is a message of its own, with
			// its own createdAt: it writes the spec (once), as before.
			rev = stored.Revision()
			s.specs.Put(id, rev, stored.Value())
		} else {
			if rev, err = s.tasks.Put(ctx, id, body); err != nil {
				return nil, permanent("", fmt.Errorf("store spec %s (%d bytes with its defaults): %w", id, len(body), err), false)
			}
			s.specs.Put(id, rev, body)
		}
		spec, step.SpecRevision = step.Spec, rev
		if step.Input.Kind == gov.KindUpdated && existing != nil {
			// What the update replaces: the adaptive cadence restarts only
			// when the update changes what it rests on (Step.replacedOf).
			step.replaced, step.replacedRevision = existing, stored.Revision()
		}
		// The outcomes of a task whose spec did not decode were
		// terminated (signal): the update does not keep its slot in
		// flight waiting for an outcome that may never come.
		step.Input.ReplacesUnreadable = step.Input.Kind == gov.KindUpdated && unreadable
	}
	dec, err := s.decide(ctx, spec, step)
	if err != nil {
		return nil, err
	}
	acc := &events.TaskAccepted{
		ID: id, Command: step.CommandType, CommandID: step.CommandID,
		Source: string(dec.Source), Trail: dec.Trail, SpecRevision: rev,
	}
	if !dec.NextRunAt.IsZero() {
		t := dec.NextRunAt
		acc.NextRunAt = &t
	}
	return acc, nil
}

// sameSpecStored reports whether the flyball-tasks entry stored (read,
// and decoded into spec and createdAt, unless unreadable: spec nil) holds
// the spec of body: byte for byte, or once decoded (sameStoredSpec).
func sameSpecStored(stored jetstream.KeyValueEntry, spec *events.TaskSpec, createdAt time.Time, body []byte) bool {
	if stored == nil {
		return false
	}
	return bytes.Equal(stored.Value(), body) || spec != nil && sameStoredSpec(spec, createdAt, body)
}

// sameStoredSpec reports whether the stored spec (decoded and normalized,
// with its createdAt) is the spec of body as this flyball writes it: a
// value written before startAt was stored in UTC keeps its offset
// ("+02:00"), and is the same spec as body's with "Z".
func sameStoredSpec(stored *events.TaskSpec, createdAt time.Time, body []byte) bool {
	again, err := json.Marshal(gov.StoredSpec{TaskSpec: stored, CreatedAt: createdAt})
	return err == nil && bytes.Equal(again, body)
}

// storedBody is the flyball-tasks value a created or updated task's
// command stores: its spec with its createdAt (gov.StoredSpec).
func (s *Service) storedBody(ctx context.Context, step Step) ([]byte, error) {
	created, err := s.createdAt(ctx, step)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(gov.StoredSpec{TaskSpec: step.Spec, CreatedAt: created})
	if err != nil {
		return nil, permanent("", fmt.Errorf("encode spec: %w", err), true)
	}
	return body, nil
}

// createdAt is the createdAt stored with the spec of a created or updated
// task (gov.StoredSpec): for a creation the time its schedule will name,
// which gov.Decide takes from the command (step.At); for an update the
// schedule's, or, when the schedule names none, the one stored with the
// spec (step.specCreatedAt). An update of a task with no schedule
// completes its creation (decide, completeCreation) with the same time:
// the spec's, or, when that is zero too (a spec written by hand or by a
// version before 2026-11-27), the update's. Before, an update of a task
// with no schedule stored its spec with a zero createdAt, which switched
// the executor's check off for good. It is zero only for an update of a
// schedule with no createdAt whose spec has none either, which the
// executor then does not compare. A NATS error is returned, for the
// command to be tried again: a zero time would switch the check off
// until the task's next update.
func (s *Service) createdAt(ctx context.Context, step Step) (time.Time, error) {
	if step.Input.Kind == gov.KindAccepted {
		return gov.CreatedAt(step.At), nil
	}
	st, _, scheduled, err := s.readState(ctx, step.TaskID)
	switch {
	case err != nil:
		return time.Time{}, err
	case !st.CreatedAt.IsZero():
		return st.CreatedAt, nil
	case !scheduled:
		return step.completedCreatedAt(), nil
	}
	return step.specCreatedAt, nil
}

// staleCommand answers a redelivered command that is older than what the
// task's schedule has applied, without applying it: a command other than
// a delete at or below the schedule's lastCommandSeq (a later command of
// the task was applied: Step.olderThan; stored after its lastCommandAt,
// only if TASKS no longer holds that command: resolveRestart), or a
// delete stored before the task was created
// (a delete is judged by the task's creation, not by its last command: a
// delete left unacked by a replica that died still applies after the
// commands published behind it). A creation of a task with no schedule
// is judged by the task's last task.deleted on TASKS (deletedSince). It
// returns nil, nil for a command to apply. A re-created task has a new
// schedule, so the sequences of the deleted one never hold back its
// commands.
func (s *Service) staleCommand(ctx context.Context, step *Step) (*events.TaskAccepted, error) {
	st, _, scheduled, err := s.readState(ctx, step.TaskID)
	if err != nil {
		return nil, err
	}
	if !scheduled {
		if step.Input.Kind == gov.KindAccepted {
			return s.deletedSince(ctx, *step)
		}
		return nil, nil
	}
	if step.Input.Kind != gov.KindDeleted {
		if err := s.resolveRestart(ctx, step, &st); err != nil {
			return nil, err
		}
	}
	var why string
	switch {
	case step.Input.Kind == gov.KindDeleted:
		if st.CreatedAt.IsZero() || !step.At.Before(st.CreatedAt) {
			return nil, nil
		}
		why = fmt.Sprintf("no change: a delete stored before the task was created again (at %s); it was applied to the task deleted then",
			st.CreatedAt.Format(time.RFC3339Nano))
	case st.LastCommandID != step.CommandID && step.olderThan(st.LastCommandSeq, st.LastCommandAt):
		why = fmt.Sprintf("no change: a copy of a command applied before (stream sequence %d), redelivered after a later one (sequence %d, %q) was applied",
			step.Seq, st.LastCommandSeq, st.LastCommandID)
	default:
		return nil, nil
	}
	s.log.Info("redelivered command is older than the task's last one; acknowledged without applying it",
		"task", step.TaskID, "command", step.CommandID, "seq", step.Seq, "lastCommandId", st.LastCommandID, "lastCommandSeq", st.LastCommandSeq)
	return unapplied(*step, &st, why), nil
}

// resolveRestart sets step.SequencesRestarted for st, the schedule it is
// about to be judged on, when the two rules of Step.olderThan disagree
// (Step.disagrees): a redelivered command (breaker transition) at or
// below st's lastCommandSeq (lastBreakerSeq) stored after its
// lastCommandAt (lastBreakerAt). It reads the message at that sequence
// from TASKS (HEALTH): the one applied then, stored at that time, is the
// same history, and the stored times disagree only because the stream
// leader's clock stepped back (a leader change to a server whose clock is
// behind, an NTP step): the sequence decides. Missing, or stored at
// another time, the stream's sequences started over (a restore, a stream
// created again): the time decides. Every other step, the hot path,
// reads nothing. A read that fails is returned, for the message to be
// tried again: guessed, either rule loses a command in one of the cases.
//
// The read is a direct get by sequence on TASKS and a message get on
// HEALTH (GetMsg's request: a direct get where the stream allows one),
// which a deployment with its own NATS users may not have granted the
// governor. Refused, the message was tried again for ever, its task's
// later messages waiting behind it, and the log said only "context
// deadline exceeded" each time. The read now ends at the refusal, the
// error names the permission, and an Error line says so once per
// readErrorWindow.
func (s *Service) resolveRestart(ctx context.Context, step *Step, st *gov.State) error {
	stream, seq, at := s.commands, st.LastCommandSeq, st.LastCommandAt
	switch {
	case step.CommandID != "":
		if st.LastCommandID == step.CommandID {
			return nil // the last command itself: Step.repeats
		}
	case step.Input.Kind == gov.KindBreaker:
		stream, seq, at = s.health, st.LastBreakerSeq, st.LastBreakerAt
	default:
		return nil
	}
	if !step.disagrees(seq, at) || step.restartSeq == seq && step.restartAt.Equal(at) {
		return nil
	}
	cfg := stream.CachedInfo().Config
	name, op := cfg.Name, "STREAM.MSG.GET."+cfg.Name
	if cfg.AllowDirect {
		op = "DIRECT.GET." + name
	}
	needs := jsutil.APISubject(s.cfg.JS, op)
	wctx, unwatch := s.refusals.Watch(ctx, needs)
	defer unwatch()
	raw, err := stream.GetMsg(wctx, seq)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		step.SequencesRestarted = true
	case err != nil:
		if v, ok := jsutil.Refusal(wctx); ok {
			s.readErrors.Log(s.cfg.Now(), slog.LevelError,
				"redelivery not judged: the governor service's NATS user may not read the stream message it needs (docs/security.md lists its subjects); it is tried again, and the task's later messages wait behind it",
				"needs", needs, "task", step.TaskID, "subject", step.Subject, "seq", step.Seq, "err", v)
			return fmt.Errorf("read %s sequence %d, the last applied to %s: %w; the governor service's NATS user needs %s (docs/security.md lists its subjects)", name, seq, step.TaskID, v, needs)
		}
		return fmt.Errorf("read %s sequence %d, the last applied to %s: %w", name, seq, step.TaskID, err)
	default:
		step.SequencesRestarted = !raw.Time.Equal(at)
	}
	step.restartSeq, step.restartAt = seq, at
	s.log.Info("redelivery at or below the schedule's last sequence, stored after it; read that message to tell a copy from a new message",
		"task", step.TaskID, "stream", name, "seq", step.Seq, "storedAt", step.At, "lastSeq", seq, "lastAt", at,
		"found", err == nil, "sequencesRestarted", step.SequencesRestarted)
	return nil
}

// readErrorWindow is how often resolveRestart's Error line for a read
// the governor's NATS user may not make is written: once, then a count.
const readErrorWindow = time.Minute

// unapplied is the answer to a command acked without effect, for why: the
// task's schedule st as it stands.
func unapplied(step Step, st *gov.State, why string) *events.TaskAccepted {
	acc := &events.TaskAccepted{ID: step.TaskID, Command: step.CommandType, CommandID: step.CommandID, Source: string(st.Source), Trail: []string{why}}
	if !st.NextRunAt.IsZero() {
		t := st.NextRunAt
		acc.NextRunAt = &t
	}
	return acc
}

// repeatedCommand answers, without applying it again, a second stored copy
// of the last command applied to the task's schedule (Step.repeatsApplied:
// a command other than a delete with its id at another stream sequence;
// `nats pub` run twice with one event id, an HTTP retry with one
// Idempotency-Key after TASKS's duplicate window). Its decision would be
// ignored (Step.repeats), but a creation's or update's spec was written
// before it: a creation's with the copy's own time as createdAt, while the
// schedule kept the first one's, and the executor, comparing the two for
// every dispatch, read the schedule and the spec from KV again before
// every run. The applied message delivered again (same sequence) still
// goes through, to finish writes its first delivery may have left undone
// (a pause's hint). A delete is applied whatever its id. It returns nil,
// nil for a command to apply.
func (s *Service) repeatedCommand(ctx context.Context, step Step) (*events.TaskAccepted, error) {
	if step.CommandID == "" || step.Seq == 0 || step.Input.Kind == gov.KindDeleted {
		return nil, nil // not one whatever the state (Step.repeatsApplied): no read
	}
	st, _, scheduled, err := s.readState(ctx, step.TaskID)
	if err != nil || !scheduled || !step.repeatsApplied(&st) {
		return nil, err
	}
	s.log.Info("command already applied; acknowledged without applying it again",
		"task", step.TaskID, "command", step.CommandID, "seq", step.Seq, "lastCommandSeq", st.LastCommandSeq)
	acc := unapplied(step, &st, repeatedWhy(step.CommandID, st.LastCommandSeq))
	if step.Spec != nil {
		// The revision the command's own spec write stored (no later
		// command has been applied: it is the task's last), as its first
		// answer named it: a client that got only this answer needs it
		// for its next If-Match.
		acc.SpecRevision = st.SpecRevision
	}
	return acc, nil
}

// deletedSince answers a redelivered task.created of a task with no
// schedule when the task's last task.deleted on TASKS was stored after it:
// the creation was applied, its ack lost (or AckWait passed), and the
// delete applied since took the schedule, and with it the lastCommandSeq
// that staleCommand compares with. Applied again, the copy would bring
// the deleted task back. It is acked without effect, and a spec written
// by a creation published after the delete (whose schedule is not
// written yet) is not overwritten by it. A creation stored after the
// delete (the task created again) applies. It returns nil, nil for a
// creation to apply: one with no task.deleted on TASKS (the common case,
// a direct get answered "not found"), or whose last one deleted nothing:
// one that is unreadable, or a conditional one (ifRevision) rejected as
// a stale revision (rejectedDelete). The governor rejected either; an
// earlier delete is not looked for.
func (s *Service) deletedSince(ctx context.Context, step Step) (*events.TaskAccepted, error) {
	if step.Seq == 0 {
		return nil, nil
	}
	raw, err := s.commands.GetLastMsgForSubject(ctx, events.TaskSubject(events.VerbDeleted, step.TaskID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the last task.deleted of %s: %w", step.TaskID, err)
	}
	if raw.Sequence <= step.Seq {
		return nil, nil
	}
	del, err := Translate(raw.Subject, raw.Header, raw.Data, raw.Time)
	if err != nil || del.Input.Kind != gov.KindDeleted {
		return nil, nil //nolint:nilerr // a delete the governor rejected deleted nothing
	}
	if rejected, err := s.rejectedDelete(ctx, del, step.Seq); rejected || err != nil {
		return nil, err
	}
	s.log.Info("redelivered creation is older than the task's delete; acknowledged without creating the task again",
		"task", step.TaskID, "command", step.CommandID, "seq", step.Seq, "deleteCommandId", del.CommandID, "deleteSeq", raw.Sequence)
	why := fmt.Sprintf("no change: a copy of a creation (stream sequence %d), redelivered after the task was deleted (task.deleted at sequence %d, %q): the task stays deleted",
		step.Seq, raw.Sequence, del.CommandID)
	return &events.TaskAccepted{ID: step.TaskID, Command: step.CommandType, CommandID: step.CommandID, Source: string(gov.SourceDeleted), Trail: []string{why}}, nil
}

// rejectedDelete reports whether del, the task's last task.deleted,
// stored after the creation at stream sequence creation being judged, is
// a conditional delete that deleted nothing, and that creation is the
// task's last: del names a revision (ifRevision) other than that of the
// spec stored now, and no task.created is stored after the one judged
// (so none after the delete). An applied delete removed the spec, and
// only a creation stored after it writes one again (an update of a task
// with no spec is rejected, and a copy of an older creation is acked
// without effect, deletedSince), so the spec was there when the delete
// was decided: it was rejected as a stale revision, or, not decided yet,
// will be (a spec's revision only grows). A delete naming the stored
// revision, not decided yet, will delete the task. A creation older than
// the task's last one is never finished here: an earlier delete may have
// removed it, and the spec stored now may be the later creation's.
func (s *Service) rejectedDelete(ctx context.Context, del Step, creation uint64) (bool, error) {
	if del.IfRevision == 0 {
		return false, nil
	}
	stored, err := s.tasks.Get(ctx, del.TaskID)
	if jsutil.IsKeyMissing(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the spec of %s: %w", del.TaskID, err)
	}
	if stored.Revision() == del.IfRevision {
		return false, nil
	}
	created, err := s.commands.GetLastMsgForSubject(ctx, events.TaskSubject(events.VerbCreated, del.TaskID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil // not even the one judged: keep the task deleted
	}
	if err != nil {
		return false, fmt.Errorf("read the last task.created of %s: %w", del.TaskID, err)
	}
	return created.Sequence == creation, nil
}

func (s *Service) applyDelete(ctx context.Context, step Step) (*events.TaskAccepted, error) {
	// The spec first, then the schedule. The governor reads RUNS, HEALTH
	// and DEADLETTER apart from TASKS, so a signal of the task may be
	// decided while the delete is applied. A signal never creates a
	// schedule (decide), and one decided on the schedule it read fails
	// its compare-and-set once the delete has removed it. (Before signals
	// stopped creating schedules, deleting the schedule first left a
	// moment in which a breaker transition or an outcome wrote a fresh
	// schedule for the deleted task.) A dispatch of the schedule in
	// between finds no spec, and the executor skips it as deleted.
	if err := s.tasks.Delete(ctx, step.TaskID); err != nil && !jsutil.IsKeyMissing(err) {
		return nil, fmt.Errorf("delete %s from %s: %w", step.TaskID, s.tasks.Bucket(), err)
	}
	s.specs.Delete(step.TaskID, 0)
	s.states.drop(step.TaskID)
	if err := s.schedules.Delete(ctx, step.TaskID); err != nil && !jsutil.IsKeyMissing(err) {
		return nil, fmt.Errorf("delete %s from %s: %w", step.TaskID, s.schedules.Bucket(), err)
	}
	if err := s.purgeDispatch(ctx, step.TaskID); err != nil {
		return nil, err
	}
	// A signal decided while the delete was applied may still cache the
	// state it wrote before the schedule went, whatever is dropped here:
	// decide checks a cached state against KV, by compare-and-set when
	// it writes and by a read when it ignores an input.
	// A task deleted while paused leaves no hint behind (unknown view: it
	// may have one). A signal that wrote the hint again while the delete
	// was applied removes it when it finds the task gone (decide, gone).
	if r := s.pauseHints.Lookup(step.TaskID); !r.Known || r.Found {
		if err := s.deletePauseHint(ctx, step.TaskID); err != nil {
			return nil, err
		}
	}
	return &events.TaskAccepted{ID: step.TaskID, Command: events.TypeTaskDeleted, CommandID: step.CommandID, Source: string(gov.SourceDeleted)}, nil
}

// purgeDispatch removes the deleted task id's pending run from DISPATCH,
// which holds one message per task subject. A run waiting for its retry
// was nakked with its delay, which the server keeps: until it came due
// (up to retry.maxDelay, plus its jitter) and was skipped as another
// task's, every dispatch of a task created again under the ID was
// refused (10077). The commands of a task are applied in order, so the
// purge, made as the delete is applied, can only remove the deleted
// task's run, never one of a task created after it; a run a timer
// publishes from the deleted schedule after the purge is skipped at once.
// A run the executor holds goes too: its settle then finds nothing to
// settle. A purge the governor's user may not make is logged, and the
// delete applies without it (as before).
func (s *Service) purgeDispatch(ctx context.Context, id string) error {
	subject := jsutil.APISubject(s.cfg.JS, "STREAM.PURGE."+streams.StreamDispatch)
	req, err := json.Marshal(struct {
		Filter string `json:"filter"`
	}{events.DispatchSubject(id)})
	if err != nil {
		return err
	}
	// A refused purge draws no reply, only the server's asynchronous -ERR.
	wctx, unwatch := s.refusals.Watch(ctx, subject)
	defer unwatch()
	if _, ok := wctx.Deadline(); !ok {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(wctx, s.cfg.JS.Options().DefaultTimeout)
		defer cancel()
	}
	msg, err := s.cfg.JS.Conn().RequestWithContext(wctx, subject, req)
	if v, ok := jsutil.Refusal(wctx); ok {
		s.log.Warn("deleted task's pending run not purged from DISPATCH: the governor's NATS user may not publish to the subject in permission; grant it in accounts.conf, or a task created again under the ID waits for that run's retry to come due",
			"task", id, "permission", v.Subject)
		return nil
	}
	if err != nil {
		return fmt.Errorf("purge %s from %s: %w", events.DispatchSubject(id), streams.StreamDispatch, err)
	}
	var resp struct {
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("purge %s from %s: %w", events.DispatchSubject(id), streams.StreamDispatch, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("purge %s from %s: %w", events.DispatchSubject(id), streams.StreamDispatch, resp.Error)
	}
	return nil
}

// handleSignal applies a run outcome, a breaker transition or a dead-letter
// entry. Malformed messages are terminated with a reason and counted.
func (s *Service) handleSignal(ctx context.Context, m jetstream.Msg) {
	s.untilSettled(ctx, m, func() error { return s.signal(ctx, m) })
}

// signal applies one signal and settles it; a transient error leaves it
// unsettled, for untilSettled to try again.
func (s *Service) signal(ctx context.Context, m jetstream.Msg) error {
	md, _ := m.Metadata()
	step, err := Translate(m.Subject(), m.Headers(), m.Data(), stampOf(md))
	step.Seq, step.Redelivered = deliveryOf(md)
	switch {
	case errors.Is(err, ErrNoEffect):
		s.ack(m)
		return nil
	case err != nil:
		jsutil.TerminateMalformed(m, err, s.cfg.Metrics, s.log)
		return nil //nolint:nilerr // settled: terminated, with the reason
	}
	spec, rev, err := s.specs.Get(ctx, step.TaskID)
	step.SpecRevision = rev
	if jsutil.IsKeyMissing(err) {
		s.ack(m) // the task was deleted; nothing to schedule
		return nil
	}
	if errors.Is(err, kvcache.ErrUnreadable) {
		// No retry can mend the stored spec; task.updated replaces it
		// and decides afresh.
		jsutil.Terminate(m, "cannot be applied: "+err.Error(), s.cfg.Metrics, s.log)
		return nil
	}
	if err != nil {
		return err
	}
	var perm *permanentError
	_, err = s.decide(ctx, spec, step)
	switch {
	case jsutil.IsKeyMissing(err):
		s.ack(m) // deleted a moment ago (decide checked the bucket)
	case errors.Is(err, errNoSchedule):
		// Deleted a moment ago, or a creation interrupted between its
		// spec and schedule writes: its redelivery (or the sweeper's
		// repair) schedules the task, and a signal never does.
		s.log.Info("signal of a task with no schedule; acknowledged without effect", "subject", m.Subject())
		s.ack(m)
	case errors.As(err, &perm):
		jsutil.Terminate(m, "cannot be applied: "+err.Error(), s.cfg.Metrics, s.log)
	case err != nil:
		return err
	default:
		s.ack(m)
	}
	return nil
}

// stampOf is the message's JetStream timestamp (md from m.Metadata(), nil
// if unreadable): the decision's clock.
func stampOf(md *jetstream.MsgMetadata) time.Time {
	if md != nil {
		return md.Timestamp.UTC()
	}
	return time.Now().UTC()
}

// deliveryOf is the message's stream sequence, and whether the server
// delivered it before (Step.Seq, Step.Redelivered); zero and false when
// the metadata is unreadable, which judges nothing.
func deliveryOf(md *jetstream.MsgMetadata) (uint64, bool) {
	if md == nil {
		return 0, false
	}
	return md.Sequence.Stream, md.NumDelivered > 1
}
