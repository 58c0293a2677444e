package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/control"
)

// TestAnOldGovernorsUnknownIfRevisionIsNotAStaleRevision: a governor older
// than ifRevision refuses an update carrying it as an unknown field, which
// names ifRevision too. That is a 422 (upgrade the governors), not a 412:
// the spec did not change.
func TestAnOldGovernorsUnknownIfRevisionIsNotAStaleRevision(t *testing.T) {
	rejected := func(rule string) *control.Answer {
		return &control.Answer{Rejected: &events.TaskRejected{
			ID: "web", Command: events.VerbUpdated.Type(), CommandID: "c1",
			Reasons: []events.FieldError{{Field: "ifRevision", Rule: rule}},
		}}
	}
	if code, _ := commandReply("web", "c1", rejected("unknown field"), nil, false, 1<<20); code != http.StatusUnprocessableEntity {
		t.Errorf("ifRevision refused as an unknown field: status %d, want 422", code)
	}
	if code, _ := commandReply("web", "c1", rejected(events.StaleRevision+"the spec of task \"web\" is at revision 4, not 3"), nil, false, 1<<20); code != http.StatusPreconditionFailed {
		t.Errorf("ifRevision stale: status %d, want 412", code)
	}
}

// TestIfMatchIsPartOfAKeyedCommand: the same Idempotency-Key and body with
// another If-Match is another command; it was taken for a retry of the
// first and answered with its verdict. Without If-Match the id is as it
// was.
func TestIfMatchIsPartOfAKeyedCommand(t *testing.T) {
	id := func(ifMatch string) string {
		r := httptest.NewRequest(http.MethodPut, "/api/v1/tasks/web", strings.NewReader("{}"))
		r.Header.Set("Idempotency-Key", "k1")
		if ifMatch != "" {
			r.Header.Set("If-Match", ifMatch)
		}
		got, ok := idempotentID(httptest.NewRecorder(), r, events.VerbUpdated, "web")
		if !ok || got == "" {
			t.Fatalf("If-Match %q: no command id", ifMatch)
		}
		return got
	}
	if a, b := id(`"3"`), id(`"4"`); a == b {
		t.Errorf("If-Match \"3\" and \"4\" under one key: the same command id %s", a)
	}
	if a, b := id(`"3"`), id(`"3"`); a != b {
		t.Errorf("the same request twice: ids %s and %s, want one", a, b)
	}
	if a, b := id(""), id(`"3"`); a == b {
		t.Errorf("with and without If-Match: the same command id %s", a)
	}
}
