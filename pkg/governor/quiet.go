package governor

import (
	"time"

	"github.com/flyballhq/flyball/pkg/cron"
)

// quietWindow is a task's daily quiet hours. Its edges are daily cron
// activations ("0 MM HH * * *" in the window's zone), so they follow the
// cron package's DST rule: an edge whose wall time does not exist (spring
// forward) happens at the end of the gap, and an edge whose wall time
// repeats (fall back) happens once, at its first instance. The window opens
// and closes exactly once a day; a window whose wall times all fall in a
// DST gap is empty that day. A window that wraps midnight and has both
// edges in the gap (or at its end) closes and opens again at the same
// instant: it stays quiet.
type quietWindow struct {
	start, end *cron.Schedule
	loc        *time.Location
	interval   time.Duration
	wraps      bool   // start is later than end on the clock ("22:00-06:00")
	text       string // "00:00-07:00 Europe/London"
}

// quiet returns the spec's quiet hours, if it has usable ones.
func (p *planner) quiet() (quietWindow, bool) {
	q := p.spec.QuietHours
	if q == nil || q.Interval <= 0 || q.Start == q.End {
		return quietWindow{}, false
	}
	start, err := clockSchedule(q.Start)
	if err == nil {
		var end *cron.Schedule
		if end, err = clockSchedule(q.End); err == nil {
			var loc *time.Location
			if loc, err = zone(q.Timezone); err == nil {
				return quietWindow{
					start: start, end: end, loc: loc, interval: q.Interval.D(),
					wraps: q.Start > q.End, // "HH:MM" compares as the clock does
					text:  q.Start + "-" + q.End + " " + loc.String(),
				}, true
			}
		}
	}
	p.tr.linef("quiet hours ignored: %v", err)
	return quietWindow{}, false
}

// contains reports whether t lies in a quiet window, and when that window
// ends. Windows are [start, end): at t, the next edge is an end. When both
// edges fall at the same instant (both wall times in a spring-forward gap,
// or at its end), a window within the day is empty, and one that wraps
// midnight closes and opens again at once: t is in the one that closes.
func (w *quietWindow) contains(t time.Time) (bool, time.Time) {
	ns, ne := w.start.Next(t, w.loc), w.end.Next(t, w.loc)
	if ns.IsZero() || ne.IsZero() {
		return false, time.Time{}
	}
	return ne.Before(ns) || (w.wraps && ne.Equal(ns)), ne.UTC()
}

// quietCadence replaces the interval of an interval task by the quiet
// interval in quiet hours: when its next slot c falls in the window, and
// when the quiet slot q does and comes first (a shorter quiet interval
// holds until the window ends: 1h task, 5m quiet interval, last run 06:00
// in a window ending at 07:00 → 06:05, not 07:00), and when a window opens
// between the last run and c (1h task, 5m quiet interval, last run 23:30,
// window 00:00-00:30 → 00:00, not 00:30). Backoff and jitter
// still apply to it. The result never comes before the window opens (when
// the quiet interval is the shorter one) nor after it ends.
func (p *planner) quietCadence(anchor time.Time, exp int, c time.Time) {
	w, ok := p.quiet()
	if !ok {
		return
	}
	step := p.stretch(w.interval, exp, false)
	q, _ := grid(anchor, step, p.now)
	in, end := w.contains(c)
	if !in {
		if !q.Before(c) {
			return
		}
		if qin, _ := w.contains(q); qin {
			p.choosef(q, SourceQuietHours, "quiet hours %s: interval %s after the slot of %s", w.text, step, stamp(anchor))
			return
		}
		// The slot passes a whole window: the shorter quiet interval
		// starts when it opens, as it does when the slot falls in it.
		if o := w.start.Next(q, w.loc).UTC(); o.Before(c) {
			if oin, _ := w.contains(o); oin {
				p.choosef(o, SourceQuietHours, "quiet hours %s: interval %s from when the window opens at %s", w.text, step, stamp(o))
			}
		}
		return
	}
	if q.Before(c) {
		if qin, _ := w.contains(q); !qin {
			q = w.start.Next(q, w.loc).UTC() // the window opens
		}
	}
	capped := q.After(end)
	if capped {
		q = end
	}
	if q.Equal(c) {
		p.tr.linef("quiet hours %s: interval %s gives the same slot", w.text, step)
		return
	}
	if capped {
		p.choosef(q, SourceQuietHours, "quiet hours %s: interval %s would pass the end of the window: runs when it ends", w.text, step)
		return
	}
	p.choosef(q, SourceQuietHours, "quiet hours %s: interval %s after the slot of %s", w.text, step, stamp(anchor))
}

// quietCron thins a cron task in quiet hours: an occurrence in the window
// less than the quiet interval after the last run is skipped. Quiet hours
// never add cron runs.
func (p *planner) quietCron(anchor time.Time) {
	if anchor.IsZero() {
		return
	}
	w, ok := p.quiet()
	if !ok {
		return
	}
	in, end := w.contains(p.next)
	least := anchor.Add(w.interval)
	if !in || !p.next.Before(least) {
		return
	}
	from := least
	if end.Before(from) {
		from = end
	}
	t := p.sched.Next(from.Add(-time.Nanosecond), p.loc) // first occurrence at or after from
	if t.IsZero() || !t.After(p.next) {
		return
	}
	p.choosef(t, SourceQuietHours, "quiet hours %s: occurrences less than %s after the last run are skipped", w.text, w.interval)
}

// quietSpacing keeps exact-time candidates (a one-shot hint, a catch-up
// run) at least the quiet interval after the last run while in quiet
// hours, but never past the end of the window.
func (p *planner) quietSpacing() {
	if !p.cadence {
		p.quietGap()
	}
}

// quietGap moves the candidate, when it falls in quiet hours less than
// the quiet interval after the last run, to that interval after it, or
// to the end of the window if that comes first. It never moves it
// earlier.
func (p *planner) quietGap() {
	last := p.last()
	if p.next.IsZero() || last.IsZero() || p.spec.QuietHours == nil {
		return
	}
	w, ok := p.quiet()
	if !ok {
		return
	}
	in, end := w.contains(p.next)
	least := last.Add(w.interval)
	if !in || !p.next.Before(least) {
		return
	}
	t := least
	if end.Before(t) {
		t = end
	}
	if !t.After(p.next) {
		return
	}
	p.choosef(t, SourceQuietHours, "quiet hours %s: at most one run per %s until the window ends at %s", w.text, w.interval, stamp(end))
}
