package cron

import (
	"math/bits"
	"time"
)

const (
	secondsPerDay = 86400

	// searchYears is the horizon of Next: if no activation exists within
	// this many years (of wall-clock time) after t, Next returns the zero
	// time. It is one whole cycle of the Gregorian calendar, whose dates
	// and weekdays repeat every 400 years (146097 days, a multiple of 7):
	// an expression with no activation within it has none at all. A
	// shorter horizon left rare expressions without a next activation for
	// years at a time: "0 0 29 2 *" fires 8 years apart across 2100 (no
	// leap year), and a leap day that is a Sunday ("0 0 29 2 */7") up to
	// 40 years apart.
	searchYears = 400

	// maxWallSteps bounds the candidates nextWall visits: at most about
	// two per month of the horizon (a month that does not match, then a
	// month with no matching day), more than any expression with an
	// activation needs to reach it.
	maxWallSteps = 32 * (searchYears + 2)

	// minUnix/maxUnix bound the instants Next accepts. The lower bound is
	// the zero time, so a result can never be mistaken for "no
	// activation"; the upper bound (~year 559000) keeps all arithmetic far
	// from overflow.
	minUnix = -62135596800 // time.Time{}.Unix()
	maxUnix = 1 << 44

	// zoneLookback bounds how far back in time a zone transition can still
	// influence the wall clock at a given instant. It must exceed the
	// largest UTC offset difference of any real zone (< 27h).
	zoneLookback = 2 * secondsPerDay

	// maxZoneSteps bounds walks over zone periods (normally 1-2 steps).
	maxZoneSteps = 16
)

// Next returns the first activation strictly after t, evaluated in loc's wall clock.
// Returns the zero time if none exists within 400 years, one whole cycle of
// the calendar: only for an expression that never fires (e.g. "0 0 30 2 *").
//
// A nil loc means UTC. The result is expressed in loc. See the package
// documentation for the exact DST rule.
func (s *Schedule) Next(t time.Time, loc *time.Location) time.Time {
	if s == nil {
		return time.Time{}
	}
	if loc == nil {
		loc = time.UTC
	}
	ts := t.Unix() // floor of t in whole seconds
	if ts < minUnix || ts > maxUnix {
		return time.Time{}
	}
	utc := loc == time.UTC

	// Wall times are "naive" seconds: the Unix time the wall clock reading
	// would have in UTC. ws is the smallest wall time whose activation
	// instant is after t.
	ws := ts + 1
	if !utc {
		ws = startWall(t, ts, loc)
	}
	limit := addYears(ws, searchYears)
	// In real time zones the first candidate always maps to an instant
	// after t; the loop is a safety net for pathological zone data.
	for range 1024 {
		w, ok := s.nextWall(ws, limit)
		if !ok {
			break
		}
		x := w
		if !utc {
			x = instantOf(w, loc)
		}
		if x > ts { // x is whole seconds, so x > ts <=> x > t
			return time.Unix(x, 0).In(loc)
		}
		ws = w + 1
	}
	return time.Time{}
}

// startWall returns the smallest wall time W such that activation(W) > t,
// i.e. one second past the largest wall-clock reading loc has shown at or
// before t. Normally that is wall(t)+1s; when t lies in the second pass
// of a repeated (fall-back) interval, the clock has already shown later
// readings, and the result is the end of the repeated interval.
func startWall(t time.Time, ts int64, loc *time.Location) int64 {
	tl := t.In(loc)
	_, off := tl.Zone()
	ws := ts + int64(off) + 1
	start, _ := tl.ZoneBounds()
	for range maxZoneSteps {
		if start.IsZero() {
			break
		}
		st := start.Unix()
		if st <= ts-zoneLookback {
			break
		}
		// The previous zone period ended at st; its last wall reading was
		// st+po-1s, so every wall time below st+po has already occurred.
		prev := time.Unix(st-1, 0).In(loc)
		_, po := prev.Zone()
		if c := st + int64(po); c > ws {
			ws = c
		}
		start, _ = prev.ZoneBounds()
	}
	return ws
}

// instantOf returns the activation instant of wall time w: the earliest
// instant at which loc's wall clock reads w or later. For an ordinary wall
// time that is its unique instant; in a fall-back overlap it is the first
// (earlier) instance; in a spring-forward gap it is the transition instant
// that ends the gap.
func instantOf(w int64, loc *time.Location) int64 {
	// No instant before w-1d can show a wall reading >= w (|offset| < 1d),
	// so walk the zone periods forward from there and stop at the first one
	// whose wall-clock range reaches w.
	p := time.Unix(w-secondsPerDay, 0).In(loc)
	for range maxZoneSteps {
		_, off := p.Zone()
		o := int64(off)
		start, end := p.ZoneBounds()
		if end.IsZero() || end.Unix()+o > w {
			x := w - o
			if !start.IsZero() && start.Unix() > x {
				x = start.Unix() // w is in the gap before this period
			}
			return x
		}
		p = end
	}
	_, off := time.Unix(w, 0).In(loc).Zone()
	return w - int64(off)
}

