package cron

import (
	"errors"
	"strings"
	"testing"
	"time"
	_ "time/tzdata"
)

// set returns a bitset with the given values.
func set(vals ...int) uint64 {
	var b uint64
	for _, v := range vals {
		b |= 1 << uint(v)
	}
	return b
}

// rng returns a bitset with lo, lo+step, ... <= hi.
func rng(lo, hi, step int) uint64 {
	var b uint64
	for v := lo; v <= hi; v += step {
		b |= 1 << uint(v)
	}
	return b
}

var (
	allSec   = rng(0, 59, 1)
	allMin   = rng(0, 59, 1)
	allHour  = rng(0, 23, 1)
	allDom   = rng(1, 31, 1)
	allMonth = rng(1, 12, 1)
	allDow   = rng(0, 6, 1)
)

func TestParseValid(t *testing.T) {
	tests := []struct {
		expr string
		want Schedule // expr field ignored
	}{
		{"* * * * *", Schedule{second: set(0), minute: allMin, hour: allHour, dom: allDom, month: allMonth, dow: allDow, domStar: true, dowStar: true}},
		{"* * * * * *", Schedule{second: allSec, minute: allMin, hour: allHour, dom: allDom, month: allMonth, dow: allDow, domStar: true, dowStar: true}},
		{"*/5 * * * *", Schedule{second: set(0), minute: rng(0, 59, 5), hour: allHour, dom: allDom, month: allMonth, dow: allDow, domStar: true, dowStar: true}},
		{"0 30 9 * * MON-FRI", Schedule{second: set(0), minute: set(30), hour: set(9), dom: allDom, month: allMonth, dow: rng(1, 5, 1), domStar: true}},
		{"  0   0  1,15 *  ?  ", Schedule{second: set(0), minute: set(0), hour: set(0), dom: set(1, 15), month: allMonth, dow: allDow, dowStar: true}},
		{"0 0 ? * sun", Schedule{second: set(0), minute: set(0), hour: set(0), dom: allDom, month: allMonth, dow: set(0), domStar: true}},
		{"0\t0\n1 jan-Mar,DEC *", Schedule{second: set(0), minute: set(0), hour: set(0), dom: set(1), month: set(1, 2, 3, 12), dow: allDow, dowStar: true}},
		{"0 0 * * 7", Schedule{second: set(0), minute: set(0), hour: set(0), dom: allDom, month: allMonth, dow: set(0), domStar: true}},
		{"0 0 * * 5-7", Schedule{second: set(0), minute: set(0), hour: set(0), dom: allDom, month: allMonth, dow: set(0, 5, 6), domStar: true}},
		{"0 0 * * 0-7/7", Schedule{second: set(0), minute: set(0), hour: set(0), dom: allDom, month: allMonth, dow: set(0), domStar: true}},
		{"0 0 * * 5/1", Schedule{second: set(0), minute: set(0), hour: set(0), dom: allDom, month: allMonth, dow: set(5, 6), domStar: true}},
		{"0 0 * * MON/2", Schedule{second: set(0), minute: set(0), hour: set(0), dom: allDom, month: allMonth, dow: set(1, 3, 5), domStar: true}},
		{"0 0 * * 7/3", Schedule{second: set(0), minute: set(0), hour: set(0), dom: allDom, month: allMonth, dow: set(0), domStar: true}},
		{"0 0 */2 * ?/3", Schedule{second: set(0), minute: set(0), hour: set(0), dom: rng(1, 31, 2), month: allMonth, dow: set(0, 3, 6), domStar: true, dowStar: true}},
		{"10-40/10 0-12/6 1-10/3 1/5 *", Schedule{second: set(0), minute: set(10, 20, 30, 40), hour: set(0, 6, 12), dom: set(1, 4, 7, 10), month: set(1, 6, 11), dow: allDow, dowStar: true}},
		{"0 0 13 * FRI", Schedule{second: set(0), minute: set(0), hour: set(0), dom: set(13), month: allMonth, dow: set(5)}},
		{"0 0 *,13 * FRI", Schedule{second: set(0), minute: set(0), hour: set(0), dom: allDom, month: allMonth, dow: set(5), domStar: true}},
		{"59/1 0 0 29 2 *", Schedule{second: set(59), minute: set(0), hour: set(0), dom: set(29), month: set(2), dow: allDow, dowStar: true}},
		{"0 0 007 * *", Schedule{second: set(0), minute: set(0), hour: set(0), dom: set(7), month: allMonth, dow: allDow, dowStar: true}},
		{"*/60 */24 */31 */12 */7", Schedule{second: set(0), minute: set(0), hour: set(0), dom: set(1), month: set(1), dow: set(0), domStar: true, dowStar: true}},
		{"@yearly", Schedule{second: set(0), minute: set(0), hour: set(0), dom: set(1), month: set(1), dow: allDow, dowStar: true}},
		{"@annually", Schedule{second: set(0), minute: set(0), hour: set(0), dom: set(1), month: set(1), dow: allDow, dowStar: true}},
		{"@monthly", Schedule{second: set(0), minute: set(0), hour: set(0), dom: set(1), month: allMonth, dow: allDow, dowStar: true}},
		{"@weekly", Schedule{second: set(0), minute: set(0), hour: set(0), dom: allDom, month: allMonth, dow: set(0), domStar: true}},
		{"@daily", Schedule{second: set(0), minute: set(0), hour: set(0), dom: allDom, month: allMonth, dow: allDow, domStar: true, dowStar: true}},
		{" @MIDNIGHT ", Schedule{second: set(0), minute: set(0), hour: set(0), dom: allDom, month: allMonth, dow: allDow, domStar: true, dowStar: true}},
		{"@Hourly", Schedule{second: set(0), minute: set(0), hour: allHour, dom: allDom, month: allMonth, dow: allDow, domStar: true, dowStar: true}},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			s, err := Parse(tt.expr)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if s.String() != tt.expr {
				t.Errorf("String() = %q, want %q", s.String(), tt.expr)
			}
			want := tt.want
			want.expr = tt.expr
			if *s != want {
				t.Errorf("Parse(%q) =\n %+v\nwant\n %+v", tt.expr, *s, want)
			}
		})
	}
}

