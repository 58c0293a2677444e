package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/flyballhq/flyball/services/internal/apitest"
	"github.com/flyballhq/flyball/services/internal/natstest"
)

// TestNATSURLCredentialsAreNotShown: the URL list that `flyball serve`
// logs and puts in a connect error keeps its hosts but never a password
// or a token.
func TestNATSURLCredentialsAreNotShown(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                              "nats://127.0.0.1:4222",
		"nats://governor:hunter2@nats-1:4222":                "nats://governor:REDACTED@nats-1:4222",
		"nats://s3cr3t-token@nats-1:4222":                    "nats://REDACTED@nats-1:4222",
		"nats://a:hunter2@n1:4222, nats://a:hunter2@n2:4222": "nats://a:REDACTED@n1:4222,nats://a:REDACTED@n2:4222",
		"tls://n1:4222,nats://n2":                            "tls://n1:4222,nats://n2",
	} {
		if got := redactURLs(in); got != want {
			t.Errorf("redactURLs(%q) = %q, want %q", in, got, want)
		}
	}
	f := natsFlags{url: "nats://governor:hunter2@127.0.0.1:1", name: "test"}
	_, _, err := f.connect()
	if err == nil {
		t.Fatal("connected to port 1")
	}
	if strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("connect error %q: want the host without the password", err)
	}
	// A password with an unescaped % does not parse, and url.Parse's own
	// error quotes the whole URL: it must not reach the error.
	for _, bad := range []string{"nats://alice:s3cr%t@127.0.0.1:1", "nats://n0:4222,nats://s3cr%t@127.0.0.1:1"} {
		f := natsFlags{url: bad, name: "test"}
		_, _, err := f.connect()
		if err == nil || strings.Contains(err.Error(), "s3cr") || !strings.Contains(err.Error(), "does not parse") {
			t.Errorf("connect to %s: error %v, want that a URL does not parse, without the credentials", bad, err)
		}
	}
	// Without credentials the parser's reason is worth showing.
	f = natsFlags{url: "nats://127.0.0.1:%zz", name: "test"}
	if _, _, err := f.connect(); err == nil || !strings.Contains(err.Error(), `invalid port ":%zz"`) {
		t.Errorf("connect to an unparsable URL without credentials: error %v, want url.Parse's reason", err)
	}
}

// TestNATSURLCredentialsURLParseMissesAreNotShown: nats.go reads a URL
// without a scheme as nats://… (cli:s3cretpass@host, which url.Parse
// reads as the scheme cli), and a password whose text up to the first
// /, ? or # is digits makes url.Parse find a port and no user info
// (nats://svc:2024/Xy+z@nats1:4222). Neither credential may reach the
// connect error, the "serving" log line or the -h default.
func TestNATSURLCredentialsURLParseMissesAreNotShown(t *testing.T) {
	t.Parallel()
	const placeholder = "(unparsable URL with credentials)"
	for in, want := range map[string]string{
		"cli:s3cretpass@127.0.0.1:4222":                   "cli:REDACTED@127.0.0.1:4222",
		"s3cr3t-token@nats-1":                             "REDACTED@nats-1",
		"nats-1:4222":                                     "nats-1:4222",
		"nats://svc:2024/Xy+z@nats1:4222":                 placeholder,
		"nats://svc:2024?Xy@nats1:4222":                   placeholder,
		"nats://svc:2024#Xy@nats1:4222":                   placeholder,
		"nats://a:b@n1:4222/x@y":                          placeholder,
		"nats://n0:4222, nats://svc:2024/Xy+z@nats1:4222": "nats://n0:4222," + placeholder,
		"nats://a:hunter2@n1:4222,cli:s3cretpass@n2:4222": "nats://a:REDACTED@n1:4222,REDACTED@n2:4222",
	} {
		if got := redactURLs(in); got != want {
			t.Errorf("redactURLs(%q) = %q, want %q", in, got, want)
		}
	}
	secrets := []string{"s3cretpass", "Xy+z"}
	leaks := func(s string) bool {
		for _, secret := range secrets {
			if strings.Contains(s, secret) {
				return true
			}
		}
		return false
	}
	for _, bad := range []string{"cli:s3cretpass@127.0.0.1:1", "nats://svc:2024/Xy+z@127.0.0.1:1"} {
		f := natsFlags{url: bad, name: "test"}
		_, _, err := f.connect()
		if err == nil || leaks(err.Error()) {
			t.Errorf("connect to %s: error %v, want one without the credentials", bad, err)
		}
	}

	// Both, to a real server (it has no authorization, so it takes any):
	// nats.go connects with either, and serve logs the list.
	_, url := natstest.StartListening(t)
	hostPort := strings.TrimPrefix(url, "nats://")
	list := "cli:s3cretpass@" + hostPort + ", nats://" + hostPort + "/Xy+z@nats1:4222"
	e := &cliEnv{url: list, dir: t.TempDir()}
	serving, raw := serveUntilServing(t, e, "governor")
	if got, want := serving["nats"], "cli:REDACTED@"+hostPort+","+placeholder; got != want {
		t.Errorf("the serving line names NATS as %q, want %q", got, want)
	}
	if leaks(raw) {
		t.Errorf("serve's log shows a credential of its NATS URL:\n%s", raw)
	}

	help := exec.Command(cliBinary, "serve", "-h")
	help.Env = append(os.Environ(), "NATS_URL="+list)
	out, err := help.CombinedOutput()
	if err != nil {
		t.Fatalf("flyball serve -h: %v\n%s", err, out)
	}
	if leaks(string(out)) || !strings.Contains(string(out), "cli:REDACTED@"+hostPort+","+placeholder) {
		t.Errorf("flyball serve -h with NATS_URL=%s shows:\n%s\nwant the default without its credentials", list, out)
	}
}

