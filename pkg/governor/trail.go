package governor

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// trail collects the lines of a decision's trail in one strings.Builder.
// The lines are substrings of its single string, so a decision costs two
// allocations (the text and the slice of lines) however many lines it has.
// Common lines are built with the appending methods, which format into
// stack scratch space; rare ones use linef (fmt), which allocates for its
// arguments but keeps the code short.
type trail struct {
	b    strings.Builder
	ends [maxTrailLines]int32
	n    int
}

// maxTrailLines bounds the lines of one trail; past it, text joins the
// last line. Decide writes far fewer.
const maxTrailLines = 32

func (t *trail) str(s string) *trail {
	t.b.WriteString(s)
	return t
}

func (t *trail) dur(d time.Duration) *trail {
	var sc [32]byte
	t.b.Write(appendDuration(sc[:0], d))
	return t
}

func (t *trail) at(ts time.Time) *trail {
	var sc [32]byte
	t.b.Write(appendTime(sc[:0], ts))
	return t
}

func (t *trail) num(n int64) *trail {
	var sc [24]byte
	t.b.Write(strconv.AppendInt(sc[:0], n, 10))
	return t
}

// quote writes s in double quotes, as strconv.Quote would.
func (t *trail) quote(s string) *trail {
	for i := range len(s) {
		if c := s[i]; c < ' ' || c > '~' || c == '"' || c == '\\' {
			var sc [64]byte
			t.b.Write(strconv.AppendQuote(sc[:0], s))
			return t
		}
	}
	// Plain printable ASCII (every valid cron expression) needs no escaping.
	t.b.WriteByte('"')
	t.b.WriteString(s)
	t.b.WriteByte('"')
	return t
}

// end closes the current line.
func (t *trail) end() {
	if t.n == maxTrailLines {
		t.b.WriteString("; ")
		t.n--
	}
	t.ends[t.n] = int32(t.b.Len())
	t.n++
}

// linef appends a whole line formatted by fmt. Use stamp(t) for times.
func (t *trail) linef(format string, args ...any) {
	var sc [160]byte
	t.b.Write(fmt.Appendf(sc[:0], format, args...))
	t.end()
}

// lines returns the trail as one string per line.
func (t *trail) lines() []string {
	if t.n == 0 {
		return nil
	}
	all := t.b.String()
	out := make([]string, t.n)
	start := int32(0)
	for i, e := range t.ends[:t.n] {
		out[i] = all[start:e]
		start = e
	}
	return out
}

// timeLayout is how the trail writes instants: UTC, milliseconds.
const timeLayout = "2006-01-02T15:04:05.000Z"

// appendTime appends t as timeLayout would format it, without the
// general-purpose formatter (a fifth of Decide's time otherwise).
func appendTime(b []byte, t time.Time) []byte {
	u := t.Unix()
	days := u / 86400
	if u%86400 < 0 {
		days--
	}
	secs := u - days*86400
	// Civil date from days since 1970-01-01 (proleptic Gregorian).
	z := days + 719468
	era := z / 146097
	if z%146097 < 0 {
		era--
	}
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y := yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d := doy - (153*mp+2)/5 + 1
	m := mp + 3
	if mp >= 10 {
		m = mp - 9
	}
	if m <= 2 {
		y++
	}
	if y < 0 || y > 9999 {
		return t.UTC().AppendFormat(b, timeLayout)
	}
	ms := int64(t.Nanosecond() / 1e6)
	b = appendPadded(b, y, 4)
	b = append(b, '-')
	b = appendPadded(b, m, 2)
	b = append(b, '-')
	b = appendPadded(b, d, 2)
	b = append(b, 'T')
	b = appendPadded(b, secs/3600, 2)
	b = append(b, ':')
	b = appendPadded(b, secs/60%60, 2)
	b = append(b, ':')
	b = appendPadded(b, secs%60, 2)
	b = append(b, '.')
	b = appendPadded(b, ms, 3)
	return append(b, 'Z')
}

// appendPadded appends 0 <= v < 10^width in decimal, zero-padded.
func appendPadded(b []byte, v int64, width int) []byte {
	if width == 2 {
		return append(b, byte(v/10)+'0', byte(v%10)+'0')
	}
	var buf [4]byte
	for i := width - 1; i >= 0; i-- {
		buf[i] = byte(v%10) + '0'
		v /= 10
	}
	return append(b, buf[:width]...)
}

// stamp formats an instant the way the trail does, for linef.
type stamp time.Time

func (s stamp) String() string { return string(appendTime(nil, time.Time(s))) }

// appendDuration appends d exactly as d.String() would write it ("1h2m3s",
// "1.5s", "250ms", "0s"), without allocating.
func appendDuration(b []byte, d time.Duration) []byte {
	var buf [32]byte
	w := len(buf)
	u := uint64(d)
	if d < 0 {
		u = -u
	}
	if u < uint64(time.Second) {
		// Sub-second values use the largest unit that keeps an integer part.
		var prec int
		w--
		buf[w] = 's'
		switch {
		case u == 0:
			return append(b, "0s"...)
		case u < uint64(time.Microsecond):
			w--
			buf[w] = 'n'
		case u < uint64(time.Millisecond):
			prec = 3
			w -= 2
			copy(buf[w:], "µ")
		default:
			prec = 6
			w--
			buf[w] = 'm'
		}
		w, u = fracDigits(buf[:w], u, prec)
		w = intDigits(buf[:w], u)
	} else {
		w--
		buf[w] = 's'
		w, u = fracDigits(buf[:w], u, 9)
		w = intDigits(buf[:w], u%60)
		u /= 60
		if u > 0 {
			w--
			buf[w] = 'm'
			w = intDigits(buf[:w], u%60)
			u /= 60
			if u > 0 {
				w--
				buf[w] = 'h'
				w = intDigits(buf[:w], u)
			}
		}
	}
	if d < 0 {
		w--
		buf[w] = '-'
	}
	return append(b, buf[w:]...)
}

// fracDigits writes the prec low decimal digits of v as a fraction at the
// end of buf, dropping trailing zeros (and the point if nothing is left).
// It returns the new start and v without those digits.
func fracDigits(buf []byte, v uint64, prec int) (int, uint64) {
	w := len(buf)
	started := false
	for range prec {
		digit := v % 10
		started = started || digit != 0
		if started {
			w--
			buf[w] = byte(digit) + '0'
		}
		v /= 10
	}
	if started {
		w--
		buf[w] = '.'
	}
	return w, v
}

// intDigits writes v in decimal at the end of buf and returns the start.
func intDigits(buf []byte, v uint64) int {
	w := len(buf)
	for {
		w--
		buf[w] = byte(v%10) + '0'
		v /= 10
		if v == 0 {
			return w
		}
	}
}
