package governor

import (
	"slices"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
)

// Decision is the result of applying one input to a task.
type Decision struct {
	// NextRunAt is when the task runs next; zero means not scheduled.
	NextRunAt time.Time
	// Source names the rule that chose NextRunAt.
	Source Source
	// Trail lists, in order, the rules considered and what they did.
	Trail []string
	// State is the task's state after the input, with NextRunAt, Source and
	// Trail filled in. It is what the governor service stores.
	State State
	// Ignored is set when the input changed nothing, such as a redelivered
	// outcome that was already applied. State is then the input state.
	Ignored bool
	// ClearedHints is set when an expired hint was removed from the state:
	// the stored state must be replaced even if NextRunAt did not move.
	ClearedHints bool
}

// Limits of the rules.
const (
	// maxBackoffExponent caps failure backoff at interval × 2^5.
	maxBackoffExponent = 5
	// maxFailures caps the stored failure count.
	maxFailures = 1 << 20
	// MinGap is the smallest gap between two runs of a task, whatever rule
	// chose the second one: a task never runs more than once a second, even
	// when every run fails at once, hints ask for "now" or a backlog is
	// replayed.
	MinGap = time.Second
)

// InFlightWindow is how far ahead of now a planned slot counts as
// dispatched: the timer publishes each dispatch up to its lead (at most
// MaxLead) before the slot.
const InFlightWindow = 2 * time.Second

// MaxLead is the longest the timer may publish a dispatch before its slot:
// half of InFlightWindow. The other half covers the time between an input
// being stored (the decision's clock) and its decision being written: a
// breaker or spec change stored just before the timer publishes must
// still see the slot as in flight, or it plans a second slot behind it.
const MaxLead = InFlightWindow / 2

// trailCap is the trail text reserved up front: enough for the usual
// decision, so the builder allocates once.
const trailCap = 128

