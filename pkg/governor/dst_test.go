package governor_test

import (
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/governor"
)

// TestDecideDST drives daily cron tasks through Decide across the 2026
// daylight-saving transitions of Europe/Berlin and America/New_York: a
// wall time that does not exist runs once, at the end of the gap; a wall
// time that repeats runs once, at its first instance; every other day runs
// at its wall time. robfig/cron and nats-server skip the spring-forward
// run; flyball must not.
func TestDecideDST(t *testing.T) {
	tests := []struct {
		name, zone, expr string
		day              time.Time // the transition day (a local date)
		want             string    // the run on that day, UTC
	}{
		// Berlin springs forward at 02:00 CET (01:00Z): 02:30 does not exist.
		{"Berlin spring forward, 02:30", "Europe/Berlin", "30 2 * * *", date(2026, 3, 29), "2026-03-29T01:00:00Z"},
		// Berlin falls back at 03:00 CEST (01:00Z): 02:30 happens twice.
		{"Berlin fall back, 02:30", "Europe/Berlin", "30 2 * * *", date(2026, 10, 25), "2026-10-25T00:30:00Z"},
		// New York springs forward at 02:00 EST (07:00Z): 02:30 does not exist.
		{"New York spring forward, 02:30", "America/New_York", "30 2 * * *", date(2026, 3, 8), "2026-03-08T07:00:00Z"},
		// New York falls back at 02:00 EDT (06:00Z): 01:00-02:00 repeats, 02:30 does not.
		{"New York fall back, 02:30", "America/New_York", "30 2 * * *", date(2026, 11, 1), "2026-11-01T07:30:00Z"},
		{"New York fall back, 01:30 (repeated)", "America/New_York", "30 1 * * *", date(2026, 11, 1), "2026-11-01T05:30:00Z"},
		{"Berlin spring forward, 6-field 02:30:15", "Europe/Berlin", "15 30 2 * * *", date(2026, 3, 29), "2026-03-29T01:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loc, err := time.LoadLocation(tt.zone)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Date(tt.day.Year(), tt.day.Month(), tt.day.Day()-3, 12, 0, 0, 0, loc)
			end := time.Date(tt.day.Year(), tt.day.Month(), tt.day.Day()+3, 12, 0, 0, 0, loc)
			slots, decisions := simulate(t, cronSpec(tt.expr, tt.zone), start, end, 2*time.Second, succeed)
			if len(slots) != 6 {
				t.Errorf("%d runs in 6 days: %v", len(slots), slots)
			}
			perDay := map[string][]time.Time{}
			for _, s := range slots {
				key := s.In(loc).Format(time.DateOnly)
				perDay[key] = append(perDay[key], s)
			}
			for d := start; d.Before(end); d = d.AddDate(0, 0, 1) {
				key := d.Format(time.DateOnly)
				if d.Day() == start.Day() {
					continue // accepted at noon: that day's run already passed
				}
				if n := len(perDay[key]); n != 1 {
					t.Errorf("%s: %d runs %v, want exactly 1", key, n, perDay[key])
				}
			}
			runs := perDay[tt.day.Format(time.DateOnly)]
			if len(runs) == 1 && runs[0].UTC().Format(time.RFC3339) != tt.want {
				t.Errorf("transition day ran at %s, want %s", runs[0].UTC().Format(time.RFC3339), tt.want)
			}
			for _, d := range decisions[1:] {
				if d.Source != governor.SourceBaselineCron {
					t.Errorf("source %s, want baseline-cron: %q", d.Source, d.Trail)
				}
			}
		})
	}
}

func date(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }
