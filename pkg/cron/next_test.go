package cron

import (
	"sort"
	"sync"
	"testing"
	"time"
)

func mustParse(t testing.TB, expr string) *Schedule {
	t.Helper()
	s, err := Parse(expr)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustTime(t testing.TB, v string) time.Time {
	t.Helper()
	x, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestNextUTC(t *testing.T) {
	tests := []struct {
		expr, from string
		want       []string // successive activations; "" means zero time
	}{
		{"* * * * * *", "2026-01-01T00:00:00Z", []string{"2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z"}},
		{"* * * * * *", "2026-01-01T00:00:00.5Z", []string{"2026-01-01T00:00:01Z"}},
		{"* * * * * *", "2026-12-31T23:59:59Z", []string{"2027-01-01T00:00:00Z"}},
		{"* * * * *", "2026-01-01T00:00:59.999999999Z", []string{"2026-01-01T00:01:00Z"}},
		{"*/5 * * * *", "2026-01-01T00:00:00Z", []string{"2026-01-01T00:05:00Z", "2026-01-01T00:10:00Z"}},
		{"*/5 * * * *", "2026-01-01T00:03:00Z", []string{"2026-01-01T00:05:00Z"}},
		{"*/5 * * * *", "2026-01-01T23:57:00Z", []string{"2026-01-02T00:00:00Z"}},
		{"@hourly", "2026-01-01T00:00:00Z", []string{"2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"}},
		{"@hourly", "2026-01-01T00:59:59Z", []string{"2026-01-01T01:00:00Z"}},
		{"@daily", "2026-02-28T12:00:00Z", []string{"2026-03-01T00:00:00Z"}},
		{"@weekly", "2026-01-01T00:00:00Z", []string{"2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"}}, // Sundays
		{"@monthly", "2026-01-31T00:00:00Z", []string{"2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"}},
		{"@yearly", "2026-01-01T00:00:00Z", []string{"2027-01-01T00:00:00Z"}},
		// Vixie OR rule: the 13th OR any Friday (2026-02-13 is a Friday).
		{"0 0 13 * FRI", "2026-02-01T00:00:00Z", []string{"2026-02-06T00:00:00Z", "2026-02-13T00:00:00Z", "2026-02-20T00:00:00Z", "2026-02-27T00:00:00Z", "2026-03-06T00:00:00Z", "2026-03-13T00:00:00Z"}},
		{"0 0 1,15 * MON", "2026-06-01T00:00:00Z", []string{"2026-06-08T00:00:00Z", "2026-06-15T00:00:00Z", "2026-06-22T00:00:00Z", "2026-06-29T00:00:00Z", "2026-07-01T00:00:00Z", "2026-07-06T00:00:00Z"}},
		// dom starts with '*': AND rule (odd days that are Mondays).
		{"0 0 */2 * MON", "2026-06-01T00:00:00Z", []string{"2026-06-15T00:00:00Z", "2026-06-29T00:00:00Z", "2026-07-13T00:00:00Z"}},
		{"0 0 ? * MON", "2026-06-01T00:00:00Z", []string{"2026-06-08T00:00:00Z"}},
		{"0 0 13 * ?", "2026-06-01T00:00:00Z", []string{"2026-06-13T00:00:00Z", "2026-07-13T00:00:00Z"}},
		// Names, case-insensitive.
		{"0 12 * feb,Aug sat", "2026-03-01T00:00:00Z", []string{"2026-08-01T12:00:00Z", "2026-08-08T12:00:00Z"}},
		{"0 0 1 JAN-MAR *", "2026-02-15T00:00:00Z", []string{"2026-03-01T00:00:00Z", "2027-01-01T00:00:00Z"}},
		{"0 9 * * 7", "2026-01-01T00:00:00Z", []string{"2026-01-04T09:00:00Z"}},
		// Steps.
		{"10-40/15 8-18/5 * * *", "2026-01-01T00:00:00Z", []string{"2026-01-01T08:10:00Z", "2026-01-01T08:25:00Z", "2026-01-01T08:40:00Z", "2026-01-01T13:10:00Z"}},
		{"30/10 * * * * *", "2026-01-01T00:00:55Z", []string{"2026-01-01T00:01:30Z", "2026-01-01T00:01:40Z"}},
		{"0 0 0 1/10 * *", "2026-01-25T00:00:00Z", []string{"2026-01-31T00:00:00Z", "2026-02-01T00:00:00Z", "2026-02-11T00:00:00Z"}},
		{"0 0 31 * *", "2026-01-31T00:00:00Z", []string{"2026-03-31T00:00:00Z", "2026-05-31T00:00:00Z"}},
		// Feb 29 and leap years (2100 is not a leap year, 2000 is).
		{"0 0 29 2 *", "2026-01-01T00:00:00Z", []string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
		{"0 0 29 2 *", "1999-03-01T00:00:00Z", []string{"2000-02-29T00:00:00Z"}},
		{"0 0 29 2 *", "2096-03-01T00:00:00Z", []string{"2104-02-29T00:00:00Z"}}, // 8 years on
		// Rare but not never: a leap day that is a Sunday (2060, then 2088, then 2128).
		{"0 0 29 2 */7", "2060-03-01T00:00:00Z", []string{"2088-02-29T00:00:00Z", "2128-02-29T00:00:00Z"}},
		// January 1st that is a Monday (dom */31 is the 1st only): 12 years apart after 2091.
		{"0 0 */31 1 1", "2091-01-02T00:00:00Z", []string{"2103-01-01T00:00:00Z"}},
		{"0 0 29 2 *", "2099-03-01T00:00:00Z", []string{"2104-02-29T00:00:00Z"}},
		// Never.
		{"0 0 30 2 *", "2026-01-01T00:00:00Z", []string{""}},
		{"0 0 31 4,6,9,11 *", "2026-01-01T00:00:00Z", []string{""}},
		// Exactly at an activation: strictly after.
		{"0 0 * * *", "2026-05-05T00:00:00Z", []string{"2026-05-06T00:00:00Z"}},
		{"0 0 * * *", "2026-05-04T23:59:59.999999999Z", []string{"2026-05-05T00:00:00Z"}},
		// Far past and the year-1 boundary.
		{"0 0 1 1 *", "0001-01-01T00:00:00Z", []string{"0002-01-01T00:00:00Z"}},
		{"0 0 1 1 *", "1969-12-31T23:59:59Z", []string{"1970-01-01T00:00:00Z"}},
		{"0 0 1 1 *", "1900-06-01T00:00:00Z", []string{"1901-01-01T00:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.expr+"@"+tt.from, func(t *testing.T) {
			s := mustParse(t, tt.expr)
			from := mustTime(t, tt.from)
			for _, w := range tt.want {
				got := s.Next(from, time.UTC)
				if w == "" {
					if !got.IsZero() {
						t.Fatalf("Next(%v) = %v, want zero time", from, got)
					}
					return
				}
				if want := mustTime(t, w); !got.Equal(want) {
					t.Fatalf("Next(%v) = %v, want %v", from, got, want)
				}
				if got.Location() != time.UTC {
					t.Fatalf("location = %v, want UTC", got.Location())
				}
				from = got
			}
		})
	}
}

func TestNextEdgeCases(t *testing.T) {
	s := mustParse(t, "* * * * * *")
	if got := (*Schedule)(nil).Next(time.Now(), time.UTC); !got.IsZero() {
		t.Errorf("nil schedule: %v", got)
	}
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if got, want := s.Next(from, nil), from.Add(time.Second); !got.Equal(want) {
		t.Errorf("nil location: %v, want %v", got, want)
	}
	// Non-UTC input time: evaluation uses loc, not t's location.
	tokyo := time.FixedZone("JST", 9*3600)
	d := mustParse(t, "0 0 * * *")
	if got, want := d.Next(from.In(tokyo), time.UTC), from.Add(24*time.Hour); !got.Equal(want) {
		t.Errorf("input in other zone: %v, want %v", got, want)
	}
	if got, want := d.Next(from, tokyo), time.Date(2026, 1, 2, 0, 0, 0, 0, tokyo); !got.Equal(want) || got.Location() != tokyo {
		t.Errorf("fixed zone: %v, want %v", got, want)
	}
	// Absurd fixed offsets still work.
	odd := time.FixedZone("odd", 1<<30)
	if got := d.Next(from, odd); !got.After(from) || got.In(odd).Hour() != 0 {
		t.Errorf("huge fixed offset: %v", got)
	}
	// Out-of-range inputs return the zero time rather than misbehaving.
	for _, x := range []time.Time{{}, time.Unix(1<<62, 0), time.Unix(-1<<62, 0), time.Date(-5000, 1, 1, 0, 0, 0, 0, time.UTC)} {
		got := s.Next(x, time.UTC)
		if !got.IsZero() && !got.After(x) {
			t.Errorf("Next(%v) = %v", x, got)
		}
	}
	if got, want := s.Next(time.Time{}, time.UTC), (time.Time{}).Add(time.Second); !got.Equal(want) {
		t.Errorf("Next(zero) = %v, want %v", got, want)
	}
}

func TestCivil(t *testing.T) {
	for d := int64(-1_000_000); d <= 1_000_000; d += 13 {
		want := time.Unix(d*secondsPerDay, 0).UTC()
		y, m, dd := civilFromDays(d)
		if y != int64(want.Year()) || m != int(want.Month()) || dd != want.Day() {
			t.Fatalf("civilFromDays(%d) = %d-%d-%d, want %v", d, y, m, dd, want)
		}
		if got := daysFromCivil(y, m, dd); got != d {
			t.Fatalf("daysFromCivil(%d-%d-%d) = %d, want %d", y, m, dd, got, d)
		}
		if int(floorMod(d+4, 7)) != int(want.Weekday()) {
			t.Fatalf("weekday of %d", d)
		}
		if dd == 1 && daysIn(y, m) != time.Date(int(y), time.Month(m)+1, 0, 0, 0, 0, 0, time.UTC).Day() {
			t.Fatalf("daysIn(%d, %d)", y, m)
		}
	}
}

func TestNextConcurrent(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	s := mustParse(t, "*/7 * * * *")
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			x := time.Date(2026, 11, 1, g, 0, 0, 0, time.UTC)
			for range 500 {
				n := s.Next(x, ny)
				if !n.After(x) {
					t.Errorf("Next(%v) = %v", x, n)
					return
				}
				x = n
			}
		})
	}
	wg.Wait()
}

