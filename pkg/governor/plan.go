package governor

import (
	"strconv"
	"time"

	"github.com/flyballhq/flyball/pkg/cron"
	"github.com/flyballhq/flyball/pkg/events"
)

// planner runs the decision pipeline for one Decide call. Stages run from
// the lowest precedence to the highest, each one free to replace what the
// earlier ones chose; see the package documentation.
type planner struct {
	now  time.Time
	spec *events.TaskSpec
	in   Kind
	s    State // the state being built

	// prevNext and prevSource are the input state's decision.
	prevNext   time.Time
	prevSource Source
	// planned is prevNext when that slot is in flight (slotInFlight),
	// else zero; running is the slot in flight that the input state
	// remembers (State.RunningSlot) when it still counts (runningSlot),
	// else zero. flying is the later of the two: the slot in flight the
	// rules plan after, and the one that serves the requests at or before
	// it. The keep rules (inFlight, keepQueued, servesAhead) are about
	// planned, the slot the timer holds.
	planned time.Time
	running time.Time
	flying  time.Time

	next   time.Time
	source Source
	tr     trail

	// cadence is set while next comes from the interval grid or a cron
	// occurrence (not an exact time such as a one-shot or "now").
	cadence bool
	// gridNext is the interval grid's slot and gridStep its step
	// (State.GridStep), when intervalBaseline planned one.
	gridNext time.Time
	gridStep time.Duration
	// sched and loc are the parsed cron baseline, if any.
	sched *cron.Schedule
	loc   *time.Location
	// leftPause is set when this decision ends a pause: slots that fell in
	// the pause are not caught up.
	leftPause bool
	// pauseEnded is the end of the timed pause this decision found over
	// (pause), zero otherwise.
	pauseEnded time.Time
	// input is the state Decide was given; nudge re-plans the run after
	// a timed pause from it, as afterPause did.
	input   State
	cleared bool
	// started is when the run of this decision's outcome started, at most
	// now; zero for other inputs, or when unknown.
	started time.Time
	// finished is when that run ended, between started and now; zero
	// when unknown.
	finished time.Time
	// requeueSkipped (oneShotSkipped) is set when this decision applies
	// the skip of a slot at or after the requeue (the one-shot hint's
	// time) for a reason that may skip a run planned at once again
	// (skipKeeps): the request stays pending, but this decision does not
	// plan it.
	requeueSkipped bool
	oneShotSkipped bool
	// waitedUntil is, for an outcome of a slot after the last completed
	// one, when the run applied before it ended (at most now; zero for a
	// skip or none): after the outcome's slot when that slot waited behind
	// it (waitedBehind).
	waitedUntil time.Time
	// replacesUnreadable is the update's Input.ReplacesUnreadable: the
	// slot in flight is not kept (inFlight).
	replacesUnreadable bool
}

// choose sets the candidate and starts a trail line naming its source; the
// caller finishes the line.
func (p *planner) choose(t time.Time, src Source) *trail {
	p.setNext(t, src)
	return p.tr.str(string(src)).str(": ")
}

// choosef sets the candidate with a whole trail line formatted by fmt.
func (p *planner) choosef(t time.Time, src Source, format string, args ...any) {
	p.setNext(t, src)
	p.tr.linef(string(src)+": "+format, args...)
}

func (p *planner) setNext(t time.Time, src Source) {
	p.next, p.source = time.Time{}, src
	if !t.IsZero() {
		p.next = t.UTC()
	}
}

func (p *planner) plan() {
	p.expireHints()
	if p.pause() {
		return
	}
	p.baseline()
	p.oneShot()
	p.quietSpacing()
	p.budget()
	p.breaker()
	p.deadLetter()
	p.clamp()
	p.floor()
	p.nudge()
}

// inFlight reports whether this decision must keep the input state's slot:
// the input is a breaker transition or a spec update, and the slot is
// planned by a schedule rule, due (or within InFlightWindow, so the timer
// may have dispatched it already), and its outcome is not applied yet (it
// is after the last completed slot).
//
// Such a slot is running, waiting for a retry, or about to run. Planning
// another slot now would put a second dispatch behind it, which the timer
// publishes the moment the first one ends: before the governor has applied
// that outcome, so a final failure or a dead-letter hold could not stop
// it, and the task would make one call more than its policy allows. The
// kept slot already honours the input: the executor reads the spec and the
// breaker at every call, and defers a call while the breaker is open. The
// slot after it is planned from its outcome, under the new spec and
// breaker state.
//
// The run a timed pause leads to is such a slot too, once the pause has
// ended (slotInFlight): left out, a breaker transition during its retries
// planned a slot past it (the breaker's retryAt), which waited behind it
// and ran after its final failure, despite the dead-letter hold.
//
// Other inputs re-plan as before: a pause, delete or dead-letter hold
// stops the task, and a hint, resume or requeue asks for a run (but a slot
// planned during a run that is still running waits behind it, and is kept:
// queued). So does an update that replaces a spec that did not decode
// (Input.ReplacesUnreadable): the slot's outcome may have been terminated,
// and then it never comes.
func (p *planner) inFlight() bool {
	return (p.in == KindBreaker || p.in == KindUpdated && !p.replacesUnreadable) && !p.planned.IsZero()
}

// slotInFlight is the input state's slot when it is in flight: planned by a
// schedule rule, due (or within InFlightWindow), and after the last
// completed slot, so its outcome is not applied yet. It is zero otherwise,
// for an acceptance (a new state), and for a slot the input state was
// paused at (the executor skips it). A resume that ends a pause counts
// the slot only once it is due: it runs, and the resume plans after it
// (planned again, a requeue or run-now it serves ran twice); still ahead,
// it is the run the pause led to, and the resume plans that run afresh.
// A resume of a task that was not paused is an input like any other:
// counted from the last completed slot instead, the slots that passed
// while the slot in flight ran were caught up at once (a 10 s task
// resumed 35 s into a run planned "catch-up: 4 slots missed", and with
// catchUp all backfilled them).
//
// A pause does not stop a slot already due: the executor checks the pause
// before each call, and the slot's outcome follows (a run, or a skip), so
// the pause plans after it and remembers it (rememberRunning). But a slot
// planned during a run that waits behind it has not run, and an input
// that does not keep it (a pause, a dead-letter hold) replaces it: Decide
// then drops it (see waits).
//
// The run a timed pause leads to (source paused, at or after the pause's
// end) is a slot too: the executor runs it, since the pause has ended by
// then. Still ahead, it is kept (servesAhead) by every input but a pause,
// a delete or a dead-letter hold; due, other inputs plan after it, though
// only a new pause stops it: measured from the slot before the pause, a
// run-now hint during it ran right behind it, whatever the budget,
// bounds.min or MinGap.
func (p *planner) slotInFlight() time.Time {
	if p.in == KindAccepted {
		return time.Time{}
	}
	s, prev := &p.s, p.prevNext
	if prev.IsZero() || s.Deleted || !prev.After(s.LastScheduledAt) || prev.After(p.now.Add(InFlightWindow)) {
		return time.Time{}
	}
	switch {
	case p.prevSource == "", p.prevSource == SourceDeleted, p.input.PausedAt(prev):
		return time.Time{}
	case p.prevSource == SourcePaused && !p.input.Paused:
		return time.Time{} // not the run of a pause: a state stored under other rules
	case p.in == KindResumed && p.leftPause && prev.After(p.now):
		return time.Time{}
	}
	return prev.UTC()
}

