// Package governor decides when a task runs next, and why.
//
// [Decide] is a pure function: given the current time, the task spec, the
// task's stored [State] and one [Input] (the event being applied), it returns
// a [Decision] holding the next run time, the rule that chose it (the
// [Source]) and a short trail of the rules that were considered. It reads no
// clock, does no I/O and uses no randomness it was not given, so replaying
// the same events through it always gives the same schedule: this is what
// `flyball explain` relies on.
//
// # Rules
//
// The baseline is the spec's interval or cron expression. An interval task
// runs once as soon as it is accepted and then every interval on the grid
// anchored at its first run; a cron task waits for its next occurrence; an
// explicit startAt overrides both.
//
// After a failed run, an interval task backs off: the next slot is
// interval × 2^min(failures, 5) after the failed slot. A success resets the
// count. Cron tasks do not back off: their next occurrence is their next
// occurrence.
//
// A candidate in the past is moved forward: an interval keeps its cadence
// (the first grid slot after now), a cron expression takes its next
// occurrence after now, and a one-shot hint is floored to now. A decision is
// never earlier than now and never repeats the slot that just ran.
//
// Pause wins over everything: a paused task's next run is its pause end, or
// none at all for an indefinite pause.
package governor
