package deadletter

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/jsutil"
)

// succeeded reports whether d's attempt record in flyball-attempts says
// its run succeeded: the executor writes the outcome before it acks, so
// a dispatch that exhausted its deliveries with that record lost its ack
// on every delivery left (or its work-queue delete trails the ack floor
// the reconcile pass reads), and the run must not be dead-lettered. A
// missing or unreadable record is not a success (a run that succeeded at
// its first attempt writes none); a read that fails is err, for the caller
// to retry rather than dead-letter a run that may have succeeded.
func (s *Service) succeeded(ctx context.Context, d *events.Dispatch) (bool, error) {
	e, err := s.attempts.Get(ctx, strings.Replace(d.DispatchID, ":", ".", 1))
	if jsutil.IsKeyMissing(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var r struct {
		Outcome events.Outcome `json:"outcome"`
	}
	// An unreadable record is no success: dead-lettered, as before.
	_ = json.Unmarshal(e.Value(), &r)
	return r.Outcome == events.OutcomeSucceeded, nil
}