// TestNATSURLPasswordWithACommaIsNotShown: nats.go splits the URL list
// at every comma, and so does redactURLs, so a password holding a comma
// is cut in two: the part before it is a piece without an "@", which was
// shown as it was ("nats://flyball:s3cr,REDACTED@…"). In a list that
// carries credentials, a piece without its own that does not parse, or
// that stands before the rest of such a password, is not shown. The rest
// may hold a ":" ("nats://flyball:s3cr,e:tPart@h" showed "…,e:REDACTED@h"),
// so a schemeless piece with an "@" after the first shows no user name.
func TestNATSURLPasswordWithACommaIsNotShown(t *testing.T) {
	t.Parallel()
	const placeholder = "(unparsable URL with credentials)"
	for in, want := range map[string]string{
		"nats://flyball:s3cr,etPart@127.0.0.1:1":  placeholder + ",REDACTED@127.0.0.1:1",
		"nats://flyball:abc:def,x@127.0.0.1:1":    placeholder + ",REDACTED@127.0.0.1:1",
		"flyball:s3cr,etPart@127.0.0.1:1":         placeholder + ",REDACTED@127.0.0.1:1",
		"nats://flyball:2024,etPart@127.0.0.1:1":  placeholder + ",REDACTED@127.0.0.1:1",
		"nats://flyball:ab,cd,ef@127.0.0.1:1":     placeholder + "," + placeholder + ",REDACTED@127.0.0.1:1",
		"nats://n0:4222,nats://a:hunter2@n1:4222": "nats://n0:4222,nats://a:REDACTED@n1:4222",
		"nats://a:hunter2@n1:4222,nats://n2:4222": "nats://a:REDACTED@n1:4222,nats://n2:4222",
		"nats://n0:4222,nats://n1:4222":           "nats://n0:4222,nats://n1:4222",
		// The rest of the password may hold a ":" too: what comes before
		// it is no user name, and nothing before the "@" is shown.
		"nats://flyball:s3cr,e:tPart@127.0.0.1:1":     placeholder + ",REDACTED@127.0.0.1:1",
		"nats://flyball:ab,cd,ef:gh@h:4222":           placeholder + "," + placeholder + ",REDACTED@h:4222",
		"flyball:s3cr,eXtra:tPart@127.0.0.1:1":        placeholder + ",REDACTED@127.0.0.1:1",
		"nats://flyball:2024,eXtra:tPart@127.0.0.1:1": placeholder + ",REDACTED@127.0.0.1:1",
		"nats://flyball:s3cr,:tPart@127.0.0.1:1":      placeholder + ",REDACTED@127.0.0.1:1",
		"nats://n0:4222,cli:s3cretpass@n2:4222":       placeholder + ",REDACTED@n2:4222",
		"nats://flyball:s3cr,eXtra:tPart@h:1,n2:4222": placeholder + ",REDACTED@h:1,n2:4222",
		// A piece with a scheme is no password's rest: its user is shown.
		"nats://n0:4222,nats://a:hunter2@n1:4222,nats://b:hunter2@n2:4222": "nats://n0:4222,nats://a:REDACTED@n1:4222,nats://b:REDACTED@n2:4222",
	} {
		if got := redactURLs(in); got != want {
			t.Errorf("redactURLs(%q) = %q, want %q", in, got, want)
		}
	}
	secrets := []string{"s3cr", "abc:def", "2024", "ab,", "cd", "eXtra"}
	leaks := func(s string) string {
		for _, secret := range secrets {
			if strings.Contains(s, secret) {
				return secret
			}
		}
		return ""
	}
	for _, bad := range []string{"nats://flyball:s3cr,etPart@127.0.0.1:1", "nats://flyball:abc:def,x@127.0.0.1:1", "nats://flyball:s3cr,eXtra:tPart@127.0.0.1:1"} {
		f := natsFlags{url: bad, name: "test"}
		_, _, err := f.connect()
		if err == nil || leaks(err.Error()) != "" || !strings.Contains(err.Error(), "% / ? # @ ,") {
			t.Errorf("connect to %s: error %v, want one without the password that says to percent-encode a comma", bad, err)
		}
	}
	for _, list := range []string{"nats://flyball:s3cr,etPart@127.0.0.1:1", "nats://flyball:s3cr,eXtra:tPart@127.0.0.1:1"} {
		help := exec.Command(cliBinary, "serve", "--help")
		help.Env = append(os.Environ(), "NATS_URL="+list)
		out, err := help.CombinedOutput()
		if err != nil {
			t.Fatalf("flyball serve --help: %v\n%s", err, out)
		}
		if secret := leaks(string(out)); secret != "" {
			t.Errorf("flyball serve --help with NATS_URL=%s shows %q", list, secret)
		}
	}

	// The first piece parses (host flyball, port 2024) and the second
	// reaches a real server (it has no authorization, so it takes any):
	// serve connects and logs the list.
	_, url := natstest.StartListening(t)
	hostPort := strings.TrimPrefix(url, "nats://")
	e := &cliEnv{url: "nats://flyball:2024,eXtra:tPart@" + hostPort, dir: t.TempDir()}
	serving, raw := serveUntilServing(t, e, "governor")
	if got, want := serving["nats"], placeholder+",REDACTED@"+hostPort; got != want {
		t.Errorf("the serving line names NATS as %q, want %q", got, want)
	}
	// Not counting the log's timestamps and the server's address, whose
	// digits may hold "2024" (a time of …:37.284202418 did).
	scrubbed := strings.ReplaceAll(regexp.MustCompile(`"time":"[^"]*"`).ReplaceAllString(raw, ""), hostPort, "")
	if secret := leaks(scrubbed); secret != "" {
		t.Errorf("serve's log shows %q of its NATS URL's password:\n%s", secret, raw)
	}
}

