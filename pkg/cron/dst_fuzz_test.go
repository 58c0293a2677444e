package cron

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // tests must not depend on the host's zoneinfo
)

// fuzzDSTZones shift their clocks in every way tzdata knows after 1980:
// an hour (New York, London, Berlin, St John's at -3:30), half an hour
// (Lord Howe), at midnight (São Paulo until 2019, so a day starts at
// 01:00), at 02:45 by an hour (Chatham at +12:45), by two hours (Troll),
// backwards in summer (Dublin's negative DST, Casablanca's Ramadan
// suspensions), by a whole day (Apia skipped 2011-12-30), and by a
// quarter of an hour once (Kathmandu, 1986).
var fuzzDSTZones = []string{
	"America/New_York", "Europe/London", "Australia/Lord_Howe", "Europe/Berlin",
	"America/St_Johns", "America/Sao_Paulo", "Pacific/Chatham", "Antarctica/Troll",
	"Europe/Dublin", "Africa/Casablanca", "Pacific/Apia", "Asia/Kathmandu", "UTC",
}

// FuzzNextDST checks Next against the DST rule of the package
// documentation, computed apart from it: every wall time the expression
// selects activates once, at the earliest instant at which loc's wall
// clock reads it or later (activations). Around a zone transition near the
// fuzzed time, iterating Next from it
//   - returns instants strictly after their argument, in whole seconds,
//     expressed in loc;
//   - returns them with strictly increasing wall-clock readings: a
//     repeated (fall-back) wall time never runs twice, and a time in the
//     second pass of the repeated hour does not run again what the first
//     pass ran;
//   - skips none and adds none: the activations, in order, a wall time in
//     a spring-forward gap at the instant that ends it (several wall times
//     there collapsing into one run).
//
// The expression is built from one bitmask per field (fuzzExpr), so every
// input is a valid one (FuzzParse covers the syntax). year picks the year
// (1980-2039) and the day of the year to search from for the next
// transition; near is the offset from it, in milliseconds, within 36
// hours either way.
func FuzzNextDST(f *testing.F) {
	at := func(year, day int) int64 { return int64(year-1980) + 60*int64(day) }
	hour := int64(time.Hour / time.Millisecond)
	for _, seed := range []struct {
		expr       string
		zone       uint8
		year, near int64
	}{
		// New York, 2026-11-01: 01:00-02:00 repeats (05:00Z-07:00Z).
		{"30 1 * * *", 0, at(2026, 300), -2 * hour},
		{"*/15 * * * *", 0, at(2026, 300), -90 * 60_000},
		{"*/15 * * * *", 0, at(2026, 300), 40 * 60_000}, // from the second pass
		{"0 30 1 * * *", 0, at(2026, 300), -10 * 60_000},
		// New York, 2026-03-08: 02:00-03:00 does not exist.
		{"30 2 * * *", 0, at(2026, 60), -hour},
		{"*/10 2-3 * * *", 0, at(2026, 60), -30 * 60_000},
		// London: 01:00 GMT → 02:00 BST (2026-03-29), 02:00 BST → 01:00 GMT (2026-10-25).
		{"30 1 * * *", 1, at(2026, 80), -hour},
		{"30 1 * * *", 1, at(2026, 290), -2 * hour},
		{"* 1 * * *", 1, at(2026, 290), -30 * 60_000},
		{"@hourly", 1, at(2026, 290), -3 * hour},
		// Lord Howe: 02:00 → 02:30 (2026-10-04), 02:00 → 01:30 (2026-04-05).
		{"*/15 1-2 * * *", 2, at(2026, 270), -hour},
		{"0,30 1-2 * * *", 2, at(2026, 90), -hour},
		{"45 1 * * *", 2, at(2026, 90), 20 * 60_000},
		{"0 15 2 * * *", 2, at(2026, 270), -2 * hour},
		// Every second across a repeated hour, from its second pass.
		{"* * * * * *", 3, at(2026, 290), 30 * 60_000},
		{"*/7 * * * * *", 4, at(2026, 300), -2000},
		// São Paulo 2018-11-04: midnight does not exist.
		{"@daily", 5, at(2018, 300), -hour},
		{"0 0 * * SUN", 5, at(2018, 300), -2 * hour},
		{"*/30 * * * *", 6, at(2026, 260), -hour},
		{"0 1-3 * * *", 7, at(2026, 80), -3 * hour},
		{"0 0 29 2 *", 8, at(2028, 0), 0},
		{"0 0 13 * FRI", 8, at(2026, 80), -hour},
		{"0 2 * * *", 9, at(2026, 40), -hour},
		{"0 0 * * *", 10, at(2011, 360), -2 * hour}, // Apia skips 2011-12-30
		{"*/15 * * * *", 11, at(1986, 0), -hour},    // Kathmandu +5:30 → +5:45
	} {
		s, err := Parse(seed.expr)
		if err != nil {
			f.Fatal(err)
		}
		var flags uint8
		if len(strings.Fields(seed.expr)) == 6 {
			flags |= 1
		}
		if s.domStar {
			flags |= 2
		}
		if s.dowStar {
			flags |= 4
		}
		f.Add(s.second, s.minute, uint32(s.hour), uint32(s.dom), uint16(s.month), uint8(s.dow), flags, seed.zone, seed.year, seed.near)
	}
	locs := make([]*time.Location, len(fuzzDSTZones))
	for i, z := range fuzzDSTZones {
		loc, err := time.LoadLocation(z)
		if err != nil {
			f.Fatal(err)
		}
		locs[i] = loc
	}
	f.Fuzz(func(t *testing.T, sec, minute uint64, hour, dom uint32, month uint16, dow, flags, zone uint8, year, near int64) {
		expr := fuzzExpr(sec, minute, hour, dom, month, dow, flags)
		s, err := Parse(expr)
		if err != nil {
			t.Fatalf("built an invalid expression: %v", err)
		}
		loc := locs[int(zone)%len(locs)]
		y := 1980 + int(fuzzMod(year, 60))
		t0 := time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, int(fuzzMod(year/60, 366)))
		// The first transition after t0 (or a year boundary Go reports
		// for a zone ruled by its TZ string, or none).
		tr := t0
		if _, end := t0.In(loc).ZoneBounds(); !end.IsZero() {
			tr = end
		}
		from := tr.Add(time.Duration(fuzzSigned(near, 36*int64(time.Hour/time.Millisecond))) * time.Millisecond)
		const limit = 400 // activations compared
		window := from.Unix() + 48*3600
		want := activations(s, loc, from, window, limit)

		prev, prevWall := from, int64(math.MinInt64)
		for i := 0; i <= len(want) && i < limit; i++ {
			got := s.Next(prev, loc)
			if i == len(want) {
				// No more activations in the window: the next one is
				// after it (or there is none at all).
				if !got.IsZero() && got.Unix() <= window {
					t.Fatalf("%q in %s from %s: Next(%s) = %s, an activation that is none (wall %s)",
						expr, loc, from.UTC(), prev.UTC(), got.UTC(), got.In(loc).Format(time.DateTime))
				}
				break
			}
			if got.IsZero() {
				t.Fatalf("%q in %s from %s: Next(%s) = zero, want %s", expr, loc, from.UTC(), prev.UTC(), time.Unix(want[i], 0).UTC())
			}
			if !got.After(prev) || got.Nanosecond() != 0 || got.Location() != loc {
				t.Fatalf("%q in %s: Next(%s) = %s: not strictly after, whole seconds, in the zone", expr, loc, prev.UTC(), got)
			}
			w := wallOf(got.Unix(), loc)
			if w <= prevWall {
				t.Fatalf("%q in %s from %s: Next(%s) = %s reads %s on the wall clock, not after the run before it (%s): a wall time ran twice",
					expr, loc, from.UTC(), prev.UTC(), got.UTC(), got.In(loc).Format(time.DateTime), prev.In(loc).Format(time.DateTime))
			}
			if got.Unix() != want[i] {
				t.Fatalf("%q in %s from %s: activation %d is Next(%s) = %s (wall %s), want %s (wall %s)",
					expr, loc, from.UTC(), i, prev.UTC(), got.UTC(), got.In(loc).Format(time.DateTime),
					time.Unix(want[i], 0).UTC(), time.Unix(want[i], 0).In(loc).Format(time.DateTime))
			}
			prev, prevWall = got, w
		}
	})
}