// Decide applies in to st and decides when the task runs next. It is pure:
// the same arguments always give the same Decision. It never modifies st.
func Decide(now time.Time, spec *events.TaskSpec, st State, in Input) Decision {
	in = storableInput(in)
	p := planner{now: now, spec: spec, in: in.Kind, s: st, input: st, prevNext: st.NextRunAt, prevSource: st.Source}
	s := &p.s
	s.Trail = nil
	p.tr.b.Grow(trailCap)
	ignored := func() Decision {
		return Decision{NextRunAt: st.NextRunAt, Source: st.Source, Trail: st.Trail, State: st, Ignored: true}
	}
	switch in.Kind {
	case KindAccepted:
		*s = State{TaskID: spec.ID, CreatedAt: CreatedAt(now), LastActivityAt: now.UTC()}
	case KindUpdated:
		s.TaskID = spec.ID
		p.restartAdaptive(in.Replaced)
		p.replacesUnreadable = in.ReplacesUnreadable
	case KindOutcome:
		o := in.Outcome
		if o == nil || Applied(o.DispatchID, st) || outdated(o, st) || OtherTask(o.TaskCreatedAt, st) {
			return ignored()
		}
		if o.ScheduledAt.After(st.LastScheduledAt) {
			p.waitedUntil = minTime(st.lastEnd(), now.UTC())
		}
		p.applyOutcome(o)
		if o.Result == "failed" && o.DeadLetterReason != "" {
			p.applyDeadLetter(&DeadLetterSignal{DispatchID: o.DispatchID, Reason: o.DeadLetterReason, At: s.LastFailureAt, ScheduledAt: o.ScheduledAt})
		}
		if o.Result != "skipped" && !o.StartedAt.IsZero() && o.ScheduledAt.Equal(s.LastScheduledAt) {
			p.started = o.StartedAt.UTC()
			if p.started.After(now) {
				p.started = now.UTC() // another machine's clock, or a forged time
			}
			if !o.FinishedAt.IsZero() {
				p.finished = o.FinishedAt.UTC()
				if p.finished.After(now) {
					p.finished = now.UTC()
				}
				p.finished = maxTime(p.started, p.finished)
			}
		}
	case KindPaused:
		s.Paused = true
		s.PausedUntil, s.PauseReason = time.Time{}, ""
		if in.Pause != nil {
			s.PausedUntil, s.PauseReason = in.Pause.Until.UTC(), in.Pause.Reason
		}
	case KindResumed:
		p.leftPause = s.Paused
		s.Paused, s.PausedUntil, s.PauseReason = false, time.Time{}, ""
	case KindHinted:
		if in.Hint != nil {
			p.applyHint(in.Hint)
		}
	case KindDeleted:
		s.Deleted = true
		s.NextRunAt, s.Source, s.RunningSlot = time.Time{}, SourceDeleted, time.Time{}
		s.Trail = []string{"task deleted: nothing scheduled"}
		s.DecidedAt, s.Input = now, in.Kind
		return Decision{Source: s.Source, Trail: s.Trail, State: *s}
	case KindBreaker:
		if in.Breaker == nil || OtherTask(in.Breaker.TaskCreatedAt, st) || OtherBreaker(in) {
			return ignored()
		}
		p.applyBreaker(in.Breaker)
	case KindDeadLettered:
		if in.DeadLetter == nil || OtherTask(in.DeadLetter.TaskCreatedAt, st) || HeldAlready(in.DeadLetter, st) || !p.applyDeadLetter(in.DeadLetter) {
			return ignored()
		}
	case KindRequeued:
		s.RequeuedAt = now.UTC()
		s.DeadLetter = nil
		s.Failures = 0
		p.tr.str("requeued: dead-letter cleared, failures reset").end()
	}
	p.leftBreaker(in.BreakerKey)
	if spec.Budget == nil {
		s.Budget, s.LastStartedAt = RunLedger{}, time.Time{}
	}
	if spec.CatchUp != events.CatchUpAll {
		s.CatchUpPending = 0
	}
	s.Input = in.Kind
	s.DecidedAt = now
	p.running = p.runningSlot()
	p.planned = p.slotInFlight()
	if !p.inFlight() && p.waits() && !p.keepsWaiting() {
		// It has not run (it waits behind the running slot), and this
		// decision replaces it: not a slot to plan after, nor to remember
		// as running.
		p.planned = time.Time{}
	}
	p.flying = p.planned
	if p.flying.IsZero() || p.running.After(p.flying) { // a slot may lie before the zero time (year 0)
		p.flying = p.running
	}
	if p.inFlight() {
		p.keep()
	} else if p.queued() {
		p.keepQueued()
	} else if what := p.servesAhead(); what != "" {
		p.keepServing(what)
	} else {
		p.plan()
	}
	s.NextRunAt, s.Source, s.Trail = p.next, p.source, p.tr.lines()
	p.rememberRunning()
	switch {
	case p.gridStep > 0 && p.next.Equal(p.gridNext):
		s.GridStep = p.gridStep
	case !p.next.Equal(p.prevNext) || p.next.IsZero():
		s.GridStep = 0 // not a grid slot; a slot kept keeps its step
	}
	s.keepStorable()
	return Decision{NextRunAt: s.NextRunAt, Source: s.Source, Trail: s.Trail, State: *s, ClearedHints: p.cleared}
}

// outdated reports an outcome of a run that ended before the slot of the
// last outcome applied: a redelivery of an outcome already applied (its
// ack was lost, or its replica died before the ack, and the redelivery
// came an AckWait later, after the outcomes of the runs behind it). A
// later slot is planned only once the run before it has ended, at or
// after the decision that applied its outcome, so a run ending before
// that slot had its outcome applied already. Applying it again counted
// the run twice (runs, budget) and replaced the newer run's result (a
// failure redelivered after a success put the task back into backoff).
// A run planned before a slot in flight (a run-now hint while the slot
// was held) runs after that slot, so it ends after it and still counts;
// and a run still in flight when a later slot began (one planned by a
// run-now hint or a requeue) ends after that slot: its outcome, once
// applied, is kept in RecentDispatchIDs so that its redelivery after the
// later slot's outcome is not taken for a first delivery.
func outdated(o *Outcome, st State) bool {
	return !o.FinishedAt.IsZero() && o.FinishedAt.Before(st.LastScheduledAt)
}

