package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/api"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/streams"
)

// TestSlowClientsAreCutOff: a client that sends its headers and then
// trickles (or never sends) the body it announced, or that keeps an idle
// keep-alive connection open, is cut off after Config.ReadTimeout. Only
// the headers were bounded (ReadHeaderTimeout), so a slowloris body or a
// pile of idle connections held a goroutine and a socket each, forever.
func TestSlowClientsAreCutOff(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	_, js := srv.Connect(t)
	s := startAPI(t, api.Config{
		Common: svcconf.Common{JS: js}, Addr: "127.0.0.1:0", Tokens: []string{token}, ReadTimeout: 300 * time.Millisecond,
	})

	// A body announced but never sent: answered 408, then the connection
	// is closed.
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+token+
		"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("a body that never arrives: %v; want the server to answer and close within 5s (ReadTimeout is 300ms)", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("a body that never arrives: status %d, want 408", resp.StatusCode)
	}

	// An idle keep-alive connection is closed too.
	idle, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	_, _ = io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	_ = idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(idle)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("an idle keep-alive connection is still open after 5s; want it closed after ReadTimeout (300ms)")
		}
		t.Fatalf("idle connection: %v, want EOF", err)
	}
}

// TestAClientThatDoesNotReadIsCutOff: a client that asks for a large
// response (here ~10 MB of run history) and never reads it is disconnected
// after Config.WriteTimeout. There was no write deadline, so the handler
// sat blocked in its write, holding a goroutine, the encoded response and
// a socket, for as long as the client cared to wait (slowloris on the
// response side).
func TestAClientThatDoesNotReadIsCutOff(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	_, js := srv.Connect(t)
	// Run bodies of '<', stored unescaped: the API escapes each as
	// \u003c, so 1.6 MB stored (cheap to read and decode, even under
	// -race) is a 9.6 MB response, more than the kernel buffers of both
	// ends hold (the server's send buffer grows to 4 MB).
	body := strings.Repeat("<", 400<<10)
	for i := range 4 {
		slot := time.Unix(1_700_000_000+int64(i), 0).UTC()
		run := events.Run{DispatchID: events.DispatchID("big", slot), TaskID: "big", ScheduledAt: slot, Attempt: 1, Status: 200, Body: body}
		data, err := events.Marshal(events.OutcomeSucceeded.Type(), "test", "big", run, slot, "")
		if err != nil {
			t.Fatal(err)
		}
		data = bytes.ReplaceAll(data, []byte(`\u003c`), []byte("<"))
		if _, err := js.Publish(t.Context(), events.RunSubject(events.OutcomeSucceeded, "big"), data); err != nil {
			t.Fatal(err)
		}
	}
	s := startAPI(t, api.Config{
		Common: svcconf.Common{JS: js}, Addr: "127.0.0.1:0", Tokens: []string{token},
		AnswerTimeout: 100 * time.Millisecond, WriteTimeout: 2 * time.Second,
	})

	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A small receive window, so that the kernel buffers fill long before
	// the response is written.
	if err := c.(*net.TCPConn).SetReadBuffer(4 << 10); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "GET /api/v1/tasks/big/runs?limit=1000 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+token+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// The handler first reads and encodes the whole history, which takes
	// a few hundred ms of CPU under -race and, on a loaded 2-core machine,
	// seconds of wall time: no bound on the time to the cut-off may count
	// it. So the client first waits for the server to act on the request,
	// with a bound that only catches a hang: either the response begins
	// (the handler is writing, and blocks once the kernel buffers are
	// full), or the handler's reads ran out of its time (WriteTimeout less
	// a quarter) and it answered a short 503, or the connection is closed
	// (nothing was sent in time). The status line read leaves the receive
	// window all but closed.
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	status := make([]byte, len("HTTP/1.1 200"))
	if _, err := io.ReadFull(c, status); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("the server neither began its response nor closed the connection within a minute")
		}
		t.Logf("cut off before the response began: %v", err)
		return
	}
	if string(status) != "HTTP/1.1 200" {
		t.Logf("reading the history took the handler's whole time: %q", status)
		return
	}
	// The response has begun and the client reads no more of it. It
	// notices that the server closed the connection by writing to it:
	// bytes the server never reads make its kernel answer with a reset,
	// and a later write fails. The bytes hold no line end, so had the
	// response been written in full after all, they would be the start of
	// a next request line, which the server waits for (ReadHeaderTimeout,
	// 10s, counted from after the full response, so after its first byte)
	// with the connection open: that fails the 8s bound.
	natstest.Eventually(t, 8*time.Second, "a client that does not read its response is still connected; want it cut off after WriteTimeout (2s)", func() bool {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, err := c.Write([]byte("x"))
		return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
	})
}

