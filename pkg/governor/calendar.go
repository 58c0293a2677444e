package governor

import "time"

// The budget and the bounds measure the gap after the last slot. A cron
// task's own occurrences are not evenly spaced in UTC: jitter delays each
// one by its own draw, and a DST change makes a day of 23 or 25 hours.
// Measured between the slots as they fall, a budget or bound equal to the
// cron's own rate moved its occurrences: a daily job with a budget of 1 a
// day lost Sunday's run when Saturday's was jittered later, or when the
// clocks sprang forward; with bounds.min 24h it ran an hour late from then
// on, and with bounds.max 24h twice on the day the clocks fell back. For a
// candidate on the cron calendar they measure between occurrences
// instead, before jitter, on the wall clock of the cron's zone, as the
// expression reads them (wallAt).

// calendarRun is what the budget and the bounds compare for a candidate
// on the cron calendar: the occurrence of the slot they measure from (r),
// and the candidate (t) and its occurrence (o).
type calendarRun struct {
	r, o, t time.Time
	gap     time.Duration // from r to o on the wall clock (wallAt)
}

// onCalendar reports whether the candidate is on the cron calendar: an
// occurrence the cron rule placed, jittered or not, or one that quiet
// hours or the budget moved it to.
func (p *planner) onCalendar() bool { return p.cadence && p.sched != nil && !p.next.IsZero() }

// onCalendarAt reports whether t, planned by an earlier decision's rule
// src, is on the cron calendar: a slot of the cron rule, or an
// occurrence quiet hours or the budget moved a cron slot to.
func (p *planner) onCalendarAt(t time.Time, src Source) bool {
	if p.sched == nil {
		return false
	}
	switch src {
	case SourceBaselineCron:
		return true
	case SourceQuietHours, SourceBudget:
		return p.sched.Next(t.Add(-time.Nanosecond), p.loc).Equal(t)
	}
	return false
}

// calendar is the calendarRun of the candidate t after ref.
func (p *planner) calendar(ref, t time.Time) calendarRun {
	c := calendarRun{r: p.occurrence(ref), o: p.occurrence(t), t: t}
	c.gap = p.wallAt(c.o, false).Sub(p.wallAt(c.r, true))
	return c
}

// occurrence is the cron occurrence of the slot t: t itself when it is
// one, or the latest occurrence before it when t is that occurrence
// delayed by jitter (by at most latestDelay); t otherwise (a slot off the
// calendar: a hint, a late start, a clamp).
func (p *planner) occurrence(t time.Time) time.Time {
	j := p.spec.Jitter
	if j <= 0 || j >= 1 {
		return t
	}
	n := p.sched.Next(t, p.loc)
	if n.IsZero() {
		return t
	}
	// An occurrence o that t is a jittered slot of lies before t by at
	// most jitter × (n − o), n being the occurrence after both: o ≥ t −
	// j/(1−j) × (n − t).
	reach := scale(n.Sub(t), j/(1-j)) + time.Second
	o := latestOccurrence(p.sched, p.loc, t, t.Add(-reach))
	if o.IsZero() || t.Sub(o) > p.latestDelay(o) {
		return t
	}
	return o
}

// latestOccurrence is the latest occurrence of sched in loc at or before
// t and after lo, or zero if there is none. Occurrences fall on whole
// seconds, so it bisects over them, as beforeLast does.
func latestOccurrence(sched interface {
	Next(time.Time, *time.Location) time.Time
}, loc *time.Location, t, lo time.Time,
) time.Time {
	if first := sched.Next(lo, loc); first.IsZero() || first.After(t) {
		return time.Time{}
	}
	a, b := lo.Unix()-1, t.Unix() // next(a) ≤ t < next(b)
	for b-a > 1 {
		mid := a + (b-a)/2
		if o := sched.Next(time.Unix(mid, 0), loc); !o.IsZero() && !o.After(t) {
			a = mid
		} else {
			b = mid
		}
	}
	return sched.Next(time.Unix(a, 0), loc)
}

