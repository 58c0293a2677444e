package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

func newTestTarget(t *testing.T, maxLog int) *httptest.Server {
	t.Helper()
	def := targetBehaviour{Status: 200, Latency: "0s", Body: `{"ok":true}`}
	srv := httptest.NewServer(newTarget(def, maxLog, slog.New(slog.DiscardHandler)).handler())
	t.Cleanup(srv.Close)
	return srv
}

// call sends a request the way flyball's executor does.
func targetCall(t *testing.T, srv *httptest.Server, path, task, key string, attempt int) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	if task != "" {
		req.Header.Set("Flyball-Task", task)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Flyball-Attempt", strconv.Itoa(attempt))
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func targetControlPost(t *testing.T, srv *httptest.Server, body string) int {
	t.Helper()
	resp, err := srv.Client().Post(srv.URL+"/control", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func targetRequests(t *testing.T, srv *httptest.Server, query string) []targetRequest {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + "/requests" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []targetRequest
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestTargetSwitchesBehaviourAtRuntime(t *testing.T) {
	t.Parallel()
	srv := newTestTarget(t, 100)

	if code, body := targetCall(t, srv, "/a", "", "", 0); code != 200 || body != `{"ok":true}` {
		t.Fatalf("default answer = %d %q, want 200 {\"ok\":true}", code, body)
	}
	if code := targetControlPost(t, srv, `{"status":500,"body":"down"}`); code != 200 {
		t.Fatalf("POST /control = %d", code)
	}
	if code, body := targetCall(t, srv, "/a", "", "", 0); code != 500 || body != "down" {
		t.Fatalf("after switching to 500: %d %q", code, body)
	}
	// A path override leaves the default alone.
	targetControlPost(t, srv, `{"path":"/b","status":204,"body":""}`)
	if code, _ := targetCall(t, srv, "/b", "", "", 0); code != 204 {
		t.Fatalf("/b = %d, want its override 204", code)
	}
	if code, _ := targetCall(t, srv, "/a", "", "", 0); code != 500 {
		t.Fatalf("/a = %d, want the default 500", code)
	}
	// The health endpoint never follows the switch.
	if code, _ := targetCall(t, srv, "/healthz", "", "", 0); code != 200 {
		t.Fatalf("/healthz = %d while the target answers 500", code)
	}
	targetControlPost(t, srv, `{"reset":true}`)
	if code, _ := targetCall(t, srv, "/b", "", "", 0); code != 200 {
		t.Fatalf("after reset /b = %d, want 200", code)
	}
}

func TestTargetLatency(t *testing.T) {
	t.Parallel()
	srv := newTestTarget(t, 100)
	targetControlPost(t, srv, `{"latency":"150ms"}`)
	start := time.Now()
	targetCall(t, srv, "/slow", "", "", 0)
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("answered after %s, want at least the 150ms latency", d)
	}
}

func TestTargetRejectsBadControl(t *testing.T) {
	t.Parallel()
	srv := newTestTarget(t, 100)
	for _, body := range []string{`{"latency":"soon"}`, `{"status":42}`, `{"status":103}`, `{"colour":"red"}`, `not json`} {
		if code := targetControlPost(t, srv, body); code != http.StatusBadRequest {
			t.Errorf("POST /control %s = %d, want 400", body, code)
		}
	}
	if code, _ := targetCall(t, srv, "/x", "", "", 0); code != 200 {
		t.Fatalf("a rejected control changed the behaviour: %d", code)
	}
}

func TestTargetRecordsRequests(t *testing.T) {
	t.Parallel()
	srv := newTestTarget(t, 3)
	targetCall(t, srv, "/r", "t1", "t1:1", 1)
	targetControlPost(t, srv, `{"status":503}`)
	targetCall(t, srv, "/r", "t2", "t2:1", 1)
	targetCall(t, srv, "/r", "t1", "t1:2", 2)
	targetCall(t, srv, "/control", "", "", 0) // GET /control is not recorded

	got := targetRequests(t, srv, "?task=t1")
	if len(got) != 2 || got[0].IdempotencyKey != "t1:1" || got[1].IdempotencyKey != "t1:2" ||
		got[1].Attempt != 2 || got[0].Status != 200 || got[1].Status != 503 {
		t.Fatalf("requests of t1 = %+v", got)
	}
	// The log is bounded: a 4th call drops the oldest.
	targetCall(t, srv, "/r", "t3", "t3:1", 1)
	all := targetRequests(t, srv, "")
	if len(all) != 3 || all[0].IdempotencyKey != "t2:1" {
		t.Fatalf("bounded log = %+v, want the newest 3 starting at t2:1", all)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodDelete, srv.URL+"/requests", http.NoBody)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := len(targetRequests(t, srv, "")); n != 0 {
		t.Fatalf("after DELETE /requests: %d entries", n)
	}
}
