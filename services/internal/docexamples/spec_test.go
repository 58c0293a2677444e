package docexamples_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/control"
	"github.com/flyballhq/flyball/services/internal/docexamples"
)

// specSections maps the headings of docs/events.md's task spec tables to
// the JSON path of the object each describes.
var specSections = map[string]string{
	"TaskSpec": "", "HTTPTarget": "target.http", "NATSTarget": "target.nats", "Schedule": "schedule",
	"Bounds": "bounds", "Adaptive": "adaptive", "Activity": "activity", "QuietHours": "quietHours",
	"Budget": "budget", "Retry": "retry", "BreakerPolicy": "breaker", "DeadLetterPolicy": "deadLetter",
}

// specField is one row of a task spec table.
type specField struct {
	path, typ, def, rule string
}

// fieldTables returns the rows of docs/events.md's field tables under the
// headings of sections, each path prefixed with its section's path. Every
// section must have its table.
func fieldTables(t *testing.T, sections map[string]string) []specField {
	t.Helper()
	root := docexamples.Root(t)
	tables, err := docexamples.Tables(root, "docs/events.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []specField
	found := map[string]bool{}
	for _, tb := range tables {
		prefix, ok := sections[tb.Heading]
		if !ok || !strings.HasPrefix(tb.Header, "| field | type |") {
			continue
		}
		found[tb.Heading] = true
		withDefault := strings.HasPrefix(tb.Header, "| field | type | default |")
		for _, r := range tb.Rows {
			f := specField{path: strings.Trim(r[0], "`"), typ: r[1], rule: r[len(r)-1]}
			if prefix != "" {
				f.path = prefix + "." + f.path
			}
			if withDefault {
				f.def = r[2]
			}
			out = append(out, f)
		}
	}
	if len(found) != len(sections) {
		t.Fatalf("found the tables of %d sections, want %d: %v", len(found), len(sections), found)
	}
	return out
}

func specFields(t *testing.T) []specField { return fieldTables(t, specSections) }

// required holds the fields an object cannot go without, so that a probe
// of one of its other fields starts from a valid object.
var required = map[string]map[string]any{
	"adaptive":   {"mode": "change"},
	"quietHours": {"start": "22:00", "end": "06:00", "interval": "10m"},
	"budget":     {"maxRunsPerDay": 100},
}

// baseSpec is a valid spec for probing path: an HTTP target (or a NATS one
// for target.nats fields), and path's parent object with its required
// fields.
func baseSpec(path string) map[string]any {
	tg := map[string]any{"http": map[string]any{"url": "https://orders.example/healthz"}}
	if strings.HasPrefix(path, "target.nats.") {
		tg = map[string]any{"nats": map[string]any{"subject": "jobs.run"}}
	}
	spec := map[string]any{"id": "t", "target": tg, "schedule": map[string]any{"interval": "1m"}}
	if parent, _, ok := strings.Cut(path, "."); ok && !strings.HasPrefix(path, "target.") && parent != "schedule" {
		obj := map[string]any{}
		for k, v := range required[parent] {
			obj[k] = v
		}
		spec[parent] = obj
	}
	return spec
}

// setPath sets a dotted path in a JSON object, creating objects on the way.
func setPath(m map[string]any, path string, v any) {
	keys := strings.Split(path, ".")
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[keys[len(keys)-1]] = v
}

func getPath(m map[string]any, path string) (any, bool) {
	var v any = m
	for _, k := range strings.Split(path, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = obj[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// decodeWith decodes the base spec with path set to v (left absent when v
// is nil); it returns the normalized spec as JSON and the fields the
// errors name.
func decodeWith(path string, v any) (map[string]any, map[string]bool, error) {
	spec := baseSpec(path)
	if v != nil {
		setPath(spec, path, v)
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, nil, err
	}
	msg, err := events.Marshal(events.TypeTaskCreated, "docs", "t", json.RawMessage(data), time.Now(), "docs")
	if err != nil {
		return nil, nil, err
	}
	e, err := events.Decode(nil, msg)
	if err != nil {
		return nil, nil, err
	}
	s, err := events.DecodeTaskSpec(e)
	named := map[string]bool{}
	for _, r := range events.Reasons(err) {
		named[r.Field] = true
	}
	if err != nil {
		return nil, named, nil //nolint:nilerr // a refused spec is an answer: named says which fields
	}
	out, err := json.Marshal(s)
	if err != nil {
		return nil, nil, err
	}
	var normalized map[string]any
	return normalized, named, json.Unmarshal(out, &normalized)
}

var rangeRE = regexp.MustCompile(`(?i)\bin ([\[(])([^,\]()` + "`" + `]+), ([^\]()` + "`" + `]+)([\])])`)

// bound is one end of a documented range, as a JSON value and a way to
// step just past it.
type bound struct {
	v    float64 // the value (durations in nanoseconds)
	open bool    // the end is excluded
}

func parseValue(typ, s string) (float64, error) {
	if typ == "duration" {
		d, err := time.ParseDuration(s)
		return float64(d), err
	}
	return strconv.ParseFloat(s, 64)
}

func jsonValue(typ string, v float64) any {
	switch typ {
	case "duration":
		return time.Duration(v).String()
	case "integer":
		return int64(v)
	case "string": // a length in bytes
		return strings.Repeat("x", int(v))
	}
	return v
}

// atMostBytesRE is the rule of a bounded string: "at most 1024 bytes".
var atMostBytesRE = regexp.MustCompile(`(?i)^at most ([0-9]+) bytes`)

// probeRules probes every literal range of fields' rules ("in [1, 20]",
// "in (0, 30m]", "at least 1s", "not negative", and for strings "at most
// 1024 bytes", a length): each end inside the range
// must be accepted, and the value just outside it refused. named reports
// whether the value v of field f is refused with an error naming f. A zero
// just below a range is not probed: JSON 0 is the same as an absent field,
// which takes the default. It returns the number of probes.
func probeRules(t *testing.T, fields []specField, named func(f specField, v any) bool) int {
	t.Helper()
	probed := 0
	for _, f := range fields {
		var lo, hi *bound // every rule but a string's length has a lower end
		if m := atMostBytesRE.FindStringSubmatch(f.rule); m != nil && f.typ == "string" {
			h, err := strconv.ParseFloat(m[1], 64)
			if err != nil {
				t.Errorf("%s: %q does not parse", f.path, m[0])
				continue
			}
			hi = &bound{h, false}
		} else if m := rangeRE.FindStringSubmatch(f.rule); m != nil {
			l, err1 := parseValue(f.typ, m[2])
			h, err2 := parseValue(f.typ, m[3])
			if err1 != nil || err2 != nil {
				t.Errorf("%s: range %q does not parse as %s", f.path, m[0], f.typ)
				continue
			}
			lo, hi = &bound{l, m[1] == "("}, &bound{h, m[4] == ")"}
		} else if m := regexp.MustCompile(`(?i)^at least ([0-9][^ .,]*)`).FindStringSubmatch(f.rule); m != nil {
			l, err := parseValue(f.typ, m[1])
			if err != nil {
				t.Errorf("%s: %q does not parse as %s", f.path, m[0], f.typ)
				continue
			}
			lo = &bound{l, false}
		} else if strings.HasPrefix(f.rule, "not negative") {
			lo = &bound{0, false}
		} else {
			continue
		}
		step := 1.0 // an integer; a duration steps by 1ms, a number by 0.001
		switch f.typ {
		case "duration":
			step = float64(time.Millisecond)
		case "number":
			step = 0.001
		}
		probe := func(v float64, accept bool) {
			if v == 0 && !accept {
				return
			}
			if refused := named(f, jsonValue(f.typ, v)); refused == accept {
				t.Errorf("%s = %v: the docs say %q, the code %s", f.path, jsonValue(f.typ, v), f.rule,
					map[bool]string{true: "refuses it", false: "accepts it"}[refused])
			}
			probed++
		}
		switch {
		case lo == nil:
		case lo.open:
			probe(lo.v, false)
			probe(lo.v+step, true)
		default:
			probe(lo.v, true)
			probe(lo.v-step, false)
		}
		if hi != nil {
			if hi.open {
				probe(hi.v, false)
				probe(hi.v-step, true)
			} else {
				probe(hi.v, true)
				probe(hi.v+step, false)
			}
		}
	}
	return probed
}

// TestTaskSpecTableRules: the ranges of the task spec tables are what
// Validate enforces, each refusal naming the field.
func TestTaskSpecTableRules(t *testing.T) {
	t.Parallel()
	probed := probeRules(t, specFields(t), func(f specField, v any) bool {
		_, named, err := decodeWith(f.path, v)
		if err != nil {
			t.Fatalf("%s: %v", f.path, err)
		}
		return named[f.path]
	})
	t.Logf("probed %d values", probed)
	if probed < 40 {
		t.Fatalf("probed %d values, want at least 40: is the parser still finding the ranges?", probed)
	}
}

// TestTaskHintTableRules: the ranges of the TaskHint table are what the
// governor, the CLI and the HTTP API enforce (control.ValidateHint).
func TestTaskHintTableRules(t *testing.T) {
	t.Parallel()
	fields := fieldTables(t, map[string]string{"TaskHint": ""})
	probed := probeRules(t, fields, func(f specField, v any) bool {
		// A hint needs interval or at: give it the other one.
		h := map[string]any{"at": "2030-01-01T00:00:00Z", f.path: v}
		raw, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		var hint events.TaskHint
		if err := json.Unmarshal(raw, &hint); err != nil {
			t.Fatalf("%s: %v", f.path, err)
		}
		for _, r := range events.Reasons(control.ValidateHint(&hint)) {
			if r.Field == f.path {
				return true
			}
		}
		return false
	})
	if probed < 8 {
		t.Fatalf("probed %d TaskHint values, want at least 8 (interval, ttl and reason)", probed)
	}
}

// TestTaskPauseTableRules: the limits of the TaskPause table are what the
// governor and the HTTP API enforce (control.ValidatePause).
func TestTaskPauseTableRules(t *testing.T) {
	t.Parallel()
	fields := fieldTables(t, map[string]string{"TaskPause": ""})
	probed := probeRules(t, fields, func(f specField, v any) bool {
		raw, err := json.Marshal(map[string]any{f.path: v})
		if err != nil {
			t.Fatal(err)
		}
		var p events.TaskPause
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatalf("%s: %v", f.path, err)
		}
		for _, r := range events.Reasons(control.ValidatePause(&p)) {
			if r.Field == f.path {
				return true
			}
		}
		return false
	})
	if probed < 2 {
		t.Fatalf("probed %d TaskPause values, want at least 2 (reason)", probed)
	}
}

// TestTaskSpecTableDefaults: every literal default of the task spec tables
// is what Normalize fills in when the field is absent (with its parent
// object present).
func TestTaskSpecTableDefaults(t *testing.T) {
	t.Parallel()
	checked := 0
	for _, f := range specFields(t) {
		def := strings.Trim(f.def, "`")
		if f.def == "" || def == f.def || strings.ContainsAny(def, "`") {
			continue // no default, or not a literal (req., —, "the larger of …")
		}
		normalized, named, err := decodeWith(f.path, nil)
		if err != nil || normalized == nil {
			t.Errorf("%s: the base spec with an empty parent is refused (%v, %v)", f.path, err, named)
			continue
		}
		got, ok := getPath(normalized, f.path)
		var want any
		if err := json.Unmarshal([]byte(def), &want); err != nil {
			t.Errorf("%s: default %s is not a JSON value", f.path, f.def)
			continue
		}
		if !ok {
			got = zeroLike(want)
		}
		if !sameValue(f.typ, got, want) {
			t.Errorf("%s: the docs say the default is %s, Normalize gives %v", f.path, f.def, got)
		}
		checked++
	}
	t.Logf("checked %d defaults", checked)
	if checked < 15 {
		t.Fatalf("checked %d defaults, want at least 15", checked)
	}
}

func zeroLike(v any) any {
	switch v.(type) {
	case float64:
		return float64(0)
	case string:
		return ""
	}
	return nil
}

func sameValue(typ string, got, want any) bool {
	if typ == "duration" {
		g, err1 := time.ParseDuration(fmt.Sprint(got))
		w, err2 := time.ParseDuration(fmt.Sprint(want))
		return err1 == nil && err2 == nil && g == w
	}
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	return string(g) == string(w)
}
