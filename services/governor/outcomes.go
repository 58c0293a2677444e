package governor

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
)

// handleOutcome applies the final outcome of a run to the task's schedule.
// Non-final failures are retries in progress and change nothing.
func (s *Service) handleOutcome(ctx context.Context, m jetstream.Msg) {
	subj, err := events.ParseSubject(m.Subject())
	if err != nil || subj.Family != events.FamilyRun {
		jsutil.Terminate(m, "bad subject: "+m.Subject(), s.cfg.Metrics, s.log)
		return
	}
	e, err := events.Decode(m.Headers(), m.Data())
	if err != nil {
		jsutil.Terminate(m, "malformed event: "+err.Error(), s.cfg.Metrics, s.log)
		return
	}
	var run events.Run
	if err := events.DecodeData(e, &run); err != nil {
		jsutil.Terminate(m, "malformed run: "+err.Error(), s.cfg.Metrics, s.log)
		return
	}
	if run.TaskID != subj.ID {
		jsutil.Terminate(m, "malformed run: taskId does not match the subject", s.cfg.Metrics, s.log)
		return
	}
	outcome := events.Outcome(subj.Action)
	if outcome == events.OutcomeStarted || (outcome == events.OutcomeFailed && !run.Final) {
		s.ack(m)
		return
	}
	spec, err := s.loadSpec(ctx, run.TaskID)
	if isMissing(err) {
		s.ack(m) // the task was deleted; nothing to schedule
		return
	}
	if err != nil {
		s.retry(m, err)
		return
	}
	in := gov.Input{Kind: gov.KindOutcome, Outcome: &gov.Outcome{
		DispatchID:  run.DispatchID,
		ScheduledAt: run.ScheduledAt,
		Result:      string(outcome),
		FinishedAt:  run.FinishedAt,
		Fingerprint: run.Fingerprint,
	}}
	if _, err := s.decide(ctx, spec, in, ""); err != nil {
		s.retry(m, err)
		return
	}
	s.ack(m)
}
