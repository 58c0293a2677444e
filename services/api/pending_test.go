package api_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/api"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/services/stack"
	"github.com/flyballhq/flyball/streams"
)

// storedCommandID is the Nats-Msg-Id of the nth (from 0) message on subject.
func storedCommandID(t *testing.T, js jetstream.JetStream, subject string, n int) string {
	t.Helper()
	stored := natstest.Read(t, js, streams.StreamTasks, subject)
	if len(stored) <= n {
		t.Fatalf("TASKS holds %d messages on %s, want more than %d", len(stored), subject, n)
	}
	return stored[n].Headers().Get(jetstream.MsgIDHeader)
}

// expectPending fails unless r is a 202 pending for the stored command
// cmdID whose detail says what is true of it.
func expectPending(t *testing.T, what string, r *reply, cmdID string) {
	t.Helper()
	expect(t, what, r, http.StatusAccepted, "")
	if r.str("status") != "pending" || r.str("commandId") != cmdID {
		t.Fatalf("%s: answered %s; want status pending and commandId %q, the stored command's", what, r.raw, cmdID)
	}
	d := r.str("detail")
	for _, want := range []string{"stored", "accept or reject", "Idempotency-Key", "GET /api/v1/tasks/"} {
		if !strings.Contains(d, want) {
			t.Fatalf("%s: detail %q does not say %q: a pending command is stored, and the governor accepts or rejects it; a keyed retry or the task tells which", what, d, want)
		}
	}
	if strings.Contains(d, "will still be applied") || strings.Contains(d, "it is applied") {
		t.Fatalf("%s: detail %q says the command will be applied; the governor may reject it", what, d)
	}
}