// TestWriteTimeoutMustExceedAnswerTimeout: a command waits up to
// AnswerTimeout for the governor before it answers, so a shorter write
// timeout would cut off every slow answer.
func TestWriteTimeoutMustExceedAnswerTimeout(t *testing.T) {
	t.Parallel()
	_, js := natstest.Start(t).Connect(t)
	_, err := api.New(api.Config{Common: svcconf.Common{JS: js}, Tokens: []string{token}, AnswerTimeout: 5 * time.Second, WriteTimeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "Config.WriteTimeout") {
		t.Fatalf("New with WriteTimeout 1s and AnswerTimeout 5s: %v, want an error naming Config.WriteTimeout", err)
	}
}

// startAPI starts the API service with cfg, stopped in t.Cleanup.
func startAPI(t *testing.T, cfg api.Config) *api.Service {
	t.Helper()
	s, err := api.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// TestASlowListIsAnsweredBeforeTheWriteTimeout: a filtered task page
// that few tasks match reads spec after spec until it is full. The
// handlers ran with the request's context, which nothing cancels when
// the write timeout passes, so with many tasks the scan ran on past it
// and the client got a bare EOF, with no status, once the handler was
// done (40,000 tasks, WriteTimeout 500ms: after 1.9 s). The scan now
// stops short of the write timeout, and the client gets a 503 naming
// what timed out and what to do instead.
func TestASlowListIsAnsweredBeforeTheWriteTimeout(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	_, js := srv.Connect(t)
	// Tasks of another job: enough that reading each one's spec takes
	// several times the write timeout (a read takes 40-100 µs, several
	// times that under -race).
	const tasks = 15000
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Second)
	defer cancel()
	natstest.PublishMany(ctx, t, js, tasks, func(i int) (string, []byte) {
		id := fmt.Sprintf("t%05d", i)
		return "$KV." + streams.BucketTasks + "." + id, fmt.Appendf(nil, `{"id":%q,"job":"other"}`, id)
	})
	const writeTimeout = 200 * time.Millisecond
	s := startAPI(t, api.Config{
		Common: svcconf.Common{JS: js}, Addr: "127.0.0.1:0", Tokens: []string{token},
		AnswerTimeout: 50 * time.Millisecond, WriteTimeout: writeTimeout,
	})
	client := &http.Client{Timeout: 8 * time.Second}
	// get returns the status and body of GET path.
	get := func(path string) (int, []byte, error) {
		req, err := http.NewRequest(http.MethodGet, "http://"+s.Addr()+path, http.NoBody)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, body, err
	}
	// An unfiltered page reads one spec: once the task index is loaded
	// (by the first page), it is answered in time.
	natstest.Eventually(t, 5*time.Second, "an unfiltered page of one task is answered 200", func() bool {
		status, _, err := get("/api/v1/tasks?limit=1")
		return err == nil && status == http.StatusOK
	})

	// Any status is proof enough that the answer came in time: the server
	// can write none after its write deadline.
	start := time.Now()
	status, body, err := get("/api/v1/tasks?job=nomatch&limit=1")
	took := time.Since(start)
	if err != nil {
		t.Fatalf("a filtered page matching none of %d tasks: %v after %s; want a status before the write timeout (%s)", tasks, err, took, writeTimeout)
	}
	var e struct{ Error, Detail string }
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("a filtered page matching none of %d tasks: %v: %s", tasks, err, body)
	}
	if status != http.StatusServiceUnavailable {
		t.Fatalf("a filtered page matching none of %d tasks: status %d after %s, want 503: %s", tasks, status, took, body)
	}
	for _, want := range []string{"GET /api/v1/tasks did not finish within", "write timeout", `read task "`, "filter"} {
		if !strings.Contains(e.Detail, want) {
			t.Errorf("detail %q: want it to say %q", e.Detail, want)
		}
	}
	t.Logf("answered %d after %s: %s", status, took, e.Detail)
}
