// Package cron parses cron expressions and computes their next activation
// time, with well-defined behaviour across daylight-saving transitions.
//
// # Syntax
//
// An expression has 5 fields (second is implicitly 0) or 6 fields,
// separated by whitespace:
//
//	[second] minute hour day-of-month month day-of-week
//
//	field          values          names
//	second         0-59
//	minute         0-59
//	hour           0-23
//	day-of-month   1-31
//	month          1-12            JAN-DEC
//	day-of-week    0-7 (0,7=Sun)   SUN-SAT
//
// Names are three ASCII letters, case-insensitive. Each field is a
// comma-separated list of items; an item is one of
//
//	item     meaning
//	*        every value ('?' is accepted as a synonym in day-of-month and day-of-week)
//	v        a single value
//	a-b      the range a through b (a <= b; ranges do not wrap)
//	*/n      every n-th value, starting at the field minimum
//	a-b/n    every n-th value from a through b
//	a/n      every n-th value from a through the field maximum
//
// For '*' and 'a/n' the day-of-week maximum is 6 (Saturday); 7 is only
// reachable explicitly ("5-7", "7"). A step must be between 1 and the number
// of values of the field (60, 60, 24, 31, 12, 7). Empty fields or list items,
// step 0, reversed ranges, out-of-range values, unknown names, trailing
// garbage and more than 6 fields are rejected with a *ParseError naming the
// field and the rule.
//
// Day matching follows Vixie cron: if both day-of-month and day-of-week are
// restricted (neither field's text starts with '*' or '?'), a day matches
// when EITHER matches ("0 0 13 * FRI" runs on the 13th and on every Friday).
// Otherwise both must match ("0 0 */2 * MON" runs on odd-numbered days that
// are Mondays).
//
// Shortcuts (case-insensitive, must stand alone):
//
//	@yearly, @annually   0 0 1 1 *
//	@monthly             0 0 1 * *
//	@weekly              0 0 * * 0
//	@daily, @midnight    0 0 * * *
//	@hourly              0 * * * *
//
// @every is deliberately not supported: fixed intervals are not cron
// schedules and must be scheduled as intervals by the caller.
//
// # Next and daylight saving time
//
// Schedule.Next evaluates the expression against the wall clock of the
// given location: the expression selects a set of wall-clock times (civil
// date and time of day, to the second), and each selected wall time W
// activates at most once, at
//
//	activation(W) = the earliest instant at which loc's wall clock reads W or later.
//
// Next(t) returns the earliest activation instant strictly after t. For
// ordinary wall times this is simply the instant showing W. Around DST
// transitions it gives exactly these rules:
//
// Spring forward (gap). Wall times that do not exist run ONCE, at the
// transition instant that ends the gap. In Europe/Berlin on 2026-03-29 the
// clock jumps from 02:00 CET to 03:00 CEST (01:00 UTC): "30 2 * * *" runs at
// 03:00 CEST. "*/15 2 * * *" (02:00, 02:15, 02:30, 02:45, all missing)
// collapses into one run at 03:00 CEST, not four. Because 03:00 itself
// also activates at that instant, "0 2,3 * * *" runs only once that night,
// and an hourly job runs 23 times that day.
//
// Fall back (overlap). Wall times that occur twice run ONCE, at their first
// (earlier, still-DST) instance; the second pass through the repeated
// interval produces nothing. In Europe/Berlin on 2026-10-25 the clock goes
// from 03:00 CEST back to 02:00 CET (01:00 UTC): "30 2 * * *" runs at 02:30
// CEST (00:30 UTC) only. The rule is per wall-clock time, so "0 * * * *"
// runs once at 02:00 CEST and next at 03:00 CET (24 runs that day, one per
// wall-clock hour), and "*/15 * * * *" runs at 02:00, 02:15, 02:30 and
// 02:45 CEST and then at 03:00 CET. If t lies in the second pass, wall times
// whose first instance is at or before t are not run again even though
// their second instance is still ahead.
//
// Consequently Next always returns a time strictly after t, is monotonic
// (Next(Next(t)) > Next(t)), and iterating it never yields the same instant
// twice. Interval semantics (e.g. "every 15 minutes of elapsed time") are
// not this package's concern.
//
// Other details:
//   - Activations are whole seconds; the sub-second part of t is honoured
//     (Next of 10:00:00.5 for an every-second schedule is 10:00:01).
//   - The result is expressed in loc; a nil loc means UTC. The location of
//     t itself is irrelevant.
//   - If no activation exists within 400 years of t, Next returns the zero
//     time. The calendar repeats every 400 years, weekdays included, so
//     that happens only for an expression that never fires ("0 0 30 2 *",
//     "0 0 31 4 *"). A rare one still finds its next activation, however
//     far: Feb 29 from 2096-03-01 is 2104-02-29 (2100 is no leap year),
//     and a Feb 29 that is a Sunday ("0 0 29 2 */7") comes up to 40 years
//     apart. Next also returns the zero time for t before year 1 or
//     absurdly far in the future (~year 500000).
//   - Next does O(1) work per call for typical expressions (it skips whole
//     months, days, hours and minutes using bitsets) and does not allocate.
//   - A Schedule is immutable and safe for concurrent use.
package cron
