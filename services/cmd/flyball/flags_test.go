package main

import (
	"net"
	"strings"
	"testing"

	"github.com/flyballhq/flyball/pkg/events"
)

// TestCLIFlagMistakesNameTheFlag: a bad flag value is refused before
// anything connects or is sent, in one line that names the flag as the
// user typed it.
func TestCLIFlagMistakesNameTheFlag(t *testing.T) {
	t.Parallel()
	e := &cliEnv{url: "nats://127.0.0.1:1", dir: t.TempDir()} // nothing listens there
	long := strings.Repeat("x", events.MaxReasonBytes+1)
	for _, c := range []struct {
		args []string
		want string
	}{
		// explain passed "--since" to parseWhen, which adds the dashes.
		{[]string{"explain", "web", "--since", "yesterday"}, `flyball: --since: want an RFC 3339 time`},
		// A negative --count made tail print its header and exit 0 at once.
		{[]string{"dlq", "tail", "--count", "-1"}, "flyball: --count: must be >= 0, got -1"},
		// pause and run-now sent a reason the governor refuses (hint checked it).
		{[]string{"task", "pause", "web", "--reason", long}, "flyball: --reason: must be at most 1024 bytes"},
		{[]string{"task", "run-now", "web", "--reason", long}, "flyball: --reason: must be at most 1024 bytes"},
		// delete, resume and dlq retry sent any reason.
		{[]string{"task", "delete", "web", "--reason", long}, "flyball: --reason: must be at most 1024 bytes"},
		{[]string{"task", "resume", "web", "--reason", long}, "flyball: --reason: must be at most 1024 bytes"},
		{[]string{"dlq", "retry", "1", "--reason", long}, "flyball: --reason: must be at most 1024 bytes"},
		// A zero or negative --timeout made every probe fail with
		// "context deadline exceeded".
		// The subject check let a CR or a newline through: replay warned it
		// was republishing, connected, and NATS refused the subject.
		{[]string{"replay", "--stream", "RUNS", "--to", "debug\rfailed"}, `flyball: --to: want one concrete subject`},
		{[]string{"replay", "--stream", "RUNS", "--to", "debug\nfailed"}, `flyball: --to: want one concrete subject`},
		// Republishing RUNS into $KV.flyball-tasks.web replaced the task's
		// spec with a run event, and its runs were skipped.
		{[]string{"replay", "--stream", "RUNS", "--to", "$KV.flyball-tasks.web"}, `flyball: --to $KV.flyball-tasks.web: a subject starting with $ belongs to the server`},
		// RUNS replayed into flyball.run.failed.web counted the failures
		// again toward web's breaker; TASKS into flyball.task.* applied the
		// commands again.
		{[]string{"replay", "--stream", "RUNS", "--to", "flyball.run.failed.web"}, `flyball: --to flyball.run.failed.web: flyball.* subjects are stored in flyball's own streams`},
		{[]string{"replay", "--stream", "TASKS", "--to", "flyball.task.created.web"}, `flyball: --to flyball.task.created.web: flyball.* subjects are stored in flyball's own streams`},
		// --until counts back from now like --since: this window was empty
		// and replay printed nothing.
		{[]string{"replay", "--stream", "RUNS", "--since", "1h", "--until", "2h"}, `flyball: --until 2h (`},
		{[]string{"healthcheck", "--timeout", "0s", "http://127.0.0.1:1/healthz"}, "flyball: --timeout: must be positive, got 0s"},
		// Pages: a cursor that is not one was no error to catch before
		// anything connects.
		{[]string{"runs", "web", "--before", "0"}, `flyball: --before: want a stream sequence (a positive integer`},
		{[]string{"dlq", "list", "--before", "seven"}, `flyball: --before: want a stream sequence (a positive integer, as the last page's hint gave), got "seven"`},
		{[]string{"runs", "web", "--before", "9", "--follow"}, "flyball: --before lists older runs and --follow newer ones: give one of them"},
		{[]string{"task", "list", "--after", "a.b"}, `flyball: --after: task id "a.b": must be 1-128 characters`},
		{[]string{"task", "list", "--limit", "-1"}, "flyball: --limit: must be in [0, 1000000] (0: all), got -1"},
		// A limit past math.MaxInt-1 overflowed in the listing: a Go
		// panic, exit 2.
		{[]string{"dlq", "list", "--limit", "9223372036854775807"}, "flyball: --limit: must be in [0, 1000000] (0: all), got 9223372036854775807"},
		{[]string{"dlq", "list", "--task", "x", "--limit", "5000000000000000000"}, "flyball: --limit: must be in [0, 1000000] (0: all)"},
		{[]string{"runs", "web", "--limit", "5000000000000000000"}, "flyball: --limit: must be in [0, 1000000] (0: all)"},
		{[]string{"runs", "web", "--follow", "--limit", "1000001"}, "flyball: --limit: must be in [0, 1000000] (0: all), got 1000001"},
		{[]string{"task", "list", "--limit", "1000001"}, "flyball: --limit: must be in [0, 1000000] (0: all), got 1000001"},
		// status printed every task's staleness; --stale caps it, as the
		// API's staleness parameter does.
		{[]string{"status", "--stale", "1001"}, "flyball: --stale: must be in [0, 1000], got 1001"},
		{[]string{"status", "--stale", "-1", "-o", "json"}, "flyball: --stale: must be in [0, 1000], got -1"},

		// An empty --until or --at (a script's unset variable) read as
		// not given: the task was paused until resumed, or hinted a
		// cadence with no one-shot run.
		{[]string{"task", "pause", "web", "--until", ""}, `flyball: --until: want an RFC 3339 time`},
		{[]string{"task", "hint", "web", "--interval", "30s", "--at", ""}, `flyball: --at: want an RFC 3339 time`},
		{[]string{"task", "hint", "web", "--at", ""}, `flyball: --at: want an RFC 3339 time`},
		// replay read an empty value as not given: --to printed the
		// messages, republished none and exited 0.
		{[]string{"replay", "--stream", "RUNS", "--to", ""}, `flyball: --to: empty`},
		{[]string{"replay", "--stream", "RUNS", "--since", ""}, `flyball: --since: empty`},
		{[]string{"replay", "--stream", "RUNS", "--subject", ""}, `flyball: --subject: empty`},
		// An empty --api-addr fell back to 127.0.0.1:8080, out of reach
		// from outside the host or container.
		{[]string{"serve", "api", "--api-addr", "", "--api-token", "0123456789abcdef"}, `flyball: --api-addr: empty`},
		// A service named twice ran once, without a word.
		{[]string{"serve", "timer", "executor", "timer"}, `flyball: service "timer" named twice`},
		// An empty cursor (a script's unset variable) read as not given:
		// the first page came back, and a loop over pages never ended.
		{[]string{"runs", "web", "--before", ""}, `flyball: --before: empty; give a value, or leave the flag out`},
		{[]string{"dlq", "list", "--before="}, `flyball: --before: empty; give a value, or leave the flag out`},
		{[]string{"task", "list", "--after", ""}, `flyball: --after: empty; give a value, or leave the flag out`},
		// An empty --job read as no filter: every task was listed, and
		// "task list --job $JOB -o json | … | xargs flyball task delete"
		// deleted every task when $JOB was unset. The same for explain's
		// --since (every decision), target's --addr (a random port on
		// every interface) and dev's --data-dir (a temporary directory).
		{[]string{"task", "list", "--job", ""}, `flyball: --job: empty; give a value, or leave the flag out`},
		{[]string{"explain", "web", "--since="}, `flyball: --since: empty; give a value, or leave the flag out`},
		{[]string{"target", "--addr=", "--max-requests", "0"}, `flyball: --addr: empty; give a value, or leave the flag out`},
		{[]string{"dev", "--data-dir", "", "--concurrency", "0"}, `flyball: --data-dir: empty; give a value, or leave the flag out`},
		// A negative --latency was served (as none), while POST /control
		// refuses one. --max-requests 0 makes a binary without the check
		// fail at once instead of serving.
		{[]string{"target", "--latency", "-1s", "--addr", "127.0.0.1:0", "--max-requests", "0"}, "flyball: --latency: want a duration of 0 or more, got -1s"},
		// An empty secret flag was dropped: --api-token= discarded
		// FLYBALL_API_TOKENS (dev generated a token instead), and
		// --nats-url= connected to nats.go's default URL. --concurrency 0
		// makes a binary without the check fail before it starts.
		{[]string{"serve", "api", "--api-token=", "--concurrency", "0"}, "flyball: --api-token: empty"},
		{[]string{"serve", "api", "--api-token", " , ", "--concurrency", "0"}, "flyball: --api-token: empty"},
		{[]string{"serve", "api", "--api-token", "0123456789abcdef", "--api-token=", "--concurrency", "0"}, "flyball: --api-token: empty"},
		{[]string{"dev", "--api-token", "", "--concurrency", "0"}, "flyball: --api-token: empty"},
		{[]string{"task", "list", "--nats-url="}, "flyball: --nats-url: empty"},
		{[]string{"provision", "--nats-url", " "}, "flyball: --nats-url: empty"},
	} {
		r := e.run(t, c.args...)
		if r.code != 1 || !strings.HasPrefix(r.stderr, c.want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("flyball %.80s: exit %d, stderr %.200q; want exit 1 and one line starting %q", strings.Join(c.args, " "), r.code, r.stderr, c.want)
		}
	}
}

// TestServeEnvMistakesNameTheVariable: a bad FLYBALL_* value is refused
// before anything connects, in one line that names the variable (the
// flag's name sent the operator looking for a flag nobody gave), and a
// flag given on the command line wins over its variable.
func TestServeEnvMistakesNameTheVariable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  string
		args []string
		want string
	}{
		{"FLYBALL_LOG_LEVEL=verbose", []string{"serve", "governor"}, `flyball: FLYBALL_LOG_LEVEL: want debug, info, warn or error, got "verbose"`},
		{"FLYBALL_LOG_LEVEL=verbose", []string{"dev"}, `flyball: FLYBALL_LOG_LEVEL: want debug, info, warn or error, got "verbose"`},
		{"FLYBALL_LOG_FORMAT=yaml", []string{"serve", "governor"}, `flyball: FLYBALL_LOG_FORMAT: want text or json, got "yaml"`},
		{"FLYBALL_ALLOW_CIDRS=10.0.0/8", []string{"serve", "executor"}, `flyball: FLYBALL_ALLOW_CIDRS: want a CIDR prefix like 10.0.0.0/8, got "10.0.0/8"`},
		{"FLYBALL_DENY_CIDRS=192.168.0.0/16,nope", []string{"serve", "executor"}, `flyball: FLYBALL_DENY_CIDRS: want a CIDR prefix like 10.0.0.0/8, got "nope"`},
		{"FLYBALL_REDACT_HEADERS=X-Bad Name", []string{"serve", "executor"}, `flyball: FLYBALL_REDACT_HEADERS: want a header or query parameter name, got "X-Bad Name"`},
		{"FLYBALL_API_TOKEN_FILE=/nonexistent/tokens", []string{"serve", "api"}, "flyball: FLYBALL_API_TOKEN_FILE: open /nonexistent/tokens: "},
		// Any value but "true" read as false, silently.
		{"FLYBALL_PPROF=yes", []string{"serve", "governor"}, `flyball: FLYBALL_PPROF: want true or false, got "yes"`},
		{"FLYBALL_ALLOW_LOOPBACK=yes", []string{"serve", "executor"}, `flyball: FLYBALL_ALLOW_LOOPBACK: want true or false, got "yes"`},
		{"FLYBALL_ALLOW_LOOPBACK=on", []string{"dev"}, `flyball: FLYBALL_ALLOW_LOOPBACK: want true or false, got "on"`},
		// Found only by the listen, after connecting, and named --metrics-addr.
		{"FLYBALL_METRICS_ADDR=9090", []string{"serve", "governor"}, `flyball: FLYBALL_METRICS_ADDR: want host:port such as :9090 (empty: no metrics), got "9090"`},
		{"FLYBALL_METRICS_ADDR=:99999", []string{"dev"}, `flyball: FLYBALL_METRICS_ADDR: want host:port such as :9090 (empty: no metrics), got ":99999"`},
		{"FLYBALL_METRICS_ADDR=:9090", []string{"serve", "governor", "--metrics-addr", "localhost"}, `flyball: --metrics-addr: want host:port such as :9090 (empty: no metrics), got "localhost"`},
		// The password alone was dropped, and the connection made without it.
		{"NATS_PASSWORD=secret", []string{"serve", "governor"}, "flyball: NATS_PASSWORD is set but NATS_USER is not: give both, or neither"},
		{"NATS_PASSWORD=secret", []string{"provision"}, "flyball: NATS_PASSWORD is set but NATS_USER is not: give both, or neither"},
		// Both were sent, and the server chose which identity to use.
		{"NATS_USER=timer", []string{"serve", "timer", "--creds", "/nonexistent/timer.creds"}, "flyball: NATS_USER and --creds both name a NATS identity: give one of them"},
		{"NATS_USER=timer", []string{"provision", "--nkey", "/nonexistent/timer.nk"}, "flyball: NATS_USER and --nkey both name a NATS identity: give one of them"},
		// flyball target named its flags for a variable's mistake too.
		{"FLYBALL_LOG_LEVEL=verbose", []string{"target"}, `flyball: FLYBALL_LOG_LEVEL: want debug, info, warn or error, got "verbose"`},
		{"FLYBALL_TARGET_ADDR=127.0.0.1:99999", []string{"target"}, `flyball: FLYBALL_TARGET_ADDR 127.0.0.1:99999: listen tcp: `},
		{"FLYBALL_TARGET_ADDR=127.0.0.1:99999", []string{"target", "--addr", "127.0.0.1:99998"}, `flyball: --addr 127.0.0.1:99998: listen tcp: `},
		// The flag wins: its variable is not read, so the next mistake is
		// the one reported.
		{"FLYBALL_LOG_LEVEL=verbose", []string{"serve", "governor", "--log-level", "info", "--concurrency", "0"}, "flyball: --concurrency: want a number from 1"},
		{"FLYBALL_ALLOW_CIDRS=nope", []string{"serve", "executor", "--allow-cidr", "10.0.0.0/8", "--concurrency", "0"}, "flyball: --concurrency: want a number from 1"},
		{"FLYBALL_PPROF=yes", []string{"serve", "governor", "--pprof=false", "--concurrency", "0"}, "flyball: --concurrency: want a number from 1"},
		{"FLYBALL_ALLOW_LOOPBACK=yes", []string{"serve", "executor", "--allow-loopback=false", "--concurrency", "0"}, "flyball: --concurrency: want a number from 1"},
		{"FLYBALL_LOG_LEVEL=info", []string{"serve", "governor", "--log-level", "verbose"}, `flyball: --log-level: want debug, info, warn or error, got "verbose"`},
	} {
		e := &cliEnv{url: "nats://127.0.0.1:1", dir: t.TempDir(), env: []string{c.env}} // nothing listens there
		r := e.run(t, c.args...)
		if r.code != 1 || !strings.HasPrefix(r.stderr, c.want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%s flyball %s: exit %d, stderr %.200q; want exit 1 and one line starting %q", c.env, strings.Join(c.args, " "), r.code, r.stderr, c.want)
		}
	}
}

// TestEmptyGuardListFlagsAreRefused: an empty --deny-cidr, --allow-cidr
// or --redact-header (a script's unset variable) read as an empty list
// that replaced its variable's: FLYBALL_DENY_CIDRS was dropped, and with
// FLYBALL_REDACT_HEADERS dropped, header values went into RUNS
// unredacted. --concurrency 0 makes a binary without the check fail
// before it starts.
func TestEmptyGuardListFlagsAreRefused(t *testing.T) {
	t.Parallel()
	env := []string{"FLYBALL_DENY_CIDRS=10.0.0.0/8", "FLYBALL_ALLOW_CIDRS=192.168.0.0/16", "FLYBALL_REDACT_HEADERS=X-Tenant"}
	e := &cliEnv{url: "nats://127.0.0.1:1", dir: t.TempDir(), env: env} // nothing listens there
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "executor", "--deny-cidr=", "--concurrency", "0"}, "flyball: --deny-cidr: empty; give a value, or leave the flag out"},
		{[]string{"serve", "executor", "--allow-cidr", "", "--concurrency", "0"}, "flyball: --allow-cidr: empty; give a value, or leave the flag out"},
		{[]string{"serve", "executor", "--redact-header=", "--concurrency", "0"}, "flyball: --redact-header: empty; give a value, or leave the flag out"},
		{[]string{"serve", "executor", "--redact-header", "X-A", "--redact-header", " , ", "--concurrency", "0"}, "flyball: --redact-header: empty"},
		{[]string{"dev", "--deny-cidr=", "--concurrency", "0"}, "flyball: --deny-cidr: empty"},
		// A value in the list that is empty is refused by guard(), as before.
		{[]string{"serve", "executor", "--redact-header=a,,b"}, `flyball: --redact-header: want a header or query parameter name, got ""`},
	} {
		r := e.run(t, c.args...)
		if r.code != 1 || !strings.HasPrefix(r.stderr, c.want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("flyball %s: exit %d, stderr %.200q; want exit 1 and one line starting %q", strings.Join(c.args, " "), r.code, r.stderr, c.want)
		}
	}
}

