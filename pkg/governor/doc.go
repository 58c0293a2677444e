// Package governor decides when a task runs next, and why.
//
// [Decide] is a pure function: given the current time, the task spec, the
// task's stored [State] and one [Input] (the event being applied), it returns
// a [Decision] holding the next run time, the rule that chose it (the
// [Source]) and a short trail of the rules that were considered. It reads no
// clock, does no I/O and uses no randomness it was not given, so replaying
// the same events through it always gives the same schedule: this is what
// `flyball explain` relies on. Floating-point steps (multipliers, smoothing,
// jitter) round explicitly, so every platform computes the same instants.
//
// # Precedence
//
// Decide runs a pipeline of rules from the lowest precedence to the
// highest; each rule may replace the candidate the earlier ones chose, and
// the decision's source names the last rule that moved it:
//
//		pause > clamps > requeue > budget > dead-letter recheck > breaker > quiet hours > hints > adaptive / activity > baseline
//
//	 1. Baseline (baseline-interval, baseline-cron, failure-backoff, start-at,
//	    catch-up). The spec's interval or cron expression. An interval task
//	    runs once as soon as it is accepted and then every interval on the
//	    grid anchored at its last run's slot; a cron task waits for its next
//	    occurrence; an explicit startAt overrides both for the first run.
//	 2. Adaptive cadence and activity modes (adaptive-tighten, adaptive-relax,
//	    activity-idle, activity-dormant) replace or stretch the interval of
//	    an interval task.
//	 3. Hints (hint-interval, hint-oneshot). An interval hint replaces the
//	    interval; a one-shot hint competes and the earliest candidate wins,
//	    so with both hints the earlier of the two is taken.
//	 4. Quiet hours (quiet-hours) only ever delay a run, except that they
//	    may set a shorter interval for an interval task if configured so.
//	 5. An open breaker (breaker-open) holds the run back until its retryAt.
//	 6. A dead-lettered task runs next at its recheck time
//	    (deadletter-recheck), even while the breaker is open (the executor
//	    then holds the call until retryAt).
//	 7. The budget (budget) only ever delays a run: the one the cadence,
//	    hints and quiet hours chose, and a dead-letter recheck too (a
//	    recheck still waits for the budget when that is later).
//	 8. A requeued task runs now (requeue), whatever the budget.
//	 9. Clamps (clamped-min, clamped-max) keep the gap after the last run
//	    within bounds.min and bounds.max, whatever chose the time.
//	10. Pause (paused) wins over everything. A timed pause plans the run a
//	    resume at its end would plan, by every rule above; that run's
//	    outcome ends the pause.
//
// Two guarantees hold after every rule, pause included: a run is never
// scheduled before now, and never less than [MinGap] (1s) after the last
// run's slot (or the slot in flight, below), so it never repeats a slot and
// never loops tightly, even when every run fails at once.
//
// # A slot in flight
//
// The rules above plan the slot after the last completed one. While the
// planned slot itself is running or retrying (it is due, or within
// [InFlightWindow] of now, and its outcome has not been applied), a breaker
// transition or a spec update does not run them: the decision keeps that
// slot, its source and time, and says so in the trail (the run a timed
// pause leads to, at or after the pause's end, is such a slot too: the
// executor runs it, the pause having ended). A new slot planned
// then would be dispatched the moment the running one ends, before its
// outcome (a final failure, a dead-letter) could cancel it: one call more
// than the task's policy allows. The kept slot honours the input anyway,
// since the executor reads the spec and the breaker at every call and
// defers calls while the breaker is open; the slot after it is planned
// from its outcome. This is the one case where a decision's NextRunAt may
// be before now; the timer does not dispatch a slot twice. Every other
// input re-plans: a pause, a delete or a dead-letter stops the task, and
// a hint, a resume or a requeue asks for a run.
//
// Such a re-plan (but for an acceptance, and a resume that ends a pause
// while the slot is still ahead; a resume of a task that is not paused is
// an input like any other) plans the slot after the one in flight, which
// runs first whatever is decided: the
// grid, the first-run rule, catch-up counting, the budget's pacing,
// quiet-hours spacing, the clamps and the MinGap floor measure from the
// slot in flight when it is later than the last completed one. Slots that
// pass while a slot is in flight are not caught up before its outcome is
// in. The slot in flight is also the run a request at or before it asked
// for (a one-shot hint, a requeue, a dead-letter recheck, the next backfill
// run, the run a timed pause leads to, in flight from InFlightWindow before
// the pause ends). While it is still ahead of now (the timer may not have
// published it yet), every input but a pause, a delete or a dead-letter
// hold keeps it. Once it is due, a re-plan plans after it and not the
// request again (a one-shot hint or a requeue stays until the run's
// outcome, which consumes it unless it is a skip: [Outcome.Skip]). From then on NextRunAt no longer names the running
// slot: the state remembers it ([State.RunningSlot]) until the outcome of
// that slot or a later one, and every later input during the run treats
// it as the slot in flight too (an acceptance and a delete forget it).
// Without it, a second input during the run measured from the last
// completed slot and planned again the requeue, recheck or backfill run
// the running slot serves. A pause does not stop a slot already due (the
// executor checks the pause before a call, and the run's outcome
// follows): the pause remembers it, and the resume that ends the pause
// plans after it, as any input during the run does.
//
// A slot planned during a run (by a hint or a requeue) is kept, due or
// ahead, by the outcome of that run and by every other input during it
// (another hint, a resume, a requeue) but one that stops the task (a
// pause, a delete, a dead-letter hold, the final failure's included, but
// for the slot of a requeue sent during the run, which outranks the
// recheck): it has not run, and its dispatch
// waits behind the run's own in DISPATCH, which holds one per task.
// Planned after, it was replaced in the timer before the timer's retry
// published it, and the run asked for never ran. It serves a one-shot
// hint whose time comes while it waits (it runs after it): the hint is
// consumed then.
//
// # Baseline, backoff and past slots
//
// After a failed run an interval cadence backs off: the next slot is
// interval × 2^min(failures, 5) after the failed slot, and a success resets
// the count. Backoff applies to the interval in force (an interval hint,
// the adaptive or the quiet-hours interval too). Cron tasks do not back
// off: a cron expression is a calendar, and its next occurrence is its next
// occurrence. A failed cron task is protected by its breaker and
// dead-letter rules instead.
//
// Cron expressions are evaluated in their time zone with the DST rule of
// package cron: a wall time that does not exist (spring forward) runs once
// at the end of the gap, and a wall time that repeats (fall back) runs
// once, at its first instance.
//
// A slot that already passed is moved forward: an interval keeps its
// cadence (the first grid slot after now), a cron expression takes its next
// occurrence after now, and a one-shot hint is floored to now.
//
// # Catch-up after downtime
//
// When two or more slots passed since the last run (one is mere lateness:
// a run that outlasted its interval), flyball was down or behind, and the
// spec's catchUp policy applies: "skip" (the default) runs once now and
// then resumes the cadence: the next slot on the grid of that run's slot
// (a run that started late, after the missed slots, is that run: the
// overdue slot the timer fires after a restart is not followed by a
// second one, though the next slot on its grid may follow it soon, within
// the budget's pacing from its start); "none" waits for the next slot;
// "all" backfills the missed slots one by one, at most catchUpMax (100),
// each run scheduled as soon as the previous one succeeded, and at least
// MinGap after it started. Slots that fell
// in a pause are not caught up (those missed after a timed pause ended
// are), nor slots that were never due (the run
// planned before the decision is still ahead, and a spec update or an
// interval hint shortened the cadence), nor slots that passed while the
// task's own run was running (a run that outlasted two slots is followed
// by the next slot, as lateness), and a
// failing task keeps its backoff grid (a backlog waits for the next
// success).
//
// # Adaptive cadence and activity
//
// Adaptive cadence (interval tasks only) keeps a smoothed interval in the
// state, moved by an exponential moving average (adaptive.smoothing, 0.5 by
// default) once per run outcome, within [bounds.min or baseline/4 (at least
// 1s), bounds.max or baseline×4]; a spec update restarts it from the new
// baseline. Mode "change" tightens toward the lower end when the response
// fingerprint changes or a run fails, and relaxes toward the upper end once
// adaptive.unchangedRuns runs in a row returned the same fingerprint as
// the run before each (unchangedRuns+1 identical fingerprints). Mode
// "staleness" tightens as the time since the last success grows from one
// baseline interval to adaptive.target (three intervals by default).
// Failure backoff still multiplies the adaptive interval: a failing target
// is watched closely once it answers again, not hammered while it fails.
//
// Activity modes stretch the interval by activity.idleMultiplier once no
// activity signal (acceptance, a hint, or a changed fingerprint) was seen
// for activity.idleAfter, and by activity.dormantMultiplier after
// activity.dormantAfter.
//
// # Quiet hours and budget
//
// Quiet hours are a daily window of local time in their own zone (it may
// wrap midnight; start == end is an empty window). Its edges follow the
// cron DST rule, so the window opens and closes once a day (a window
// wrapping midnight whose edges both fall in a spring-forward gap closes
// and opens again at the same instant, and stays quiet). Inside it the
// interval of an interval task becomes quietHours.interval (backoff and
// jitter still apply), never starting before the window opens nor holding
// a run past its end; a cron task only has its occurrences thinned, and
// exact-time candidates (one-shots, catch-up runs), and a run the budget
// moves into the window, are kept at least the quiet interval after the
// last run.
//
// The budget keeps runs at least 24h/maxRunsPerDay (the spacing) apart,
// measured from the last slot, or from the last run's start when it
// started more than half the spacing after its slot (a late run, an
// overdue slot fired after a restart; a retry or executor lag of a few
// seconds is not late, so a cadence at the spacing keeps its grid):
// consecutive calls start at least half the spacing apart. When the runs
// counted (in the hour they started) in the current UTC hour and the 23
// before it reach the budget, the next run waits for the hour at which
// the window frees one. The
// counts live in a fixed 24-slot ring in the state. Only a requeue (the
// operator's) and bounds.max place a run the budget does not allow: a
// dead-letter recheck waits for the budget when that is later. A cron
// occurrence is judged, by the budget and the bounds alike, by its
// occurrence before jitter on the wall clock of its zone (calendar.go):
// a budget or bound at the cron's own rate never moves one.
//
// # Breaker, dead-letter and requeue
//
// While the task's breaker is open, no run is scheduled before its retryAt;
// a later candidate stays, and becomes the probe. A dead-letter entry
// schedules a recheck at its time + deadLetter.recheckAfter (30m by
// default, or later when the budget says so), kept until a run succeeds
// or the task is requeued; a requeue
// clears the dead-letter and the failure count and runs the task now. It
// stays pending until a run: a skip is none, but for a slot that ran
// already ([Outcome.Skip]). After a skip in a pause it runs at the
// resume; after another skip it is not planned again by that decision
// (the next dispatch could be skipped again at once), but by the next
// run or the next input that plans.
// Clamps rank above both: a bounds.max shorter than the breaker's delay
// dispatches the run earlier, and the executor then defers it to retryAt
// itself; "within the clamps" therefore holds for every decision but a
// pause and the two floors above.
//
// # Jitter
//
// A spec's jitter fraction f spreads an interval cadence by a factor in
// [1-f, 1+f), and delays a cron occurrence by up to f of the gap to the
// occurrence after it. The draw is a hash of the task ID and the run count,
// so it is random across tasks and runs but the same on every replay.
// Exact times (startAt, one-shots, now, retryAt, rechecks) are not
// jittered. Jitter is applied before the budget and the clamps, which
// therefore still hold.
//
// # Hints
//
// Hints expire after their TTL (60 min for interval hints, 30 min for
// one-shots by default). An expired hint is ignored, removed from the
// state, and reported by [Decision.ClearedHints] and the trail. A hint
// holds no run past its TTL: a one-shot at or after its expiry is not
// planned, and one whose slot was skipped stays as a requeue does (see
// above), until its TTL. An interval hint whose slot comes at or after
// its expiry gives way to the task's own cadence at the expiry. A hint
// moves the next run earlier at once (nudging); a hint that would only
// delay the run already planned takes effect from the run after it, if
// the rules above hints (the clamps, the budget, quiet hours, the breaker,
// a dead-letter hold or a requeue) still allow that run. The run a timed
// pause leads to is kept too once the pause has ended, with the source a
// resume at the end gives it.
package governor
