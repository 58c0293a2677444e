package breaker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
// every reader decodes (executor.BreakerRecord, with the taskCreatedAt of
// the outcomes a task-scoped record counts: an outcome of an older task
// of the same ID is ignored, and the first outcome of a newer one starts
// from a closed breaker), and what makes applying an outcome idempotent.
// Readers that decode only executor.BreakerRecord ignore the rest.
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
	// ClosedAt is when an open or half-open breaker last closed, by this
	// service's clock (zero before it first did).
	ClosedAt time.Time `json:"closedAt,omitzero"`
	// CountFrom is the cut-off of that closing (countFrom): while
	// closed, a failure of a call that started before it is not counted.
	// That call was in flight while the breaker was open, and the success
	// that closed it came later. A record written before it existed has
	// only ClosedAt, and counts from closeClockMargin before that.
	CountFrom time.Time `json:"countFrom,omitzero"`
}

// countFrom is the record's cut-off for failures while closed (CountFrom).
func (r *record) countFrom() time.Time {
	if r.CountFrom.IsZero() && !r.ClosedAt.IsZero() {
		return r.ClosedAt.Add(-closeClockMargin)
	}
	return r.CountFrom
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

// viewed is a flyball-breakers record as this service's watch-fed view
// holds it: the state every reader decodes, and the outcome whose closing
// the record stored last, if its last transition is a closing (settled).
type viewed struct {
	executor.BreakerRecord
	closedBy string
}

// decodeViewed decodes a record for the view (kvcache.Decode). The
// outcomes it applied are not kept: the view needs no more than the
// state and closedBy.
func decodeViewed(key string, raw []byte) (viewed, error) {
	closed := executor.BreakerRecord{Key: key, State: events.BreakerClosed}
	r := struct {
		executor.BreakerRecord
		Transition *storedTransition `json:"transition"`
	}{BreakerRecord: closed}
	if err := json.Unmarshal(raw, &r); err != nil { // as executor.DecodeBreaker
		return viewed{BreakerRecord: closed}, fmt.Errorf("breaker record %s: %w", key, err)
	}
	v := viewed{BreakerRecord: r.BreakerRecord}
	if t := r.Transition; t != nil && t.To == events.BreakerClosed {
		v.closedBy = t.Outcome
	}
	return v, nil
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

// publish publishes the stored transition t unless a later transition of
// its key superseded it. Every publish comes after the KV write that
// made t, and may come late (a paused replica, a publish retried while
// HEALTH elects a leader, a retry of a failed one, the republish of a
// redelivered outcome, or another replica's republish, of a record read
// before it moved on): meanwhile the breaker may move on and publish its
// next transition, and a late breaker.open stored after the closing held
// the task of a closed breaker until retryAt, and a late half-open after
// the re-opening lifted the hold on an open one. So the publish is
// conditional: it reads the sequence of the key's last breaker event on
// HEALTH, then the record, and publishes only if the record still holds
// t and no breaker event of the key was stored since that read
// (Nats-Expected-Last-Subject-Sequence over flyball.breaker.*.<key>). A
// transition written after the record read publishes after it, and makes
// the publish fail; the next round finds the record moved on, and t is
// dropped: HEALTH holds a key's transitions in the order KV made them.
func (s *Service) publish(ctx context.Context, t *storedTransition) error {
	if s.publishing != nil {
		s.publishing(t.Key, t.To)
	}
	key := t.Key
	filter := events.BreakerSubject("*", key)
	body, err := events.Marshal(t.To.Type(), s.source, t.TaskID, t.BreakerTransition, t.At, t.EventID)
	if err != nil {
		return err
	}
	for range 10 {
		var last uint64
		m, err := s.health.GetLastMsgForSubject(ctx, filter)
		switch {
		case err == nil && m.Header.Get(jetstream.MsgIDHeader) == t.EventID:
			return nil // already stored
		case err == nil:
			last = m.Sequence
		case !errors.Is(err, jetstream.ErrMsgNotFound):
			return fmt.Errorf("last breaker event of %s: %w", key, err)
		}
		ent, err := s.breakers.Get(ctx, key)
		if jsutil.IsKeyMissing(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("get %s: %w", key, err)
		}
		if cur := decodeRecord(key, ent.Value()); cur.Transition == nil || cur.Transition.EventID != t.EventID {
			s.cfg.Logger.Debug("transition superseded before its publish; not published", "key", key, "event", t.EventID)
			return nil
		}
		if s.checked != nil && !s.checked(key, t.To) {
			return nil
		}
		_, err = jsutil.PublishMsg(ctx, s.cfg.JS, jsutil.EventMsg(events.BreakerSubject(t.To, key), t.EventID, body),
			jetstream.WithExpectLastSequenceForSubject(last, filter))
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
			continue // a breaker event of the key was stored since the read
		}
		return err
	}
	return fmt.Errorf("publish %s: the key's breaker events kept changing", t.EventID)
}
