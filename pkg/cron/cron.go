package cron

import (
	"strconv"
	"strings"
)

// Schedule is a parsed cron expression. Immutable and safe for concurrent use.
type Schedule struct {
	expr string

	// Bit i is set when value i matches. dom uses bits 1-31, month bits
	// 1-12, dow bits 0-6 (7 is folded into 0).
	second, minute, hour, dom, month, dow uint64

	// domStar/dowStar record whether the field text starts with '*' or
	// '?'. They select the Vixie day-matching rule (see doc.go).
	domStar, dowStar bool
}

// ParseError describes why an expression was rejected.
type ParseError struct {
	Expr  string // the expression as passed to Parse
	Field string // "second", "minute", "hour", "day-of-month", "month", "day-of-week", or "" for whole-expression errors
	Msg   string // what is wrong
}

// Error implements error.
func (e *ParseError) Error() string {
	var b strings.Builder
	b.WriteString("cron ")
	b.WriteString(strconv.Quote(e.Expr))
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString("field ")
		b.WriteString(strconv.Quote(e.Field))
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// String returns the original expression, exactly as passed to Parse.
func (s *Schedule) String() string { return s.expr }

// fieldSpec describes one cron field.
type fieldSpec struct {
	name     string
	min, max int      // accepted explicit values
	top      int      // upper bound used by '*' and 'a/n'
	names    []string // optional three-letter names; names[i] has value nameBase+i
	nameBase int
	question bool // '?' accepted as a synonym of '*'
}

var (
	monthNames = []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}
	dowNames   = []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}

	secondSpec = fieldSpec{name: "second", min: 0, max: 59, top: 59}
	minuteSpec = fieldSpec{name: "minute", min: 0, max: 59, top: 59}
	hourSpec   = fieldSpec{name: "hour", min: 0, max: 23, top: 23}
	domSpec    = fieldSpec{name: "day-of-month", min: 1, max: 31, top: 31, question: true}
	monthSpec  = fieldSpec{name: "month", min: 1, max: 12, top: 12, names: monthNames, nameBase: 1}
	dowSpec    = fieldSpec{name: "day-of-week", min: 0, max: 7, top: 6, names: dowNames, nameBase: 0, question: true}
)

// shortcuts maps the supported @-shortcuts to their 5-field equivalents.
var shortcuts = []struct{ name, expr string }{
	{"@yearly", "0 0 1 1 *"},
	{"@annually", "0 0 1 1 *"},
	{"@monthly", "0 0 1 * *"},
	{"@weekly", "0 0 * * 0"},
	{"@daily", "0 0 * * *"},
	{"@midnight", "0 0 * * *"},
	{"@hourly", "0 * * * *"},
}

// Parse parses a 5-field (minute hour dom month dow) or 6-field (second minute hour dom month dow)
// expression, or a shortcut: @yearly @annually @monthly @weekly @daily @midnight @hourly.
// (`@every` is NOT supported: tell the caller to use an interval instead.)
// Errors are *ParseError with a message naming the field and rule, e.g.
//
//	`field "hour": value 25 out of range 0-23`, `expected 5 or 6 fields, got 3`.
func Parse(expr string) (*Schedule, error) {
	fields := strings.Fields(expr)
	if len(fields) > 0 && strings.HasPrefix(fields[0], "@") {
		return parseShortcut(expr, fields)
	}
	s := &Schedule{expr: expr}
	switch len(fields) {
	case 5:
		s.second = 1 // second 0
	case 6:
		var err string
		if s.second, _, err = parseField(fields[0], &secondSpec); err != "" {
			return nil, &ParseError{Expr: expr, Field: secondSpec.name, Msg: err}
		}
		fields = fields[1:]
	default:
		return nil, &ParseError{Expr: expr, Msg: "expected 5 or 6 fields, got " + strconv.Itoa(len(fields))}
	}
	specs := [5]*fieldSpec{&minuteSpec, &hourSpec, &domSpec, &monthSpec, &dowSpec}
	dsts := [5]*uint64{&s.minute, &s.hour, &s.dom, &s.month, &s.dow}
	for i, spec := range specs {
		bits, star, err := parseField(fields[i], spec)
		if err != "" {
			return nil, &ParseError{Expr: expr, Field: spec.name, Msg: err}
		}
		*dsts[i] = bits
		switch spec {
		case &domSpec:
			s.domStar = star
		case &dowSpec:
			s.dowStar = star
		}
	}
	return s, nil
}

