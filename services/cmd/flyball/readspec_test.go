package main

import (
	"fmt"
	"maps"
	"strings"
	"testing"
)

// TestReadSpecTakesOneYAMLDocument: a task file holds one task. The YAML
// converter reads the first document of a stream and ignores the rest, so
// a second task, or broken YAML after a ---, was dropped without a word
// and the first task created (exit 0).
func TestReadSpecTakesOneYAMLDocument(t *testing.T) {
	t.Parallel()
	one := "id: multi-a\ntarget: {http: {url: \"http://example.com/\"}}\nschedule: {interval: 1h}\n"
	for _, c := range []struct{ name, doc, wantErr string }{
		{"one document", one, ""},
		{"one document after a leading ---", "---\n" + one, ""},
		{"a trailing --- with nothing after it", one + "---\n", ""},
		{"a --- inside a block scalar", strings.Replace(one, "id: multi-a\n", "id: multi-a\njob: |\n  ---\n  not a document\n", 1), ""},
		{"two tasks", one + "---\n" + strings.Replace(one, "multi-a", "multi-b", 1), "stdin: holds 2 YAML documents; want one task per file"},
		{"broken YAML after a ---", one + "---\n: : [\n", "stdin: not valid YAML"},
		// Cut at 4 MiB inside the comment, it parsed without its labels.
		{"over 4 MiB", one + "#" + strings.Repeat("x", 4<<20) + "\nlabels: {team: a}\n", "stdin: more than 4 MiB"},
	} {
		spec, err := readSpec("-", strings.NewReader(c.doc))
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v, want the task", c.name, err)
		case c.wantErr == "" && spec.ID != "multi-a":
			t.Errorf("%s: read task %q, want multi-a", c.name, spec.ID)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: error %v, want %q", c.name, err, c.wantErr)
		}
	}
}

// TestReadSpecKeepsYAMLKeysAsWritten: keys are names, and a task file's
// keys reach the spec as written. The YAML 1.1 converter read on, off,
// yes, no, y and n (any case) as booleans, and a key true or false as one
// too: `labels: {on: call}` was sent as the label "true", the header `Y:
// v` as the header "true", without a word (and --dry-run said valid).
// A value is read as YAML 1.2: `yes` is a string.
func TestReadSpecKeepsYAMLKeysAsWritten(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		labels, headers, job string
		wantLabels           map[string]string
		wantHeaders          map[string]string
	}{
		{"{on: call}", "{Y: v}", "orders", map[string]string{"on": "call"}, map[string]string{"Y": "v"}},
		{
			"{Off: x, 1: one, true: t, 0x1F: hex}", "{N: w, YES: a}", "orders",
			map[string]string{"Off": "x", "1": "one", "true": "t", "0x1F": "hex"},
			map[string]string{"N": "w", "YES": "a"},
		},
		{"{null: n, ~: tilde}", "{}", "yes", map[string]string{"null": "n", "~": "tilde"}, map[string]string{}},
	} {
		doc := "id: keys\nlabels: " + c.labels + "\ntarget:\n  http:\n    url: \"https://example.com/\"\n    headers: " + c.headers + "\nschedule: {interval: 30s}\njob: " + c.job + "\n"
		spec, err := readSpec("-", strings.NewReader(doc))
		if err != nil {
			t.Errorf("labels %s, headers %s: %v", c.labels, c.headers, err)
			continue
		}
		if !maps.Equal(spec.Labels, c.wantLabels) {
			t.Errorf("labels %s read as %v, want %v", c.labels, spec.Labels, c.wantLabels)
		}
		if !maps.Equal(spec.Target.HTTP.Headers, c.wantHeaders) {
			t.Errorf("headers %s read as %v, want %v", c.headers, spec.Target.HTTP.Headers, c.wantHeaders)
		}
		if spec.Job != c.job {
			t.Errorf("job %s read as %q, want it as written", c.job, spec.Job)
		}
	}
}

