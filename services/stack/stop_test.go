package stack_test

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/stack"
	"github.com/flyballhq/flyball/streams"
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

// TestAServiceWhoseStartFailedIsStopped: a service whose Start failed
// partway was never stopped: stack.Start stopped the services that had
// started, and the failed one was not among them. A governor whose RUNS
// consumer was missing had already started consuming TASKS, and kept
// applying commands after Start returned its error; a dead-letter service
// whose ADVISORIES consumer was missing kept consuming RUNS; and every
// one kept its KV watches and goroutines. Now the failed service is
// stopped too: its consumers no longer pull, and the connection is back
// to the subscriptions it had before Start.
func TestAServiceWhoseStartFailedIsStopped(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		service  string
		missing  [2]string // the consumer deleted: its Start fails on it
		consumes [2]string // a consumer its Start consumed before that
		addrUsed bool      // the API's address is taken: its Start fails on it
	}{
		{"governor", [2]string{streams.StreamRuns, streams.ConsumerGovernor}, [2]string{streams.StreamTasks, streams.ConsumerGovernor}, false},
		{"deadletter", [2]string{streams.StreamAdvisories, streams.ConsumerDeadLetter}, [2]string{streams.StreamRuns, streams.ConsumerDeadLetter}, false},
		{"breaker", [2]string{streams.StreamRuns, streams.ConsumerBreaker}, [2]string{}, false},
		{"executor", [2]string{streams.StreamDispatch, streams.ConsumerExecutor}, [2]string{}, false},
		{"api", [2]string{}, [2]string{}, true},
	} {
		t.Run(c.service, func(t *testing.T) {
			t.Parallel()
			srv := natstest.StartWithStreams(t)
			ctx := t.Context()
			cfg := stack.Config{Services: []string{c.service}, APIAddr: "127.0.0.1:0", APITokens: []string{"test-token-0123456789"}}
			if c.missing[0] != "" {
				if err := srv.JS.DeleteConsumer(ctx, c.missing[0], c.missing[1]); err != nil {
					t.Fatal(err)
				}
			}
			if c.addrUsed {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = ln.Close() })
				cfg.APIAddr = ln.Addr().String()
			}
			nc, js := srv.Connect(t)
			if _, err := js.Stream(ctx, streams.StreamTasks); err != nil { // the request inbox, which stays
				t.Fatal(err)
			}
			before := nc.NumSubscriptions()
			cfg.JS = js
			st, err := stack.Start(ctx, cfg)
			if err == nil {
				st.Stop()
				t.Fatalf("stack.Start of %s succeeded", c.service)
			}
			if c.consumes[0] != "" {
				natstest.Eventually(t, 10*time.Second, fmt.Sprintf("%s, whose Start failed (%v), still pulls from %s/%s", c.service, err, c.consumes[0], c.consumes[1]), func() bool {
					info, err := srv.JS.Consumer(ctx, c.consumes[0], c.consumes[1])
					if err != nil {
						return false
					}
					ci, err := info.Info(ctx)
					return err == nil && ci.NumWaiting == 0
				})
			}
			natstest.Eventually(t, 10*time.Second, fmt.Sprintf("%s, whose Start failed (%v), still holds subscriptions (KV watches, consumers)", c.service, err), func() bool {
				return nc.NumSubscriptions() == before
			})
			if c.service != "governor" {
				return
			}
			// No pull waits on TASKS: a command published now stays there,
			// undelivered, for a governor that starts.
			data := `{"id":"leak","target":{"http":{"url":"http://example.com/"}},"schedule":{"interval":"1m"}}`
			ack, err := srv.JS.Publish(ctx, "flyball.task.created.leak", createdEvent("leak", data))
			if err != nil {
				t.Fatal(err)
			}
			cons, err := srv.JS.Consumer(ctx, streams.StreamTasks, streams.ConsumerGovernor)
			if err != nil {
				t.Fatal(err)
			}
			// The server tells a stream's consumers about a stored message
			// after it acks the publish (signalConsumersLoop), so wait until
			// the consumer has counted the command, as pending or delivered.
			var ci *jetstream.ConsumerInfo
			natstest.Eventually(t, 10*time.Second, "TASKS/governor counts the command published", func() bool {
				ci, err = cons.Info(ctx)
				return err == nil && (ci.NumPending > 0 || ci.Delivered.Stream >= ack.Sequence)
			})
			if ci.Delivered.Stream >= ack.Sequence {
				t.Fatalf("TASKS/governor delivered the command (delivered %d, pending %d) after the governor's Start failed", ci.Delivered.Stream, ci.NumPending)
			}
			tasks, err := srv.JS.KeyValue(ctx, streams.BucketTasks)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tasks.Get(ctx, "leak"); err == nil {
				t.Fatal("a governor whose Start failed still consumed TASKS and stored task leak")
			}
		})
	}
}