// TestServeNamesAnIdentityMistakeWhenItsPortIsTaken: a contradictory NATS
// identity, or an nkey seed that does not read, is the mistake serve
// reports, even when its metrics port is taken. It bound the port first, and CI's run of the table above failed
// with "--metrics-addr :9090: … address already in use" when another
// package's test held :9090.
func TestServeNamesAnIdentityMistakeWhenItsPortIsTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, c := range []struct {
		env  string
		args []string
		want string
	}{
		{"NATS_PASSWORD=secret", []string{"serve", "governor"}, "flyball: NATS_PASSWORD is set but NATS_USER is not: give both, or neither"},
		{"NATS_USER=timer", []string{"serve", "timer", "--creds", "/nonexistent/timer.creds"}, "flyball: NATS_USER and --creds both name a NATS identity: give one of them"},
		{"FLYBALL_LOG_LEVEL=info", []string{"serve", "timer", "--nkey", "/nonexistent/timer.nk"}, "flyball: --nkey (NATS_NKEY): "},
	} {
		e := &cliEnv{url: "nats://127.0.0.1:1", dir: t.TempDir(), env: []string{c.env}}
		r := e.run(t, append(c.args, "--metrics-addr", ln.Addr().String())...)
		if r.code != 1 || !strings.HasPrefix(r.stderr, c.want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%s flyball %s with its metrics port taken: exit %d, stderr %.200q; want exit 1 and one line starting %q", c.env, strings.Join(c.args, " "), r.code, r.stderr, c.want)
		}
	}
}

