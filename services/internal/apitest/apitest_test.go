package apitest_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/flyballhq/flyball/services/internal/apitest"
)

// TestDoSendsTheRequestAsTheAPIWantsIt: the token as a bearer, the body as
// JSON, the extra headers, and the answer's status and body back.
func TestDoSendsTheRequestAsTheAPIWantsIt(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPut || r.URL.Path != "/api/v1/tasks/x" || string(body) != `{"a":1}` ||
			r.Header.Get("Authorization") != "Bearer tok-0123456789abcdef" || r.Header.Get("Content-Type") != "application/json" ||
			r.Header.Get("If-Match") != `"7"` {
			http.Error(w, "unexpected request", http.StatusTeapot)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"status":"accepted"}`))
	}))
	t.Cleanup(srv.Close)
	c := apitest.Client{Base: srv.URL, Token: "tok-0123456789abcdef"}
	code, body := c.Do(t, http.MethodPut, "/api/v1/tasks/x", `{"a":1}`, "If-Match", `"7"`)
	if code != http.StatusAccepted || string(body) != `{"status":"accepted"}` {
		t.Fatalf("Do = %d %s, want 202 and the server's body", code, body)
	}
}
