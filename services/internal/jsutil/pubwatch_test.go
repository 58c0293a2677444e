package jsutil

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/natstest"
)

// TestPubWatchEndsOnlyTheRefusedSubject: a request to a subject the
// user may not publish to hears nothing back (the server's -ERR goes to
// the connection's error handler). Watched, it ends at once with a
// *PubViolation naming the subject, well inside its timeout; a request to
// an allowed subject watched meanwhile is not ended; and the handler set
// before Install still sees the violation.
func TestPubWatchEndsOnlyTheRefusedSubject(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithUsers(t,
		&server.User{Username: "svc", Password: "pw"},
		&server.User{Username: "limited", Password: "pw", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{"ok.>", "_INBOX.>"}},
		}},
	)
	svc, _ := natstest.ConnectAs(t, srv, "svc", "pw")
	natstest.Subscribe(t, svc, "ok.>", func(m *nats.Msg) { _ = m.Respond([]byte("ok")) })
	nc, _ := natstest.ConnectAs(t, srv, "limited", "pw")
	seen := make(chan error, 16)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { seen <- err })
	// Two watches on one connection, installed at once (two services
	// sharing it): each must see the refusal, and so must the handler
	// set before.
	var w, w2 PubWatch
	var wg sync.WaitGroup
	for _, pw := range []*PubWatch{&w, &w2} {
		wg.Go(func() { pw.Install(nc) })
	}
	wg.Wait()

	const timeout = 30 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	other, unwatchOther := w.Watch(ctx, "ok.a")
	defer unwatchOther()
	rctx, unwatch := w.Watch(ctx, "no.a")
	defer unwatch()
	rctx2, unwatch2 := w2.Watch(ctx, "no.a")
	defer unwatch2()
	start := time.Now()
	_, err := nc.RequestWithContext(rctx, "no.a", nil)
	var v *PubViolation
	if err == nil || !errors.As(context.Cause(rctx), &v) || v.Subject != "no.a" || time.Since(start) > timeout/2 {
		t.Fatalf("request to no.a: err %v, cause %v after %s; want it ended at once by a *PubViolation for no.a",
			err, context.Cause(rctx), time.Since(start).Round(time.Millisecond))
	}
	select {
	case <-rctx2.Done():
		if v2, ok := Refusal(rctx2); !ok || v2.Subject != "no.a" {
			t.Fatalf("the second watch on the connection ended with %v, want a *PubViolation for no.a", context.Cause(rctx2))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second watch installed on the connection did not see the refusal: one wrapper was lost")
	}
	if other.Err() != nil {
		t.Fatalf("the request watched on ok.a was ended too: %v", context.Cause(other))
	}
	if reply, err := nc.RequestWithContext(other, "ok.a", nil); err != nil || string(reply.Data) != "ok" {
		t.Fatalf("request to ok.a: %v, want the reply", err)
	}
	select {
	case err := <-seen:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("the handler set before Install got %v, want the permissions violation", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler set before Install did not see the violation")
	}
}

// TestAPISubjectIsWhereTheClientSends: APISubject names the subject
// nats.go sends a JetStream API request to, for each way to make the
// client (a watch on another subject would never fire). The subject is
// taken from the client's own trace of a stream info request.
func TestAPISubjectIsWhereTheClientSends(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc, _ := srv.Connect(t)
	for _, tc := range []struct {
		name string
		make func(...jetstream.JetStreamOpt) (jetstream.JetStream, error)
		want string
	}{
		{"default", func(o ...jetstream.JetStreamOpt) (jetstream.JetStream, error) { return jetstream.New(nc, o...) }, "$JS.API.STREAM.INFO.S"},
		{"domain", func(o ...jetstream.JetStreamOpt) (jetstream.JetStream, error) {
			return jetstream.NewWithDomain(nc, "hub", o...)
		}, "$JS.hub.API.STREAM.INFO.S"},
		{"prefix", func(o ...jetstream.JetStreamOpt) (jetstream.JetStream, error) {
			return jetstream.NewWithAPIPrefix(nc, "imported.API", o...)
		}, "imported.API.STREAM.INFO.S"},
		{"prefix ending in a dot", func(o ...jetstream.JetStreamOpt) (jetstream.JetStream, error) {
			return jetstream.NewWithAPIPrefix(nc, "imported.API.", o...)
		}, "imported.API.STREAM.INFO.S"},
	} {
		sent := make(chan string, 1)
		js, err := tc.make(jetstream.WithClientTrace(&jetstream.ClientTrace{RequestSent: func(subj string, _ []byte) {
			select {
			case sent <- subj:
			default:
			}
		}}))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		_, _ = js.Stream(ctx, "S") // no such stream, or no one answers: only the subject matters
		cancel()
		got := APISubject(js, "STREAM.INFO.S")
		select {
		case subj := <-sent:
			if got != subj || got != tc.want {
				t.Errorf("%s: APISubject = %q, the client sent to %q, want both %q", tc.name, got, subj, tc.want)
			}
		default:
			t.Errorf("%s: the client traced no request", tc.name)
		}
	}
}

// TestPubWatchOfAWildcardEndsAtEachSubjectUnderIt: a request whose
// subject names what it reads (a direct get of a subject's last message,
// $JS.API.DIRECT.GET.<stream>.<subject>) is watched by the subjects the
// permission covers. The server's -ERR names the subject refused: it ends
// the watches whose wildcards match it, with a *PubViolation naming it,
// and no other.
func TestPubWatchOfAWildcardEndsAtEachSubjectUnderIt(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithUsers(t, &server.User{Username: "limited", Password: "pw", Permissions: &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{"ok.>", "_INBOX.>"}},
	}})
	nc, _ := natstest.ConnectAs(t, srv, "limited", "pw")
	seen := make(chan error, 16)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { seen <- err })
	var w PubWatch
	w.Install(nc)
	watch := func(subject string) context.Context {
		wctx, unwatch := w.Watch(t.Context(), subject)
		t.Cleanup(unwatch)
		return wctx
	}
	ended := []context.Context{watch("no.>"), watch("no.*.c"), watch(">"), watch("no.b.c")}
	kept := map[string]context.Context{"no.*": watch("no.*"), "no.b": watch("no.b"), "no.b.c.>": watch("no.b.c.>"), "ok.>": watch("ok.>")}
	rctx, cancel := context.WithTimeout(ended[0], 5*time.Second)
	defer cancel()
	if _, err := nc.RequestWithContext(rctx, "no.b.c", nil); err == nil {
		t.Fatal("a request to no.b.c was answered")
	}
	select {
	case err := <-seen: // the watches have had it: the handler set before Install is called after them
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("the connection's error was %v, want the permissions violation", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler set before Install did not see the violation")
	}
	for i, c := range ended {
		if v, ok := Refusal(c); !ok || v.Subject != "no.b.c" {
			t.Errorf("watch %d ended with %v, want a *PubViolation for no.b.c", i, context.Cause(c))
		}
	}
	for pattern, c := range kept {
		if c.Err() != nil {
			t.Errorf("the watch of %s was ended by the refusal of no.b.c: %v", pattern, context.Cause(c))
		}
	}
}