// TestHalfATLSClientPairIsRefused: a client certificate without its key
// (or the key alone) went to nats.ClientCert as it was, and the connect
// failed with "open : no such file or directory", naming neither flag.
func TestHalfATLSClientPairIsRefused(t *testing.T) {
	t.Parallel()
	const want = "flyball: --tls-cert/--tls-key (NATS_CERT/NATS_KEY): give both"
	for _, c := range []struct {
		env  string
		args []string
	}{
		{"FLYBALL_LOG_LEVEL=info", []string{"serve", "timer", "--tls-cert", "/nonexistent/client.crt"}},
		{"FLYBALL_LOG_LEVEL=info", []string{"provision", "--tls-key", "/nonexistent/client.key"}},
		{"NATS_CERT=/nonexistent/client.crt", []string{"task", "list"}},
		{"NATS_KEY=/nonexistent/client.key", []string{"serve", "executor"}},
	} {
		e := &cliEnv{url: "nats://127.0.0.1:1", dir: t.TempDir(), env: []string{c.env}} // nothing listens there
		r := e.run(t, c.args...)
		if r.code != 1 || !strings.HasPrefix(r.stderr, want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%s flyball %s: exit %d, stderr %.200q; want exit 1 and one line starting %q", c.env, strings.Join(c.args, " "), r.code, r.stderr, want)
		}
	}
}

// TestAPITLSFlagsGoTogether: serve's API takes a certificate and its
// key, both or neither; one without the other, an empty one, or files
// that do not read are refused in one line naming where each came from,
// before anything connects or listens. Only a serve that runs the API
// reads them.
func TestAPITLSFlagsGoTogether(t *testing.T) {
	t.Parallel()
	const tok = "0123456789abcdef"
	for _, c := range []struct {
		env  string
		args []string
		want string
	}{
		{"FLYBALL_LOG_LEVEL=info", []string{"serve", "api", "--api-token", tok, "--api-tls-cert", "/nonexistent/api.pem"}, "flyball: --api-tls-cert is set but --api-tls-key (FLYBALL_API_TLS_KEY) is not: give both (HTTPS), or neither (plain HTTP)"},
		{"FLYBALL_LOG_LEVEL=info", []string{"serve", "api", "--api-token", tok, "--api-tls-key", "/nonexistent/api-key.pem"}, "flyball: --api-tls-key is set but --api-tls-cert (FLYBALL_API_TLS_CERT) is not: give both (HTTPS), or neither (plain HTTP)"},
		{"FLYBALL_API_TLS_CERT=/nonexistent/api.pem", []string{"serve", "api", "--api-token", tok}, "flyball: FLYBALL_API_TLS_CERT is set but --api-tls-key (FLYBALL_API_TLS_KEY) is not: give both (HTTPS), or neither (plain HTTP)"},
		{"FLYBALL_API_TLS_KEY=/nonexistent/api-key.pem", []string{"serve", "timer", "api", "--api-token", tok}, "flyball: FLYBALL_API_TLS_KEY is set but --api-tls-cert (FLYBALL_API_TLS_CERT) is not: give both (HTTPS), or neither (plain HTTP)"},
		{"FLYBALL_LOG_LEVEL=info", []string{"serve", "api", "--api-token", tok, "--api-tls-cert", "/nonexistent/api.pem", "--api-tls-key", "/nonexistent/api-key.pem"}, "flyball: --api-tls-cert/--api-tls-key: open /nonexistent/api.pem: no such file or directory"},
		{"FLYBALL_API_TLS_KEY=/nonexistent/api-key.pem", []string{"serve", "api", "--api-token", tok, "--api-tls-cert", "/nonexistent/api.pem"}, "flyball: --api-tls-cert/FLYBALL_API_TLS_KEY: open /nonexistent/api.pem: no such file or directory"},
		// Given empty (a script's unset variable), the API would be
		// plain HTTP without a word.
		{"FLYBALL_LOG_LEVEL=info", []string{"serve", "api", "--api-token", tok, "--api-tls-cert=", "--api-tls-key", "/nonexistent/api-key.pem"}, "flyball: --api-tls-cert: empty"},
	} {
		e := &cliEnv{url: "nats://127.0.0.1:1", dir: t.TempDir(), env: []string{c.env}} // nothing listens there
		r := e.run(t, append(c.args, "--api-addr", "127.0.0.1:0", "--metrics-addr", "")...)
		if r.code != 1 || !strings.HasPrefix(r.stderr, c.want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%s flyball %s: exit %d, stderr %.200q; want exit 1 and one line starting %q", c.env, strings.Join(c.args, " "), r.code, r.stderr, c.want)
		}
	}
}

