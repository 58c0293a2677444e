package governor_test

import (
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/pkg/governor"
)

// Spec modifiers; each returns the spec it was given, normalized.

func withAdaptive(s *events.TaskSpec, mode string, unchanged int, smoothing float64, target time.Duration) *events.TaskSpec {
	s.Adaptive = &events.Adaptive{Mode: mode, UnchangedRuns: unchanged, Smoothing: smoothing, Target: events.Duration(target)}
	s.Normalize()
	return s
}

func withActivity(s *events.TaskSpec) *events.TaskSpec {
	s.Activity = &events.Activity{}
	s.Normalize()
	return s
}

func withQuiet(s *events.TaskSpec, start, end, tz string, every time.Duration) *events.TaskSpec {
	s.QuietHours = &events.QuietHours{Start: start, End: end, Timezone: tz, Interval: events.Duration(every)}
	s.Normalize()
	return s
}

func withBudget(s *events.TaskSpec, perDay int) *events.TaskSpec {
	s.Budget = &events.Budget{MaxRunsPerDay: perDay}
	return s
}

func withJitter(s *events.TaskSpec, f float64) *events.TaskSpec {
	s.Jitter = f
	return s
}

func withRecheck(s *events.TaskSpec, after time.Duration) *events.TaskSpec {
	s.DeadLetter = &events.DeadLetterPolicy{RecheckAfter: events.Duration(after)}
	return s
}

// mustValid fails the test if spec would be refused by the API: the tables
// must only exercise specs a user can store.
func mustValid(t testing.TB, s *events.TaskSpec) *events.TaskSpec {
	t.Helper()
	if err := s.Validate(); err != nil {
		t.Fatalf("invalid spec in test: %v", err)
	}
	return s
}

// State builders.

func stateWith(s governor.State, edits ...func(*governor.State)) governor.State {
	for _, e := range edits {
		e(&s)
	}
	return s
}

func fingerprint(fp string) func(*governor.State) {
	return func(s *governor.State) { s.LastFingerprint = fp }
}

func adaptiveInterval(d time.Duration) func(*governor.State) {
	return func(s *governor.State) { s.AdaptiveInterval = d }
}

func unchangedRuns(n int) func(*governor.State) {
	return func(s *governor.State) { s.UnchangedRuns = n }
}

func failures(n int) func(*governor.State) { return func(s *governor.State) { s.Failures = n } }

func lastActivity(at time.Time) func(*governor.State) {
	return func(s *governor.State) { s.LastActivityAt = at }
}

func breakerOpenUntil(at time.Time) func(*governor.State) {
	return func(s *governor.State) { s.BreakerOpenUntil = at }
}

func deadLettered(at, recheck time.Time) func(*governor.State) {
	return func(s *governor.State) {
		s.DeadLetter = &governor.DeadLetterHold{DispatchID: "t:dead", Reason: "max-attempts", At: at, RecheckAt: recheck}
	}
}

func pending(n int) func(*governor.State) { return func(s *governor.State) { s.CatchUpPending = n } }

func planned(at time.Time, src governor.Source) func(*governor.State) {
	return func(s *governor.State) { s.NextRunAt, s.Source = at, src }
}

func oneShotHint(at, expires time.Time) func(*governor.State) {
	return func(s *governor.State) { s.OneShotHint = &governor.OneShotHint{At: at, ExpiresAt: expires} }
}

func intervalHint(every time.Duration, expires time.Time) func(*governor.State) {
	return func(s *governor.State) { s.IntervalHint = &governor.IntervalHint{Interval: every, ExpiresAt: expires} }
}

func pausedUntil(at time.Time) func(*governor.State) {
	return func(s *governor.State) { s.Paused, s.PausedUntil = true, at }
}

// Inputs.

func outcomeFP(result string, slot time.Time, fp string) governor.Input {
	in := outcome(result, slot)
	in.Outcome.Fingerprint = fp
	return in
}

func breakerInput(state string, retryAt time.Time) governor.Input {
	return governor.Input{Kind: governor.KindBreaker, Breaker: &governor.BreakerSignal{State: state, RetryAt: retryAt}}
}

func deadLetterInput(id string, at time.Time) governor.Input {
	return governor.Input{Kind: governor.KindDeadLettered, DeadLetter: &governor.DeadLetterSignal{DispatchID: id, Reason: "permanent", At: at}}
}

// finalFailure is the final run.failed of the slot, which the dead-letter
// service turns into an entry with reason.
func finalFailure(slot time.Time, reason string) governor.Input {
	in := outcome("failed", slot)
	in.Outcome.DeadLetterReason = reason
	return in
}

var requeued = governor.Input{Kind: governor.KindRequeued}

var accepted = governor.Input{Kind: governor.KindAccepted}

// simulate drives one task the way the services do: it is accepted at
// start, then every scheduled run completes after took with the result
// (and fingerprint) that respond returns, until the next run would come
// after end. It returns the slots that ran, in order.
func simulate(t testing.TB, spec *events.TaskSpec, start, end time.Time, took time.Duration,
	respond func(i int, slot time.Time) (result, fp string),
) ([]time.Time, []governor.Decision) {
	t.Helper()
	d := governor.Decide(start, spec, governor.State{}, accepted)
	var slots []time.Time
	decisions := []governor.Decision{d}
	for i := 0; !d.NextRunAt.IsZero() && !d.NextRunAt.After(end); i++ {
		if i > 1_000_000 {
			t.Fatal("simulation does not end")
		}
		slot := d.NextRunAt
		if n := len(slots); n > 0 && slot.Sub(slots[n-1]) < governor.MinGap {
			t.Fatalf("run %d at %s, %s after the previous one", i, fmtT(slot), slot.Sub(slots[n-1]))
		}
		slots = append(slots, slot)
		result, fp := respond(i, slot)
		now := slot.Add(took)
		d = governor.Decide(now, spec, d.State, governor.Input{Kind: governor.KindOutcome, Outcome: &governor.Outcome{
			DispatchID: events.DispatchID(spec.ID, slot), ScheduledAt: slot, Result: result, FinishedAt: now, Fingerprint: fp,
		}})
		if d.Ignored {
			t.Fatalf("outcome %d ignored", i)
		}
		decisions = append(decisions, d)
	}
	return slots, decisions
}

func succeed(int, time.Time) (string, string) { return "succeeded", "" }