// runningSlot is the slot in flight that the input state remembers
// (State.RunningSlot: an earlier decision planned NextRunAt after it)
// when it still counts: its outcome is not applied (it is after the last
// completed slot), it is due (or within InFlightWindow, as slotInFlight
// judges the planned slot, for clocks a little apart), and the input is
// not an acceptance nor the task deleted. It is zero otherwise, and the
// decision then forgets it (rememberRunning). A pause and a resume keep
// it: the run goes on, and its outcome follows.
//
// Without it, a second input during the same run no longer knew the slot
// in flight: it measured from the last completed slot (a second 10m hint
// during a 10:05 run → 10:10), planned again the requeue the running slot
// serves (its outcome then kept that slot, keepQueued, and the requeued
// run ran twice), a second recheck right behind the running one, and the
// next backfill run before the running one's success. Forgotten by a
// pause, the resume after it did the same.
func (p *planner) runningSlot() time.Time {
	if p.in == KindAccepted {
		return time.Time{}
	}
	s, r := &p.s, p.s.RunningSlot
	if r.IsZero() || s.Deleted || !r.After(s.LastScheduledAt) || r.After(p.now.Add(InFlightWindow)) {
		return time.Time{}
	}
	return r.UTC()
}

// rememberRunning sets State.RunningSlot after the decision: the planned
// slot in flight when it is due and the decision planned past it (it did
// not keep it), else the running slot that still counts, if any. A
// planned slot still ahead and not kept is not remembered: the timer may
// not have published it, and then it never runs.
func (p *planner) rememberRunning() { p.s.RunningSlot = p.runningAfter(p.next) }

// runningAfter is the running slot a decision that plans next leaves in
// the state (rememberRunning).
func (p *planner) runningAfter(next time.Time) time.Time {
	if !p.planned.IsZero() && !p.planned.After(p.now) && !next.Equal(p.planned) {
		return p.planned
	}
	return p.running
}

// last is the slot the next run is planned after: the last completed one,
// or the slot in flight (planned, or remembered running), which runs
// before anything this decision plans.
// The grid, the first-run rule, catch-up counting, the budget's pacing,
// quiet-hours spacing, the clamps and the MinGap floor all measure from
// it. Measured from the last completed slot, an input during a run (a
// hint, a requeue) planned "first run at once" again during the first
// run, counted the slots that passed while a slow run ran as missed, and
// planned a second run right behind the one in flight, whatever the
// budget or bounds.min.
func (p *planner) last() time.Time {
	if p.flying.IsZero() { // a stored slot may lie before the zero time (year 0)
		return p.s.LastScheduledAt
	}
	return maxTime(p.s.LastScheduledAt, p.flying)
}

// keep leaves the slot in flight where it is (see inFlight). Expired hints
// are still cleared.
func (p *planner) keep() {
	p.expireHints()
	p.setNext(p.prevNext, p.prevSource)
	p.tr.str("slot ").at(p.prevNext).str(" is in flight (its outcome is not in yet): kept; the slot after it is planned from that outcome").end()
}

// waits reports whether the slot in flight was planned while an earlier
// slot ran, and so waits behind it: the input is the outcome of that
// earlier run, or the state remembers the earlier slot as running
// (runningSlot) and the planned slot comes after it. An input during that
// run (a run-now hint, a requeue, an interval hint, a spec update past a
// remembered running slot) planned it. It cannot have run yet, and may
// not be dispatched at all: DISPATCH holds one dispatch per task, so the
// timer's publish of it is refused until the running slot's dispatch
// leaves DISPATCH (its ack follows its outcome), and retried with a
// backoff of up to 4 s. Planned after, as a slot in flight is otherwise,
// it was replaced in the timer before that retry, and the run it was
// planned for (the run-now, the requeue) never ran, without a word: by
// the running slot's outcome, and by any other input during the same run
// (an interval hint, a one-shot hint for later, a resume).
func (p *planner) waits() bool {
	switch {
	case p.planned.IsZero():
		return false
	case p.in == KindOutcome:
		return true
	}
	return !p.running.IsZero() && p.planned.After(p.running)
}

// keepsWaiting reports whether the input keeps the slot that waits behind
// a running one (waits). Every input does but those that stop the task: a
// pause, a delete (it plans nothing), and a dead-letter hold, from a
// dead-letter input or one in the state whose recheck is after the slot,
// the outcome's included: a final failure holds the task for its recheck,
// and the slot planned during its run (by a breaker transition, a spec
// update or a hint: rules below the recheck) would run after it, one call
// more than the policy allows. Only the operator's requeue outranks the
// hold: a requeue sent during the failing run stays pending
// (applyDeadLetter), and a slot at or after it is kept, and runs; a slot
// before it (a run-now queued before the requeue) is dropped, and the
// requeue runs now in its place.
//
// This keeps the precedence of the clamps and the budget: the slot was
// planned under them, measured from the running slot, and the inputs that
// keep it do not change them (a spec update or a breaker transition keeps
// any slot in flight: inFlight).
func (p *planner) keepsWaiting() bool {
	switch p.in {
	case KindPaused, KindDeadLettered:
		return false
	}
	dl := p.s.DeadLetter
	if dl == nil || !dl.RecheckAt.After(p.planned) {
		return true
	}
	r := p.s.RequeuedAt
	return !r.IsZero() && servedBy(p.planned, r)
}

// queued reports whether the slot in flight waits behind a running one
// (waits) and the input keeps it (keepsWaiting).
func (p *planner) queued() bool { return p.waits() && p.keepsWaiting() }

// keepQueued leaves the queued slot (see queued) where it is, due or still
// ahead. Kept, it runs once whether or not it was published, and its
// outcome plans the slot after it. A one-shot hint whose time came while
// the slot waited (after the slot, at or before now) is served by it: the
// slot runs after it, so it is the run the hint asked for. The hint is
// dated back to the slot, so that the slot's outcome, which consumes only
// a hint at or before the slot, consumes it: left as it was, a second
// run-now hint during the run ran a second time right behind it. It is
// not consumed at once: a pause drops the queued slot, and the resume
// plans the hint again (consumed, and having replaced the first hint, the
// run-now was lost). A
// requeue is not consumed early (applyDeadLetter reads it, see deadLetter):
// one sent while the slot waits, after its time, runs after its outcome.
func (p *planner) keepQueued() {
	p.expireHints()
	run := p.running
	if run.IsZero() {
		run = p.s.LastScheduledAt
	}
	p.setNext(p.prevNext, p.prevSource)
	p.tr.str("slot ").at(p.prevNext).str(" was planned while the run of ").at(run).
		str(" ran; its dispatch waits for that run's to leave DISPATCH: kept; the slot after it is planned from its outcome").end()
	if h := p.s.OneShotHint; h != nil && h.At.After(p.planned) && !h.At.After(p.now) {
		p.tr.str("one-shot hint for ").at(h.At).str(" came while the slot ").at(p.planned).
			str(" waits, which runs after it: served by that slot, whose outcome consumes it").end()
		served := *h // the input state's hint is shared: Decide never modifies it
		served.At = p.planned
		p.s.OneShotHint = &served
	}
}