func parseShortcut(expr string, fields []string) (*Schedule, error) {
	name := fields[0]
	if asciiEqualFold(name, "@every") {
		return nil, &ParseError{Expr: expr, Msg: "@every is not supported; use a fixed interval instead of a cron schedule"}
	}
	for _, sc := range shortcuts {
		if !asciiEqualFold(name, sc.name) {
			continue
		}
		if len(fields) != 1 {
			return nil, &ParseError{Expr: expr, Msg: "unexpected text after shortcut " + sc.name}
		}
		s, err := Parse(sc.expr)
		if err != nil {
			return nil, err // unreachable: built-in expressions are valid
		}
		s.expr = expr
		return s, nil
	}
	return nil, &ParseError{Expr: expr, Msg: "unknown shortcut " + strconv.Quote(name)}
}

// parseField parses one field into a bitset. star reports whether the
// field text starts with '*' (or '?', where allowed). A non-empty err is
// the message for a ParseError.
func parseField(text string, spec *fieldSpec) (bits uint64, star bool, err string) {
	if text == "" { // cannot happen via strings.Fields; kept for safety
		return 0, false, "empty field"
	}
	star = text[0] == '*' || (spec.question && text[0] == '?')
	for item := range strings.SplitSeq(text, ",") {
		b, e := parseItem(item, spec)
		if e != "" {
			return 0, false, e
		}
		bits |= b
	}
	return bits, star, ""
}

// parseItem parses one list element: base or base/step, where base is
// '*', '?', a value, or a range a-b.
func parseItem(item string, spec *fieldSpec) (uint64, string) {
	if item == "" {
		return 0, "empty list element"
	}
	base, stepText, hasStep := strings.Cut(item, "/")
	step := 1
	if hasStep {
		if stepText == "" {
			return 0, "missing step after '/' in " + strconv.Quote(item)
		}
		n, ok := parseNumber(stepText)
		if !ok {
			return 0, "invalid step " + strconv.Quote(stepText)
		}
		span := spec.top - spec.min + 1
		if n < 1 || n > span {
			return 0, "step " + stepText + " out of range 1-" + strconv.Itoa(span)
		}
		step = n
	}
	var lo, hi int
	switch {
	case base == "":
		return 0, "missing value in " + strconv.Quote(item)
	case base == "*" || (spec.question && base == "?"):
		lo, hi = spec.min, spec.top
	case strings.Contains(base, "-"):
		a, b, _ := strings.Cut(base, "-")
		if a == "" || b == "" || strings.Contains(b, "-") {
			return 0, "invalid range " + strconv.Quote(base)
		}
		var e string
		if lo, e = parseValue(a, spec); e != "" {
			return 0, e
		}
		if hi, e = parseValue(b, spec); e != "" {
			return 0, e
		}
		if lo > hi {
			return 0, "range " + base + ": start " + strconv.Itoa(lo) + " is greater than end " + strconv.Itoa(hi)
		}
	default:
		var e string
		if lo, e = parseValue(base, spec); e != "" {
			return 0, e
		}
		hi = lo
		if hasStep { // a/n means a through the field maximum, step n
			hi = spec.top
			if lo > hi { // e.g. dow "7/2": Sunday only
				hi = lo
			}
		}
	}
	var bits uint64
	for v := lo; v <= hi; v += step {
		bits |= 1 << uint(v)
	}
	if spec == &dowSpec && bits&(1<<7) != 0 { // 7 is Sunday
		bits = bits&^(1<<7) | 1
	}
	return bits, ""
}

// parseValue parses a number or (for month/dow) a three-letter name and
// checks its range.
func parseValue(text string, spec *fieldSpec) (int, string) {
	if n, ok := parseNumber(text); ok {
		if n < spec.min || n > spec.max {
			return 0, "value " + text + " out of range " + strconv.Itoa(spec.min) + "-" + strconv.Itoa(spec.max)
		}
		return n, ""
	}
	for i, name := range spec.names {
		if asciiEqualFold(text, name) {
			return spec.nameBase + i, ""
		}
	}
	return 0, "invalid value " + strconv.Quote(text)
}

// parseNumber parses a non-empty string of ASCII digits. Values that would
// overflow saturate at a large number (callers range-check them).
func parseNumber(text string) (int, bool) {
	if text == "" {
		return 0, false
	}
	n := 0
	for i := 0; i < len(text); i++ {
		c := text[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n < 1<<20 {
			n = n*10 + int(c-'0')
		}
	}
	return n, true
}

// asciiEqualFold is strings.EqualFold restricted to ASCII letters, so that
// exotic Unicode folds (e.g. U+212A KELVIN SIGN) are not accepted.
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
