package deadletter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/slotdone"
	"github.com/flyballhq/flyball/streams"
)

// Advisory subjects captured in the ADVISORIES stream.
const (
	advisoryMaxDeliveries = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."
	advisoryTerminated    = "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED."
)

// maxDeliveriesAdvisory is the part of JetStream's max_deliver advisory
// that matters here.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// handleAdvisory dead-letters a dispatch that exhausted MaxDeliver: no
// delivery settled it (maxDeliveriesError), so no final run.failed was
// ever published. The original stays in DISPATCH (holding the task's
// one-pending slot) until it is deleted here.
func (s *Service) handleAdvisory(ctx context.Context, m jetstream.Msg) {
	switch {
	case strings.HasPrefix(m.Subject(), advisoryTerminated):
		// Terminations are the executor's own final failures (already on
		// RUNS) or malformed dispatches (already counted where terminated).
		_ = m.Ack()
		return
	case !strings.HasPrefix(m.Subject(), advisoryMaxDeliveries):
		jsutil.Terminate(m, "unexpected advisory subject", s.cfg.Metrics, s.cfg.Logger)
		return
	}
	var adv maxDeliveriesAdvisory
	if err := json.Unmarshal(m.Data(), &adv); err != nil || adv.StreamSeq == 0 {
		jsutil.Terminate(m, "malformed max_deliver advisory", s.cfg.Metrics, s.cfg.Logger)
		return
	}
	if adv.Stream != streams.StreamDispatch {
		_ = m.Ack()
		return
	}
	if _, _, err := s.deadLetterBySeq(ctx, adv.StreamSeq); err != nil {
		s.cfg.Logger.Warn("max-deliveries dead-letter failed; retrying", "seq", adv.StreamSeq, "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	_ = m.Ack()
}

// deadLetterBySeq dead-letters the DISPATCH message at seq, which
// exhausted its deliveries, and deletes it; it returns the message's task
// ("" if it is gone already or unreadable) and whether this call counted
// its entry (false when the message was gone, unreadable, too large to
// dead-letter, its run succeeded, or its entry was stored and counted
// already: write).
// The advisory and the reconcile pass (reconcile.go) both come here:
// whichever is second finds the message gone, and two at once write one
// entry (its Nats-Msg-Id).
func (s *Service) deadLetterBySeq(ctx context.Context, seq uint64) (string, bool, error) {
	raw, err := s.dispatch.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return "", false, nil // another replica, or an operator, already removed it
	}
	if err != nil {
		return "", false, err
	}
	e, derr := events.Decode(raw.Header, raw.Data)
	var d events.Dispatch
	if derr == nil {
		derr = events.DecodeData(e, &d)
	}
	if derr != nil || !events.ValidToken(d.TaskID) {
		// Unreadable: free the slot anyway, and count it.
		s.cfg.Metrics.RejectedEvents.WithLabelValues("malformed dispatch").Inc()
		s.cfg.Logger.Error("deleting unreadable dispatch that exhausted its deliveries", "seq", seq, "subject", raw.Subject)
		return "", false, s.deleteDispatch(ctx, seq)
	}
	rec, err := s.attemptRecord(ctx, &d)
	if err != nil {
		return "", false, fmt.Errorf("read attempt record: %w", err)
	}
	if rec.Outcome == events.OutcomeSucceeded {
		s.cfg.Logger.Info("dispatch exhausted its deliveries after its run succeeded (its ack was lost); deleting it without a dead letter", "seq", seq, "task", d.TaskID, "dispatch", d.DispatchID)
		return d.TaskID, false, s.deleteDispatch(ctx, seq)
	}
	// A run that succeeded at its first attempt and a skipped dispatch
	// write no attempt record, and a final failure's entry comes from
	// RUNS with its own reason: look for the slot's stored outcome, as the
	// executor does for a slot dispatched again (slotdone). Found, the
	// dispatch's acks (or terms) were lost, not its run: an entry here
	// alarmed an operator for a run that had succeeded or been skipped,
	// and made the governor hold the task until a recheck; or, ahead of
	// the RUNS backlog, labelled a final failure max-deliveries.
	// DISPATCH holds one dispatch per task, so no later slot of the task
	// has run meanwhile to hide this one's outcome. The dispatch's own
	// max-deliveries entry is no such outcome: a try before this one
	// stored it and did not get to count it (its PubAck was lost, or the
	// service stopped) nor to delete the dispatch. write finds it stored,
	// and counts it.
	outcomes := slotdone.Watched{Refusals: &s.refusals, JS: s.cfg.JS, Service: "deadletter"}
	if o, done, err := outcomes.Find(ctx, s.runs, s.dead, d.TaskID, d.ScheduledAt, d.TaskCreatedAt, slotdone.SlotOnly); err != nil {
		return "", false, fmt.Errorf("read the slot's outcome: %w", err)
	} else if done && (!o.DeadLetter || o.DispatchID != d.DispatchID || o.Reason != events.DeadLetterMaxDeliveries) {
		s.cfg.Logger.Info("dispatch exhausted its deliveries after its slot's outcome was stored (its acks were lost); deleting it without a max-deliveries dead letter", "seq", seq, "task", d.TaskID, "dispatch", d.DispatchID)
		return d.TaskID, false, s.deleteDispatch(ctx, seq)
	}
	attempts := rec.Attempts
	run := d.Run()
	final := &run
	final.Attempt, final.FinishedAt = attempts, s.cfg.Now().UTC()
	final.Error = maxDeliveriesError
	// The dispatch is deleted only once its entry is stored and counted:
	// still here, an entry stored for it may be uncounted (a retry).
	wrote, err := s.write(ctx, final, d, events.DeadLetterMaxDeliveries, true)
	if jsutil.TooLarge(err) {
		// No retry makes it fit: free the slot anyway, and count it.
		s.cfg.Metrics.RejectedEvents.WithLabelValues("cannot be dead-lettered").Inc()
		s.cfg.Logger.Error("dead-letter entry too large to store; deleting the dispatch without one", "seq", seq, "task", d.TaskID, "err", err)
	} else if err != nil {
		return "", false, err
	}
	return d.TaskID, wrote, s.deleteDispatch(ctx, seq)
}

func (s *Service) deleteDispatch(ctx context.Context, seq uint64) error {
	if err := s.dispatch.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return err
	}
	return nil
}

