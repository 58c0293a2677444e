package api_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/stack"
	"github.com/flyballhq/flyball/streams"
)

// lostAcks is a JetStream whose first lost publishes to subject go through
// lossy, a connection that may not subscribe to its inboxes: the stream
// stores each one, and its ack reaches nobody, as an ack lost with a
// stream leader or a connection does.
type lostAcks struct {
	jetstream.JetStream
	lossy   jetstream.JetStream
	subject string
	lost    atomic.Int32
}

func (l *lostAcks) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if m.Subject == l.subject && l.lost.Add(-1) >= 0 {
		return l.lossy.PublishMsg(ctx, m, opts...)
	}
	return l.JetStream.PublishMsg(ctx, m, opts...)
}

// TestACommandWhoseAckWasLostIsNotAnsweredNotStored: a create whose
// publish timed out because its ack was lost is stored in TASKS, and the
// governor applies it. It was answered 503 "command not stored", and a
// client that believed it sent it again: a second command. The API
// publishes it again with the same id to find out: when that is acked
// (TASKS answers Duplicate), the command is stored once and answered
// with the governor's verdict; when that ack is lost too, the 503 says the
// command may have been stored and gives its commandId.
func TestACommandWhoseAckWasLostIsNotAnsweredNotStored(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		given  int32 // publishes of the command whose ack is lost
		status int
	}{
		{name: "one ack lost", given: 1, status: http.StatusAccepted},
		{name: "every ack lost", given: 100, status: http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, js, _, lossy := natstest.LostAcks(t, 500*time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := streams.Ensure(ctx, js); err != nil {
				t.Fatal(err)
			}
			wrapped := &lostAcks{JetStream: js, lossy: lossy, subject: "flyball.task.created.web"}
			wrapped.lost.Store(tc.given)
			st, err := stack.Start(context.Background(), stack.Config{
				JS: wrapped, Services: []string{"governor", "api"}, APIAddr: "127.0.0.1:0", APITokens: []string{token},
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(st.Stop)
			b := &bundle{base: "http://" + st.API.Addr(), url: "http://example.com"}

			r := b.call(t, http.MethodPost, "/api/v1/tasks", b.task("web", ""))
			expect(t, "create whose ack was lost", r, tc.status, "")
			stored := natstest.Read(t, js, streams.StreamTasks, "flyball.task.created.web")
			if len(stored) != 1 {
				t.Fatalf("TASKS holds %d task.created, want 1", len(stored))
			}
			id := stored[0].Headers().Get(jetstream.MsgIDHeader)
			if r.str("commandId") != id {
				t.Fatalf("answered %s: want commandId %q, the stored command's", r.raw, id)
			}
			switch tc.status {
			case http.StatusAccepted:
				if r.str("status") != "accepted" {
					t.Fatalf("answered %s: want the governor's verdict, accepted", r.raw)
				}
			default:
				if r.str("status") != "unknown" || !strings.Contains(r.str("detail"), "may or may not have been stored") ||
					strings.Contains(r.str("detail"), "command not stored") {
					t.Fatalf("answered %s: want status unknown and a detail that says it may have been stored", r.raw)
				}
			}
		})
	}
}

// TestACommandSentWhileNATSIsDownIsAnsweredNotStored: flyball serve
// connects with no reconnect buffer, so a publish made while NATS is
// unreachable fails at once in the client (nats: outbound buffer limit
// exceeded) and never reaches a stream. The API took that for a lost ack
// and answered 503 "may or may not have been stored" with a commandId,
// sending the client to look at the task or retry with the same key for
// a command nobody stored. It is 503 "command not stored", with no
// commandId, as the status table says.
func TestACommandSentWhileNATSIsDownIsAnsweredNotStored(t *testing.T) {
	t.Parallel()
	srv := natstest.StartRestartable(t)
	nc, js := srv.Connect(t, nats.ReconnectBufSize(-1))
	st, err := stack.Start(context.Background(), stack.Config{
		JS: js, Services: []string{"api"}, APIAddr: "127.0.0.1:0", APITokens: []string{token},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	b := &bundle{base: "http://" + st.API.Addr(), url: "http://example.com"}

	srv.Server.Shutdown()
	srv.Server.WaitForShutdown()
	natstest.Eventually(t, 10*time.Second, "the client disconnected", func() bool { return nc.Status() == nats.RECONNECTING })
	r := b.call(t, http.MethodPost, "/api/v1/tasks", b.task("web", ""))
	expect(t, "create while NATS is down", r, http.StatusServiceUnavailable, "")
	if r.str("commandId") != "" || r.str("status") != "" || !strings.Contains(r.str("detail"), "command not stored") {
		t.Fatalf("create while NATS is down: %s, want \"command not stored\" with no commandId or status", r.raw)
	}
}