func TestParseInvalid(t *testing.T) {
	tests := []struct {
		expr  string
		field string
		msg   string // substring of ParseError.Msg
	}{
		{"", "", "expected 5 or 6 fields, got 0"},
		{"   ", "", "expected 5 or 6 fields, got 0"},
		{"* * *", "", "expected 5 or 6 fields, got 3"},
		{"* * * * * * *", "", "expected 5 or 6 fields, got 7"},
		{"0 25 * * *", "hour", "value 25 out of range 0-23"},
		{"60 * * * *", "minute", "value 60 out of range 0-59"},
		{"60 * * * * *", "second", "value 60 out of range 0-59"},
		{"0 0 0 * *", "day-of-month", "value 0 out of range 1-31"},
		{"0 0 32 * *", "day-of-month", "value 32 out of range 1-31"},
		{"0 0 * 13 *", "month", "value 13 out of range 1-12"},
		{"0 0 * 0 *", "month", "value 0 out of range 1-12"},
		{"0 0 * * 8", "day-of-week", "value 8 out of range 0-7"},
		{"0 0 * * 99999999999999999999999", "day-of-week", "value 99999999999999999999999 out of range 0-7"},
		{"*/0 * * * *", "minute", "step 0 out of range 1-60"},
		{"0 */25 * * *", "hour", "step 25 out of range 1-24"},
		{"0 0 * * */8", "day-of-week", "step 8 out of range 1-7"},
		{"*/ * * * *", "minute", "missing step"},
		{"*/x * * * *", "minute", `invalid step "x"`},
		{"1/2/3 * * * *", "minute", `invalid step "2/3"`},
		{"5-3 * * * *", "minute", "start 5 is greater than end 3"},
		{"0 0 * * FRI-MON", "day-of-week", "start 5 is greater than end 1"},
		{"1- * * * *", "minute", `invalid range "1-"`},
		{"-1 * * * *", "minute", `invalid range "-1"`},
		{"1-2-3 * * * *", "minute", `invalid range "1-2-3"`},
		{"1,,2 * * * *", "minute", "empty list element"},
		{"1, * * * *", "minute", "empty list element"},
		{",1 * * * *", "minute", "empty list element"},
		{"/5 * * * *", "minute", "missing value"},
		{"5x * * * *", "minute", `invalid value "5x"`},
		{"+5 * * * *", "minute", `invalid value "+5"`},
		{"** * * * *", "minute", `invalid value "**"`},
		{"*-5 * * * *", "minute", `invalid value "*"`},
		{"? * * * *", "minute", `invalid value "?"`},
		{"0 ? * * *", "hour", `invalid value "?"`},
		{"0 0 * JAN *", "", ""}, // valid, filtered below
		{"0 0 * JANUARY *", "month", `invalid value "JANUARY"`},
		{"0 0 MON * *", "day-of-month", `invalid value "MON"`},
		{"0 0 * * JAN", "day-of-week", `invalid value "JAN"`},
		{"0 0 * * \u212Aon", "day-of-week", "invalid value"},
		{"@every 5m", "", "@every is not supported"},
		{"@EVERY", "", "@every is not supported"},
		{"@daily 0", "", "unexpected text after shortcut @daily"},
		{"@fortnightly", "", `unknown shortcut "@fortnightly"`},
		{"@", "", `unknown shortcut "@"`},
		{"0 0 * * * @", "day-of-week", `invalid value "@"`},
	}
	for _, tt := range tests {
		if tt.msg == "" {
			continue
		}
		t.Run(tt.expr, func(t *testing.T) {
			s, err := Parse(tt.expr)
			if err == nil {
				t.Fatalf("Parse(%q) = %v, want error", tt.expr, s)
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not *ParseError", err)
			}
			if pe.Expr != tt.expr {
				t.Errorf("Expr = %q, want %q", pe.Expr, tt.expr)
			}
			if pe.Field != tt.field {
				t.Errorf("Field = %q, want %q (err: %v)", pe.Field, tt.field, err)
			}
			if !strings.Contains(pe.Msg, tt.msg) {
				t.Errorf("Msg = %q, want it to contain %q", pe.Msg, tt.msg)
			}
			if tt.field != "" && !strings.Contains(err.Error(), `field "`+tt.field+`": `) {
				t.Errorf("Error() = %q does not name field %q", err.Error(), tt.field)
			}
		})
	}
}

