package cron_test

import (
	"testing"
	"time"
	_ "time/tzdata" // tests must not depend on the host's zoneinfo

	"github.com/flyballhq/flyball/pkg/cron"
)

func load(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func parse(t testing.TB, expr string) *cron.Schedule {
	t.Helper()
	s, err := cron.Parse(expr)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func utc(t testing.TB, v string) time.Time {
	t.Helper()
	x, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// runsOnDay returns every activation during the local calendar day
// y-m-d in loc, by iterating Next from just before local midnight.
func runsOnDay(t *testing.T, s *cron.Schedule, loc *time.Location, y int, m time.Month, d int) []time.Time {
	t.Helper()
	start := time.Date(y, m, d, 0, 0, 0, 0, loc)
	end := time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	var out []time.Time
	prev := start.Add(-time.Nanosecond)
	for {
		n := s.Next(prev, loc)
		if n.IsZero() {
			t.Fatalf("%s: Next(%v) = zero", s, prev)
		}
		if !n.After(prev) {
			t.Fatalf("%s: Next(%v) = %v, not strictly after", s, prev, n)
		}
		if !n.Before(end) {
			break
		}
		if n.Location() != loc {
			t.Fatalf("%s: result location %v, want %v", s, n.Location(), loc)
		}
		out = append(out, n)
		prev = n
	}
	return out
}

type dstDay struct {
	zone string
	y    int
	m    time.Month
	d    int
}

var (
	berlinSpring = dstDay{"Europe/Berlin", 2026, time.March, 29}      // 02:00 CET -> 03:00 CEST at 01:00Z
	berlinFall   = dstDay{"Europe/Berlin", 2026, time.October, 25}    // 03:00 CEST -> 02:00 CET at 01:00Z
	nySpring     = dstDay{"America/New_York", 2026, time.March, 8}    // 02:00 EST -> 03:00 EDT at 07:00Z
	nyFall       = dstDay{"America/New_York", 2026, time.November, 1} // 02:00 EDT -> 01:00 EST at 06:00Z
)

func TestDSTRunsOnTransitionDays(t *testing.T) {
	tests := []struct {
		day  dstDay
		expr string
		want []string // exact UTC instants; nil means only check the count
		n    int
	}{
		// Spring forward: missing wall times run once, at the end of the gap.
		{berlinSpring, "30 2 * * *", []string{"2026-03-29T01:00:00Z"}, 1},
		{berlinSpring, "*/15 2 * * *", []string{"2026-03-29T01:00:00Z"}, 1},
		{berlinSpring, "0 30 2 * * *", []string{"2026-03-29T01:00:00Z"}, 1},
		{berlinSpring, "30 1,2,3 * * *", []string{"2026-03-29T00:30:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:30:00Z"}, 3},
		// 02:xx (in the gap) and 03:00 (the gap end) share one instant: one run.
		{berlinSpring, "0 2,3 * * *", []string{"2026-03-29T01:00:00Z"}, 1},
		{berlinSpring, "0 * * * *", nil, 23},
		{berlinSpring, "*/15 * * * *", nil, 92},
		{berlinSpring, "* * * * *", nil, 23 * 60},
		{berlinSpring, "* * * * * *", nil, 23 * 3600},
		{nySpring, "30 2 * * *", []string{"2026-03-08T07:00:00Z"}, 1},
		{nySpring, "*/15 2 * * *", []string{"2026-03-08T07:00:00Z"}, 1},
		{nySpring, "0 * * * *", nil, 23},
		{nySpring, "*/15 * * * *", nil, 92},
		{nySpring, "* * * * *", nil, 23 * 60},
		// Fall back: repeated wall times run once, at their first instance.
		{berlinFall, "30 2 * * *", []string{"2026-10-25T00:30:00Z"}, 1},
		{berlinFall, "*/15 2 * * *", []string{"2026-10-25T00:00:00Z", "2026-10-25T00:15:00Z", "2026-10-25T00:30:00Z", "2026-10-25T00:45:00Z"}, 4},
		{berlinFall, "0 1-4 * * *", []string{"2026-10-24T23:00:00Z", "2026-10-25T00:00:00Z", "2026-10-25T02:00:00Z", "2026-10-25T03:00:00Z"}, 4},
		{berlinFall, "0 * * * *", nil, 24},
		{berlinFall, "*/15 * * * *", nil, 96},
		{berlinFall, "* * * * *", nil, 24 * 60},
		{berlinFall, "* * * * * *", nil, 24 * 3600},
		{nyFall, "30 1 * * *", []string{"2026-11-01T05:30:00Z"}, 1},
		{nyFall, "30 2 * * *", []string{"2026-11-01T07:30:00Z"}, 1}, // 02:30 is not repeated in New York
		{nyFall, "*/15 1 * * *", []string{"2026-11-01T05:00:00Z", "2026-11-01T05:15:00Z", "2026-11-01T05:30:00Z", "2026-11-01T05:45:00Z"}, 4},
		{nyFall, "0 * * * *", nil, 24},
		{nyFall, "*/15 * * * *", nil, 96},
		{nyFall, "* * * * *", nil, 24 * 60},
	}
	for _, tt := range tests {
		t.Run(tt.day.zone+"/"+time.Date(tt.day.y, tt.day.m, tt.day.d, 0, 0, 0, 0, time.UTC).Format("2006-01-02")+"/"+tt.expr, func(t *testing.T) {
			loc := load(t, tt.day.zone)
			s := parse(t, tt.expr)
			got := runsOnDay(t, s, loc, tt.day.y, tt.day.m, tt.day.d)
			if len(got) != tt.n {
				t.Fatalf("got %d runs, want %d", len(got), tt.n)
			}
			seen := make(map[time.Time]bool, len(got))
			for i, x := range got {
				if i > 0 && !x.After(got[i-1]) {
					t.Fatalf("run %d (%v) not after run %d (%v)", i, x, i-1, got[i-1])
				}
				if seen[x.UTC()] {
					t.Fatalf("duplicate run %v", x)
				}
				seen[x.UTC()] = true
			}
			for i, w := range tt.want {
				if want := utc(t, w); !got[i].Equal(want) {
					t.Errorf("run %d = %v (%v), want %v", i, got[i], got[i].UTC(), want)
				}
			}
		})
	}
}

// An hourly job runs exactly once per wall-clock hour on fall-back days:
// the hour that occurs twice runs only on its first pass.
func TestDSTHourlyOncePerWallHour(t *testing.T) {
	for _, day := range []dstDay{berlinFall, nyFall} {
		loc := load(t, day.zone)
		runs := runsOnDay(t, parse(t, "0 * * * *"), loc, day.y, day.m, day.d)
		var perHour [24]int
		for _, r := range runs {
			l := r.In(loc)
			if l.Minute() != 0 || l.Second() != 0 {
				t.Errorf("%s: run at %v is not on the hour", day.zone, l)
			}
			perHour[l.Hour()]++
		}
		for h, n := range perHour {
			if n != 1 {
				t.Errorf("%s: wall hour %02d ran %d times, want 1", day.zone, h, n)
			}
		}
	}
	// Spring forward: every hour but the missing one; 02:00 runs at 03:00
	// (together with 03:00 itself).
	for _, day := range []dstDay{berlinSpring, nySpring} {
		loc := load(t, day.zone)
		runs := runsOnDay(t, parse(t, "0 * * * *"), loc, day.y, day.m, day.d)
		var perHour [24]int
		for _, r := range runs {
			perHour[r.In(loc).Hour()]++
		}
		for h, n := range perHour {
			want := 1
			if h == 2 {
				want = 0
			}
			if n != want {
				t.Errorf("%s: wall hour %02d ran %d times, want %d", day.zone, h, n, want)
			}
		}
	}
}

// Next called from inside the repeated hour must not re-run wall times whose
// first instance already passed, even if their second instance is still ahead.
func TestDSTNextFromSecondPass(t *testing.T) {
	ber := load(t, "Europe/Berlin")
	ny := load(t, "America/New_York")
	tests := []struct {
		loc        *time.Location
		expr, from string
		want       string
	}{
		// Berlin: first pass 00:00Z-01:00Z (CEST), second pass 01:00Z-02:00Z (CET).
		{ber, "30 2 * * *", "2026-10-25T01:10:00Z", "2026-10-26T01:30:00Z"},
		{ber, "30 2 * * *", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"},
		{ber, "30 2 * * *", "2026-10-25T00:29:59.999Z", "2026-10-25T00:30:00Z"},
		{ber, "0 * * * *", "2026-10-25T00:00:00Z", "2026-10-25T02:00:00Z"},
		{ber, "0 * * * *", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z"},
		{ber, "*/15 * * * *", "2026-10-25T00:50:00Z", "2026-10-25T02:00:00Z"},
		{ber, "*/15 * * * *", "2026-10-25T01:20:00Z", "2026-10-25T02:00:00Z"},
		{ber, "* * * * * *", "2026-10-25T00:59:59Z", "2026-10-25T02:00:00Z"},
		{ber, "* * * * * *", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z"},
		{ber, "* * * * * *", "2026-10-25T01:59:59.5Z", "2026-10-25T02:00:00Z"},
		{ber, "59 59 2 * * *", "2026-10-25T00:59:58Z", "2026-10-25T00:59:59Z"},
		{ber, "59 59 2 * * *", "2026-10-25T00:59:59Z", "2026-10-26T01:59:59Z"},
		// New York: first pass 05:00Z-06:00Z (EDT), second pass 06:00Z-07:00Z (EST).
		{ny, "30 1 * * *", "2026-11-01T06:10:00Z", "2026-11-02T06:30:00Z"},
		{ny, "*/15 * * * *", "2026-11-01T06:40:00Z", "2026-11-01T07:00:00Z"},
		{ny, "0 * * * *", "2026-11-01T05:00:00Z", "2026-11-01T07:00:00Z"},
		// Spring forward: from inside the collapsed run, nothing repeats.
		{ber, "*/15 2,3 * * *", "2026-03-29T00:59:59Z", "2026-03-29T01:00:00Z"},
		{ber, "*/15 2,3 * * *", "2026-03-29T01:00:00Z", "2026-03-29T01:15:00Z"},
		{ny, "30 2 * * *", "2026-03-08T06:59:59.999999999Z", "2026-03-08T07:00:00Z"},
		{ny, "30 2 * * *", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"},
	}
	for _, tt := range tests {
		s := parse(t, tt.expr)
		from := utc(t, tt.from)
		if got, want := s.Next(from, tt.loc), utc(t, tt.want); !got.Equal(want) {
			t.Errorf("%s in %v: Next(%v) = %v, want %v", tt.expr, tt.loc, from, got.UTC(), want)
		}
	}
}

// Iterating across a whole year never yields duplicates or goes backwards,
// and the number of daily runs equals the number of days.
func TestDSTYearIteration(t *testing.T) {
	for _, zone := range []string{"Europe/Berlin", "America/New_York"} {
		loc := load(t, zone)
		for _, c := range []struct {
			expr string
			n    int
		}{
			{"30 2 * * *", 365},
			{"0 0 * * *", 365},
			{"0 9 * * MON-FRI", 261},
			{"0 * * * *", 365*24 - 1}, // the spring-forward hour is missing; the fall-back hour runs once
		} {
			s := parse(t, c.expr)
			from := time.Date(2026, 1, 1, 0, 0, 0, 0, loc).Add(-time.Nanosecond)
			end := time.Date(2027, 1, 1, 0, 0, 0, 0, loc)
			n := 0
			for x := s.Next(from, loc); x.Before(end); {
				n++
				nx := s.Next(x, loc)
				if !nx.After(x) {
					t.Fatalf("%s %q: Next(%v) = %v", zone, c.expr, x, nx)
				}
				x = nx
			}
			if n != c.n {
				t.Errorf("%s %q: %d runs in 2026, want %d", zone, c.expr, n, c.n)
			}
		}
	}
}
