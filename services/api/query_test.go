package api_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestConflictingLabelSelectorsAreRefused: every label selector must match
// ("repeat to require several"), so team=ops and team=dev together can
// match no task. The second used to replace the first, and the list
// showed the team=dev tasks as if both had been required.
func TestConflictingLabelSelectorsAreRefused(t *testing.T) {
	t.Parallel()
	b, _ := apiOnly(t)
	r := b.call(t, http.MethodGet, "/api/v1/tasks?label=team=ops&label=team=dev", "")
	expect(t, "GET /api/v1/tasks?label=team=ops&label=team=dev", r, http.StatusBadRequest, "label")
	if !strings.Contains(r.str("detail"), `"team"`) {
		t.Fatalf("the error does not name the label key: %s", r.raw)
	}
	expect(t, "the same selector twice", b.call(t, http.MethodGet, "/api/v1/tasks?label=team=ops&label=team=ops", ""), http.StatusOK, "")
}
