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

// How many applied outcomes a record remembers: every one applied in the
// last appliedFor, and at least the last appliedKept, at most appliedMax.
// A redelivery comes about one AckWait (30 s) after the first delivery
// when its ack was lost or its replica died, and every second while its
// apply or publish fails; by then a busy host-scoped breaker may have
// applied many other outcomes, and a count alone (it was the last 8) let a
// redelivered failure be counted again.
const (
	appliedKept = 8
	appliedFor  = 5 * time.Minute
	appliedMax  = 512
)

// record is a flyball-breakers value as this service writes it: the state
// every reader decodes (executor.BreakerRecord), and what makes applying
// an outcome idempotent. Readers that decode only executor.BreakerRecord
// ignore the rest.
type record struct {
	executor.BreakerRecord
	// Applied names the newest outcomes applied to the record
	// (outcomeID), oldest first: those applied in the last appliedFor, and
	// at least the last appliedKept, at most appliedMax. A redelivered
	// outcome among them is not counted again.
	Applied []string `json:"applied,omitempty"`
	// AppliedAt is when each outcome in Applied was applied (Unix
	// seconds), in the same order. Records written before it existed
	// have none: their outcomes count as applied long ago.
	AppliedAt []int64 `json:"appliedAt,omitempty"`
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

// remember adds an outcome applied at now, forgetting those applied more
// than appliedFor ago beyond the last appliedKept, and the oldest past
// appliedMax.
func (r *record) remember(outcome string, now time.Time) {
	if outcome == "" {
		return
	}
	at := make([]int64, len(r.Applied), len(r.Applied)+1)
	// Align the times with the names: a record written before AppliedAt
	// existed (or by hand) has fewer, and its outcomes are the oldest.
	copy(at[max(len(at)-len(r.AppliedAt), 0):], r.AppliedAt[max(len(r.AppliedAt)-len(at), 0):])
	applied := append(slices.Clone(r.Applied), outcome)
	at = append(at, now.Unix())
	drop := max(len(applied)-appliedMax, 0)
	horizon := now.Add(-appliedFor).Unix()
	for drop < len(applied)-appliedKept && at[drop] < horizon {
		drop++
	}
	r.Applied, r.AppliedAt = applied[drop:], at[drop:]
}

// publish publishes a stored transition on HEALTH.
func (s *Service) publish(ctx context.Context, t *storedTransition) error {
	return jsutil.PublishEvent(ctx, s.cfg.JS, events.BreakerSubject(t.To, t.Key), t.EventID, t.To.Type(),
		s.source, t.TaskID, t.BreakerTransition, t.At)
}
