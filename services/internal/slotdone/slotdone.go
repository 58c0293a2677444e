// Package slotdone tells whether a task's slot already has its outcome
// stored, from the last events of the task on RUNS and DEADLETTER.
//
// The governor plans the next slot from a slot's outcome. While it is
// behind (down, or working through a backlog), the schedule still names a
// slot that has run, and a dispatch of that slot published again (by the
// sweeper for a zombie, or by a timer that restarted) after DISPATCH's
// 2-minute duplicate window would run it again. The sweeper asks before
// it re-dispatches; the executor asks before it calls for a dispatch
// fired long after its slot; the deadletter service asks before it
// dead-letters an exhausted dispatch. Each asks through Watched, which
// names a direct get the service's NATS user may not make.
package slotdone

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/streams"
)

// Match says which stored outcomes count for a slot.
type Match int

const (
	// SlotOrLater counts an outcome of the slot or of a later one: the
	// sweeper asks about the slot the schedule names, and a later slot's
	// outcome also means the governor is behind; the executor asks so
	// about the sweeper's lost-write repair, which it judged so.
	SlotOrLater Match = iota
	// SlotOnly counts an outcome of the slot itself: the executor asks
	// about one dispatch, and a later slot may have run before it (a
	// run-now planned ahead of a slot held by a slow call) without making
	// it a repeat.
	SlotOnly
)

// Outcome is the stored event that made a slot done: its stream sequence
// on RUNS, or on DEADLETTER when DeadLetter is set. The sweeper compares
// it with the ack floor of the governor's consumer of that stream, to
// tell a governor that is behind from a schedule write that was lost.
type Outcome struct {
	Seq        uint64
	DeadLetter bool
	// DispatchID and Reason are the entry's, when DeadLetter is set.
	DispatchID, Reason string
}

// find reports whether task id's slot at slot (or, with SlotOrLater, a
// later one) has a final outcome on runs (run.succeeded, run.skipped, or
// run.failed with no retry to follow) or a dead-letter entry on dead, and
// the event that made it done. A failure with a retry to follow is no
// outcome: the slot is not done. Nor is an event of another task of the
// same ID: one naming a taskCreatedAt other than created (the
// schedule's), when both are known. An error reading either stream is
// returned; an event that does not decode counts as none. Services ask
// through Watched.
func find(ctx context.Context, runs, dead jetstream.Stream, id string, slot, created time.Time, match Match) (Outcome, bool, error) {
	covers := func(t time.Time) bool {
		if match == SlotOnly {
			return t.Equal(slot)
		}
		return !t.Before(slot)
	}
	for _, o := range []events.Outcome{events.OutcomeSucceeded, events.OutcomeSkipped, events.OutcomeFailed} {
		raw, err := runs.GetLastMsgForSubject(ctx, events.RunSubject(o, id))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return Outcome{}, false, fmt.Errorf("read the last run.%s of %s: %w", o, id, err)
		}
		e, err := events.Decode(raw.Header, raw.Data)
		if err != nil {
			continue
		}
		var r events.Run
		if events.DecodeRun(e, &r) == nil && (r.Final || o != events.OutcomeFailed) && covers(r.ScheduledAt) && !governor.OtherCreatedAt(r.TaskCreatedAt, created) {
			return Outcome{Seq: raw.Sequence}, true, nil
		}
	}
	raw, err := dead.GetLastMsgForSubject(ctx, events.DeadLetterSubject(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Outcome{}, false, nil
	}
	if err != nil {
		return Outcome{}, false, fmt.Errorf("read the last dead letter of %s: %w", id, err)
	}
	e, err := events.Decode(raw.Header, raw.Data)
	if err != nil {
		return Outcome{}, false, nil //nolint:nilerr // an entry that does not decode names no slot
	}
	var dl events.DeadLetter
	if events.DecodeData(e, &dl) == nil && covers(dl.Dispatch.ScheduledAt) && !governor.OtherCreatedAt(dl.Dispatch.TaskCreatedAt, created) {
		return Outcome{Seq: raw.Sequence, DeadLetter: true, DispatchID: dl.Dispatch.DispatchID, Reason: dl.Reason}, true, nil
	}
	return Outcome{}, false, nil
}

// Watched is how a service asks whether a slot is done: find with its direct gets of
// RUNS and DEADLETTER watched by the service's PubWatch. A direct get its
// NATS user may not publish draws no reply, only the server's
// asynchronous -ERR: the read waited out the JetStream timeout (5 s), for
// each slot asked about, and said "context deadline exceeded", to a
// deployment with its own NATS users that had granted the streams' info
// but not the gets. Watched, the read ends at the refusal, and the error
// names the refused subject and the permission the user needs.
type Watched struct {
	// Refusals is the service's PubWatch, installed on JS's connection.
	Refusals *jsutil.PubWatch
	JS       jetstream.JetStream
	// Service names the service whose NATS user reads ("executor"), in
	// the error.
	Service string
}

// Done is Find without the event.
func (w Watched) Done(ctx context.Context, runs, dead jetstream.Stream, id string, slot, created time.Time, match Match) (bool, error) {
	_, done, err := w.Find(ctx, runs, dead, id, slot, created, match)
	return done, err
}

// Find reports whether the slot is done (find), and the event that made it
// done, with the task's direct gets watched. Only the task's own subjects are
// watched: a refusal ends no other task's read in flight, which a user
// granted some of RUNS's subjects but not others could still answer.
func (w Watched) Find(ctx context.Context, runs, dead jetstream.Stream, id string, slot, created time.Time, match Match) (Outcome, bool, error) {
	runsGets := jsutil.APISubject(w.JS, "DIRECT.GET."+streams.StreamRuns+".")
	deadGets := jsutil.APISubject(w.JS, "DIRECT.GET."+streams.StreamDeadLetter+".")
	runsCtx, unwatchRuns := w.Refusals.Watch(ctx, runsGets+events.RunSubject("*", id))
	defer unwatchRuns()
	wctx, unwatchDead := w.Refusals.Watch(runsCtx, deadGets+events.DeadLetterSubject(id))
	defer unwatchDead()
	o, done, err := find(wctx, runs, dead, id, slot, created, match)
	if err == nil {
		return o, done, nil
	}
	// wctx's cause is runsCtx's when that ended first.
	v, ok := jsutil.Refusal(wctx)
	if !ok {
		return Outcome{}, false, err
	}
	needs := deadGets + ">"
	if strings.HasPrefix(v.Subject, runsGets) {
		needs = runsGets + ">"
	}
	return Outcome{}, false, fmt.Errorf("%w; the %s service's NATS user needs %s (docs/security.md lists its subjects)", v, w.Service, needs)
}