// matchesWall reports whether the wall time w (naive seconds) matches s,
// using the time package rather than the bitset walk under test.
func matchesWall(s *Schedule, w int64) bool {
	c := time.Unix(w, 0).UTC()
	has := func(bits uint64, v int) bool { return bits&(1<<uint(v)) != 0 }
	if !has(s.second, c.Second()) || !has(s.minute, c.Minute()) || !has(s.hour, c.Hour()) || !has(s.month, int(c.Month())) {
		return false
	}
	dom, dow := has(s.dom, c.Day()), has(s.dow, int(c.Weekday()))
	if s.domStar || s.dowStar {
		return dom && dow
	}
	return dom || dow
}

// wallClock holds the wall-clock readings (naive seconds) of loc at every
// whole minute from start on.
type wallClock struct {
	start int64
	walls []int64
}

func newWallClock(loc *time.Location, from, to time.Time) *wallClock {
	start := from.Unix() - from.Unix()%60 - 2*secondsPerDay // room to warm up maxSeen
	wc := &wallClock{start: start}
	for x := start; x <= to.Unix(); x += 60 {
		_, off := time.Unix(x, 0).In(loc).Zone()
		wc.walls = append(wc.walls, x+int64(off))
	}
	return wc
}

// refActivations computes by brute force all activation instants in
// (from, end of wc] for a minute-granular schedule in a zone whose offsets
// and transitions are minute-aligned. It follows the documented definition
// directly: the activation of matching wall time W is the first instant at
// which the wall clock reads >= W; scanning instants minute by minute, an
// instant x is an activation iff some matching W satisfies
// maxSeen < W <= wall(x), where maxSeen is the largest reading before x.
func refActivations(s *Schedule, wc *wallClock, from time.Time) []time.Time {
	maxSeen := wc.walls[0]
	var out []time.Time
	for i := 1; i < len(wc.walls); i++ {
		x, wx := wc.start+int64(i)*60, wc.walls[i]
		hit := false
		for w := maxSeen + 60; w <= wx; w += 60 {
			if matchesWall(s, w) {
				hit = true
				break
			}
		}
		maxSeen = max(maxSeen, wx)
		if hit && x > from.Unix() {
			out = append(out, time.Unix(x, 0))
		}
	}
	return out
}