// TestCLICommandMistakesFailInOneLine: a mistyped or missing command or
// argument exits 1 with one line that names it. A mistyped subcommand of
// task or dlq printed the group's help and exited 0, so a script's
// "flyball task delet web" passed as done.
func TestCLICommandMistakesFailInOneLine(t *testing.T) {
	t.Parallel()
	e := &cliEnv{url: "nats://127.0.0.1:1", dir: t.TempDir()} // nothing listens there
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"task", "delet", "web"}, `flyball: unknown command "delet" for "flyball task" (did you mean delete?); want one of create, delete,`},
		{[]string{"dlq", "lst"}, `flyball: unknown command "lst" for "flyball dlq"; want one of list, purge, retry, show, tail`},
		{[]string{"task"}, "flyball: task: give a command: create, delete, get,"},
		{[]string{"taks", "list"}, `flyball: unknown command "taks" for "flyball" (did you mean task?)`},
		{[]string{"task", "get"}, "flyball: task get: give the task id: flyball task get <id>"},
		{[]string{"task", "pause", "a", "b"}, `flyball: task pause: want one task id, got 2 arguments (not shown: one may be a secret);`},
		{[]string{"dlq", "show"}, "flyball: dlq show: give the DEADLETTER sequence"},
		{[]string{"runs"}, "flyball: runs: give the task id: flyball runs <id>"},
		// cobra.NoArgs called a stray argument an unknown command, and
		// "task create t.yaml" did not say the spec goes after -f.
		{[]string{"task", "create", "t.yaml"}, `flyball: task create: takes no arguments, got 1 (not shown: it may be a secret); give the spec file with -f <file>`},
		{[]string{"task", "list", "web", "db"}, `flyball: task list: takes no arguments, got 2 (not shown: one may be a secret);`},
		{[]string{"status", "now"}, `flyball: status: takes no arguments, got 1 (not shown: it may be a secret);`},
		// A mistyped service is named when it is near one, which no
		// secret is; anything else by its place.
		{[]string{"serve", "timer", "govenor"}, `flyball: unknown service "govenor" (did you mean governor?): want one of governor, breaker,`},
		{[]string{"serve", "timer", "flyball-dev-token"}, `flyball: unknown service (argument 2, not shown): want one of governor, breaker,`},
		{[]string{"serve"}, "flyball: serve: give one or more services: governor, breaker,"},
		{[]string{"serve", "governor", "--async-persist", "--ensure-streams=false"}, "flyball: --async-persist applies when the streams are created: it needs --ensure-streams"},
		{[]string{"serve", "governor", "--replicas", "3", "--ensure-streams=false"}, "flyball: --replicas applies when the streams are ensured: it needs --ensure-streams"},
		// cobra's "accepts at most 1 arg(s), received 2" named neither.
		{[]string{"dlq", "retry", "1", "2"}, `flyball: dlq retry: want one DEADLETTER sequence, got 2 arguments (not shown: one may be a secret);`},
		// --json silently won over -o table.
		{[]string{"status", "--json", "-o", "table"}, "flyball: --json and -o table conflict"},
	} {
		r := e.run(t, c.args...)
		if r.code != 1 || !strings.HasPrefix(r.stderr, c.want) || strings.Count(r.stderr, "\n") != 1 || r.stdout != "" {
			t.Errorf("flyball %s: exit %d, stdout %.80q, stderr %.200q; want exit 1 and one line starting %q", strings.Join(c.args, " "), r.code, r.stdout, r.stderr, c.want)
		}
	}
}

