package governor

import (
	"math"
	"time"
)

// budget keeps a task under budget.maxRunsPerDay. Two rules, both
// deterministic:
//   - pacing: runs are at least 24h/maxRunsPerDay apart, so the steady rate
//     never exceeds the budget; a shorter interval is stretched, and a cron
//     task skips to the first occurrence far enough out. It measures from
//     the latest run's start when that is more than half the spacing
//     after the last slot (paceFrom), so consecutive calls start at least
//     half the spacing apart;
//   - exhaustion: when the runs counted (in the hour they started) in the
//     current UTC hour and the 23 before it reach the budget (bursts from
//     requeues or a backlog), the next run waits for the hour at which the
//     oldest counted hour leaves the window.
//
// A candidate on the cron calendar is judged by its occurrence, before
// jitter (calendarPaced, calendarFreed): a budget equal to the cron's own
// rate never moves one of its occurrences.
//
// deadLetter applies it again to a dead-letter recheck, which it would
// otherwise replace: only a requeue and bounds.max rank above the budget.
//
// Either may move the run into quiet hours: it is then kept the quiet
// interval after the last run there, as quiet hours keep any run
// (quietAfterBudget). Only later, so the budget still holds.
func (p *planner) budget() {
	b := p.spec.Budget
	if b == nil || b.MaxRunsPerDay <= 0 || p.next.IsZero() {
		return
	}
	limit := b.MaxRunsPerDay
	spacing := budgetSpacing(limit)
	from, started := p.paceFrom(spacing)
	if !from.IsZero() {
		if least := from.Add(spacing); p.next.Before(least) && !p.calendarPaced(from, spacing) {
			if started {
				p.budgetMove(least, "budget of %d runs a day: runs at least %s apart (a run started late, at %s)",
					limit, spacing, stamp(from))
			} else {
				p.budgetMove(least, "budget of %d runs a day: runs at least %s apart", limit, spacing)
			}
		}
	}
	free, used := p.budgetFree(limit)
	if free.IsZero() {
		return
	}
	if p.next.Before(free) && !p.calendarFreed(free) {
		p.budgetMove(free, "budget used up: %d runs counted in this UTC hour and the 23 before it (limit %d): waits until %s",
			used, limit, stamp(free))
	}
}

// calendarPaced reports whether the budget's pacing admits a candidate on
// the cron calendar less than the spacing after from: its occurrence is
// at least the spacing after from's on the wall clock (calendarMin).
func (p *planner) calendarPaced(from time.Time, spacing time.Duration) bool {
	if !p.onCalendar() {
		return false
	}
	c := p.calendar(from, p.next)
	ok := p.calendarMin(c, spacing)
	if ok {
		p.calendarLine("budget: ", c, "within the spacing of "+spacing.String())
	}
	return ok
}

// calendarFrees reports whether the budget's exhaustion rule admits the
// candidate t on the cron calendar before free, the hour that frees a
// run: on the wall clock (wallAt), the latest slot jitter may draw for
// its occurrence (latestDelay, at most jitter × 24h), or for the
// occurrence before it when that is at most a day earlier on the wall
// clock (prevDelay), is at least a day after the hour whose runs leave
// the window then (free − 24h). On a day of 23 hours that is an hour
// sooner than free.
func (p *planner) calendarFrees(t, free time.Time) (ok bool, o time.Time, delay time.Duration) {
	o = p.occurrence(t)
	delay = max(min(p.latestDelay(o), scale(24*time.Hour, p.spec.Jitter)), p.prevDelay(o))
	day := p.wallAt(free.Add(-24*time.Hour), true).Add(24 * time.Hour)
	return !p.wallAt(o, false).Add(delay).Before(day), o, delay
}

// prevDelay is how much later than its occurrence the latest slot jitter
// may draw for the occurrence before o reads on the wall clock, when that
// occurrence is at most a day before o there; else zero. Its jitter is
// drawn over its own gap to o in UTC: on the day the clocks fall back a
// daily run may be delayed by jitter × 25h, and across the hour they
// spring forward it reads an hour later, so the hour it frees is later
// than o's own delay reaches (a daily 09:45 in Berlin, jitter 0.5, ran at
// 22:07 on 2026-10-24 and lost the next day's run).
func (p *planner) prevDelay(o time.Time) time.Duration {
	prev := latestOccurrence(p.sched, p.loc, o.Add(-time.Second), o.Add(-27*time.Hour))
	if prev.IsZero() || p.wallAt(o, false).Sub(p.wallAt(prev, true)) > 24*time.Hour {
		return 0
	}
	return p.wallAt(prev.Add(p.latestDelay(prev)), true).Sub(p.wallAt(prev, true))
}

// calendarFreed is calendarFrees for the candidate, said in the trail.
func (p *planner) calendarFreed(free time.Time) bool {
	if !p.onCalendar() {
		return false
	}
	ok, o, delay := p.calendarFrees(p.next, free)
	if ok {
		p.tr.str("budget: occurrence ").at(o).str(" (jitter may delay it by ").dur(delay).str(") is a day after the hour of ").
			at(free.Add(-24 * time.Hour)).str(" on the clock of ").str(p.loc.String()).str(", whose runs leave the window at ").at(free).end()
	}
	return ok
}