// nextWall returns the smallest wall time >= ws matching s, or false if
// there is none <= limit.
func (s *Schedule) nextWall(ws, limit int64) (int64, bool) {
	days := floorDiv(ws, secondsPerDay)
	sod := int(ws - days*secondsPerDay)
	y, mo, d := civilFromDays(days)
	h, mi, se := sod/3600, sod/60%60, sod%60
	maxYear := y + searchYears + 1
	// Each iteration advances to the next month, day, hour or minute
	// candidate; a few dozen a year cover the whole horizon.
	for range maxWallSteps {
		if y > maxYear {
			return 0, false
		}
		if s.month&(1<<uint(mo)) == 0 {
			nm := nextBit(s.month, mo)
			if nm < 0 {
				y++
				nm = bits.TrailingZeros64(s.month)
			}
			mo, d, h, mi, se = nm, 1, 0, 0, 0
			continue
		}
		nd := nextBit(s.dayMask(y, mo), d)
		if nd < 0 {
			mo, d, h, mi, se = mo+1, 1, 0, 0, 0
			if mo > 12 {
				mo = 1
				y++
			}
			continue
		}
		if nd != d {
			d, h, mi, se = nd, 0, 0, 0
		}
		nh := nextBit(s.hour, h)
		if nh < 0 {
			d, h, mi, se = d+1, 0, 0, 0
			continue
		}
		if nh != h {
			h, mi, se = nh, 0, 0
		}
		nmi := nextBit(s.minute, mi)
		if nmi < 0 {
			h, mi, se = h+1, 0, 0
			continue
		}
		if nmi != mi {
			mi, se = nmi, 0
		}
		nse := nextBit(s.second, se)
		if nse < 0 {
			mi, se = mi+1, 0
			continue
		}
		w := daysFromCivil(y, mo, d)*secondsPerDay + int64(h*3600+mi*60+nse)
		if w > limit {
			return 0, false
		}
		return w, true
	}
	return 0, false
}

// dayMask returns the days (bits 1-31) of month mo of year y that match
// the day-of-month/day-of-week fields.
func (s *Schedule) dayMask(y int64, mo int) uint64 {
	valid := uint64(1)<<uint(daysIn(y, mo)+1) - 2       // bits 1..daysIn
	wd1 := uint(floorMod(daysFromCivil(y, mo, 1)+4, 7)) // weekday of the 1st; 1970-01-01 was a Thursday
	// r: bit k set iff weekday (wd1+k)%7 matches, i.e. day k+1 matches.
	r := (s.dow>>wd1 | s.dow<<(7-wd1)) & 0x7f
	dowDays := (r<<1 | r<<8 | r<<15 | r<<22 | r<<29) & valid
	domDays := s.dom & valid
	if s.domStar || s.dowStar {
		return domDays & dowDays
	}
	return domDays | dowDays
}

// nextBit returns the lowest set bit of mask at position >= from, or -1.
func nextBit(mask uint64, from int) int {
	if from >= 64 {
		return -1
	}
	m := mask & (^uint64(0) << uint(from))
	if m == 0 {
		return -1
	}
	return bits.TrailingZeros64(m)
}

func daysIn(y int64, mo int) int {
	switch mo {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// addYears adds n calendar years to wall time w (Feb 29 becomes Mar 1).
func addYears(w int64, n int64) int64 {
	days := floorDiv(w, secondsPerDay)
	sod := w - days*secondsPerDay
	y, mo, d := civilFromDays(days)
	return daysFromCivil(y+n, mo, d)*secondsPerDay + sod
}

// daysFromCivil returns the number of days since 1970-01-01 of the
// proleptic Gregorian date y-m-d (H. Hinnant's algorithm).
func daysFromCivil(y int64, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := floorDiv(y, 400)
	yoe := y - era*400
	mp := int64((m + 9) % 12)
	doy := (153*mp+2)/5 + int64(d) - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// civilFromDays is the inverse of daysFromCivil.
func civilFromDays(z int64) (y int64, m, d int) {
	z += 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = int(doy - (153*mp+2)/5 + 1)
	if mp < 10 {
		m = int(mp + 3)
	} else {
		m = int(mp - 9)
	}
	y = yoe + era*400
	if m <= 2 {
		y++
	}
	return y, m, d
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }
