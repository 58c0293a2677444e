package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flyballhq/flyball/services/internal/natstest"
)

// TestASecondSignalEndsAStoppingServeAtOnce: serve caught SIGINT and
// SIGTERM until it returned, so a second one during its stop (up to the
// executor's 10 s grace for calls in flight, and longer if something
// hung) was swallowed, and only kill -9 ended it. Now the first signal
// starts the stop and releases them: a second gets its default action.
// The stop here waits on a call that never ends.
func TestASecondSignalEndsAStoppingServeAtOnce(t *testing.T) {
	t.Parallel()
	srv, url := natstest.StartListening(t)
	called := make(chan struct{}, 1)
	release := make(chan struct{})
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		select {
		case called <- struct{}{}:
		default:
		}
		<-release
	}))
	t.Cleanup(target.Close)
	t.Cleanup(func() { close(release) }) // before target.Close, which waits for the handler
	e := &cliEnv{url: url, dir: t.TempDir()}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := e.command(ctx, "serve", "governor", "executor", "timer", "--allow-loopback", "--metrics-addr", "", "--log-format", "json")
	_, lines, raw := startJSONLogged(t, cmd, false)
	await := func(msg string) {
		t.Helper()
		for m := range lines {
			if m["msg"] == msg {
				return
			}
		}
		t.Fatalf("serve ended before logging %q:\n%s", msg, raw.String())
	}
	await("serving")
	data := fmt.Sprintf(`{"id":"hang","target":{"http":{"url":%q}},"schedule":{"interval":"1s"}}`, target.URL)
	if err := srv.NC.Publish("flyball.task.created.hang", []byte(fmt.Sprintf(`{"specversion":"1.0","type":"io.flyball.task.created","source":"test/user","id":"cmd-hang","subject":"hang","datacontenttype":"application/json","data":%s}`, data))); err != nil {
		t.Fatal(err)
	}
	select {
	case <-called:
	case <-ctx.Done():
		t.Fatalf("the task was never called:\n%s", raw.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	await("shutting down")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for range lines { // until serve exits
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("serve, sent a second SIGTERM while it waited for a call in flight, exited with %v: the second signal was swallowed, want it killed by the signal\n%s", err, raw.String())
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("serve, sent a second SIGTERM while it stopped, ended with %v, want killed by SIGTERM\n%s", err, raw.String())
	}
}

// TestTheConnectionDrainsBeforeItCloses: dev and serve called nc.Drain,
// which only starts the drain, and closed the connection (and dev its
// embedded server) microseconds later: a message a handler still held,
// or a publish still buffered, was cut off. drainAndClose waits for the
// drain to close the connection, at most its timeout.
func TestTheConnectionDrainsBeforeItCloses(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc, _ := srv.Connect(t)
	inHandler, release := make(chan struct{}), make(chan struct{})
	var handled atomic.Bool
	if _, err := nc.Subscribe("drain.test", func(*nats.Msg) {
		close(inHandler)
		<-release
		handled.Store(true)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil { // the subscription is the server's
		t.Fatal(err)
	}
	if err := srv.NC.Publish("drain.test", nil); err != nil {
		t.Fatal(err)
	}
	<-inHandler
	done := make(chan bool)
	go func() {
		drainAndClose(nc, 30*time.Second, slog.New(slog.DiscardHandler))
		done <- handled.Load()
	}()
	natstest.Eventually(t, 10*time.Second, "the drain to start", nc.IsDraining)
	select {
	case <-done:
		close(release)
		t.Fatal("drainAndClose returned while a handler still held a message: it did not wait for the drain")
	default:
	}
	close(release)
	if !<-done {
		t.Fatal("drainAndClose returned before the handler finished")
	}
	if !nc.IsClosed() {
		t.Fatal("the connection is not closed after drainAndClose")
	}

	// A drain that cannot finish is cut off after the timeout.
	nc2, _ := srv.Connect(t)
	stuck, unstick := make(chan struct{}), make(chan struct{})
	defer close(unstick)
	if _, err := nc2.Subscribe("drain.stuck", func(*nats.Msg) { close(stuck); <-unstick }); err != nil {
		t.Fatal(err)
	}
	if err := nc2.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := srv.NC.Publish("drain.stuck", nil); err != nil {
		t.Fatal(err)
	}
	<-stuck
	drainAndClose(nc2, 100*time.Millisecond, slog.New(slog.DiscardHandler))
	if !nc2.IsClosed() {
		t.Fatal("the connection is not closed after a drain that timed out")
	}
}