// TestServeWithoutTheAPIDoesNotReadItsTokens: the API's tokens (and its
// TLS files) are read and checked only when serve runs the API. A shared
// environment file naming a token file that only the API's pod mounts,
// or a short token, stopped the timer and the executors at start, and
// they crash-looped.
func TestServeWithoutTheAPIDoesNotReadItsTokens(t *testing.T) {
	t.Parallel()
	_, url := natstest.StartListening(t)
	e := &cliEnv{url: url, dir: t.TempDir(), env: []string{"FLYBALL_API_TOKEN_FILE=/nonexistent/tokens", "FLYBALL_API_TOKENS=short", "FLYBALL_API_TLS_CERT=/nonexistent/api.pem"}}
	serveUntilServing(t, e, "timer", "executor")
	// With the API, both are still refused before anything starts.
	for _, env := range []string{"FLYBALL_API_TOKEN_FILE=/nonexistent/tokens", "FLYBALL_API_TOKENS=short"} {
		e := &cliEnv{url: url, dir: t.TempDir(), env: []string{env}}
		if r := e.run(t, "serve", "timer", "api", "--metrics-addr", ""); r.code != 1 || !strings.HasPrefix(r.stderr, "flyball: ") {
			t.Errorf("%s flyball serve timer api: exit %d, stderr %q; want the token refused", env, r.code, r.stderr)
		}
	}
}