// servesAhead names the request that the slot in flight, still ahead of
// now, serves: the run a timed pause leads to, a one-shot hint or a
// requeue at or before it, a dead-letter recheck it is, or the next
// backfill run. Empty when there is none, when the slot is due already
// (dispatched and running: the rules plan after it), or when the input
// stops the task (a pause, a delete, a dead-letter hold), which re-plans.
//
// Such a slot is kept (keepServing), not planned after: the timer
// publishes a dispatch only its lead (at most MaxLead) before its slot,
// so a slot up to InFlightWindow ahead may not be published yet, and a
// decision that planned after it dropped it, and the request with it (a
// requeue or a run-now hint waited a whole interval, the run after a
// pause was lost). Kept, the slot runs once whether or not it was
// published, and its outcome settles the request.
func (p *planner) servesAhead() string {
	if !p.planned.After(p.now) {
		return ""
	}
	switch p.in {
	case KindPaused, KindDeleted, KindDeadLettered:
		return ""
	}
	p.expireHints()
	s := &p.s
	if dl := s.DeadLetter; dl != nil && dl.RecheckAt.After(p.planned) {
		return "" // a dead-letter hold stops the task until its recheck
	}
	switch {
	case s.Paused: // the slot in flight is the run a timed pause leads to (slotInFlight)
		return "the run after the pause until " + stamp(s.PausedUntil).String()
	case s.OneShotHint != nil && servedBy(p.planned, s.OneShotHint.At):
		return "the one-shot hint for " + stamp(s.OneShotHint.At).String()
	case !s.RequeuedAt.IsZero() && servedBy(p.planned, s.RequeuedAt):
		return "the requeue at " + stamp(s.RequeuedAt).String()
	case p.recheckBy(p.planned):
		return "the dead-letter recheck at " + stamp(s.DeadLetter.RecheckAt).String()
	case s.CatchUpPending > 0 && s.Failures == 0:
		return "the next backfill run"
	case p.in == KindHinted || p.in == KindRequeued:
		// Any slot still ahead: planned after it, the hint's new cadence
		// dropped it if it was not published yet (an hourly task ran at
		// 09:00 and 11:00), and nudge cannot keep it (MinGap from
		// itself). The hint or requeue applies from its outcome.
		return "the run planned before this " + string(p.in) + " input"
	}
	return ""
}

// keepServing leaves the slot in flight, still ahead, where it is: it is
// the run that what (named by servesAhead) asked for.
func (p *planner) keepServing(what string) {
	p.setNext(p.prevNext, p.prevSource)
	p.tr.str("slot ").at(p.prevNext).str(" is in flight (its dispatch is published up to ").dur(MaxLead).
		str(" before it) and is ").str(what).str(": kept; the slot after it is planned from its outcome").end()
}

func (p *planner) expireHints() {
	if h := p.s.IntervalHint; h != nil && !h.ExpiresAt.After(p.now) {
		p.tr.str("interval hint ").dur(h.Interval).str(" expired at ").at(h.ExpiresAt).str(": cleared").end()
		p.s.IntervalHint = nil
		p.cleared = true
	}
	if h := p.s.OneShotHint; h != nil && !h.ExpiresAt.After(p.now) {
		p.tr.str("one-shot hint for ").at(h.At).str(" expired at ").at(h.ExpiresAt).str(": cleared").end()
		p.s.OneShotHint = nil
		p.cleared = true
	}
}

// pause applies a pause and reports whether it decided.
func (p *planner) pause() bool {
	s := &p.s
	if !s.Paused {
		return false
	}
	if s.PausedUntil.IsZero() {
		p.choose(time.Time{}, SourcePaused).str("paused indefinitely").end()
		return true
	}
	if s.PausedUntil.After(p.now) {
		p.choose(p.afterPause(), SourcePaused).str("paused until ").at(s.PausedUntil)
		if p.next.After(s.PausedUntil) {
			p.tr.str("; the first run after it is ").at(p.next).str(", as a resume then plans")
		}
		p.tr.end()
		p.floor() // a pause end too close to the last slot must not repeat it
		return true
	}
	p.tr.str("pause ended at ").at(s.PausedUntil).end()
	p.pauseEnded = s.PausedUntil
	s.Paused, s.PausedUntil, s.PauseReason = false, time.Time{}, ""
	p.leftPause = true
	return false
}

// afterPause is the run a timed pause leads to: the one a resume at its
// end would plan, by every rule (the cron calendar, quiet hours, the
// budget, a breaker or dead-letter hold, clamps), and never before the
// end. A run at the end itself would be off the calendar of a cron task
// and over an exhausted budget. The state stays paused until that run
// (State.PausedAt tells an ended pause apart); its outcome ends the pause.
func (p *planner) afterPause() time.Time {
	until := p.s.PausedUntil
	st := p.s
	st.Trail = nil
	// After the slot in flight, which runs before the pause ends: as a
	// resume at the end, the decision remembers it (a pause never keeps
	// it, the end being after now).
	st.RunningSlot = p.runningAfter(time.Time{})
	// Planned from just before the end, so that a slot falling on the end
	// itself is the run after it (a resume plans strictly after now).
	d := Decide(until.Add(-time.Nanosecond), p.spec, st, Input{Kind: KindResumed})
	if d.NextRunAt.Before(until) { // zero: nothing to run after it
		return until
	}
	return d.NextRunAt
}

// PausedAt reports whether the task is paused at t: paused indefinitely,
// or until a time after t. A timed pause whose end has passed stays in
// the state until the run after it (afterPause) decides again.
func (s *State) PausedAt(t time.Time) bool { return PausedAt(s.Paused, s.PausedUntil, t) }

// PausedAt is State.PausedAt for a reader that decodes only the two
// fields of a stored schedule (the executor's pause check, the sweeper).
func PausedAt(paused bool, until, t time.Time) bool {
	return paused && (until.IsZero() || until.After(t))
}

// baseline picks the candidate from the spec's interval (shaped by
// adaptive cadence, activity modes, interval hints, backoff and jitter) or
// its cron expression, the first-run rule and the catch-up policy.
func (p *planner) baseline() {
	anchor := p.last()
	if anchor.IsZero() && p.spec.StartAt != nil {
		start := *p.spec.StartAt
		if start.IsZero() {
			// 0001-01-01T00:00:00Z, what Go marshals for an unset
			// time.Time, is a time in the past like any other: at once
			// (choose would take a zero time for "nothing scheduled").
			p.choose(p.now, SourceStartAt).str("startAt ").at(start).str(" is in the past: first run at once").end()
			return
		}
		p.choose(start, SourceStartAt).str("first run at startAt ").at(start).end()
		return
	}
	if p.spec.Schedule.Cron != "" {
		p.cronBaseline(anchor)
		return
	}
	p.intervalBaseline(anchor)
}