// maxDeliveriesError is the error of a max-deliveries entry. It names
// what can use up a dispatch's deliveries without a final run event, not
// which of them did: the service sees only that none settled it.
const maxDeliveriesError = "delivery limit reached: no delivery settled the run (an executor crashed or was " +
	"cut off from NATS mid-run, a call and its settle outlasted the AckWait, or the run's event or state " +
	"could not be stored in NATS on each delivery)"

// attemptRecord is what the dead-letter service reads of d's record in
// flyball-attempts, written by the executor: the attempts counted and the
// outcome, written before the executor acks or terms. A missing record is
// zero (a run that succeeded at its first attempt writes none), and so is
// one that does not decode. A read that fails is an error, for the caller
// to try again (the advisory is nakked, the reconcile pass retries):
// taken for zero, the entry understated the calls made, or dead-lettered
// a run that succeeded.
type attemptRecord struct {
	Attempts int            `json:"attempts"`
	Outcome  events.Outcome `json:"outcome"`
}

func (s *Service) attemptRecord(ctx context.Context, d *events.Dispatch) (attemptRecord, error) {
	var r attemptRecord
	e, err := s.attempts.Get(ctx, events.AttemptKey(d.DispatchID))
	if jsutil.IsKeyMissing(err) {
		return r, nil
	}
	if err != nil {
		return r, err
	}
	_ = json.Unmarshal(e.Value(), &r)
	return r, nil
}
