package executor

import (
	"testing"

	"github.com/flyballhq/flyball/services/internal/docexamples"
)

// TestDocsKVExamplesDecode: the event catalog's examples of the values the
// executor reads (flyball-breakers, flyball-attempts, flyball-probes)
// decode strictly into the executor's own types. The governor's docs test
// checks the rest.
func TestDocsKVExamplesDecode(t *testing.T) {
	t.Parallel()
	root := docexamples.Root(t)
	blocks, err := docexamples.Blocks(root, "docs/events.md")
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]func() any{
		"BreakerRecord": func() any { return &BreakerRecord{} },
		"Attempt":       func() any { return &attemptRecord{} },
		"ProbeClaim":    func() any { return &probeClaim{} },
	}
	seen := map[string]int{}
	for _, b := range blocks {
		newV, ok := types[b.Kind]
		if !ok {
			continue
		}
		seen[b.Kind]++
		if err := docexamples.DecodeStrict([]byte(b.Body), newV()); err != nil {
			t.Errorf("%s: %s example: %v", b.Where(), b.Kind, err)
		}
	}
	for kind := range types {
		if seen[kind] == 0 {
			t.Errorf("docs/events.md has no <!-- check:%s --> example", kind)
		}
	}
}