func (p *planner) intervalBaseline(anchor time.Time) {
	step, src := p.cadenceStep()
	if step <= 0 {
		// Only a hand-edited spec or state gets here; dividing by it below
		// would panic.
		p.choose(time.Time{}, src).str("interval ").dur(step).str(" is not positive: nothing scheduled").end()
		return
	}
	if anchor.IsZero() {
		p.choose(p.now, src).str("first run of a ").dur(step).str(" interval task runs at once").end()
		return
	}
	if p.backfill() {
		return
	}
	exp := min(p.s.Failures, maxBackoffExponent)
	if exp > 0 {
		src = SourceBackoff
	}
	full := p.stretch(step, exp, true)
	at := p.now // the grid's first slot after at
	if first := anchor.Add(full); !first.After(p.now) && p.heldByMin(anchor, first) {
		at = anchor
	}
	next, missed := grid(anchor, full, at)
	gap := full // the step of the grid next is on
	if h := p.s.IntervalHint; h != nil && !next.Before(h.ExpiresAt) {
		next, src, gap = p.afterHint(h, anchor, exp, next, src, full)
	}
	passed := missed // slots on the grid at or before now
	if missed >= 2 {
		onGrid := func(from, to time.Time, limit int64) int64 {
			_, a := grid(anchor, full, from)
			_, b := grid(anchor, full, to)
			return min(b-a, limit)
		}
		missed, afterRun := p.ownRun(anchor, missed, onGrid)
		missed = p.outsidePause(anchor, missed, onGrid)
		if (missed >= 2 || missed < 0) && p.catchUp(anchor, missed, afterRun) { // < 0: more than the cap
			return
		}
	}
	switch {
	case gap != full: // the task's own cadence after the hint's TTL
		if n := int64(next.Sub(anchor) / gap); n > 1 {
			p.choose(next, src).num(n).str(" × ").dur(gap).str(" after the slot of ").at(anchor).end()
		} else {
			p.choose(next, src).dur(gap).str(" after the slot of ").at(anchor).end()
		}
	case passed > 0:
		p.tr.str("slot ").at(anchor.Add(full)).str(" already passed: skipped to the next slot on the grid").end()
		p.choose(next, src).num(passed + 1).str(" × ").dur(full).str(" after the slot of ").at(anchor).end()
	default:
		p.choose(next, src).dur(full).str(" after the slot of ").at(anchor).end()
	}
	p.cadence = true
	p.gridNext, p.gridStep = p.next, gap
	p.quietCadence(anchor, exp, next)
}

// afterHint bounds an interval hint by its TTL: when the hint's slot comes
// at or after the hint expires, the task's own cadence takes over at the
// TTL, with its first grid slot at or after it, earlier or later than the
// hint's slot. A slot at the TTL itself is not the hint's: at that
// instant the hint has expired (expireHints), as a one-shot at its expiry
// has, and a decision made then planned the cadence's slot instead. Without
// this, a hint longer than its TTL (6h for 15m) held the task past it; and
// a hint shorter than the cadence planned one more run after its TTL (an
// hourly task hinted 10m for 15m at 10:00:30 ran at 10:20, on a grid
// re-anchored to 11:20, 12:20). It returns the slot, its source and the
// step of its grid (the hint's slot and full when the spec has no
// positive step).
func (p *planner) afterHint(h *IntervalHint, anchor time.Time, exp int, next time.Time, src Source, full time.Duration) (time.Time, Source, time.Duration) {
	step, own := p.specStep()
	if step <= 0 {
		return next, src, full
	}
	if exp > 0 {
		own = SourceBackoff
	}
	step = p.stretch(step, exp, false)
	after, _ := grid(anchor, step, h.ExpiresAt.Add(-time.Nanosecond))
	p.tr.str("interval hint ").dur(h.Interval).str(" expires at ").at(h.ExpiresAt)
	if next.Equal(h.ExpiresAt) {
		p.tr.str(", its slot")
	} else {
		p.tr.str(" before its slot ").at(next)
	}
	p.tr.str(": the cadence after it applies").end()
	return after, own, step
}

// grid returns the first slot anchor + k×step strictly after now, and how
// many slots (k-1) lie at or before now.
func grid(anchor time.Time, step time.Duration, now time.Time) (time.Time, int64) {
	next := anchor.Add(step)
	if next.After(now) {
		return next, 0
	}
	// Keep the cadence: the first grid slot strictly after now. The
	// multiple of step is at most now-anchor, so it cannot overflow (Sub
	// saturates for anchors ~292 years back; the floor then applies).
	k := now.Sub(anchor) / step
	return anchor.Add(k * step).Add(step), int64(k)
}

// backfill continues a catch-up backlog; it reports whether it decided.
func (p *planner) backfill() bool {
	n := p.s.CatchUpPending
	if n <= 0 {
		return false
	}
	if p.s.Failures > 0 {
		p.tr.linef("catch-up: %d backfill runs wait for a successful run", n)
		return false
	}
	if !p.flying.IsZero() {
		// The next backfill run follows the success of the one before;
		// planned now, it ran right behind the slot in flight, whatever
		// its outcome.
		p.tr.linef("catch-up: %d backfill runs wait for the slot in flight %s to succeed", n, stamp(p.flying))
		return false
	}
	p.choosef(p.catchUpAt(), SourceCatchUp, "backfilling missed slots: %d still to run, the next one now", n)
	return true
}

// catchUpAt is when a catch-up run may start: now, and at least MinGap
// after the run whose outcome this is started. The slot floor alone let
// a backfill run follow a late run (an overdue slot fired after a
// downtime) a few milliseconds after it.
func (p *planner) catchUpAt() time.Time {
	if t := p.started.Add(MinGap); !p.started.IsZero() && t.After(p.now) {
		return t
	}
	return p.now
}

// ownRun sets apart, of the missed slots since anchor, those that passed
// while the run of this outcome ran (from its start to its end): they
// were not missed, the task was busy, not down. Counted as missed, they
// made every run that outlasted two slots a catch-up, and a slow target
// was called again the moment it answered, for good. It returns the
// missed slots left and how many slots fell after the run (after its end,
// or its start if the end is unknown), counted up to 2; -1 when the start
// is unknown. between counts the schedule's slots in (from, to], stopping
// at limit.
func (p *planner) ownRun(anchor time.Time, missed int64, between func(from, to time.Time, limit int64) int64) (int64, int64) {
	missed = p.waitedBehind(anchor, missed, between)
	if p.started.IsZero() {
		return missed, -1
	}
	end := p.started
	if !p.finished.IsZero() {
		end = p.finished
		switch {
		case missed > 0:
			if during := between(p.started, p.finished, missed); during > 0 {
				p.tr.linef("%d slots passed while the run of %s ran (%s to %s): not missed",
					during, stamp(anchor), stamp(p.started), stamp(p.finished))
				missed -= during
			}
		case missed < 0:
			// More than -missed slots (cron counting stops at the cap):
			// count those outside the run instead, as far as the cap.
			// Left counted as more than the cap, a run that outlasted the
			// cap was caught up as a downtime.
			limit := -missed
			left := between(anchor, p.started, limit+1) + between(p.finished, p.now, limit+1)
			if left <= limit {
				p.tr.linef("%d or more slots passed while the run of %s ran (%s to %s): not missed",
					limit+1-left, stamp(anchor), stamp(p.started), stamp(p.finished))
				missed = left
			}
		}
	}
	return missed, between(end, p.now, 2)
}