// TestReadSpecTakesAFlowMappingForYAML: a file that starts with "{" was
// taken for JSON, and a YAML flow mapping (`{id: a, …}`, no quotes)
// refused as `not valid JSON: invalid character 'i' looking for
// beginning of object key string`. It is YAML, and read as YAML; a JSON
// document is still read as JSON, and one that is neither says both.
func TestReadSpecTakesAFlowMappingForYAML(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, doc, wantErr string }{
		{"a flow mapping", `{id: flow, target: {http: {url: "https://example.com/"}}, schedule: {interval: 30s}}`, ""},
		{"a flow mapping over lines", "{id: flow,\n target: {http: {url: \"https://example.com/\"}},\n schedule: {interval: 30s}}\n", ""},
		{"JSON", `{"id": "flow", "target": {"http": {"url": "https://example.com/"}}, "schedule": {"interval": "30s"}}`, ""},
		{"JSON with a rule broken", `{"id": "flow", "target": {"http": {"url": "https://example.com/"}}, "schedule": {"interval": "30"}}`, "schedule.interval"},
		{"neither", `{"id": "flow", "schedule": {`, `stdin: neither JSON (not valid JSON: unexpected end of JSON input) nor YAML (`},
		{"a YAML key given twice", "{id: flow, id: again}", `stdin: neither JSON (not valid JSON: invalid character 'i' looking for beginning of object key string) nor YAML (line 1: key "id" given twice)`},
	} {
		spec, err := readSpec("-", strings.NewReader(c.doc))
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v, want the task", c.name, err)
		case c.wantErr == "" && spec.ID != "flow":
			t.Errorf("%s: read task %q, want flow", c.name, spec.ID)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: error %v, want %q", c.name, err, c.wantErr)
		case err != nil && c.name != "JSON with a rule broken" && strings.Contains(err.Error(), "\n"):
			t.Errorf("%s: error of more than one line: %q", c.name, err)
		}
	}
}

// TestReadSpecRefusesWhatJSONCannotHold: a YAML key may be a list or a
// mapping, which no field or map key of a spec can be; a key may be given
// twice; an alias may sit inside the value it names, or stand for a
// billion values; a number may be .inf. Each is refused in one line naming where it is.
func TestReadSpecRefusesWhatJSONCannotHold(t *testing.T) {
	t.Parallel()
	const rest = "target: {http: {url: \"https://example.com/\"}}\nschedule: {interval: 30s}\n"
	// Each alias of l9 stands for a billion strings.
	laughs := "x-0: &l0 [a, a, a, a, a, a, a, a, a, a]\n"
	for i := 1; i < 10; i++ {
		laughs += fmt.Sprintf("x-%d: &l%d [*l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	for _, c := range []struct{ doc, want string }{
		{"id: k\nlabels:\n  ? [a, b]\n  : c\n" + rest, "stdin: not valid YAML: line 3: a key must be a string, got a list"},
		{"id: k\nlabels:\n  ? {a: b}\n  : c\n" + rest, "stdin: not valid YAML: line 3: a key must be a string, got a mapping"},
		{"id: k\nlabels: {on: a, \"on\": b}\n" + rest, `stdin: not valid YAML: line 2: key "on" given twice`},
		{"id: k\nlabels: &l {a: *l}\n" + rest, "stdin: not valid YAML: line 2: alias *l is inside the value it names"},
		{"id: k\njitter: .inf\n" + rest, "stdin: not valid YAML: line 2: .inf is not a number JSON can hold"},
		{laughs + "id: k\n" + rest, "stdin: not valid YAML: more than 100000 values once aliases are expanded"},
	} {
		_, err := readSpec("-", strings.NewReader(c.doc))
		if err == nil || err.Error() != c.want {
			t.Errorf("%q: error %v, want %q", c.doc, err, c.want)
		}
	}
}

// TestReadSpecFollowsYAMLAnchorsAndMerges: anchors, aliases and merge
// keys (<<) work, and a key written beside a merge wins over the merged
// one, as YAML has it (the strict YAML 1.1 converter refused it: `key
// "X-B" already set in map`).
func TestReadSpecFollowsYAMLAnchorsAndMerges(t *testing.T) {
	t.Parallel()
	doc := `id: &name merged
job: *name
target:
  http:
    url: "https://example.com/"
    headers:
      <<: {X-A: base, X-B: base}
      X-B: own
schedule: {interval: 30s}
`
	spec, err := readSpec("-", strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	if spec.Job != "merged" {
		t.Errorf("job %q, want the alias of id, merged", spec.Job)
	}
	if want := map[string]string{"X-A": "base", "X-B": "own"}; !maps.Equal(spec.Target.HTTP.Headers, want) {
		t.Errorf("headers %v, want %v (the key written wins over the merged one)", spec.Target.HTTP.Headers, want)
	}
}