func TestParseErrorText(t *testing.T) {
	tests := []struct{ expr, want string }{
		{"0 25 * * *", `cron "0 25 * * *": field "hour": value 25 out of range 0-23`},
		{"* * *", `cron "* * *": expected 5 or 6 fields, got 3`},
		{"*/0 * * * * *", `cron "*/0 * * * * *": field "second": step 0 out of range 1-60`},
	}
	for _, tt := range tests {
		_, err := Parse(tt.expr)
		if err == nil || err.Error() != tt.want {
			t.Errorf("Parse(%q) error = %v, want %s", tt.expr, err, tt.want)
		}
	}
}

// checkInvariants verifies the structural invariants of a parsed schedule.
func checkInvariants(t *testing.T, s *Schedule) {
	t.Helper()
	for _, c := range []struct {
		name string
		bits uint64
		mask uint64
	}{
		{"second", s.second, allSec},
		{"minute", s.minute, allMin},
		{"hour", s.hour, allHour},
		{"dom", s.dom, allDom},
		{"month", s.month, allMonth},
		{"dow", s.dow, allDow},
	} {
		if c.bits == 0 || c.bits&^c.mask != 0 {
			t.Fatalf("%q: %s bits %b outside %b or empty", s.expr, c.name, c.bits, c.mask)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"* * * * *", "* * * * * *", "*/5 * * * *", "0 30 9 * * MON-FRI", "0 0 30 2 *",
		"0 0 29 2 *", "30 2 * * *", "*/15 2 * * *", "0 0 13 * FRI", "0 0 1,15 * MON",
		"0 0 ? * sun", "1-59/7 */3 1/2 jan-jun/2 0-7", "@daily", "@hourly", "@every 1h",
		"@yearly", "0 0 * * 7", "5-3 * * * *", "*/0 * * * *", "1,,2 * * * *", "",
		"0 25 * * *", "a b c d e", "0 0 31 4 *", "59 59 23 31 12 *", "0 0 */31 */12 */7",
	} {
		f.Add(seed)
	}
	ber, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		f.Fatal(err)
	}
	froms := []time.Time{
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 3, 29, 0, 59, 59, 500, time.UTC),  // just before Berlin spring forward
		time.Date(2026, 10, 25, 1, 10, 0, 0, time.UTC),    // inside Berlin's repeated hour (second pass)
		time.Date(2026, 10, 25, 0, 59, 59, 999, time.UTC), // end of Berlin's first pass
	}
	f.Fuzz(func(t *testing.T, expr string) {
		s, err := Parse(expr)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Parse(%q): error %T is not *ParseError", expr, err)
			}
			if pe.Expr != expr || pe.Msg == "" {
				t.Fatalf("Parse(%q): bad ParseError %+v", expr, pe)
			}
			return
		}
		checkInvariants(t, s)
		if s.String() != expr {
			t.Fatalf("String() = %q, want %q", s.String(), expr)
		}
		s2, err := Parse(s.String())
		if err != nil || *s2 != *s {
			t.Fatalf("round trip of %q: %v, %+v != %+v", expr, err, s2, s)
		}
		for _, loc := range []*time.Location{time.UTC, ber} {
			for _, from := range froms {
				n := s.Next(from, loc)
				if n.IsZero() {
					continue
				}
				if !n.After(from) {
					t.Fatalf("%q in %v: Next(%v) = %v, not after", expr, loc, from, n)
				}
				if n2 := s.Next(n, loc); !n2.IsZero() && !n2.After(n) {
					t.Fatalf("%q in %v: Next(%v) = %v, not after", expr, loc, n, n2)
				}
			}
		}
	})
}
