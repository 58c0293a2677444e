package governor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/control"
	"github.com/flyballhq/flyball/services/internal/jsutil"
)

// rejection is a refused command; it becomes a task.rejected event.
type rejection struct {
	reasons []events.FieldError
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

// handleCommand applies one control command and answers it with
// task.accepted or task.rejected. Only a transient NATS/KV failure leads to
// redelivery; everything else is answered and acked.
func (s *Service) handleCommand(ctx context.Context, m jetstream.Msg) {
	subj, subjErr := events.ParseSubject(m.Subject())
	e, err := events.Decode(m.Headers(), m.Data())
	if err != nil {
		s.answerRejected(ctx, m, subj, subjErr, events.Event{}, &rejection{reasons: events.Reasons(err)})
		return
	}
	acc, err := s.apply(ctx, subj, subjErr, e)
	var rej *rejection
	if errors.As(err, &rej) {
		s.answerRejected(ctx, m, subj, subjErr, e, rej)
		return
	}
	if err != nil {
		s.retry(m, err)
		return
	}
	id := "accepted:" + e.ID()
	if err := jsutil.PublishEvent(ctx, s.cfg.JS, events.TaskSubject(events.VerbAccepted, acc.ID), id,
		events.TypeTaskAccepted, s.source, acc.ID, acc, s.cfg.Now().UTC()); err != nil {
		s.retry(m, err)
		return
	}
	s.ack(m)
}

func (s *Service) answerRejected(ctx context.Context, m jetstream.Msg, subj events.Subject, subjErr error, e events.Event, r *rejection) {
	id := subj.ID
	if subjErr != nil {
		id = ""
	}
	body := events.TaskRejected{ID: id, Command: e.Type(), CommandID: e.ID(), Subject: m.Subject(), Reasons: r.reasons}
	token := id
	if token == "" {
		token = "_invalid"
	}
	// A command that lacks an id still gets a unique, stable answer id.
	answerID := "rejected:" + e.ID()
	if e.ID() == "" {
		md, err := m.Metadata()
		if err == nil {
			answerID = fmt.Sprintf("rejected:%s:%d", md.Stream, md.Sequence.Stream)
		}
	}
	reasonLabel := "invalid"
	if len(r.reasons) > 0 && r.reasons[0].Field != "" {
		reasonLabel = "field:" + strings.SplitN(r.reasons[0].Field, "[", 2)[0]
	}
	s.cfg.Metrics.RejectedEvents.WithLabelValues(reasonLabel).Inc()
	s.log.Info("command rejected", "subject", m.Subject(), "reasons", r.Error())
	if err := jsutil.PublishEvent(ctx, s.cfg.JS, events.TaskSubject(events.VerbRejected, token), answerID,
		events.TypeTaskRejected, s.source, id, body, s.cfg.Now().UTC()); err != nil {
		s.retry(m, err)
		return
	}
	s.ack(m)
}

// apply validates and applies a command. It returns a *rejection for bad
// commands and any other error for transient failures.
func (s *Service) apply(ctx context.Context, subj events.Subject, subjErr error, e events.Event) (*events.TaskAccepted, error) {
	if subjErr != nil {
		return nil, reject("subject", subjErr.Error())
	}
	verb := events.Verb(subj.Action)
	if e.Type() != verb.Type() {
		return nil, reject("type", fmt.Sprintf("must be %q on subject %s, got %q", verb.Type(), events.TaskSubject(verb, subj.ID), e.Type()))
	}
	if e.Subject() != "" && e.Subject() != subj.ID {
		return nil, reject("subject", fmt.Sprintf("CloudEvents subject %q must equal the task id in the NATS subject, %q", e.Subject(), subj.ID))
	}
	switch verb {
	case events.VerbCreated, events.VerbUpdated:
		return s.applySpec(ctx, subj.ID, verb, e)
	case events.VerbDeleted:
		return s.applyDelete(ctx, subj.ID, e)
	case events.VerbPaused, events.VerbResumed, events.VerbHinted, events.VerbRequeued:
		return s.applyControl(ctx, subj.ID, verb, e)
	default:
		return nil, reject("type", fmt.Sprintf("%q is not a command", e.Type()))
	}
}

func (s *Service) applySpec(ctx context.Context, id string, verb events.Verb, e events.Event) (*events.TaskAccepted, error) {
	spec, err := events.DecodeTaskSpec(e)
	if err != nil {
		return nil, rejectErr(err)
	}
	if spec.ID != id {
		return nil, reject("id", fmt.Sprintf("must equal the task id in the subject %q, got %q", id, spec.ID))
	}
	_, err = s.loadSpec(ctx, id)
	switch {
	case err == nil && verb == events.VerbCreated:
		if st, ok := s.loadState(ctx, id); !ok || st.LastCommandID != e.ID() {
			return nil, reject("id", fmt.Sprintf("task %q already exists; publish task.updated to change it", id))
		}
	case isMissing(err) && verb == events.VerbUpdated:
		return nil, reject("id", fmt.Sprintf("no task %q; publish task.created first", id))
	case err != nil && !isMissing(err):
		return nil, err
	}
	body, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encode spec: %w", err)
	}
	rev, err := s.tasks.Put(ctx, id, body)
	if err != nil {
		return nil, fmt.Errorf("store spec %s: %w", id, err)
	}
	kind := gov.KindAccepted
	if verb == events.VerbUpdated {
		kind = gov.KindUpdated
	}
	dec, err := s.decide(ctx, &spec, gov.Input{Kind: kind}, e.ID())
	if err != nil {
		return nil, err
	}
	acc := accepted(id, e, dec)
	acc.SpecRevision = rev
	return acc, nil
}