// waited is the end of the run that the slot of this outcome (anchor)
// waited behind, after anchor (see waitedBehind), at most the outcome's
// start when known; zero when the slot did not wait.
func (p *planner) waited(anchor time.Time) time.Time {
	w := p.waitedUntil
	if !p.started.IsZero() {
		w = minTime(w, p.started)
	}
	if !w.After(anchor) {
		return time.Time{}
	}
	return w
}

// waitedBehind sets apart, of the missed slots since anchor, those that
// passed while the slot of this outcome waited behind the run before it
// (planned during it: the run after a pause, a run-now, a requeue): that
// run ended after the slot (waited), and DISPATCH holds one dispatch per
// task, so the slot started only then. The task was busy, not down.
// Counted as missed, a slot queued behind a 45-minute run of a 1m task
// with catchUp all backfilled 45 runs. It returns the missed slots left;
// more than the cap (negative) as long as they are. The slots after that
// run's end, before this one's start, were missed (flyball down, or
// behind).
func (p *planner) waitedBehind(anchor time.Time, missed int64, between func(from, to time.Time, limit int64) int64) int64 {
	w := p.waited(anchor)
	if w.IsZero() || missed == 0 {
		return missed
	}
	if missed > 0 {
		if during := between(anchor, w, missed); during > 0 {
			p.tr.linef("%d slots passed while the slot of %s waited behind the run before it (until %s): not missed",
				during, stamp(anchor), stamp(w))
			missed -= during
		}
		return missed
	}
	limit := -missed // more than the cap: count those after the wait instead
	if left := between(w, p.now, limit+1); left <= limit {
		p.tr.linef("%d or more slots passed while the slot of %s waited behind the run before it (until %s): not missed",
			limit+1-left, stamp(anchor), stamp(w))
		return left
	}
	return missed
}

// outsidePause sets apart, of the missed slots since anchor (ownRun's
// count), those that fell in the pause this decision ends (leftPause):
// they are not caught up. Those after the pause's end were missed like
// any (flyball was down, or behind), and are. It returns the missed slots
// left: the slots after the end, but for those the run of this outcome
// spanned (ownRun set them apart); more than the cap (negative) as long
// as they are. between counts the schedule's slots in (from, to],
// stopping at limit. Before, every missed slot counted as in the pause,
// and catchUp all dropped the backlog of an outage that began after a
// timed pause had ended, when the run after the pause, overdue, ran once
// flyball was back.
func (p *planner) outsidePause(anchor time.Time, missed int64, between func(from, to time.Time, limit int64) int64) int64 {
	if !p.leftPause || missed == 0 {
		return missed
	}
	end := p.pauseEnd()
	if !end.After(anchor) {
		return missed // the pause ended before the last slot: none fell in it
	}
	limit := missed
	if missed < 0 {
		limit = -missed
	}
	after := between(end, p.now, limit+1)
	if from := maxTime(end, p.started); !p.started.IsZero() && p.finished.After(from) {
		after -= min(between(from, p.finished, limit+1), after)
	}
	if w := p.waited(anchor); w.After(end) { // waitedBehind set them apart
		after -= min(between(end, w, limit+1), after)
	}
	if after > limit { // only for more than the cap: ownRun's count is at least this
		p.tr.str("slots up to the pause's end at ").at(end).str(" fell in the pause: not caught up").end()
		return missed // still more than the cap
	}
	switch after {
	case missed:
		return missed // none fell in it
	case 0:
		p.tr.linef("%s slots fell in the pause: not caught up", countText(missed))
	default:
		p.tr.str("slots up to the pause's end at ").at(end).str(" fell in the pause: not caught up; ").num(after).str(" missed after it").end()
	}
	return after
}

// pauseEnd is when the pause this decision ends (leftPause) ended: the
// end of a timed pause found over, or now for a resume (the end of a
// timed pause already past that no decision applied yet, if any).
func (p *planner) pauseEnd() time.Time {
	if !p.pauseEnded.IsZero() {
		return p.pauseEnded
	}
	if u := p.input.PausedUntil; !u.IsZero() && u.Before(p.now) {
		return u
	}
	return p.now
}

// cronBetween counts the occurrences in (from, to], stopping at limit.
func (p *planner) cronBetween(from, to time.Time, limit int64) int64 {
	n := int64(0)
	for t := from; n < limit; n++ {
		if t = p.sched.Next(t, p.loc); t.IsZero() || t.After(to) {
			break
		}
	}
	return n
}

// catchUp applies the catch-up policy after downtime: missed (≥ 2) slots
// passed since the anchor. Slots count as missed only if the task was due:
// not when they fell in a pause (outsidePause sets those apart), nor when
// the run planned before this decision is still ahead. afterRun counts, up to 2, the slots that fell
// after the run of this outcome (ownRun; -1: not an outcome, or its start
// is unknown): under "skip", fewer than 2 means the run started late,
// after the others, and it was the run the policy asks for. It reports
// whether it decided.
func (p *planner) catchUp(anchor time.Time, missed, afterRun int64) bool {
	policy := p.spec.CatchUp
	switch {
	case p.prevNext.After(p.now):
		// The run planned before this decision is still ahead: nothing was
		// due, so these slots exist only on a cadence this input just
		// shortened (a spec update, an interval hint).
		p.tr.linef("%s slots since %s were never due (the run planned was at %s): not caught up",
			countText(missed), stamp(anchor), stamp(p.prevNext))
		return false
	case !p.flying.IsZero():
		// The slot in flight is running (busy, not down) or, after a
		// downtime, is the overdue slot the timer fires at once; its
		// outcome tells which (ownRun).
		p.tr.linef("%s slots passed since the slot in flight %s: not caught up before its outcome is in",
			countText(missed), stamp(anchor))
		return false
	case p.s.Failures > 0:
		p.tr.linef("%s slots missed since %s while failing: not caught up", countText(missed), stamp(anchor))
		return false
	case afterRun >= 0 && afterRun < 2 && policy != events.CatchUpAll && policy != events.CatchUpNone:
		before := missed
		if missed >= 0 {
			before = missed - afterRun
		}
		p.tr.linef("%s slots passed before the run of %s started at %s: it was the run catch-up skip asks for",
			countText(before), stamp(anchor), stamp(p.started))
		return false
	case policy == events.CatchUpNone:
		p.tr.linef("catch-up none: %s slots missed since %s are dropped", countText(missed), stamp(anchor))
		return false
	case policy == events.CatchUpAll:
		limit := p.spec.CatchUpMax
		if limit <= 0 {
			limit = events.DefaultCatchUpMax
		}
		n := limit
		if missed >= 0 && missed < int64(limit) {
			n = int(missed)
		}
		p.s.CatchUpPending = n
		p.choosef(p.catchUpAt(), SourceCatchUp, "%s slots missed since %s (catchUp all, at most %d): backfilling %d, one now",
			countText(missed), stamp(anchor), limit, n)
	default:
		p.choosef(p.catchUpAt(), SourceCatchUp, "%s slots missed since %s (catchUp skip): run once now, then resume the cadence",
			countText(missed), stamp(anchor))
	}
	return true
}

