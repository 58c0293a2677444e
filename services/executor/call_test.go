package executor

import (
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
)

// TestCallHeaderKeepsTheTaskHeadersButNotOverFlyballs checks the request
// header an attempt sends: a task's own headers go out canonicalised, and
// flyball's five headers win over a task header of the same name, however
// the task spelled it.
func TestCallHeaderKeepsTheTaskHeadersButNotOverFlyballs(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 25, 17, 0, 0, 500, time.FixedZone("x", 3600))
	d := &events.Dispatch{DispatchID: "t1:1764090000000", TaskID: "t1", ScheduledAt: at}
	task := map[string]string{
		"authorization":   "Bearer s3cret",
		"X-Custom":        "yes",
		"idempotency-key": "forged",
		"USER-AGENT":      "curl",
	}
	h := callHeader(task, "flyball/test", d, 3)
	want := http.Header{
		"Authorization":        {"Bearer s3cret"},
		"X-Custom":             {"yes"},
		"Idempotency-Key":      {"t1:1764090000000"},
		"User-Agent":           {"flyball/test"},
		"Flyball-Task":         {"t1"},
		"Flyball-Scheduled-At": {"2026-11-25T16:00:00.0000005Z"},
		"Flyball-Attempt":      {"3"},
	}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("header:\n got %v\nwant %v", h, want)
	}
	// The values share one array: adding a value to one header must not
	// change the next.
	h.Add("Idempotency-Key", "second")
	if got := h.Get("User-Agent"); got != "flyball/test" {
		t.Fatalf("User-Agent = %q after an Add to Idempotency-Key", got)
	}
}