func (s *Service) loadState(ctx context.Context, id string) (gov.State, bool) {
	ent, err := s.schedules.Get(ctx, id)
	if err != nil {
		return gov.State{}, false
	}
	var st gov.State
	if json.Unmarshal(ent.Value(), &st) != nil {
		return gov.State{}, false
	}
	return st, true
}

func (s *Service) applyDelete(ctx context.Context, id string, e events.Event) (*events.TaskAccepted, error) {
	if len(e.Data()) > 0 {
		var ref events.TaskRef
		if err := events.DecodeData(e, &ref); err != nil {
			return nil, rejectErr(err)
		}
		if ref.ID != "" && ref.ID != id {
			return nil, reject("id", fmt.Sprintf("must equal the task id in the subject %q, got %q", id, ref.ID))
		}
	}
	// Schedules first: the timer stops dispatching before the spec goes, so
	// the executor never meets a dispatch for a half-deleted task it could
	// not report on.
	for _, kv := range []jetstream.KeyValue{s.schedules, s.tasks} {
		if err := kv.Delete(ctx, id); err != nil && !isMissing(err) {
			return nil, fmt.Errorf("delete %s from %s: %w", id, kv.Bucket(), err)
		}
	}
	return &events.TaskAccepted{ID: id, Command: e.Type(), CommandID: e.ID(), Source: string(gov.SourceDeleted)}, nil
}

func (s *Service) applyControl(ctx context.Context, id string, verb events.Verb, e events.Event) (*events.TaskAccepted, error) {
	spec, err := s.loadSpec(ctx, id)
	if isMissing(err) {
		return nil, reject("id", fmt.Sprintf("no task %q", id))
	}
	if err != nil {
		return nil, err
	}
	var in gov.Input
	switch verb {
	case events.VerbPaused:
		var p events.TaskPause
		if err := decodeOptional(e, &p, id); err != nil {
			return nil, err
		}
		in = gov.Input{Kind: gov.KindPaused, Pause: &gov.Pause{Reason: p.Reason}}
		if p.Until != nil {
			in.Pause.Until = *p.Until
		}
	case events.VerbResumed:
		var r events.TaskRef
		if err := decodeOptional(e, &r, id); err != nil {
			return nil, err
		}
		in = gov.Input{Kind: gov.KindResumed}
	case events.VerbHinted:
		var h events.TaskHint
		if err := decodeOptional(e, &h, id); err != nil {
			return nil, err
		}
		if err := control.ValidateHint(&h); err != nil {
			return nil, rejectErr(err)
		}
		in = gov.Input{Kind: gov.KindHinted, Hint: &gov.Hint{Interval: h.Interval.D(), TTL: h.TTL.D(), Reason: h.Reason}}
		if h.At != nil {
			in.Hint.At = *h.At
		}
	case events.VerbRequeued:
		var r events.TaskRequeue
		if err := decodeOptional(e, &r, id); err != nil {
			return nil, err
		}
		// TODO(issue 3): switch to gov.KindRequeued once Decide handles it
		// (clears dead-letter state and failures).
		in = gov.Input{Kind: gov.KindHinted, Hint: &gov.Hint{At: s.cfg.Now().UTC(), Reason: "requeue"}}
	}
	dec, err := s.decide(ctx, spec, in, e.ID())
	if err != nil {
		return nil, err
	}
	return accepted(id, e, dec), nil
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

func accepted(id string, e events.Event, dec gov.Decision) *events.TaskAccepted {
	acc := &events.TaskAccepted{ID: id, Command: e.Type(), CommandID: e.ID(), Source: string(dec.Source), Trail: dec.Trail}
	if !dec.NextRunAt.IsZero() {
		t := dec.NextRunAt
		acc.NextRunAt = &t
	}
	return acc
}
