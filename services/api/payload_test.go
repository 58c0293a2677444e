package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/flyballhq/flyball/streams"
)

// TestACommandOverTheNATSPayloadLimitIs413: a body under MaxBodyBytes (1
// MiB) whose command is over the NATS server's max_payload (1 MB by
// default) can never be stored. It was answered 503 "command not stored",
// which tells a client to retry the same request forever.
func TestACommandOverTheNATSPayloadLimitIs413(t *testing.T) {
	t.Parallel()
	b, js := apiOnly(t)
	body := fmt.Sprintf(`{"id":"web","target":{"http":{"url":"http://example.com","body":%q}},"schedule":{"interval":"1h"}}`, strings.Repeat("x", 1<<20-200))
	if len(body) > 1<<20 {
		t.Fatalf("body of %d bytes is over MaxBodyBytes", len(body))
	}
	r := b.call(t, http.MethodPost, "/api/v1/tasks", body)
	expect(t, "POST /api/v1/tasks over max_payload", r, http.StatusRequestEntityTooLarge, "")
	if !strings.Contains(r.str("detail"), "max_payload") {
		t.Errorf("detail %q: want it to name max_payload", r.str("detail"))
	}
	if r.header.Get("Location") != "" {
		t.Errorf("Location %q on a command that was not stored", r.header.Get("Location"))
	}
	st, err := js.Stream(context.Background(), streams.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(context.Background()); err != nil || info.State.Msgs != 0 {
		t.Fatalf("TASKS: %v, %v: want nothing stored", info, err)
	}
}