// transitions returns the zone transitions of loc in [from, to).
func transitions(loc *time.Location, from, to time.Time) []time.Time {
	var out []time.Time
	x := from
	for range 1000 {
		_, end := x.In(loc).ZoneBounds()
		if end.IsZero() || !end.Before(to) {
			break
		}
		out = append(out, end)
		x = end
	}
	return out
}

// TestNextMatchesReference cross-checks Next against the brute-force
// reference around every transition of a set of zones with unusual DST
// rules (30-minute DST, negative DST, skipped day, Ramadan DST, ...).
func TestNextMatchesReference(t *testing.T) {
	zones := []string{
		"Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Apia",
		"America/Santiago", "Europe/Dublin", "Africa/Casablanca", "America/St_Johns",
		"Pacific/Chatham", "Asia/Tehran", "America/Havana",
	}
	exprs := []string{
		"* * * * *", "*/15 * * * *", "0 * * * *", "30 * * * *", "30 2 * * *", "*/15 2 * * *",
		"0 0 * * *", "0,30 1-3 * * *", "45 1 * * 0", "59 23 * * *", "0 3 * * *", "0 12 * * *",
		"*/20 0-1 * * *", "0 0 1 * *",
	}
	if testing.Short() {
		zones = zones[:3]
	}
	periods := []struct{ from, to time.Time }{
		{time.Date(2011, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2012, 1, 1, 0, 0, 0, 0, time.UTC)},
		{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
		{time.Date(2045, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2046, 1, 1, 0, 0, 0, 0, time.UTC)}, // TZ-rule extension
	}
	for _, zone := range zones {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		var trans []time.Time
		for _, p := range periods {
			trans = append(trans, transitions(loc, p.from, p.to)...)
		}
		if len(trans) == 0 {
			t.Fatalf("%s: no transitions found", zone)
		}
		for _, tr := range trans {
			from, to := tr.Add(-26*time.Hour), tr.Add(26*time.Hour)
			wc := newWallClock(loc, from, to)
			for _, expr := range exprs {
				s := mustParse(t, expr)
				want := refActivations(s, wc, from)
				// Iterating Next reproduces the reference sequence.
				var got []time.Time
				for x := s.Next(from, loc); !x.IsZero() && !x.After(to); x = s.Next(x, loc) {
					got = append(got, x)
					if len(got) > len(want)+1 {
						break
					}
				}
				if !equalTimes(got, want) {
					t.Fatalf("%s %q around %v:\n got %v\nwant %v", zone, expr, tr, fmtTimes(got, loc), fmtTimes(want, loc))
				}
				// Next from arbitrary instants near the transition.
				for x := tr.Add(-3 * time.Hour); x.Before(tr.Add(3 * time.Hour)); x = x.Add(7 * time.Minute) {
					for _, at := range []time.Time{x, x.Add(-time.Nanosecond), x.Add(29 * time.Second)} {
						i := sort.Search(len(want), func(i int) bool { return want[i].After(at) })
						if i == len(want) {
							continue
						}
						if got := s.Next(at, loc); !got.Equal(want[i]) {
							t.Fatalf("%s %q: Next(%v) = %v, want %v", zone, expr, at.In(loc), got.In(loc), want[i].In(loc))
						}
					}
				}
			}
		}
	}
}

func equalTimes(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

func fmtTimes(ts []time.Time, loc *time.Location) []string {
	out := make([]string, len(ts))
	for i, x := range ts {
		out[i] = x.In(loc).Format("01-02 15:04:05 MST") + "=" + x.UTC().Format("15:04Z")
	}
	return out
}