// budgetAdmits reports whether the budget allows the run t planned by an
// earlier decision, placed by the rule src: as budget judges the
// candidate, by its occurrence when it is on the cron calendar.
func (p *planner) budgetAdmits(t time.Time, src Source) bool {
	b := p.spec.Budget
	if b == nil || b.MaxRunsPerDay <= 0 {
		return true
	}
	cal := p.onCalendarAt(t, src)
	spacing := budgetSpacing(b.MaxRunsPerDay)
	if from, _ := p.paceFrom(spacing); t.Before(from.Add(spacing)) && (!cal || !p.calendarMin(p.calendar(from, t), spacing)) {
		return false
	}
	if free, _ := p.budgetFree(b.MaxRunsPerDay); t.Before(free) {
		if !cal {
			return false
		}
		ok, _, _ := p.calendarFrees(t, free)
		return ok
	}
	return true
}

// budgetFree is the exhaustion rule: when the runs counted in now's UTC
// hour and the 23 before it (used) reach limit, the hour at which the
// oldest counted hour leaves the window and frees a run; else zero.
func (p *planner) budgetFree(limit int) (free time.Time, used int64) {
	hour := hourOf(p.now)
	used = p.s.Budget.count(hour-23, hour)
	if used < int64(limit) {
		return time.Time{}, used
	}
	return time.Unix(p.s.Budget.freeHour(hour, int64(limit))*3600, 0).UTC(), used
}

// budgetMove moves the run to t, or for a cron task to its first
// occurrence at or after t, with the trail line format, and applies
// quiet hours to the new time (quietAfterBudget).
func (p *planner) budgetMove(t time.Time, format string, args ...any) {
	p.choosef(p.onOrAfter(t), SourceBudget, format, args...)
	p.quietAfterBudget()
}

// quietAfterBudget applies quiet hours to a run the budget moved: quiet
// hours ran before it, so a pacing or exhaustion time in the window was
// never checked against the quiet interval (a 1m task with 48 runs a day
// ran 30m after 23:40 in a window that allows one run an hour).
func (p *planner) quietAfterBudget() {
	if p.cadence && p.sched != nil {
		p.quietCron(p.last())
		return
	}
	p.quietGap()
}

// paceFrom is what the budget's pacing measures from: the last slot
// (last), or the latest run's start (State.LastStartedAt) when it is more
// than half the spacing after the last completed slot and later than
// last; started reports the latter. A run started within half the
// spacing of its slot is paced from the slot: StartedAt is its last
// attempt's start, so a retry or executor lag of a few seconds made an
// on-time run late, moved the grid of an interval at the budget's spacing
// by the delay every run, and cost a cron task its next occurrence.
// Either way the next call starts at least half the spacing after the
// last one, and the exhaustion window still bounds the daily total.
func (p *planner) paceFrom(spacing time.Duration) (from time.Time, started bool) {
	last := p.last()
	if st := p.s.LastStartedAt; st.After(p.s.LastScheduledAt.Add(spacing/2)) && st.After(last) {
		return st, true
	}
	return last, false
}

// budgetSpacing is 24h / runsPerDay, rounded up to the nanosecond.
func budgetSpacing(runsPerDay int) time.Duration {
	n := time.Duration(runsPerDay)
	return (24*time.Hour + n - 1) / n
}

// onOrAfter is t, or for a cron candidate the first occurrence at or
// after t.
func (p *planner) onOrAfter(t time.Time) time.Time {
	if p.cadence && p.sched != nil {
		if o := p.sched.Next(t.Add(-time.Nanosecond), p.loc); !o.IsZero() {
			return o
		}
	}
	return t
}

func ledgerSlot(h int64) int { return int((h%24 + 24) % 24) }

// add counts one run started in hour h.
func (l *RunLedger) add(h int64) {
	if *l == (RunLedger{}) {
		l.Hour = h
	}
	switch {
	case h > l.Hour:
		if h-l.Hour >= 24 {
			l.Counts = [24]uint32{}
		} else {
			for x := l.Hour + 1; x <= h; x++ {
				l.Counts[ledgerSlot(x)] = 0
			}
		}
		l.Hour = h
	case h <= l.Hour-24:
		return // older than the ledger covers
	}
	if c := &l.Counts[ledgerSlot(h)]; *c < math.MaxUint32 {
		*c++
	}
}

// count sums the runs of hours from..to (inclusive) that the ledger holds.
func (l *RunLedger) count(from, to int64) int64 {
	from, to = max(from, l.Hour-23), min(to, l.Hour)
	var n int64
	for x := from; x <= to; x++ {
		n += int64(l.Counts[ledgerSlot(x)])
	}
	return n
}

// freeHour is the first hour after now at which the runs counted in it and
// the 23 hours before it fall below limit.
func (l *RunLedger) freeHour(now, limit int64) int64 {
	for h := now + 1; h < now+24; h++ {
		if l.count(h-23, now) < limit {
			return h
		}
	}
	return now + 24
}