// countText writes a count of missed slots; a negative n means "more than
// -n" (cron counting stops at a cap).
func countText(n int64) string {
	if n < 0 {
		return "more than " + strconv.FormatInt(-n, 10)
	}
	return strconv.FormatInt(n, 10)
}

func (p *planner) cronBaseline(anchor time.Time) {
	sched, loc, err := cronSchedule(p.spec.Schedule.Cron, p.spec.Schedule.Timezone)
	if err != nil {
		// Validation refuses such specs; a stored one means a bug or a
		// hand-edited KV entry. Keep the task visible rather than spinning.
		p.choosef(time.Time{}, SourceBaselineCron, "cannot evaluate cron %q: %v", p.spec.Schedule.Cron, err)
		return
	}
	p.sched, p.loc = sched, loc
	if p.spec.Adaptive != nil || p.spec.Activity != nil {
		p.tr.str("adaptive cadence and activity modes apply to interval schedules only").end()
	}
	if h := p.s.IntervalHint; h != nil {
		p.tr.str("interval hint ").dur(h.Interval).str(" has no effect on a cron schedule").end()
	}
	if !anchor.IsZero() && p.backfill() {
		return
	}
	var next time.Time
	switch {
	case anchor.IsZero() || !anchor.Before(p.now):
		next = sched.Next(maxTime(anchor, p.now), loc)
		if anchor.IsZero() {
			// The first occurrence after the task was created is its first
			// slot until its jittered time has passed.
			if first := p.pendingOccurrence(p.s.CreatedAt); !first.IsZero() {
				next = first
			}
		}
	default:
		first := sched.Next(anchor, loc)
		if first.IsZero() {
			// An anchor outside cron's range (a hand-edited state): start
			// afresh from now.
			next = sched.Next(p.now, loc)
			break
		}
		if first.After(p.now) || p.pendingOccurrence(anchor).Equal(first) || p.heldByMin(anchor, first) {
			next = first
			break
		}
		second := sched.Next(first, loc)
		if second.IsZero() || second.After(p.now) {
			p.tr.str("occurrence ").at(first).str(" already passed: next occurrence").end()
			next = second
			break
		}
		missed, afterRun := p.ownRun(anchor, p.countMissed(second), p.cronBetween)
		missed = p.outsidePause(anchor, missed, p.cronBetween)
		if (missed >= 2 || missed < 0) && p.catchUp(anchor, missed, afterRun) { // < 0: more than the cap
			return
		}
		next = sched.Next(p.now, loc)
		// Not caught up, the missed occurrences are dropped, but the last
		// one has not passed while its jittered slot is ahead.
		if p.spec.Jitter > 0 {
			if last := p.pendingOccurrence(p.beforeLast(second)); !last.IsZero() {
				next = last
			}
		}
	}
	if next.IsZero() {
		p.choose(time.Time{}, SourceBaselineCron).str("cron ").quote(p.spec.Schedule.Cron).str(" never fires: nothing scheduled").end()
		return
	}
	if delay, ok := p.cronDelay(next); ok {
		p.tr.linef("jitter: occurrence %s delayed by %s (%.1f%% of the gap to the next one, run %d)",
			stamp(next), delay, 100*p.spec.Jitter*jitterUnit(p.s.TaskID, p.s.Runs), p.s.Runs)
		next = next.Add(delay)
	}
	p.choose(next, SourceBaselineCron).str("next occurrence of ").quote(p.spec.Schedule.Cron).str(" in ").str(loc.String()).end()
	p.cadence = true
	p.quietCron(anchor)
}

// cronDelay is how long jitter delays the cron occurrence o: up to
// jitter of the gap to the occurrence after it, drawn from the task ID and
// its run count. ok is false without jitter.
func (p *planner) cronDelay(o time.Time) (time.Duration, bool) {
	j := p.spec.Jitter
	if j <= 0 {
		return 0, false
	}
	after := p.sched.Next(o, p.loc)
	if after.IsZero() {
		return 0, false
	}
	u := jitterUnit(p.s.TaskID, p.s.Runs)
	return scale(after.Sub(o), j*u).Truncate(time.Millisecond), true
}

// pendingOccurrence is the first cron occurrence after ref when it has
// passed but its jittered slot has not: that slot is still the task's
// next run, and judged by the bare occurrence a decision in between (a
// spec update, a breaker transition) dropped it for the occurrence after.
// It is zero otherwise (ref zero or not before now, the occurrence ahead,
// or its slot passed).
func (p *planner) pendingOccurrence(ref time.Time) time.Time {
	if ref.IsZero() || !ref.Before(p.now) {
		return time.Time{}
	}
	o := p.sched.Next(ref, p.loc)
	if o.IsZero() || o.After(p.now) {
		return time.Time{}
	}
	delay, ok := p.cronDelay(o)
	if !ok || !o.Add(delay).After(p.now) {
		return time.Time{}
	}
	p.tr.str("occurrence ").at(o).str(" passed, but its jittered slot ").at(o.Add(delay)).str(" has not: still the next run").end()
	return o
}

// heldByMin reports whether slot, the cadence's first slot after anchor
// (the grid's, or the cron expression's next occurrence), has passed but
// was never due: bounds.min raises it to anchor + bounds.min, still ahead,
// and clamp raises it there again. Judged by the bare slot, a decision in
// between (a breaker transition, a spec update) dropped the raised run
// for the cadence's next slot (a daily cron with bounds.min 36h, last run
// at midnight, ran at the second midnight instead of noon the next day),
// and an outcome applied late, after a downtime, counted the slots
// bounds.min forbade as missed (with catchUp all it backfilled them).
func (p *planner) heldByMin(anchor, slot time.Time) bool {
	b := p.spec.Bounds
	if b == nil || b.Min <= 0 {
		return false
	}
	until := anchor.Add(boundsMin(b))
	if !until.After(p.now) || !slot.Before(until) {
		return false
	}
	if p.sched != nil {
		if p.calendarMin(p.calendar(anchor, slot), boundsMin(b)) {
			return false // a cron occurrence bounds.min admits (calendarBound): it passed
		}
	}
	p.tr.str("slot ").at(slot).str(" passed, but bounds.min ").dur(boundsMin(b)).str(" holds it until ").at(until).str(": still the next run").end()
	return true
}

