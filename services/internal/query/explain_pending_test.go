package query

import (
	"testing"
	"time"

	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/governor"
)

// TestAgreementAllowsOnlyRecentInputsAfterTheStoredDecision: a stored
// schedule that is the replay's before its last inputs agrees when each
// of them was stored within InFlight of the read and after the decision
// it holds (on their way to the governor), and is a mismatch otherwise.
func TestAgreementAllowsOnlyRecentInputsAfterTheStoredDecision(t *testing.T) {
	t.Parallel()
	readAt := time.Date(2026, 11, 27, 20, 0, 0, 0, time.UTC)
	decided := func(at time.Time, kind gov.Kind, next time.Time) governor.Entry {
		return governor.Entry{Step: governor.Step{At: at, Input: gov.Input{Kind: kind}}, Decision: gov.Decision{
			NextRunAt: next, Source: gov.SourceBaselineInterval,
			State: gov.State{NextRunAt: next, Source: gov.SourceBaselineInterval, DecidedAt: at},
		}}
	}
	ago := func(d time.Duration) time.Time { return readAt.Add(-d) }
	created := decided(ago(time.Hour), gov.KindAccepted, ago(time.Hour-time.Minute))
	run1 := decided(ago(3*time.Second), gov.KindOutcome, readAt.Add(time.Second))
	run2 := decided(ago(2*time.Second), gov.KindOutcome, readAt.Add(2*time.Second))
	oldRun := decided(ago(time.Minute), gov.KindOutcome, readAt.Add(time.Second))
	deleted := decided(ago(time.Second), gov.KindDeleted, time.Time{})
	ignored := run1
	ignored.Step.At, ignored.Decision.Ignored = ago(time.Second), true
	// update is a command (TASKS 2) stored after run1 that the governor
	// applied before it: it reads each stream on its own.
	update := decided(ago(2*time.Second), gov.KindUpdated, readAt.Add(2*time.Second))
	update.Step.CommandID, update.Step.Seq = "u1", 2
	stored := func(e governor.Entry) *gov.State { st := e.Decision.State; return &st }
	other := stored(run2)
	other.Source = gov.SourceHintInterval

	for _, c := range []struct {
		name    string
		entries []governor.Entry
		stored  *gov.State
		agrees  bool
		pending int
	}{
		{"caught up", []governor.Entry{created, run1, run2}, stored(run2), true, 0},
		{"one input on its way", []governor.Entry{created, run1, run2}, stored(run1), true, 1},
		{"two inputs on their way", []governor.Entry{created, run1, run2}, stored(created), true, 2},
		{"an ignored input after the stored decision", []governor.Entry{created, run1, ignored}, stored(run1), true, 0},
		{"the creation on its way", []governor.Entry{run1}, nil, true, 1},
		{"the deletion on its way", []governor.Entry{created, run1, deleted}, stored(run1), true, 1},
		{"an input older than InFlight not applied", []governor.Entry{created, oldRun, run1}, stored(created), false, 0},
		{"a schedule the replay never held", []governor.Entry{created, run1, run2}, other, false, 0},
		{"a schedule stored for nothing", nil, stored(run1), false, 0},
		{"a command the stored schedule records as applied is not pending", []governor.Entry{created, run1, update}, func() *gov.State {
			st := stored(run1) // run1 decided last, after the update
			st.LastCommandID, st.LastCommandSeq = "u1", 2
			return st
		}(), false, 0},
		{"a breaker transition the stored schedule records as applied is not pending", []governor.Entry{created, run1, func() governor.Entry {
			e := update
			e.Step.CommandID, e.Step.Input.Kind = "", gov.KindBreaker
			return e
		}()}, func() *gov.State {
			st := stored(run1)
			st.LastBreakerSeq = 2
			return st
		}(), false, 0},
		{"a command stored after the last one applied is pending, whatever its sequence", []governor.Entry{created, run1, update}, func() *gov.State {
			st := stored(run1) // restored: its last command is past the restored TASKS, whose new messages take its sequences again
			st.LastCommandID, st.LastCommandSeq, st.LastCommandAt = "old", 5, ago(time.Hour)
			return st
		}(), true, 1},
		{"a breaker transition stored after the last one applied is pending, whatever its sequence", []governor.Entry{created, run1, func() governor.Entry {
			e := update
			e.Step.CommandID, e.Step.Input.Kind = "", gov.KindBreaker
			return e
		}()}, func() *gov.State {
			st := stored(run1)
			st.LastBreakerSeq, st.LastBreakerAt = 5, ago(time.Hour)
			return st
		}(), true, 1},
		{"an input at or before the stored decision is not pending", []governor.Entry{created, run1, run2}, func() *gov.State {
			st := stored(run1)
			st.DecidedAt = run2.Step.At // a decision as late as run2, yet run1's schedule
			return st
		}(), false, 0},
	} {
		agrees, pending := agreement(c.entries, c.stored, readAt)
		if agrees != c.agrees || pending != c.pending {
			t.Errorf("%s: agreement = %v, %d pending; want %v, %d", c.name, agrees, pending, c.agrees, c.pending)
		}
	}
}