// MaxRecentDispatchIDs bounds State.RecentDispatchIDs. A redelivery comes
// an AckWait after its first delivery; an entry is needed only until the
// outcome of a slot planned after its run ended is applied (then the
// outdated check catches it), so it covers that many runs overlapping
// each other.
const MaxRecentDispatchIDs = 3

// Applied reports an outcome of dispatch id whose outcome st applied
// already: the last one, or one of the recent ones whose redelivery the
// outdated check would not catch. An empty id is never a duplicate.
func Applied(id string, st State) bool {
	return id != "" && (id == st.LastDispatchID || slices.Contains(st.RecentDispatchIDs, id))
}

// CreatedAt is the createdAt of a task whose creation Decide applies at
// now (State.CreatedAt). The governor service stores the same time with
// the spec, before it decides.
func CreatedAt(now time.Time) time.Time { return now.UTC() }

// OtherTask reports a run of another task of the same ID: one dispatched
// from a schedule created at taskCreatedAt, when st was created at another
// time (the task was deleted and created again while the run, its outcome
// or its dead letter was on its way). Either time zero (flyball before
// 2026-11-27, or a schedule written by hand) tells nothing, and the run
// counts as before.
func OtherTask(taskCreatedAt time.Time, st State) bool {
	return OtherCreatedAt(taskCreatedAt, st.CreatedAt)
}

// OtherCreatedAt reports whether two createdAt times name two tasks of
// one ID (one deleted, the other created again): both are known and they
// differ. A zero time (flyball before 2026-11-27, a value written by
// hand) tells nothing. Every service that tells a task from its deleted
// namesake (governor, breaker, executor, sweeper) asks this.
func OtherCreatedAt(a, b time.Time) bool {
	return !a.IsZero() && !b.IsZero() && !a.Equal(b)
}

// applyOutcome records the final outcome of a run.
func (p *planner) applyOutcome(o *Outcome) {
	s := &p.s
	p.rememberLast(o)
	s.LastDispatchID = o.DispatchID
	s.LastOutcome = o.Result
	if o.ScheduledAt.After(s.LastScheduledAt) {
		s.LastScheduledAt = o.ScheduledAt.UTC()
	}
	finished := o.FinishedAt.UTC()
	if o.FinishedAt.IsZero() {
		finished = p.now.UTC()
	}
	ran := false
	switch o.Result {
	case "succeeded":
		ran = true
		s.Runs++
		s.Failures = 0
		s.LastSuccessAt = finished
		if s.CatchUpPending > 0 {
			s.CatchUpPending--
		}
		if dl := s.DeadLetter; dl != nil {
			s.DeadLetter = nil
			p.tr.linef("run succeeded: dead-letter of %s cleared", stamp(dl.At))
		}
	case "failed":
		ran = true
		s.Runs++
		if s.Failures < maxFailures {
			s.Failures++
		}
		s.LastFailureAt = finished
	}
	if ran && p.spec.Budget != nil {
		// Counted in the hour the call was made, and paced from it when
		// it was late (paceFrom): counted in the hour of a late run's
		// slot (a day back, or out of the window), and paced from that
		// slot, it was followed by the next run at once.
		start := runStart(o, p.now)
		s.Budget.add(hourOf(start))
		if start.After(s.LastStartedAt) {
			s.LastStartedAt = start
		}
	}
	if h := s.OneShotHint; h != nil && !o.ScheduledAt.Before(h.At) {
		var keep bool
		if keep, p.oneShotSkipped = p.skipKeeps(o, "one-shot hint for ", h.At, "hint"); !keep {
			s.OneShotHint = nil
		}
	}
	if r := s.RequeuedAt; !r.IsZero() && !o.ScheduledAt.Before(r) {
		var keep bool
		if keep, p.requeueSkipped = p.skipKeeps(o, "requeued at ", r, "requeue"); !keep {
			s.RequeuedAt = time.Time{}
		}
	}
	if ran {
		p.observe(o)
	}
}

