package breaker

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
)

// appliedKept is how many applied outcomes a record remembers.
const appliedKept = 8

// record is a flyball-breakers value as this service writes it: the state
// every reader decodes (executor.BreakerRecord), and what makes applying
// an outcome idempotent. Readers that decode only executor.BreakerRecord
// ignore the rest.
type record struct {
	executor.BreakerRecord
	// Applied names the newest outcomes applied to the record
	// (outcomeID), oldest first, at most appliedKept: a redelivered
	// outcome among them is not counted again.
	Applied []string `json:"applied,omitempty"`
	// Transition is the last transition the record made, stored in the
	// same write: when its publish on HEALTH fails, the redelivered
	// outcome (or the retried half-open) publishes it again, and the
	// event's deterministic Nats-Msg-Id drops a copy already stored.
	Transition *storedTransition `json:"transition,omitempty"`
	// TaskCreatedAt is the taskCreatedAt of the outcomes a task-scoped
	// record counts (zero for host keys, and for records written before
	// it existed): an outcome of an older task of the same ID is ignored,
	// and the first outcome of a newer one starts from a closed breaker.
	TaskCreatedAt time.Time `json:"taskCreatedAt,omitzero"`
	// ClosedAt is when an open or half-open breaker last closed (zero
	// before it first did, and for records written before it existed):
	// while closed, a failure of a call that started before it is not
	// counted. That call was in flight while the breaker was open, and
	// the success that closed it came later.
	ClosedAt time.Time `json:"closedAt,omitzero"`
}

// storedTransition is a transition event as published on HEALTH.
type storedTransition struct {
	// EventID is the event's id and Nats-Msg-Id.
	EventID string `json:"eventId"`
	// Outcome is the outcome that made it (outcomeID); empty for
	// open → half-open, which no outcome makes.
	Outcome string `json:"outcome,omitempty"`
	events.BreakerTransition
}

func decodeRecord(key string, cur []byte) record {
	r := record{BreakerRecord: executor.BreakerRecord{Key: key, State: events.BreakerClosed}}
	if cur != nil {
		if json.Unmarshal(cur, &r) != nil {
			r = record{BreakerRecord: executor.BreakerRecord{Key: key, State: events.BreakerClosed}}
		}
	}
	return r
}

// outcomeID names one attempt outcome: its dispatch and attempt, then
// ":ok" for a success and ":final" for a final failure. The executor
// repeats an attempt number when the attempt's record was not written (a
// crash after its event, an outbox give-up whose event was in fact
// stored), and a repeat that ends otherwise than the first try (a final
// failure after a non-final one, a success after a failure) is another
// call, not a redelivery: under the same name it was taken for one and not
// counted, and a half-open breaker's successful probe was lost.
func outcomeID(run *events.Run, ok bool) string {
	id := run.DispatchID
	if run.Attempt > 0 {
		id += ":" + strconv.Itoa(run.Attempt)
	}
	switch {
	case ok:
		id += ":ok"
	case run.Final:
		id += ":final"
	}
	return id
}

// applied reports whether the outcome is among those the record applied.
func (r *record) applied(outcome string) bool {
	return outcome != "" && slices.Contains(r.Applied, outcome)
}

// remember adds an applied outcome, forgetting the oldest past appliedKept.
func (r *record) remember(outcome string) {
	if outcome == "" {
		return
	}
	r.Applied = append(slices.Clone(r.Applied), outcome)
	if n := len(r.Applied); n > appliedKept {
		r.Applied = r.Applied[n-appliedKept:]
	}
}

// publish publishes a stored transition on HEALTH.
func (s *Service) publish(ctx context.Context, t *storedTransition) error {
	return jsutil.PublishEvent(ctx, s.cfg.JS, events.BreakerSubject(t.To, t.Key), t.EventID, t.To.Type(),
		s.source, t.TaskID, t.BreakerTransition, t.At)
}
