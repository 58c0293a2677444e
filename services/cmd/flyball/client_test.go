package main

import (
	"testing"

	"github.com/flyballhq/flyball/pkg/events"
)

// TestStaleRevisionLine: a stale-revision rejection is one line naming the
// revision sent, and the stored one when the governor's reason gives it;
// worded otherwise, the line sends the operator to task get for it. Any
// other rejection naming ifRevision (an older governor's unknown field)
// is left to the reasons list.
func TestStaleRevisionLine(t *testing.T) {
	upd := events.TaskUpdate{IfRevision: 7}
	for _, c := range []struct {
		name string
		verb events.Verb
		data any
		rule string
		want string
	}{
		{
			name: "update, stored revision given", verb: events.VerbUpdated, data: upd,
			rule: events.StaleRevision + `the spec of task "web" is at revision 9, not 7: it changed since it was read`,
			want: `task.updated for "web" rejected by the governor: the task changed since revision 7: it is at revision 9 now; run 'flyball task get web' to see the change, then apply your change to it and update again with --if-revision set to the revision it shows`,
		},
		{
			name: "delete, worded otherwise", verb: events.VerbDeleted, data: events.TaskDelete{IfRevision: 7},
			rule: events.StaleRevision + "something else",
			want: `task.deleted for "web" rejected by the governor: the task changed since revision 7; run 'flyball task get web' to see the change, then decide again whether to delete it`,
		},
		{name: "an older governor", verb: events.VerbUpdated, data: upd, rule: "unknown field"},
	} {
		err := staleRevision(c.verb, "web", c.data, []events.FieldError{{Field: "ifRevision", Rule: c.rule}})
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}
