package events_test

import (
	"testing"

	"github.com/flyballhq/flyball/pkg/events"
)

// TestTaskRejectedStale: only a first reason naming ifRevision whose rule
// starts with StaleRevision is a stale revision (the API's 412, the CLI's
// "the task changed"); an older governor's "unknown field" on ifRevision,
// another field's stale-looking rule, or no reason at all is not.
func TestTaskRejectedStale(t *testing.T) {
	for _, c := range []struct {
		name    string
		reasons []events.FieldError
		want    bool
	}{
		{"stale", []events.FieldError{{Field: "ifRevision", Rule: events.StaleRevision + "the spec of task \"a\" is at revision 9, not 7"}}, true},
		{"an older governor", []events.FieldError{{Field: "ifRevision", Rule: "unknown field"}}, false},
		{"another field", []events.FieldError{{Field: "id", Rule: events.StaleRevision + "x"}}, false},
		{"stale, but not first", []events.FieldError{{Field: "id", Rule: "x"}, {Field: "ifRevision", Rule: events.StaleRevision + "x"}}, false},
		{"no reason", nil, false},
	} {
		r := &events.TaskRejected{Reasons: c.reasons}
		if got := r.Stale(); got != c.want {
			t.Errorf("%s: Stale() = %v, want %v", c.name, got, c.want)
		}
	}
}