// fuzzExpr writes a cron expression from one bitmask per field: a field
// lists its values ("0,15,30"), or is "*" when it selects them all or
// none. Bit 0 of flags adds the seconds field; bits 1 and 2 write
// day-of-month and day-of-week as "*" (the Vixie rule: both restricted
// match either); bit 7 of dow is the value 7 (Sunday again).
func fuzzExpr(sec, minute uint64, hour, dom uint32, month uint16, dow, flags uint8) string {
	field := func(mask uint64, lo, hi int, star bool) string {
		var vals []string
		for v := lo; v <= hi; v++ {
			if mask&(1<<uint(v)) != 0 {
				vals = append(vals, strconv.Itoa(v))
			}
		}
		if star || len(vals) == 0 || len(vals) == hi-lo+1 {
			return "*"
		}
		return strings.Join(vals, ",")
	}
	fs := []string{
		field(minute, 0, 59, false), field(uint64(hour), 0, 23, false),
		field(uint64(dom), 1, 31, flags&2 != 0), field(uint64(month), 1, 12, false),
		field(uint64(dow), 0, 7, flags&4 != 0),
	}
	if flags&1 != 0 {
		fs = append([]string{field(sec, 0, 59, false)}, fs...)
	}
	return strings.Join(fs, " ")
}

