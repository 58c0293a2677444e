package main

import (
	"testing"

	"github.com/flyballhq/flyball/pkg/events"
)

// TestStaleRevisionLine: a stale-revision rejection is one line naming the
// revision sent, and the stored one when the rejection carries it; from a
// governor that does not send it, the line sends the operator to task get
// for it.
func TestStaleRevisionLine(t *testing.T) {
	upd := events.TaskUpdate{IfRevision: 7}
	for _, c := range []struct {
		name   string
		verb   events.Verb
		data   any
		stored uint64
		want   string
	}{
		{
			name: "update, stored revision given", verb: events.VerbUpdated, data: upd, stored: 9,
			want: `task.updated for "web" rejected by the governor: the task changed since revision 7: it is at revision 9 now; run 'flyball task get web' to see the change, then apply your change to it and update again with --if-revision set to the revision it shows`,
		},
		{
			name: "delete, from a governor that does not send the stored revision", verb: events.VerbDeleted, data: events.TaskDelete{IfRevision: 7},
			want: `task.deleted for "web" rejected by the governor: the task changed since revision 7; run 'flyball task get web' to see the change, then decide again whether to delete it`,
		},
	} {
		rej := &events.TaskRejected{SpecRevision: c.stored}
		if got := staleRevision(c.verb, "web", c.data, rej).Error(); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}
