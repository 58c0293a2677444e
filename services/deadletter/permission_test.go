package deadletter_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/flyballhq/flyball/services/deadletter"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestStartNamesTheStreamInfoItsUserMayNotRead: the service binds RUNS
// and DEADLETTER at start (an exhausted dispatch's stored outcome is read
// there). A deployment with its own NATS users that upgraded without
// granting their stream info got no reply to the info request, only the
// server's asynchronous -ERR, and Start failed after the JetStream
// timeout with "context deadline exceeded" and a hint to provision. It
// now fails at the refusal, naming the refused subject and the direct
// gets the service needs with it.
func TestStartNamesTheStreamInfoItsUserMayNotRead(t *testing.T) {
	t.Parallel()
	for _, stream := range []string{streams.StreamRuns, streams.StreamDeadLetter} {
		t.Run(stream, func(t *testing.T) {
			t.Parallel()
			denied := "$JS.API.STREAM.INFO." + stream
			srv := natstest.StartWithUsers(t,
				&server.User{Username: "admin", Password: "pw"},
				&server.User{Username: "deadletter", Password: "pw", Permissions: &server.Permissions{
					Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{denied}},
				}},
			)
			_, admin := natstest.ConnectAs(t, srv, "admin", "pw")
			if err := streams.Ensure(t.Context(), admin); err != nil {
				t.Fatal(err)
			}
			// The violation also reaches the connection's handler: keep
			// nats.go's default from printing it.
			_, js := natstest.ConnectAs(t, srv, "deadletter", "pw", nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
			cfg := deadletter.Config{}
			cfg.JS = js
			cfg.Metrics = metrics.New()
			svc, err := deadletter.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = svc.Start(t.Context())
			t.Cleanup(svc.Stop)
			want := "deadletter: stream " + stream + ": permissions violation: may not publish to " + denied +
				"; the deadletter service's NATS user needs it, and $JS.API.DIRECT.GET." + stream + ".> (docs/security.md lists its subjects)"
			var v *jsutil.PubViolation
			if err == nil || err.Error() != want || !errors.As(err, &v) || v.Subject != denied || strings.Contains(err.Error(), "provision") {
				t.Fatalf("start with no permission for %s: %v\nwant: %s", denied, err, want)
			}
		})
	}
}
