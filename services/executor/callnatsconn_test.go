package executor

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	dto "github.com/prometheus/client_model/go"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// cuttableProxy is a TCP proxy to a NATS server whose connections can be
// cut and kept out (down) and let through again (up): one client losing
// its NATS node while the server and its other clients stay up.
type cuttableProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  []net.Conn
}

func startCuttableProxy(t *testing.T, target string) *cuttableProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cuttableProxy{ln: ln, target: target}
	t.Cleanup(func() {
		_ = ln.Close()
		p.setDown(true)
	})
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			down := p.down
			p.mu.Unlock()
			if down {
				_ = in.Close()
				continue
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				_ = in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); _ = out.Close(); _ = in.Close() }()
			go func() { _, _ = io.Copy(in, out); _ = out.Close(); _ = in.Close() }()
		}
	}()
	return p
}

func (p *cuttableProxy) url() string { return "nats://" + p.ln.Addr().String() }

// setDown cuts every connection and refuses new ones (true), or lets
// them through again (false).
func (p *cuttableProxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.conns = nil
	}
}

func callsMade(t *testing.T, m *metrics.Set) uint64 {
	t.Helper()
	var out dto.Metric
	if err := m.RunDuration.Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetHistogram().GetSampleCount()
}

// TestExecutorsOwnNATSOutageIsNotATargetFailure: the executor loses its
// own NATS node (its connection cut, the server and the target's service
// up) while it holds a NATS-target dispatch of a task with maxAttempts 1.
// The call in flight loses its reply and times out; a call made while the
// connection reconnects fails at once (no reconnect buffer, as in flyball
// serve). Neither is the target's failure: each was recorded as a failed
// attempt, and with maxAttempts 1 dead-lettered. Now each is tried again
// in place once the connection is back, and succeeds as attempt 1.
func TestExecutorsOwnNATSOutageIsNotATargetFailure(t *testing.T) {
	t.Parallel()
	srv, addr := natstest.StartListening(t)
	proxy := startCuttableProxy(t, strings.TrimPrefix(addr, "nats://"))
	ids := []string{"nats-a"}
	for _, id := range ids {
		natstest.PutJSON(t, srv.JS, streams.BucketTasks, id, events.TaskSpec{
			ID:       id,
			Target:   events.Target{NATS: &events.NATSTarget{Subject: "targets.svc", Timeout: events.Duration(time.Second)}},
			Schedule: events.Schedule{Interval: events.Duration(time.Hour)},
			Retry:    &events.Retry{MaxAttempts: 1},
		})
	}
	// The target's service, on its own connection, which stays up.
	held, _ := answerAllButTheFirst(t, srv.NC, "targets.svc")
	nc := connectThrough(t, proxy)
	js, err := jsutil.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	ex, err := New(Config{JS: js, Guard: Guard{AllowLoopback: true}, Logger: quietLog(), ShutdownGrace: time.Millisecond, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ex.infraRetryFirst, ex.infraRetryMax = 20*time.Millisecond, 100*time.Millisecond
	if err := ex.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ex.Stop)
	for _, id := range ids {
		dispatchNow(t, srv.JS, id)
	}
	awaitClosed(t, held, 20*time.Second, "the first NATS-target request")
	proxy.setDown(true)
	// The call in flight times out; the dispatch, tried again in place,
	// is called again while the executor's connection reconnects.
	natstest.Eventually(t, 20*time.Second, "the call in flight timed out", func() bool { return callsMade(t, m) >= 1 })
	natstest.Eventually(t, 10*time.Second, "a call made while the executor's connection reconnects (the dispatch tried again in place)", func() bool {
		return callsMade(t, m) >= 2
	})
	if nc.IsConnected() {
		t.Fatal("the executor's connection is up while cut")
	}
	proxy.setDown(false)
	for _, id := range ids {
		natstest.Eventually(t, 20*time.Second, "a final outcome of "+id, func() bool {
			return len(natstest.Read(t, srv.JS, streams.StreamRuns, "flyball.run.*."+id)) > 0
		})
	}
	for _, id := range ids {
		var got []string
		for _, msg := range natstest.Read(t, srv.JS, streams.StreamRuns, "flyball.run.*."+id) {
			if strings.HasPrefix(msg.Subject(), "flyball.run.recovered.") {
				continue // for the breaker, whose view was lost with the connection
			}
			e, err := events.Decode(msg.Headers(), msg.Data())
			if err != nil {
				t.Fatal(err)
			}
			var run events.Run
			if err := events.DecodeData(e, &run); err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprintf("%s(attempt %d) %s", strings.Split(msg.Subject(), ".")[2], run.Attempt, run.Error))
		}
		if fmt.Sprint(got) != "[succeeded(attempt 1) ]" {
			t.Errorf("task %s: RUNS holds %q, want one run.succeeded of attempt 1", id, got)
		}
	}
}