// TestFlagErrorsDoNotEchoASecret: a flag value that does not parse is
// refused in one line that names the flag and not the value, for the
// flags that carry secrets. --api-token is read as comma-separated
// values, and pflag's error for a token with a stray double quote quoted
// it whole ("invalid argument \"s3cr3t\\\"x-…\" for \"--api-token\"
// flag"), into docker logs on every restart of a crash loop. A mistyped
// dash before a flag's name (-api-token=…, ---api-token=…) quoted the
// argument, value and all, too.
func TestFlagErrorsDoNotEchoASecret(t *testing.T) {
	t.Parallel()
	e := &cliEnv{url: "nats://127.0.0.1:1", dir: t.TempDir()} // nothing listens there
	const secret = "s3cr3t"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "api", "--api-token", secret + `"x-0123456789`}, "flyball: --api-token: "},
		{[]string{"serve", "api", "--api-token=" + secret + `"x-0123456789`}, "flyball: --api-token: "},
		{[]string{"dev", "--api-token", `"` + secret + `-0123456789`}, "flyball: --api-token: "},
		{[]string{"serve", "api", "--api-token", "0123456789abcdef", "--api-token", secret + `"x-0123456789`}, "flyball: --api-token: "},
		{[]string{"serve", "api", "-api-token=" + secret + "-0123456789"}, "flyball: unknown shorthand flag: 'a' in -api-token="},
		{[]string{"serve", "api", "---api-token=" + secret + "-0123456789"}, "flyball: bad flag syntax: ---api-token="},
	} {
		r := e.run(t, c.args...)
		if r.code != 1 || !strings.HasPrefix(r.stderr, c.want) || strings.Count(r.stderr, "\n") != 1 || strings.Contains(r.stderr, secret) {
			t.Errorf("flyball %s: exit %d, stderr %q; want exit 1 and one line starting %q without the value", strings.Join(c.args, " "), r.code, r.stderr, c.want)
		}
	}
}

// TestStrayArgumentsDoNotEchoASecret: an argument the command does not
// take is refused without quoting it: it may be a secret parted from its
// flag by a space ("--nats-url= nats://admin:pw@nats:4222", "--api-token=
// <token>"). The errors quoted every argument, into a terminal's
// scrollback or a crash-looping container's logs.
func TestStrayArgumentsDoNotEchoASecret(t *testing.T) {
	t.Parallel()
	e := &cliEnv{url: "nats://127.0.0.1:1", dir: t.TempDir()} // nothing listens there
	const (
		url   = "nats://admin:hunter2@nats:4222"
		token = "SuperSecretToken123456"
	)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"task", "get", "web", url}, "flyball: task get: want one task id, got 2 arguments (not shown: one may be a secret)"},
		{[]string{"task", "get", url, "web"}, "flyball: task get: want one task id, got 2 arguments (not shown: one may be a secret)"},
		{[]string{"dlq", "retry", "1", token}, "flyball: dlq retry: want one DEADLETTER sequence, got 2 arguments (not shown: one may be a secret)"},
		{[]string{"dev", token}, "flyball: dev: takes no arguments, got 1 (not shown: it may be a secret)"},
		{[]string{"task", "create", token}, "flyball: task create: takes no arguments, got 1 (not shown: it may be a secret)"},
		{[]string{"status", "--timeout", "5s", url, token}, "flyball: status: takes no arguments, got 2 (not shown: one may be a secret)"},
		{[]string{"serve", "api", token}, "flyball: unknown service (argument 2, not shown): want one of "},
		{[]string{"serve", url, "api"}, "flyball: unknown service (argument 1, not shown): want one of "},
		// The reviewer's cases: the empty flag is now the error.
		{[]string{"task", "get", "web", "--nats-url=", url}, "flyball: --nats-url: empty"},
		{[]string{"serve", "api", "--api-token=", token}, "flyball: --api-token: empty"},
		{[]string{"dev", "--api-token=", token}, "flyball: --api-token: empty"},
	} {
		r := e.run(t, c.args...)
		if r.code != 1 || !strings.HasPrefix(r.stderr, c.want) || strings.Count(r.stderr, "\n") != 1 ||
			strings.Contains(r.stderr, "hunter2") || strings.Contains(r.stderr, token) {
			t.Errorf("flyball %s: exit %d, stderr %q; want exit 1 and one line starting %q without the secret", strings.Join(c.args, " "), r.code, r.stderr, c.want)
		}
	}
}
