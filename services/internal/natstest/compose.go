package natstest

import (
	"context"
	"fmt"
	"net/url"
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
// service, or the CLI binary, under the least-privileged user it has in
// compose. Every permission violation the server logs, from any client,
// fails the test.
type Compose struct {
	*Server // connected as admin (everything inside FLYBALL)
	log     *violationLog
}

// passwordVar matches the password variables of accounts.conf.
var passwordVar = regexp.MustCompile(`\$FLYBALL_NATS_([A-Z]+)_PASSWORD`)

// StartCompose starts a server with deploy/compose/nats/accounts.conf,
// each user's password being its name, listening on a random 127.0.0.1
// port, and creates every flyball stream, consumer and KV bucket as the
// provisioner's user, as compose does.
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
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	s := launch(t, opts)
	log := &violationLog{}
	s.SetLoggerV2(log, false, false, false)
	// Registered after the server's shutdown, so it runs before it, and
	// after the cleanups of everything the test starts later (a service
	// stopping may still touch a subject).
	t.Cleanup(func() {
		for _, v := range log.take() {
			t.Errorf("natstest: permission violation: %s", v)
		}
	})
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("natstest: server not ready within 10s")
	}
	c := &Compose{Server: &Server{Server: s}, log: log}
	c.NC, c.JS = c.Connect(t, "admin")
	// The provision container provisions in compose (flyball provision),
	// under its own user, before any service starts.
	_, prov := c.Connect(t, "provisioner")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := streams.Ensure(ctx, prov); err != nil {
		t.Fatalf("natstest: ensure streams as the provisioner: %v", err)
	}
	return c
}

// ExpectViolation lets the test provoke a permission violation on
// purpose: logged violations whose line contains subject (quoted, as the
// server logs it) no longer fail the test.
func (c *Compose) ExpectViolation(subject string) {
	c.log.mu.Lock()
	defer c.log.mu.Unlock()
	c.log.expected = append(c.log.expected, `"`+subject+`"`)
}

// Connect connects in-process as a compose user (admin, provisioner, governor, timer,
// executor, breaker, deadletter, sweeper, api, cli). opts come after its
// own, so a test can add one (an error handler).
func (c *Compose) Connect(t testing.TB, user string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	own := []nats.Option{nats.InProcessServer(c.Server.Server), nats.UserInfo(user, user), nats.Name(user)}
	return connect(t, "", append(own, opts...)...)
}

// Each connects as each of users in turn (a service's user is its name)
// and calls start with the connection, as compose runs one process per
// service.
func (c *Compose) Each(t testing.TB, users []string, start func(user string, js jetstream.JetStream)) {
	t.Helper()
	for _, u := range users {
		_, js := c.Connect(t, u)
		start(u, js)
	}
}

// URL is the client URL of the server with user's credentials in it, for a
// process of its own (the CLI binary).
func (c *Compose) URL(user string) string {
	u, err := url.Parse(c.Server.Server.ClientURL())
	if err != nil {
		panic(err) // the server's own URL
	}
	u.User = url.UserPassword(user, user)
	return u.String()
}

// violationLog is the server's logger: it keeps the permission
// violations it logs and drops everything else.
type violationLog struct {
	mu       sync.Mutex
	seen     []string
	expected []string // quoted subjects whose violations are provoked on purpose
	done     bool
}

func (l *violationLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.done = true
	return l.seen
}

func (l *violationLog) Errorf(format string, v ...any) {
	line := fmt.Sprintf(format, v...)
	if !strings.Contains(line, "Violation") {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.expected {
		if strings.Contains(line, e) {
			return
		}
	}
	if !l.done {
		l.seen = append(l.seen, line)
	}
}

func (*violationLog) Noticef(string, ...any) {}
func (*violationLog) Warnf(string, ...any)   {}
func (*violationLog) Fatalf(string, ...any)  {}
func (*violationLog) Debugf(string, ...any)  {}
func (*violationLog) Tracef(string, ...any)  {}