// TestNATSTargetPublishViolationIsPermanent: a task whose subject the
// executor's NATS user may not publish to (in the compose stack, any
// subject outside targets.>) reaches nobody: the server answers with an
// asynchronous permissions violation. The call waited out its timeout and
// was recorded as "no reply", transient, and retried. It now ends at once
// as a permanent failure naming the cause; the connection's own error
// handler still sees the violation, and an allowed subject still works.
func TestNATSTargetPublishViolationIsPermanent(t *testing.T) {
	t.Parallel()
	s := natstest.StartWithUsers(t,
		&server.User{Username: "svc", Password: "pw"},
		&server.User{Username: "executor", Password: "pw", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"targets.>"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
		}},
	)
	svc, _ := natstest.ConnectAs(t, s, "svc", "pw")
	natstest.Subscribe(t, svc, ">", func(m *nats.Msg) { _ = m.Respond([]byte("ok")) })
	seen := make(chan error, 16)
	_, js := natstest.ConnectAs(t, s, "executor", "pw")
	js.Conn().SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { seen <- err })
	ex, err := New(Config{JS: js, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ex.pubViolations.Install(js.Conn()) // as Start does; the calls below skip Start
	d := &events.Dispatch{DispatchID: "t:1", TaskID: "t", ScheduledAt: time.Now()}
	const timeout = 10 * time.Second
	start := time.Now()
	res := ex.callNATS(t.Context(), &events.NATSTarget{Subject: "reports.build", Timeout: events.Duration(timeout)}, nil, d, 1)
	took := time.Since(start)
	want := "the executor's NATS user may not publish to reports.build (permissions violation)"
	if res.ok() || !res.permanent || res.err.Error() != want || took > timeout/2 {
		t.Fatalf("reports.build: ok %v permanent %v after %s, err %v; want a permanent failure %q at once",
			res.ok(), res.permanent, took.Round(time.Millisecond), res.err, want)
	}
	select {
	case err := <-seen:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("the connection's error handler got %v, want the permissions violation", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the connection's own error handler did not see the violation")
	}
	// The server quotes the subject in its -ERR as Go's %q does: one
	// with a quote or a backslash in it was not matched, and its call
	// waited out its timeout as "no reply".
	for _, subj := range []string{`reports."build"`, `reports.a\b`} {
		start := time.Now()
		res := ex.callNATS(t.Context(), &events.NATSTarget{Subject: subj, Timeout: events.Duration(timeout)}, nil, d, 1)
		if took := time.Since(start); res.ok() || !res.permanent || took > timeout/2 {
			t.Fatalf("%s: ok %v permanent %v after %s, err %v; want a permanent failure at once", subj, res.ok(), res.permanent, took.Round(time.Millisecond), res.err)
		}
	}
	if res := ex.callNATS(t.Context(), &events.NATSTarget{Subject: "targets.build", Timeout: events.Duration(timeout)}, nil, d, 1); !res.ok() || res.body != "ok" {
		t.Fatalf("targets.build: ok %v body %q err %v, want the reply", res.ok(), res.body, res.err)
	}
}

// TestNATSTargetPublishViolationHandlerSetAtStart: the handler that ends
// a refused request is set on the executor's connection by Start, once,
// not by the first NATS-target call. A started executor's very first
// call, to a subject its user may not publish to, fails at once and for
// good (run.failed, final, naming the violation), well inside its
// timeout, and the handler set before Start still sees the violation.
func TestNATSTargetPublishViolationHandlerSetAtStart(t *testing.T) {
	t.Parallel()
	_, admin, js := natstest.StartDenying(t, "executor", "reports.>")
	const timeout = 30 * time.Second
	spec := events.TaskSpec{
		ID:       "refused",
		Target:   events.Target{NATS: &events.NATSTarget{Subject: "reports.build", Timeout: events.Duration(timeout)}},
		Schedule: events.Schedule{Interval: events.Duration(time.Hour)},
		Retry:    &events.Retry{MaxAttempts: 3},
	}
	spec.Normalize()
	natstest.PutJSON(t, admin, streams.BucketTasks, spec.ID, spec)

	nc := js.Conn()
	seen := make(chan error, 16)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			seen <- err
		}
	})
	ex, err := New(Config{JS: js, Logger: slog.New(slog.DiscardHandler), ShutdownGrace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// %p of a func is its code: the test's handler and the executor's
	// wrapper differ.
	before := fmt.Sprintf("%p", nc.ErrorHandler())
	if err := ex.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ex.Stop)
	if fmt.Sprintf("%p", nc.ErrorHandler()) == before {
		t.Fatal("Start did not set the connection's error handler: the first NATS-target call would set it")
	}

	start := time.Now()
	dispatchNow(t, admin, spec.ID)
	var run events.Run
	natstest.Eventually(t, timeout/2, "the refused task's run.failed, well inside its timeout", func() bool {
		r, ok := lastRun(t, admin, events.OutcomeFailed, spec.ID)
		run = r
		return ok
	})
	want := "the executor's NATS user may not publish to reports.build (permissions violation)"
	if !run.Final || run.Attempt != 1 || run.Error != want {
		t.Fatalf("run.failed after %s: attempt %d final %v error %q; want attempt 1, final, %q",
			time.Since(start).Round(time.Millisecond), run.Attempt, run.Final, run.Error, want)
	}
	select {
	case err := <-seen:
		if !strings.Contains(err.Error(), "reports.build") {
			t.Fatalf("the handler set before Start got %v, want the violation on reports.build", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler set before Start did not see the violation")
	}
}

// answerAllButTheFirst serves subject on nc as a NATS target: it leaves
// the first request unanswered (its reply would be lost), closing first
// when it comes, and answers every later one "ok"; requests counts them.
func answerAllButTheFirst(t *testing.T, nc *nats.Conn, subject string) (first chan struct{}, requests *atomic.Int32) {
	t.Helper()
	first, requests = make(chan struct{}), new(atomic.Int32)
	natstest.Subscribe(t, nc, subject, func(m *nats.Msg) {
		if requests.Add(1) == 1 {
			close(first)
			return
		}
		_ = m.Respond([]byte("ok"))
	})
	return first, requests
}

// connectThrough connects through proxy the way flyball serve does (no
// reconnect buffer), reconnecting every 20 ms for ever; it is closed in
// t.Cleanup.
func connectThrough(t *testing.T, proxy *cuttableProxy) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(proxy.url(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond), nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