// skipKeeps tells what the outcome o of a slot at or after a request
// pending since at (what: "requeued at ", "one-shot hint for "; name:
// "requeue", "hint") does to it. A run, or the skip of a slot that ran
// already (SkipRan), is the run the request asked for: it is consumed
// (keep false). Any other skip is no run, and the request stays pending
// until one (keep): consumed, a requeued or run-now slot skipped because
// the task was paused meanwhile never ran, and the resume planned the
// next slot of the cadence. After a skip in a pause (SkipPaused) it is
// planned as before: the pause holds it until it ends, and a resume
// applied before the skip runs it at once. After any other skip
// (SkipNotRun) this decision does not plan it (hold: requeueSkipped,
// oneShotSkipped): planned at once, the next dispatch could meet what
// skipped this one (an open breaker with no room to wait, a spec that
// does not validate), and be skipped again, once a second. The next run
// the other rules plan serves it, or the next input that plans runs it at
// once. A one-shot hint kept still expires at its TTL (expireHints).
func (p *planner) skipKeeps(o *Outcome, what string, at time.Time, name string) (keep, hold bool) {
	if o.Result != "skipped" || o.Skip == SkipRan {
		return false, false
	}
	p.tr.str(what).at(at).str(": the slot ").at(o.ScheduledAt).str(" was skipped")
	if o.Skip == SkipPaused {
		p.tr.str(" (paused), not run: the ").str(name).str(" stays pending").end()
		return true, false
	}
	p.tr.str(", not run: the ").str(name).str(" stays pending for the next run planned, and is not planned again at once").end()
	return true, true
}

// runStart is when the run of o made its call: its start, at most now
// (another machine's clock, or a forged time) and not before its slot (the
// executor holds a dispatch until then); its slot when the start is
// unknown. The budget counts the run in its hour and paces the next one
// from it (State.LastStartedAt), so it is clamped: a start after now
// would count the run in an hour to come and hold the next run back from
// a time that has not come. observe compares the start unclamped, for
// reasons given there.
func runStart(o *Outcome, now time.Time) time.Time {
	start := reportedStart(o)
	if start.After(now) {
		start = now
	}
	return maxTime(o.ScheduledAt, start).UTC()
}

// reportedStart is the start of the run of o as the executor reported it,
// on its clock and not clamped: its start, or its slot when the start is
// unknown. observe compares it with a spec update (FingerprintFrom) as it
// is; runStart clamps it for the budget.
func reportedStart(o *Outcome) time.Time {
	if o.StartedAt.IsZero() {
		return o.ScheduledAt
	}
	return o.StartedAt
}

// rememberLast keeps the dispatch applied last in RecentDispatchIDs when
// o replaces it and the outdated check would not catch its redelivery:
// its run ended at or after the slot that is the anchor once o is applied
// (the two runs overlapped), or its end is not recorded (a skip, or no
// outcome result). A run that ended before that slot, the usual case, is
// not kept, so the state of a task whose runs never overlap does not grow.
// The list is a new slice: Decide never modifies the state it is given.
func (p *planner) rememberLast(o *Outcome) {
	s := &p.s
	if s.LastDispatchID == "" || s.LastDispatchID == o.DispatchID {
		return
	}
	if end := s.lastEnd(); !end.IsZero() && end.Before(maxTime(s.LastScheduledAt, o.ScheduledAt)) {
		return
	}
	ids := make([]string, 0, MaxRecentDispatchIDs)
	ids = append(ids, s.LastDispatchID)
	for _, id := range s.RecentDispatchIDs {
		if len(ids) == MaxRecentDispatchIDs {
			break
		}
		if id != s.LastDispatchID && id != o.DispatchID {
			ids = append(ids, id)
		}
	}
	s.RecentDispatchIDs = ids
}

// lastEnd is when the run whose outcome st applied last ended (its
// finishedAt, or the decision's now when unknown); zero for a skip, or
// when there is none.
func (st *State) lastEnd() time.Time {
	switch st.LastOutcome {
	case "succeeded":
		return st.LastSuccessAt
	case "failed":
		return st.LastFailureAt
	}
	return time.Time{}
}

