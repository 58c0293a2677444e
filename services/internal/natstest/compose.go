package natstest

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/streams"
)

// Compose is a server running the compose stack's accounts, users and
// permissions (deploy/compose/nats/accounts.conf), so a test can run a
// service under the least-privileged user it has in compose.
type Compose struct {
	*Server // connected as admin (everything inside FLYBALL)
}

// passwordVar matches the password variables of accounts.conf.
var passwordVar = regexp.MustCompile(`\$FLYBALL_NATS_([A-Z]+)_PASSWORD`)

// StartCompose starts a server with deploy/compose/nats/accounts.conf,
// each user's password being its name, and creates every flyball stream,
// consumer and KV bucket as admin (as the governor does in compose).
func StartCompose(t testing.TB) *Compose {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("natstest: cannot locate the source tree")
	}
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "..", "deploy", "compose", "nats", "accounts.conf"))
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	conf := passwordVar.ReplaceAllStringFunc(string(raw), func(v string) string {
		return `"` + strings.ToLower(passwordVar.FindStringSubmatch(v)[1]) + `"`
	})
	path := filepath.Join(t.TempDir(), "accounts.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatalf("natstest: %v", err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("natstest: accounts.conf: %v", err)
	}
	opts.DontListen = true
	s := launch(t, opts)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("natstest: server not ready within 10s")
	}
	c := &Compose{Server: &Server{Server: s}}
	c.NC, c.JS = c.Connect(t, "admin")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := streams.Ensure(ctx, c.JS); err != nil {
		t.Fatalf("natstest: ensure streams as admin: %v", err)
	}
	return c
}

// Connect connects as a compose user (admin, governor, timer, executor,
// breaker, deadletter, sweeper, api, cli). A permission violation the
// server reports on the connection fails the test: violations are
// collected while the test and its cleanups run (a service stopping in
// cleanup may still touch a subject), and reported just before the
// connection closes.
func (c *Compose) Connect(t testing.TB, user string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	var (
		mu         sync.Mutex
		violations []string
		reported   bool
	)
	nc, js := connect(t, "", nats.InProcessServer(c.Server.Server), nats.UserInfo(user, user),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if !reported {
				violations = append(violations, err.Error())
			}
		}))
	// Registered after connect's Close, so it runs before it (and after
	// the cleanups of whatever the test starts on the connection later).
	t.Cleanup(func() {
		_ = nc.Flush() // the server's answer to the last publish, if any
		mu.Lock()
		defer mu.Unlock()
		reported = true
		for _, v := range violations {
			t.Errorf("natstest: user %s: %s", user, v)
		}
	})
	return nc, js
}