// activations is the oracle of the DST rule: the activation instants (Unix
// seconds) after from, at most end, at most limit+1 of them, in order. It
// walks the instants minute by minute (every zone offset and transition
// since 1980 falls on a whole minute) and keeps the highest wall-clock
// reading shown so far: the wall times a minute's readings newly reach
// activate in it, those that a jump forward skipped at its first instant.
// A wall time the clock shows a second time (fall back) was reached
// before and activates nothing.
func activations(s *Schedule, loc *time.Location, from time.Time, end int64, limit int) []int64 {
	fs := from.Unix()
	lo := fuzzFloorDiv(fs, 60) * 60
	high := int64(math.MinInt64) // the highest wall reading shown before x
	for x := lo - 2*secondsPerDay; x < lo; x += 60 {
		high = max(high, wallOf(x, loc)+59)
	}
	var out []int64
	for x := lo; x <= end && len(out) <= limit; x += 60 {
		w0 := wallOf(x, loc)
		top := w0 + 59 // no transition within the minute
		for m := fuzzFloorDiv(high+1, 60) * 60; m <= top; m += 60 {
			if !s.matchesMinute(m) {
				continue
			}
			for sec := range int64(60) {
				w := m + sec
				if w <= high || w > top || s.second&(1<<uint(sec)) == 0 {
					continue
				}
				a := x // reached at the minute's first instant (a jump forward)...
				if w > w0 {
					a = x + (w - w0) // ...or as the minute passes
				}
				if a > fs && (len(out) == 0 || out[len(out)-1] != a) {
					out = append(out, a)
				}
			}
		}
		high = max(high, top)
	}
	return out
}

// matchesMinute reports whether the naive wall time m (Unix seconds read
// as UTC) falls on a date, hour and minute the expression selects, by the
// Vixie rule of doc.go, computed with package time rather than the
// bitsets' own calendar.
func (s *Schedule) matchesMinute(m int64) bool {
	c := time.Unix(m, 0).UTC()
	bit := func(mask uint64, v int) bool { return mask&(1<<uint(v)) != 0 }
	if !bit(s.minute, c.Minute()) || !bit(s.hour, c.Hour()) || !bit(s.month, int(c.Month())) {
		return false
	}
	dom, dow := bit(s.dom, c.Day()), bit(s.dow, int(c.Weekday()))
	if s.domStar || s.dowStar {
		return dom && dow
	}
	return dom || dow
}

// wallOf is the wall-clock reading of instant x in loc, as naive Unix
// seconds.
func wallOf(x int64, loc *time.Location) int64 {
	_, off := time.Unix(x, 0).In(loc).Zone()
	return x + int64(off)
}

func fuzzMod(x, n int64) int64 { return (x%n + n) % n }

// fuzzSigned maps x into [-n, n], keeping x there (so seeds read as
// offsets).
func fuzzSigned(x, n int64) int64 { return fuzzMod(x%(2*n+1)+n, 2*n+1) - n }

func fuzzFloorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