// latestDelay is the most jitter may delay the occurrence o: jitter ×
// the gap to the occurrence after it (cronDelay).
func (p *planner) latestDelay(o time.Time) time.Duration {
	if p.spec.Jitter <= 0 {
		return 0
	}
	after := p.sched.Next(o, p.loc)
	if after.IsZero() {
		return 0
	}
	return scale(after.Sub(o), p.spec.Jitter)
}

// wallAt is the wall-clock time of t in the cron's zone, read as UTC: the
// time the expression names. An occurrence at the instant the clocks
// sprang forward stands for the wall times the change skipped that the
// expression names, and for its own if the expression names it too: a
// daily 02:30 runs at 03:00 CEST on the day Berlin springs forward, and
// reads 02:30, 24h after Saturday's and before Monday's; every 15 minutes
// it stands for 02:00 to 03:00. The slot measured from (first) reads as
// the latest of them, the slot measured to as the earliest: no gap
// between two runs reads longer than it is on the clock.
func (p *planner) wallAt(t time.Time, first bool) time.Time {
	l := t.In(p.loc)
	wall := time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
	shift := p.clockShift(t)
	if shift <= 0 {
		return wall
	}
	if first {
		if p.sched.Next(wall.Add(-time.Nanosecond), time.UTC).Equal(wall) {
			return wall
		}
		if skipped := latestOccurrence(p.sched, time.UTC, wall, wall.Add(-shift-time.Second)); !skipped.IsZero() {
			return skipped
		}
		return wall
	}
	if skipped := p.sched.Next(wall.Add(-shift-time.Nanosecond), time.UTC); !skipped.IsZero() && !skipped.After(wall) {
		return skipped
	}
	return wall
}

// clockShift is how far the cron's zone moved its clocks at the instant t
// (positive: forward), zero when t is not such an instant.
func (p *planner) clockShift(t time.Time) time.Duration {
	_, before := t.Add(-time.Nanosecond).In(p.loc).Zone()
	_, after := t.In(p.loc).Zone()
	return time.Duration(after-before) * time.Second
}

// calendarMin reports whether bounds.min (or the budget's spacing) lo
// admits the calendar run c: its occurrences are at least lo apart on the
// wall clock.
func (p *planner) calendarMin(c calendarRun, lo time.Duration) bool { return c.gap >= lo }

// calendarMax reports whether bounds.max hi admits the calendar run c:
// its occurrences are at most hi apart on the wall clock, and jitter
// delays the candidate by at most jitter × hi (the bound in UTC: hi plus
// the hour the clocks fall back before the occurrence after it). A cron
// whose occurrences are further apart than bounds.max is clamped as
// before.
func (p *planner) calendarMax(c calendarRun, hi time.Duration) bool {
	if c.gap > hi {
		return false
	}
	span := hi
	if after := p.sched.Next(c.o, p.loc); !after.IsZero() {
		span += max(after.Sub(c.o)-p.wallAt(after, false).Sub(p.wallAt(c.o, true)), 0)
	}
	return c.t.Sub(c.o) <= scale(span, p.spec.Jitter)
}

// calendarBound reports whether a bound (bounds.min, or bounds.max when
// upper) admits the candidate on the cron calendar whose gap after ref it
// does not (calendarMin, calendarMax), and says so in the trail.
func (p *planner) calendarBound(ref time.Time, bound time.Duration, upper bool) bool {
	if !p.onCalendar() {
		return false
	}
	c := p.calendar(ref, p.next)
	name, ok := "bounds.min", false
	if upper {
		name, ok = "bounds.max", p.calendarMax(c, bound)
	} else {
		ok = p.calendarMin(c, bound)
	}
	if ok {
		p.calendarLine(name+": ", c, "within "+bound.String())
	}
	return ok
}

// calendarLine writes the trail line of a rule (what) that a calendar run
// c passes by its occurrences.
func (p *planner) calendarLine(what string, c calendarRun, verdict string) {
	p.tr.str(what).str("occurrence ").at(c.o).str(" is ").dur(c.gap).str(" after the occurrence ").at(c.r).
		str(" of the last run on the clock of ").str(p.loc.String()).str(": ").str(verdict).end()
}
