package stack_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/stack"
)

// TestStopWithNATSGoneDoesNotHang: stopping every service after NATS went
// away (a compose down that stops nats first, a node lost before a
// rolling restart) held the process for about 90 s: each heartbeat
// waited out its beat in flight (up to an interval) and then its 2 s
// deregistration, one service after another. Beats in flight are now
// cancelled and the services deregister together, each giving up after
// its 2 s.
func TestStopWithNATSGoneDoesNotHang(t *testing.T) {
	srv := natstest.StartRestartable(t)
	nc, js := srv.Connect(t)
	// Beats every 200ms, each allowed 200ms: while NATS is gone one is
	// nearly always in flight.
	st, err := stack.Start(context.Background(), stack.Config{JS: js, Services: stack.All, APIAddr: "127.0.0.1:0", APITokens: []string{"test-token-0123456789"}, HeartbeatInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv.Server.Shutdown()
	srv.Server.WaitForShutdown()
	natstest.Eventually(t, 10*time.Second, "the client to notice NATS is gone", func() bool { return !nc.IsConnected() })
	stopped := make(chan struct{})
	go func() {
		st.Stop()
		close(stopped)
	}()
	// Seven deregistrations of 2 s each, one after another, took 14 s
	// and more; together they take 2 s. The bound is a hang check, with
	// room for a loaded machine.
	select {
	case <-stopped:
	case <-time.After(8 * time.Second):
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("Stop did not return within 8s of NATS going away:\n%s", buf)
	}
}