// restartAdaptive drops the adaptive interval on a spec update that
// changes what it rests on (AdaptiveRestarts, against the replaced spec;
// any update when that is not known). It is a duration smoothed for the
// old baseline and bounds; clamped into the new range it could mean the
// opposite (relaxed to 4m on a 1m baseline is the floor of a 1h one). The
// runs after the update move it from the new baseline.
//
// Change detection restarts too: the update may change what a
// fingerprint is taken of (the URL, the method, maxResponseBytes, a NATS
// subject), so the first fingerprint of a run made under the new spec
// only records, as a new task's first does, and a run that started
// before the update (FingerprintFrom) counts for nothing. Compared with
// the old spec's, an unchanged target read as "response changed"
// (tightening, and waking a dormant task), and the unchanged runs counted
// before the update relaxed it at once.
//
// An update that changes none of it (the same spec applied again, as a
// GitOps loop does; new labels) keeps both: restarted, a relaxed task
// went back to its baseline at every re-apply, and a response that
// changed across one was only recorded.
func (p *planner) restartAdaptive(replaced *events.TaskSpec) {
	s := &p.s
	if replaced != nil && !AdaptiveRestarts(replaced, p.spec) {
		if s.AdaptiveInterval != 0 || s.LastFingerprint != "" {
			p.tr.str("spec updated: adaptive cadence and change detection go on (the call, baseline, bounds and adaptive settings are unchanged)").end()
		}
		return
	}
	if p.spec.Adaptive != nil || p.spec.Activity != nil {
		s.FingerprintFrom = p.now.UTC()
	}
	if s.LastFingerprint != "" || s.UnchangedRuns != 0 {
		p.tr.str("spec updated: change detection restarts (the first fingerprint of a run under the new spec only records)").end()
		s.LastFingerprint, s.UnchangedRuns = "", 0
	}
	if s.AdaptiveInterval == 0 {
		return
	}
	if base := p.spec.Schedule.Interval.D(); p.spec.Adaptive != nil && base > 0 {
		p.tr.str("spec updated: adaptive interval ").dur(s.AdaptiveInterval).str(" restarts from the baseline ").dur(base).end()
	}
	s.AdaptiveInterval = 0
}

func (p *planner) applyHint(h *Hint) {
	s := &p.s
	if h.Interval > 0 {
		ttl := h.TTL
		if ttl <= 0 {
			ttl = DefaultIntervalHintTTL
		}
		s.IntervalHint = &IntervalHint{Interval: h.Interval, ExpiresAt: p.now.Add(ttl).UTC(), Reason: h.Reason}
	}
	if !h.At.IsZero() {
		ttl := h.TTL
		if ttl <= 0 {
			ttl = DefaultOneShotHintTTL
		}
		s.OneShotHint = &OneShotHint{At: h.At.UTC(), ExpiresAt: p.now.Add(ttl).UTC(), Reason: h.Reason}
	}
	if h.Interval > 0 || !h.At.IsZero() {
		s.LastActivityAt = p.now.UTC()
	}
}

func (p *planner) applyBreaker(b *BreakerSignal) {
	s := &p.s
	switch events.BreakerState(b.State) {
	case events.BreakerOpen:
		until := b.RetryAt.UTC()
		if b.RetryAt.IsZero() {
			d := events.DefaultOpenDelay
			if bp := p.spec.Breaker; bp != nil && bp.OpenDelay > 0 {
				d = bp.OpenDelay.D()
			}
			until = p.now.Add(d).UTC()
			p.tr.linef("breaker opened without retryAt: assuming %s", d)
		}
		s.BreakerOpenUntil, s.BreakerKey = until, b.Key
	case events.BreakerClosed, events.BreakerHalfOpen:
		if !s.BreakerOpenUntil.IsZero() {
			p.tr.linef("breaker %s: no longer holding runs", b.State)
		}
		s.BreakerOpenUntil, s.BreakerKey = time.Time{}, ""
	default:
		p.tr.linef("unknown breaker state %q: ignored", b.State)
	}
}

