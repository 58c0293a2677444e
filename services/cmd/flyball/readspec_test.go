package main

import (
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
