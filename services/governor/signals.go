package governor

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
)

// handleBreaker applies a breaker transition from HEALTH: while a task's
// breaker is open its next run waits for retryAt.
func (s *Service) handleBreaker(ctx context.Context, m jetstream.Msg) {
	e, err := events.Decode(m.Headers(), m.Data())
	if err != nil {
		jsutil.Terminate(m, "malformed event: "+err.Error(), s.cfg.Metrics, s.log)
		return
	}
	var tr events.BreakerTransition
	if err := events.DecodeData(e, &tr); err != nil {
		jsutil.Terminate(m, "malformed breaker transition: "+err.Error(), s.cfg.Metrics, s.log)
		return
	}
	if tr.TaskID == "" || !events.ValidToken(tr.TaskID) {
		s.ack(m) // a host-scoped transition names no task
		return
	}
	sig := &gov.BreakerSignal{State: string(tr.To)}
	if tr.RetryAt != nil {
		sig.RetryAt = *tr.RetryAt
	}
	s.applySignal(ctx, m, tr.TaskID, gov.Input{Kind: gov.KindBreaker, Breaker: sig})
}

// handleDeadLetter applies a dead-letter entry: the task is rechecked after
// its deadLetter.recheckAfter.
func (s *Service) handleDeadLetter(ctx context.Context, m jetstream.Msg) {
	e, err := events.Decode(m.Headers(), m.Data())
	if err != nil {
		jsutil.Terminate(m, "malformed event: "+err.Error(), s.cfg.Metrics, s.log)
		return
	}
	var dl events.DeadLetter
	if err := events.DecodeData(e, &dl); err != nil || !events.ValidToken(dl.TaskID) {
		jsutil.Terminate(m, "malformed dead-letter entry", s.cfg.Metrics, s.log)
		return
	}
	s.applySignal(ctx, m, dl.TaskID, gov.Input{Kind: gov.KindDeadLettered, DeadLetter: &gov.DeadLetterSignal{
		DispatchID: dl.Dispatch.DispatchID, Reason: dl.Reason, At: dl.DeadLetteredAt,
	}})
}

func (s *Service) applySignal(ctx context.Context, m jetstream.Msg, id string, in gov.Input) {
	spec, err := s.loadSpec(ctx, id)
	if isMissing(err) {
		s.ack(m)
		return
	}
	if err != nil {
		s.retry(m, err)
		return
	}
	if _, err := s.decide(ctx, spec, in, ""); err != nil {
		s.retry(m, err)
		return
	}
	s.ack(m)
}