// TestPublishesAreNotBufferedWhileDisconnected: a service's connection has
// no reconnect buffer. A publish made while it is disconnected fails, and
// its caller retries it with fresh data; buffered, it was sent unchanged
// once the connection came back (a timer's stale dispatch stored after
// the slot had run). Checked on a connection that really loses its
// server: the publish fails at once instead of being kept.
func TestPublishesAreNotBufferedWhileDisconnected(t *testing.T) {
	t.Parallel()
	srv, url := natstest.StartListening(t)
	f := natsFlags{url: url, name: "test"}
	nc, _, err := f.connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if nc.Opts.ReconnectBufSize != -1 {
		t.Fatalf("ReconnectBufSize %d, want -1 (no buffer)", nc.Opts.ReconnectBufSize)
	}
	disconnected := make(chan struct{})
	var once sync.Once
	nc.SetDisconnectErrHandler(func(*nats.Conn, error) { once.Do(func() { close(disconnected) }) })
	srv.Server.Shutdown()
	<-disconnected
	if err := nc.Publish("flyball.test", []byte("x")); err == nil {
		t.Fatal("a publish while disconnected was accepted (buffered for the reconnect), want an error")
	}
}

// TestCleanCloseIsNotAWarning: a process that closes its own NATS
// connection at a clean stop logs no "nats: disconnected" warning; the
// operations guide lists that warning among those that need a look.
func TestCleanCloseIsNotAWarning(t *testing.T) {
	t.Parallel()
	_, url := natstest.StartListening(t)
	var buf syncBuffer
	f := natsFlags{url: url, name: "test", log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	nc, _, err := f.connect()
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	nc.Close()
	<-closed
	if out := buf.String(); strings.Contains(out, "level=WARN") || !strings.Contains(out, "nats: connection closed") {
		t.Fatalf("log after a clean close:\n%s\nwant a debug line and no warning", out)
	}
}

// TestHelpShowsNoSecretsFromTheEnvironment: flags whose default comes
// from the environment print that default in --help. For --api-token
// (FLYBALL_API_TOKENS) and --nats-url (NATS_URL, which may carry a
// password or a token) that printed the secret itself.
func TestHelpShowsNoSecretsFromTheEnvironment(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"serve", "--help"}, {"dev", "--help"}, {"task", "list", "--help"}} {
		cmd := exec.Command(cliBinary, args...)
		cmd.Env = append(os.Environ(), "FLYBALL_API_TOKENS=s3cr3t-api-token-0123456789", "NATS_URL=nats://cli:hunter2@127.0.0.1:4222")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("flyball %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		for _, secret := range []string{"s3cr3t-api-token", "hunter2"} {
			if i := strings.Index(string(out), secret); i >= 0 {
				line := string(out)[strings.LastIndex(string(out[:i]), "\n")+1:]
				line, _, _ = strings.Cut(line, "\n")
				t.Errorf("flyball %s prints %q from the environment: %s", strings.Join(args, " "), secret, strings.TrimSpace(line))
			}
		}
	}
}