// beforeLast is a time whose next occurrence is the last one at or before
// now, given from, an occurrence at or before now. Occurrences fall on
// whole seconds, so it bisects over them: a downtime of years costs a
// few dozen steps, not one per occurrence (three years of an hourly cron
// in TestDecideCronJitterSlotSurvivesMissedOccurrences).
func (p *planner) beforeLast(from time.Time) time.Time {
	lo, hi := from.Unix()-1, p.now.Unix() // next(lo) ≤ now < next(hi)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if o := p.sched.Next(time.Unix(mid, 0), p.loc); !o.IsZero() && !o.After(p.now) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return time.Unix(lo, 0).UTC()
}

// countMissed counts the cron occurrences in (anchor, now], given the
// second one (at or before now). It stops counting past the catch-up cap
// (100 for policies other than "all") and then returns -cap.
func (p *planner) countMissed(second time.Time) int64 {
	limit := int64(events.DefaultCatchUpMax)
	if p.spec.CatchUp == events.CatchUpAll && p.spec.CatchUpMax > 0 {
		limit = int64(p.spec.CatchUpMax)
	}
	n := int64(2)
	for t := second; ; n++ {
		t = p.sched.Next(t, p.loc)
		if t.IsZero() || t.After(p.now) {
			return n
		}
		if n >= limit {
			return -limit
		}
	}
}

// oneShot lets a one-shot hint compete: the earliest candidate wins. With
// an interval hint too, this takes the earlier of the two hints. A one-shot
// whose time comes at or after its expiry is not planned: it expires
// unused. Nor is one that the slot in flight serves (it is at or after
// the hint's time): still ahead, servesAhead keeps that slot; due, the
// hint stays until that slot's outcome, which consumes it (applyOutcome)
// unless it is a skip, as a requeue does; planned again, it ran a second
// time right behind it. Consumed at once, a run-now whose slot was then
// skipped (a pause, a resume before the skip was applied) was lost. A
// hint whose slot this decision's outcome skipped (oneShotSkipped) stays,
// and is not planned again at once.
func (p *planner) oneShot() {
	h := p.s.OneShotHint
	if h == nil {
		return
	}
	if p.served(h.At) {
		// The slot is running (servesAhead keeps one still ahead): its
		// outcome consumes the hint (applyOutcome), or keeps it when it is
		// a skip.
		p.tr.str("one-shot hint for ").at(h.At).str(" is served by the slot in flight ").at(p.flying).str(": not planned again; its outcome consumes it").end()
		return
	}
	if p.oneShotSkipped {
		return
	}
	at := h.At
	if at.Before(p.now) {
		at = p.now
	}
	if !at.Before(h.ExpiresAt) {
		// At its time the hint has expired: it would run as a hint that no
		// longer holds (the TTL counts from receipt, so a far-off one-shot
		// needs a TTL that outlasts it).
		p.tr.str("one-shot hint for ").at(h.At).str(" comes at or after it expires at ").at(h.ExpiresAt).str(": not planned").end()
		return
	}
	if p.next.IsZero() || at.Before(p.next) {
		p.choose(at, SourceHintOneShot).str("one-shot hint for ").at(h.At).str(" is earlier").end()
		p.cadence = false
	}
}

// breaker holds runs back until an open breaker's retryAt. It never brings
// a run forward: a later candidate stays, and is the probe.
func (p *planner) breaker() {
	s := &p.s
	until := s.BreakerOpenUntil
	if until.IsZero() {
		return
	}
	if !until.After(p.now) {
		p.tr.str("breaker retry time ").at(until).str(" passed: the next run is the probe").end()
		s.BreakerOpenUntil, s.BreakerKey = time.Time{}, ""
		return
	}
	switch {
	case p.next.IsZero():
	case p.next.Before(until):
		p.choose(until, SourceBreakerOpen).str("breaker open: the next run waits for retryAt ").at(until).end()
		p.cadence = false
	default:
		p.tr.str("breaker open until ").at(until).str(": the next run is already later").end()
	}
}

// deadLetter schedules a requeued task now, or a dead-lettered one at its
// recheck time, or later when the budget says so (a requeue, the
// operator's, ranks above the budget; a recheck does not). A slot in
// flight at or after the requeue, or at or after the recheck time, is
// that run: still ahead, servesAhead keeps it; due, the next one is
// planned after it by the other rules (the requeue stays until that run's
// outcome, and the inputs after this one during the run find it served by
// the running slot the state then remembers, State.RunningSlot; a recheck
// counts as run once a slot at or after it is the last one). Planned
// again, the run was made a second time right behind it. A requeue
// whose slot this decision's outcome skipped (requeueSkipped) is left to
// the other rules: it stays pending, and is not planned again at once.
func (p *planner) deadLetter() {
	s := &p.s
	if !s.RequeuedAt.IsZero() && p.served(s.RequeuedAt) {
		// Running (servesAhead keeps one still ahead). Kept until the
		// outcome, not consumed now as a one-shot is: applyDeadLetter
		// reads it to refuse a dead letter dated before the requeue.
		p.tr.str("requeued at ").at(s.RequeuedAt).str(": served by the slot in flight ").at(p.flying).end()
		return
	}
	if !s.RequeuedAt.IsZero() && !p.requeueSkipped {
		p.choose(p.now, SourceRequeue).str("requeued at ").at(s.RequeuedAt).str(": runs now").end()
		p.cadence = false
		return
	}
	dl := s.DeadLetter
	if dl == nil {
		return
	}
	if dl.RecheckAt.After(p.last()) {
		p.choosef(dl.RecheckAt, SourceDeadLetterRecheck, "run %s dead-lettered (%s) at %s: recheck at %s",
			orDash(dl.DispatchID), orDash(dl.Reason), stamp(dl.At), stamp(dl.RecheckAt))
		p.cadence = false
		// The recheck is an automatic run: it keeps the budget's pacing
		// and exhaustion rule, and waits for the budget when that is
		// later. It replaced whatever the budget chose, and a task whose
		// every run is dead-lettered ran every recheckAfter (46 times a
		// day for a budget of 2), on a target that was already failing.
		p.budget()
		return
	}
	if p.recheckInFlight() {
		p.tr.linef("dead-lettered at %s (%s); its recheck is the slot in flight %s: the task stays marked until a run succeeds",
			stamp(dl.At), orDash(dl.Reason), stamp(p.flying))
		return
	}
	p.tr.linef("dead-lettered at %s (%s); its recheck ran: the task stays marked until a run succeeds", stamp(dl.At), orDash(dl.Reason))
}

// served reports whether the slot in flight, if any, is at or after t: it
// is the run a request for a run at t (a one-shot hint, a requeue) asked
// for, as its outcome will tell.
func (p *planner) served(t time.Time) bool { return servedBy(p.flying, t) }

// servedBy reports whether slot, if not zero, is at or after t.
func servedBy(slot, t time.Time) bool { return !slot.IsZero() && !slot.Before(t) }

