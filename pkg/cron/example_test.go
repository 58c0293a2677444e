package cron_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/cron"
)

func Example() {
	s, err := cron.Parse("0 30 9 * * MON-FRI")
	if err != nil {
		panic(err)
	}
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		panic(err)
	}
	t := time.Date(2026, 3, 6, 12, 0, 0, 0, ny) // a Friday; DST starts on Sunday 8 March
	for range 3 {
		t = s.Next(t, ny)
		fmt.Println(t.Format(time.RFC1123Z))
	}
	// Output:
	// Mon, 09 Mar 2026 09:30:00 -0400
	// Tue, 10 Mar 2026 09:30:00 -0400
	// Wed, 11 Mar 2026 09:30:00 -0400
}

func ExampleSchedule_Next_dst() {
	ber, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		panic(err)
	}
	s, _ := cron.Parse("*/20 2 * * *")
	// Spring forward: 02:00, 02:20 and 02:40 do not exist on 29 March and
	// collapse into a single run when the gap ends.
	t := time.Date(2026, 3, 29, 0, 0, 0, 0, ber)
	for range 2 {
		t = s.Next(t, ber)
		fmt.Println(t)
	}
	// Fall back: 02:00-02:59 happens twice on 25 October; each wall time
	// runs once, on the first pass.
	t = time.Date(2026, 10, 25, 0, 0, 0, 0, ber)
	for range 4 {
		t = s.Next(t, ber)
		fmt.Println(t)
	}
	// Output:
	// 2026-03-29 03:00:00 +0200 CEST
	// 2026-03-30 02:00:00 +0200 CEST
	// 2026-10-25 02:00:00 +0200 CEST
	// 2026-10-25 02:20:00 +0200 CEST
	// 2026-10-25 02:40:00 +0200 CEST
	// 2026-10-26 02:00:00 +0100 CET
}

func ExampleParse_error() {
	_, err := cron.Parse("0 25 * * *")
	fmt.Println(err)
	_, err = cron.Parse("@every 5m")
	fmt.Println(err)
	// Output:
	// cron "0 25 * * *": field "hour": value 25 out of range 0-23
	// cron "@every 5m": @every is not supported; use a fixed interval instead of a cron schedule
}

func BenchmarkNext(b *testing.B) {
	for _, bc := range []struct{ name, expr, zone string }{
		{"every5min/UTC", "*/5 * * * *", "UTC"},
		{"weekdays0930/NewYork", "0 30 9 * * MON-FRI", "America/New_York"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := parse(b, bc.expr)
			loc := load(b, bc.zone)
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			t := start
			b.ReportAllocs()
			for b.Loop() {
				t = s.Next(t, loc)
				if t.IsZero() || t.Year() > 2030 {
					t = start
				}
			}
		})
	}
}

func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cron.Parse("0 30 9 * * MON-FRI"); err != nil {
			b.Fatal(err)
		}
	}
}