// TestServeLogsNATSAsyncErrorsInItsLogFormat: the connection's
// asynchronous errors (after a NATS restart, "consumer not active" for
// every KV watch) go to the service's log. nats.go's default handler
// printed them to stderr as bare lines, which --log-format json readers
// cannot parse.
func TestServeLogsNATSAsyncErrorsInItsLogFormat(t *testing.T) {
	t.Parallel()
	_, url := natstest.StartListening(t)
	var buf syncBuffer
	f := natsFlags{url: url, name: "test", log: slog.New(slog.NewJSONHandler(&buf, nil))}
	nc, _, err := f.connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// A subscriber that holds one message at most: the rest are dropped,
	// and nats.go reports a slow consumer through the error handler.
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	sub := natstest.Subscribe(t, nc, "slow", func(*nats.Msg) { <-block })
	if err := sub.SetPendingLimits(1, -1); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := nc.Publish("slow", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	natstest.Eventually(t, 10*time.Second, "the slow consumer error in the JSON log", func() bool {
		return strings.Contains(buf.String(), `"msg":"nats: asynchronous error","err":"nats: slow consumer, messages dropped","subject":"slow"`)
	})
}

// syncBuffer is a bytes.Buffer safe for a logger and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeSaysWhenJetStreamIsOff: against a NATS server without
// JetStream, serve and provision say so in their one line. They stopped
// with nats.go's "no responders available for request", which names
// neither JetStream nor the server's setting.
func TestServeSaysWhenJetStreamIsOff(t *testing.T) {
	t.Parallel()
	s := startWithoutJetStream(t)
	e := &cliEnv{url: s.ClientURL(), dir: t.TempDir()}
	const want = "is JetStream enabled"
	for _, args := range [][]string{
		{"serve", "governor", "--metrics-addr", ""},
		{"serve", "governor", "--metrics-addr", "", "--ensure-streams=false"},
		{"provision", "--timeout", "1s"},
	} {
		r := e.run(t, args...)
		last := r.stderr[strings.LastIndex(strings.TrimSuffix(r.stderr, "\n"), "\n")+1:]
		if r.code != 1 || !strings.HasPrefix(last, "flyball: ") || !strings.Contains(last, want) {
			t.Errorf("flyball %s without JetStream: exit %d, stderr %q; want exit 1 and a last line with %q", strings.Join(args, " "), r.code, r.stderr, want)
		}
	}
}

// startWithoutJetStream starts a nats-server without JetStream, shut down
// in t.Cleanup.
func startWithoutJetStream(t *testing.T) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return s
}

// serveUntilServing runs flyball serve with services under e, waits for
// its "serving" log line, then interrupts it and waits for a clean exit.
// It returns that line and the whole log.
func serveUntilServing(t *testing.T, e *cliEnv, services ...string) (serving map[string]any, log string) {
	t.Helper()
	return serveWhile(t, e, nil, services...)
}

// serveWhile is serveUntilServing calling during (unless nil) with the
// "serving" line before it interrupts serve. services may hold flags.
func serveWhile(t *testing.T, e *cliEnv, during func(serving map[string]any), services ...string) (serving map[string]any, log string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	args := append(append([]string{"serve"}, services...), "--metrics-addr", "", "--log-format", "json")
	cmd := e.command(ctx, args...)
	_, lines, raw := startJSONLogged(t, cmd, false)
	for m := range lines {
		if m["msg"] == "serving" {
			serving = m
			break
		}
	}
	if serving == nil {
		_ = cmd.Wait()
		t.Fatalf("serve %v ended before logging \"serving\":\n%s", services, raw.String())
	}
	if during != nil {
		during(serving)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	for range lines { // drain until serve exits
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve after an interrupt: %v\n%s", err, raw.String())
	}
	return serving, raw.String()
}

// TestServeAPIOverTLS: serve's API spoke plain HTTP only, on every
// interface by default (:8080), so bearer tokens crossed the network in
// the clear. With --api-tls-cert and --api-tls-key (here the key from
// FLYBALL_API_TLS_KEY) it serves HTTPS: an authenticated request works
// over https, and plain http to the port gets no API answer.
func TestServeAPIOverTLS(t *testing.T) {
	t.Parallel()
	_, url := natstest.StartListening(t)
	certFile, keyFile, roots := apitest.SelfSigned(t)
	e := &cliEnv{url: url, dir: t.TempDir(), env: []string{"FLYBALL_API_TLS_KEY=" + keyFile}}
	serveWhile(t, e, func(serving map[string]any) {
		addr, _ := serving["api"].(string)
		c := apitest.Client{Base: "https://" + addr, Token: fixedToken, HTTP: apitest.TLSClient(t, roots)}
		if code, body := c.Do(t, http.MethodGet, "/api/v1/tasks", ""); code != http.StatusOK || !strings.Contains(string(body), `"tasks"`) {
			t.Errorf("GET /api/v1/tasks over https: %d %s, want 200 and the tasks", code, body)
		}
		plain := apitest.Client{Base: "http://" + addr, Token: fixedToken}
		if code, body := plain.Do(t, http.MethodGet, "/api/v1/tasks", ""); code == http.StatusOK || strings.Contains(string(body), `"tasks"`) {
			t.Errorf("GET /api/v1/tasks over plain http to the TLS port: %d %s, want it refused", code, body)
		}
	}, "api", "--api-addr", "127.0.0.1:0", "--api-token", fixedToken, "--api-tls-cert", certFile)
}