// recheckInFlight reports whether the slot in flight is the dead-letter
// recheck: at or after its time (served), which no completed slot has
// reached yet.
func (p *planner) recheckInFlight() bool { return p.recheckBy(p.flying) }

// recheckBy reports whether slot is the dead-letter recheck: at or after
// its time, which no completed slot has reached yet.
func (p *planner) recheckBy(slot time.Time) bool {
	dl := p.s.DeadLetter
	return dl != nil && servedBy(slot, dl.RecheckAt) && dl.RecheckAt.After(p.s.LastScheduledAt)
}

// clamp applies bounds.min and bounds.max to the gap after the last run.
// A candidate on the cron calendar is judged by its occurrence
// (calendarBound).
func (p *planner) clamp() {
	b := p.spec.Bounds
	ref := p.last()
	if b == nil || ref.IsZero() || p.next.IsZero() {
		return
	}
	gap := p.next.Sub(ref)
	if lo := boundsMin(b); b.Min != 0 && gap < lo && !p.calendarBound(ref, lo, false) {
		p.choose(ref.Add(lo), SourceClampedMin).str("gap ").dur(gap).str(" raised to bounds.min ").dur(lo).end()
	} else if hi := boundsMax(b); b.Max != 0 && gap > hi && !p.calendarBound(ref, hi, true) {
		p.choose(ref.Add(hi), SourceClampedMax).str("gap ").dur(gap).str(" lowered to bounds.max ").dur(hi).end()
	}
}

// boundsAdmit reports whether the bounds allow the run t planned by an
// earlier decision, placed by the rule src, after last: as clamp judges
// the candidate, by its occurrence when it is on the cron calendar.
func (p *planner) boundsAdmit(t, last time.Time, src Source) bool {
	b := p.spec.Bounds
	if b == nil {
		return true
	}
	gap := t.Sub(last)
	if lo := boundsMin(b); b.Min > 0 && gap < lo {
		return p.onCalendarAt(t, src) && p.calendarMin(p.calendar(last, t), lo)
	}
	if hi := boundsMax(b); b.Max > 0 && gap > hi {
		return p.onCalendarAt(t, src) && p.calendarMax(p.calendar(last, t), hi)
	}
	return true
}

// floor guarantees a decision is never in the past and comes at least
// MinGap after the last slot (so it never repeats it).
func (p *planner) floor() {
	if p.next.IsZero() {
		return
	}
	if p.next.Before(p.now) {
		p.tr.str("candidate ").at(p.next).str(" is in the past: floored to now").end()
		p.next = p.now.UTC()
	}
	if last := p.last(); !last.IsZero() && p.next.Before(last.Add(MinGap)) {
		p.next = last.Add(MinGap).UTC()
		p.tr.str("candidate is less than ").dur(MinGap).str(" after the last slot: moved to ").at(p.next).end()
	}
}

// nudge keeps a run already planned when a hint would only delay it: a
// hint moves the next run earlier at once, and later only from the next
// run on.
func (p *planner) nudge() {
	if p.in != KindHinted || p.next.IsZero() {
		return
	}
	prev := p.prevNext
	if prev.IsZero() || !prev.Before(p.next) {
		if p.next.Before(prev) {
			p.tr.str("nudged: earlier than the run planned at ").at(prev).end()
		}
		return
	}
	src := p.prevSource
	if src == SourcePaused {
		src = p.resumedSource()
	}
	if !p.admissible(prev, src) {
		return
	}
	p.tr.str("nudge: the hint does not delay the run planned at ").at(prev)
	if src != p.prevSource {
		p.tr.str(" after the pause until ").at(p.pauseEnded).str(" (").str(string(src)).str(", as a resume at its end planned it)")
	}
	p.tr.str("; it applies from the next run").end()
	p.next, p.source = prev.UTC(), src
}

// resumedSource is the source of the run planned after a timed pause
// that this decision found over (pause), as a resume at its end plans it:
// the run is no longer held by the pause, and kept by nudging, it carries
// the label of the rule that placed it, as it would after a resume. Kept
// as "paused", a later input took it for the run of a pause still in
// force. It is SourcePaused (never admissible) while the pause lasts, when
// the run planned is not the one a resume at the end plans (a state
// stored under other rules), or when that resume plans nothing.
func (p *planner) resumedSource() Source {
	until := p.pauseEnded
	if until.IsZero() || !p.input.Paused || !p.input.PausedUntil.Equal(until) || p.prevNext.Before(until) {
		return SourcePaused
	}
	st := p.input
	st.Trail = nil
	// As afterPause planned it, from the state the run was planned in.
	d := Decide(until.Add(-time.Nanosecond), p.spec, st, Input{Kind: KindResumed})
	if !d.NextRunAt.Equal(p.prevNext) || d.Source == SourcePaused {
		return SourcePaused
	}
	return d.Source
}

// admissible reports whether a run planned by an earlier decision, placed
// by the rule src, still satisfies the rules that outrank a hint: planned
// by a schedule rule, not
// in the past, at least MinGap after the last run, within the clamps, the
// budget's pacing and its exhaustion rule, quiet hours' interval (unless
// a rule above quiet hours placed it), not held by the breaker, and no
// dead-letter or requeue to serve instead. Without the budget's
// exhaustion rule and quiet hours, a hint kept a planned run that a state
// stored under other rules held (a run before the hour that frees one of
// a used-up budget; a run 1h after the last in quiet hours that allow
// one every 2h): nudging is a hint's rule, and ranks below both.
func (p *planner) admissible(t time.Time, src Source) bool {
	s := &p.s
	last := p.last()
	switch {
	case src == "", src == SourcePaused, src == SourceDeleted:
		return false // nothing planned by a rule still in force
	case t.Before(p.now), s.DeadLetter != nil, !s.RequeuedAt.IsZero(), t.Before(s.BreakerOpenUntil):
		return false
	case last.IsZero():
		return true
	case t.Before(last.Add(MinGap)):
		return false
	}
	if !p.boundsAdmit(t, last, src) || !p.budgetAdmits(t, src) {
		return false
	}
	return p.quietAdmits(t, last, src)
}

// quietAdmits reports whether quiet hours allow the run t planned by an
// earlier decision, placed by the rule src: outside the window, at least the quiet interval after
// the last run (as the planner spaces it: jitter may shorten it on an
// interval task), or placed by a rule that outranks quiet hours.
func (p *planner) quietAdmits(t, last time.Time, src Source) bool {
	switch src {
	case SourceClampedMin, SourceClampedMax, SourceRequeue, SourceDeadLetterRecheck, SourceBreakerOpen:
		return true
	}
	if p.spec.QuietHours == nil {
		return true
	}
	w, ok := p.quiet()
	if !ok {
		return true
	}
	least := w.interval
	if p.spec.Schedule.Cron == "" {
		least = min(least, p.stretch(w.interval, min(p.s.Failures, maxBackoffExponent), false))
	}
	in, _ := w.contains(t)
	return !in || !t.Before(last.Add(least))
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