// leftBreaker lifts a hold set by a breaker the task no longer uses: the
// state's hold names another key (State.BreakerKey) than the task's
// breaker key under the spec decided with (key, Input.BreakerKey), both
// known. An update switched breaker.scope, or moved a host-scoped task to
// another host: the executor calls under the new key at once, while the
// hold kept every run back until the old breaker's retryAt (up to
// breaker.maxOpenDelay), since no transition of the old breaker came to
// lift it. Checked at every decision, not only an update's: a decision
// made with the new spec lifts it whatever input comes first.
func (p *planner) leftBreaker(key string) {
	s := &p.s
	if s.BreakerOpenUntil.IsZero() {
		s.BreakerKey = "" // no hold: a key stored without one says nothing
		return
	}
	if s.BreakerKey == "" || key == "" || s.BreakerKey == key {
		return
	}
	p.tr.str("breaker ").quote(s.BreakerKey).str(" open until ").at(s.BreakerOpenUntil).
		str(" is no longer the task's (its breaker is ").quote(key).str(" since an update): no longer holding runs").end()
	s.BreakerOpenUntil, s.BreakerKey = time.Time{}, ""
}

// applyDeadLetter records a dead-letter entry. It reports false for an
// entry that changes nothing: a redelivery, or one that a later requeue or
// success superseded.
//
// A requeue sent after the dead-lettered run's slot (during its retries:
// the operator asked for a run while it was failing) outranks the hold
// and stays pending: it runs, and its outcome clears it. Judged by when
// the failure or its entry arrived (after the requeue), the hold cleared
// it, and neither the requeue nor a run-now queued before it ran until
// the recheck. A requeue before the slot is the one the failed run
// served: the hold replaces it.
func (p *planner) applyDeadLetter(d *DeadLetterSignal) bool {
	s := &p.s
	at := d.At.UTC()
	if d.At.IsZero() {
		at = p.now.UTC()
	}
	switch {
	case s.DeadLetter != nil && d.DispatchID != "" && s.DeadLetter.DispatchID == d.DispatchID:
		return false
	case !s.RequeuedAt.IsZero() && at.Before(s.RequeuedAt):
		return false // requeued since
	case s.LastSuccessAt.After(at):
		return false // a run succeeded since
	}
	after := events.DefaultRecheckAfter
	if dp := p.spec.DeadLetter; dp != nil && dp.RecheckAfter > 0 {
		after = dp.RecheckAfter.D()
	}
	if after > events.MaxInterval {
		// A spec stored before the cap (Validate refuses it now): a
		// recheck after 2262 was never queued by the timer, and the task
		// never ran again until a requeue.
		p.tr.str("deadLetter.recheckAfter ").dur(after).str(" capped at ").dur(events.MaxInterval).end()
		after = events.MaxInterval
	}
	s.DeadLetter = &DeadLetterHold{DispatchID: d.DispatchID, Reason: d.Reason, At: at, RecheckAt: at.Add(after)}
	if d.ScheduledAt.IsZero() || !s.RequeuedAt.After(d.ScheduledAt) {
		s.RequeuedAt = time.Time{}
	} else {
		p.tr.str("requeued at ").at(s.RequeuedAt).str(" during the dead-lettered run of ").at(d.ScheduledAt).
			str(": the requeue outranks the hold and runs").end()
	}
	return true
}

// HeldAlready reports a permanent or max-attempts entry whose final
// run.failed st has applied (its dispatch, or its slot or a later one):
// that failure held the task already (Outcome.DeadLetterReason), and a
// requeue, a success or a later run's hold may have replaced the hold
// since. A max-deliveries entry follows no run event, so it always
// applies. Decide ignores such an entry.
func HeldAlready(d *DeadLetterSignal, st State) bool {
	if d.Reason == events.DeadLetterMaxDeliveries {
		return false
	}
	return Applied(d.DispatchID, st) || (!d.ScheduledAt.IsZero() && !st.LastScheduledAt.Before(d.ScheduledAt))
}

// hourOf is t's hour since the Unix epoch (floored, also before 1970).
func hourOf(t time.Time) int64 {
	u := t.Unix()
	h := u / 3600
	if u%3600 < 0 {
		h--
	}
	return h
}
