package executor

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
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

// TestTaskHostHeaderIsSent: a task's Host header names the virtual host
// the call asks for, as curl -H 'Host: …' does, while the connection
// still goes to the URL's host. net/http ignores a Host in the request
// header, so it was silently dropped, though the run record listed it
// as sent.
func TestTaskHostHeaderIsSent(t *testing.T) {
	t.Parallel()
	s := loopbackCaller(t)
	hosts := make(chan string, 2)
	tg := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		hosts <- r.Host + " " + r.Header.Get("Host")
	}))
	t.Cleanup(tg.Close)
	d := &events.Dispatch{DispatchID: "x:1", TaskID: "x", ScheduledAt: time.Now()}
	for _, name := range []string{"Host", "host"} {
		h := &events.HTTPTarget{
			Method: "GET", URL: tg.URL, Headers: map[string]string{name: "orders.internal", "X-Other": "kept"},
			Timeout: events.Duration(5 * time.Second), MaxResponseBytes: 100, ExpectStatus: []string{"2xx"},
		}
		if res := s.callHTTP(t.Context(), h, nil, d, 1); !res.ok() {
			t.Fatalf("call: %v", res.err)
		}
		if got := <-hosts; got != "orders.internal " {
			t.Errorf("headers {%q: orders.internal}: the target saw Host (and a Host header) %q, want %q", name, got, "orders.internal ")
		}
	}
}

// TestStreamingBodyPastMaxResponseBytesEndsTheCall: once a body is cut at
// maxResponseBytes, the call ends soon, whatever follows. Draining the
// rest, so the connection could be reused, waited on a streaming body
// (server-sent events, a long poll, a slow download) until the call's
// timeout: every run took its full timeout, held its slots meanwhile, and
// reported that as its duration.
func TestStreamingBodyPastMaxResponseBytesEndsTheCall(t *testing.T) {
	t.Parallel()
	s := loopbackCaller(t)
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(make([]byte, 2000))
		w.(http.Flusher).Flush()
		for { // a byte a second, until the caller goes away
			select {
			case <-r.Context().Done():
				return
			case <-time.After(time.Second):
				_, _ = w.Write([]byte("z"))
				w.(http.Flusher).Flush()
			}
		}
	}))
	t.Cleanup(tg.Close)
	d := &events.Dispatch{DispatchID: "x:1", TaskID: "x", ScheduledAt: time.Now()}
	h := &events.HTTPTarget{
		Method: "GET", URL: tg.URL, Timeout: events.Duration(10 * time.Second), MaxResponseBytes: 1000, ExpectStatus: []string{"2xx"},
	}
	start := time.Now()
	res := s.callHTTP(t.Context(), h, nil, d, 1)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the call took %s for a body cut at 1000 bytes, want well under its 10s timeout", took.Round(time.Millisecond))
	}
	if !res.ok() || !res.truncated || len(res.body) != 1000 {
		t.Errorf("result: err %v, truncated %v, %d bytes; want a success cut at 1000 bytes", res.err, res.truncated, len(res.body))
	}
}

// TestBodyStallSaysItTimedOut: a target that sends its status and then
// stalls its body fails with the same "timed out after <timeout>" as one
// that stalls before its status, saying it was the body. It read
// "reading body: context deadline exceeded", naming neither the timeout
// nor the cause.
func TestBodyStallSaysItTimedOut(t *testing.T) {
	t.Parallel()
	s := loopbackCaller(t)
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		_, _ = w.Write([]byte("partial"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(tg.Close)
	d := &events.Dispatch{DispatchID: "x:1", TaskID: "x", ScheduledAt: time.Now()}
	h := &events.HTTPTarget{
		Method: "GET", URL: tg.URL, Timeout: events.Duration(300 * time.Millisecond), MaxResponseBytes: 1000, ExpectStatus: []string{"2xx"},
	}
	res := s.callHTTP(t.Context(), h, nil, d, 1)
	const want = "timed out after 300ms reading the body: context deadline exceeded"
	if res.err == nil || res.err.Error() != want || res.permanent || res.status != 200 {
		t.Errorf("result: status %d, err %v, permanent %v; want status 200, err %q, transient", res.status, res.err, res.permanent, want)
	}
}

// loopbackCaller is an executor, not started, on its own embedded server,
// allowed to call loopback targets: a test calls callHTTP on it.
func loopbackCaller(t *testing.T) *Service {
	t.Helper()
	srv := natstest.Start(t)
	s, err := New(Config{JS: srv.JS, Guard: Guard{AllowLoopback: true}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStatusClassification: a status in expectStatus is a success; 408,
// 429 and 5xx are transient; any other status is permanent
// (docs/events.md). A status past 599, which net/http accepts from a
// server (any three digits), is not 5xx: it was taken for one and retried,
// and counted by the breaker as an outage.
func TestStatusClassification(t *testing.T) {
	t.Parallel()
	s := loopbackCaller(t)
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.URL.Query().Get("code"))
		w.WriteHeader(code)
	}))
	t.Cleanup(tg.Close)
	d := &events.Dispatch{DispatchID: "x:1", TaskID: "x", ScheduledAt: time.Now()}
	for code, want := range map[int]string{
		200: "ok", 204: "ok", 301: "permanent", 400: "permanent", 404: "permanent", 408: "transient", 429: "transient",
		500: "transient", 503: "transient", 599: "transient", 600: "permanent", 999: "permanent",
	} {
		h := &events.HTTPTarget{
			Method: "GET", URL: tg.URL + "/?code=" + strconv.Itoa(code), Timeout: events.Duration(10 * time.Second), MaxResponseBytes: 1000, ExpectStatus: []string{"2xx"},
		}
		res := s.callHTTP(t.Context(), h, nil, d, 1)
		got := "ok"
		switch {
		case res.err != nil && res.permanent:
			got = "permanent"
		case res.err != nil:
			got = "transient"
		}
		if got != want || res.status != code {
			t.Errorf("HTTP %d: %s (status %d, err %v), want %s", code, got, res.status, res.err, want)
		}
	}
}