// TestAPendingCommandSaysItMayBeRejected: with no governor running, two
// creates of the same task were both answered 202 pending, "it will
// still be applied"; once a governor ran, it accepted the first and
// rejected the second. A pending command is stored, and the governor
// accepts or rejects it: the 202 now says so, names the command, and
// says how to learn its verdict, and a retry with the same
// Idempotency-Key once the governor answered gets that verdict.
func TestAPendingCommandSaysItMayBeRejected(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	_, js := srv.Connect(t)
	s := startAPI(t, api.Config{
		Common: svcconf.Common{JS: js}, Addr: "127.0.0.1:0", Tokens: []string{token}, AnswerTimeout: 200 * time.Millisecond,
	})
	b := &bundle{base: "http://" + s.Addr(), url: "http://example.com"}
	const subject = "flyball.task.created.web"

	first := b.keyed(t, http.MethodPost, "/api/v1/tasks", "create-web-1", b.task("web", ""))
	expectPending(t, "the first create, no governor", first, storedCommandID(t, js, subject, 0))
	second := b.keyed(t, http.MethodPost, "/api/v1/tasks", "create-web-2", b.task("web", ""))
	expectPending(t, "the second create, no governor", second, storedCommandID(t, js, subject, 1))

	st, err := stack.Start(context.Background(), stack.Config{JS: js, Services: []string{"governor"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	natstest.Eventually(t, 10*time.Second, "the governor answered neither create", func() bool {
		return len(natstest.Read(t, js, streams.StreamTasks, "flyball.task.rejected.web")) == 1
	})

	r := b.keyed(t, http.MethodPost, "/api/v1/tasks", "create-web-1", b.task("web", ""))
	expect(t, "the first create retried with its key", r, http.StatusAccepted, "")
	if r.str("status") != "accepted" || r.str("commandId") != first.str("commandId") {
		t.Fatalf("the first create retried: %s; want its verdict, accepted, for command %q", r.raw, first.str("commandId"))
	}
	r = b.keyed(t, http.MethodPost, "/api/v1/tasks", "create-web-2", b.task("web", ""))
	expect(t, "the second create retried with its key", r, http.StatusUnprocessableEntity, "id")
	if r.str("status") != "rejected" || r.str("commandId") != second.str("commandId") {
		t.Fatalf("the second create retried: %s; want its verdict, rejected, for command %q", r.raw, second.str("commandId"))
	}
}

// unreadableAnswers is a JetStream that cannot read the answers stored
// in TASKS: creating a consumer on them fails, as it does when NATS is
// short of resources or the connection drops after a publish was acked.
type unreadableAnswers struct {
	jetstream.JetStream
}

func (u *unreadableAnswers) OrderedConsumer(ctx context.Context, stream string, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	for _, s := range cfg.FilterSubjects {
		if strings.HasPrefix(s, "flyball.task.accepted.") || strings.HasPrefix(s, "flyball.task.rejected.") {
			return nil, errors.New("injected: no consumer for the answers")
		}
	}
	return u.JetStream.OrderedConsumer(ctx, stream, cfg)
}

// TestAStoredCommandWhoseVerdictIsUnreadableIsNotNotStored: a keyed
// retry of a stored command is not stored again (TASKS answers
// Duplicate) and reads the first one's answer from TASKS. When that read
// failed, it was answered 503 "command not stored: …" with no commandId,
// and a client that believed it sent it again without a key: a second
// command (a run-now or a dead-letter retry ran twice). It is stored, so
// it is answered 202 pending with its commandId.
func TestAStoredCommandWhoseVerdictIsUnreadableIsNotNotStored(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	_, js := srv.Connect(t)
	s := startAPI(t, api.Config{
		Common: svcconf.Common{JS: &unreadableAnswers{JetStream: js}}, Addr: "127.0.0.1:0", Tokens: []string{token}, AnswerTimeout: 200 * time.Millisecond,
	})
	b := &bundle{base: "http://" + s.Addr(), url: "http://example.com"}

	first := b.keyed(t, http.MethodPost, "/api/v1/tasks", "create-web", b.task("web", ""))
	cmdID := storedCommandID(t, js, "flyball.task.created.web", 0)
	if first.status != http.StatusAccepted || first.str("commandId") != cmdID {
		t.Fatalf("the create, no governor: %d %s; want 202 for command %q", first.status, first.raw, cmdID)
	}
	r := b.keyed(t, http.MethodPost, "/api/v1/tasks", "create-web", b.task("web", ""))
	if strings.Contains(r.str("detail"), "not stored") {
		t.Fatalf("a keyed retry of a stored create whose answer could not be read: %d %s; want it not called \"not stored\"", r.status, r.raw)
	}
	expectPending(t, "a keyed retry whose answer could not be read", r, cmdID)
	if !strings.Contains(r.str("detail"), "injected") {
		t.Fatalf("the detail %q does not say why the verdict is unknown", r.str("detail"))
	}
	if n := len(natstest.Read(t, js, streams.StreamTasks, "flyball.task.created.web")); n != 1 {
		t.Fatalf("TASKS holds %d task.created, want 1", n)
	}
}

// TestAPendingCreateHasNoLocation: a create answered 202 pending carried
// Location: /api/v1/tasks/<id>, though the governor may reject it (the
// task already exists: Location named someone else's task). Location
// comes only with an accepted create.
func TestAPendingCreateHasNoLocation(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	_, js := srv.Connect(t)
	s := startAPI(t, api.Config{
		Common: svcconf.Common{JS: js}, Addr: "127.0.0.1:0", Tokens: []string{token}, AnswerTimeout: 100 * time.Millisecond,
	})
	b := &bundle{base: "http://" + s.Addr(), url: "http://example.com"}
	r := b.call(t, http.MethodPost, "/api/v1/tasks", b.task("web", ""))
	expectPending(t, "a create, no governor", r, storedCommandID(t, js, "flyball.task.created.web", 0))
	if loc := r.header.Get("Location"); loc != "" {
		t.Fatalf("a pending create: Location %q, want none: the governor may still reject it", loc)
	}
}
