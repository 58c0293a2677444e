package governor

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

func TestAppendDurationMatchesString(t *testing.T) {
	values := []time.Duration{
		0, 1, -1, 999, 1000, 1500, time.Microsecond, 1500 * time.Microsecond, time.Millisecond,
		999 * time.Millisecond, time.Second, 1500 * time.Millisecond, time.Minute, 90 * time.Minute, 25*time.Hour + 1,
		37500 * time.Millisecond, math.MaxInt64, math.MinInt64, math.MinInt64 + 1, -time.Hour,
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		values = append(values, time.Duration(r.Int64()>>r.IntN(63)), -time.Duration(r.Int64()>>r.IntN(63)))
	}
	for _, d := range values {
		if got := string(appendDuration(nil, d)); got != d.String() {
			t.Fatalf("appendDuration(%d) = %q, want %q", int64(d), got, d.String())
		}
	}
}

func TestAppendTimeMatchesFormat(t *testing.T) {
	values := []time.Time{
		{},
		time.Unix(0, 0), time.Unix(-1, 999_999_999), time.Date(2000, 2, 29, 23, 59, 59, 999_999_999, time.UTC),
		time.Date(1600, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-5, 6, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 3, 29, 3, 0, 0, 0, time.FixedZone("CEST", 7200)),
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 100000 {
		values = append(values, time.Unix(r.Int64N(600_000_000_000)-300_000_000_000, r.Int64N(1e9)))
	}
	for _, v := range values {
		if got, want := string(appendTime(nil, v)), v.UTC().Format(timeLayout); got != want {
			t.Fatalf("appendTime(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestLedger(t *testing.T) {
	var l RunLedger
	l.add(100)
	l.add(100)
	l.add(99)
	l.add(76) // 24 hours before the newest: outside
	if got := l.count(77, 100); got != 3 {
		t.Fatalf("count = %d, want 3", got)
	}
	l.add(110)
	if l.Hour != 110 || l.count(87, 110) != 4 || l.count(99, 99) != 1 {
		t.Fatalf("after advancing: %+v", l)
	}
	if h := l.freeHour(110, 4); h != 123 { // 99 leaves the window at 123
		t.Fatalf("freeHour = %d, want 123", h)
	}
	if h := l.freeHour(110, 1); h != 134 { // 110 leaves at 134, past the scan: the scan's end
		t.Fatalf("freeHour = %d, want 134", h)
	}
	l.add(200)
	if l.count(0, 300) != 1 {
		t.Fatalf("a jump of more than a day keeps old counts: %+v", l)
	}
	l = RunLedger{Hour: -5}
	l.add(-30)
	l.add(-5)
	if l.count(-28, -5) != 1 || l.Counts[ledgerSlot(-5)] != 1 {
		t.Fatalf("negative hours: %+v", l)
	}
}

func TestQuoteMatchesStrconv(t *testing.T) {
	for _, s := range []string{"", "0 */5 * * * *", "@hourly", `a"b`, `a\b`, "tab\there", "ünïcode", "\x7f"} {
		var tr trail
		tr.quote(s)
		if got, want := tr.b.String(), strconv.Quote(s); got != want {
			t.Errorf("quote(%q) = %s, want %s", s, got, want)
		}
	}
}
