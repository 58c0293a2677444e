package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"

	"github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/api"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/stack"
	"github.com/flyballhq/flyball/services/sweeper"
	"github.com/flyballhq/flyball/services/timer"
)

// runFlags are shared by dev and serve.
type runFlags struct {
	logLevel     string
	logFormat    string
	apiAddr      string
	apiTokens    []string
	apiTokenFile string
	// apiTLSCert and apiTLSKey, both or neither (serve only), are the
	// API's HTTPS certificate and key files.
	apiTLSCert string
	apiTLSKey  string
	// tokenFile, set by tokens() when there is an apiTokenFile, re-reads
	// it into the running API.
	tokenFile     *tokenFile
	metricsAddr   string
	allowLoopback bool
	allowCIDRs    []string
	denyCIDRs     []string
	redact        []string
	concurrency   int
	perHost       int
	govWorkers    int
	timerLead     time.Duration
	timerLease    time.Duration
	zombieAfter   time.Duration
	perTask       bool
	pprof         bool
	// pprofEnvErr is FLYBALL_PPROF's parse error, refused unless --pprof
	// is given; loopbackEnvErr is FLYBALL_ALLOW_LOOPBACK's, refused
	// unless --allow-loopback is.
	pprofEnvErr    error
	loopbackEnvErr error
	// fs tells a value given as a flag from one an environment variable
	// gave as its default, so errors name the one that was set.
	fs *pflag.FlagSet
}

func (f *runFlags) register(fs *pflag.FlagSet, dev bool) {
	f.fs = fs
	fs.StringVar(&f.logLevel, "log-level", envOr("FLYBALL_LOG_LEVEL", "info"), "log level: debug, info, warn, error (env FLYBALL_LOG_LEVEL)")
	fs.StringVar(&f.logFormat, "log-format", envOr("FLYBALL_LOG_FORMAT", "text"), "log format: text or json (env FLYBALL_LOG_FORMAT)")
	defAPI := ":8080"
	if dev {
		defAPI = "127.0.0.1:8080"
	}
	fs.StringVar(&f.apiAddr, "api-addr", envOr("FLYBALL_API_ADDR", defAPI), "HTTP API listen address (env FLYBALL_API_ADDR)")
	fs.StringSliceVar(&f.apiTokens, "api-token", splitEnv("FLYBALL_API_TOKENS"), "accepted API bearer token, repeatable (env FLYBALL_API_TOKENS, comma-separated)")
	// Read as comma-separated values (encoding/csv): a token holding a
	// comma or a double quote is written in double quotes. An error
	// about it names the flag, never the token.
	markSecret(fs, "api-token", `tokens are separated by commas, and one that holds a comma or a double quote is written in double quotes ("a,b", with "" for a quote inside), or given in --api-token-file`)
	if len(f.apiTokens) > 0 {
		// --help shows the default: say that there is one, not what it is.
		fs.Lookup("api-token").DefValue = "[REDACTED]"
	}
	fs.StringVar(&f.apiTokenFile, "api-token-file", os.Getenv("FLYBALL_API_TOKEN_FILE"), "file with one API bearer token per line, read again on SIGHUP and when it changes (env FLYBALL_API_TOKEN_FILE)")
	if !dev { // dev's API listens on loopback
		fs.StringVar(&f.apiTLSCert, "api-tls-cert", os.Getenv("FLYBALL_API_TLS_CERT"), "PEM certificate (chain) file the API serves HTTPS with, TLS 1.2 or later; give --api-tls-key with it. Without both the API is plain HTTP: keep it on loopback or behind TLS (env FLYBALL_API_TLS_CERT)")
		fs.StringVar(&f.apiTLSKey, "api-tls-key", os.Getenv("FLYBALL_API_TLS_KEY"), "PEM private key file of --api-tls-cert (env FLYBALL_API_TLS_KEY)")
		// Given empty (a script's unset variable), the API was plain
		// HTTP without a word.
		markNonEmpty(fs, "api-tls-cert")
		markNonEmpty(fs, "api-tls-key")
	}
	defMetrics := ":9090"
	if dev {
		defMetrics = "127.0.0.1:9090"
	}
	fs.StringVar(&f.metricsAddr, "metrics-addr", envOr("FLYBALL_METRICS_ADDR", defMetrics), "address serving /metrics and /healthz; empty disables (env FLYBALL_METRICS_ADDR)")
	// The SSRF guard: the executor applies it when it dials, the governor
	// and the API to the target URLs of created and updated tasks, so
	// every one of them must be given the same settings.
	// It alone of the guard's settings had no variable: a compose file
	// or unit that sets the others had to change the command for it.
	f.allowLoopback, f.loopbackEnvErr = envBool("FLYBALL_ALLOW_LOOPBACK", dev)
	fs.BoolVar(&f.allowLoopback, "allow-loopback", f.allowLoopback, "let tasks call loopback addresses (SSRF guard), except those --deny-cidr holds; give the executor, governor and API the same (env FLYBALL_ALLOW_LOOPBACK)")
	fs.StringSliceVar(&f.allowCIDRs, "allow-cidr", splitEnv("FLYBALL_ALLOW_CIDRS"), "prefixes tasks may call even if the SSRF guard blocks them (cloud metadata addresses included), except those --deny-cidr holds, repeatable; give the executor, governor and API the same (env FLYBALL_ALLOW_CIDRS)")
	fs.StringSliceVar(&f.denyCIDRs, "deny-cidr", splitEnv("FLYBALL_DENY_CIDRS"), "extra prefixes tasks may not call, repeatable; wins over --allow-cidr and --allow-loopback; give the executor, governor and API the same (env FLYBALL_DENY_CIDRS)")
	fs.StringSliceVar(&f.redact, "redact-header", splitEnv("FLYBALL_REDACT_HEADERS"), "executor: a header or query parameter name whose value run records replace with [REDACTED], besides the built-in secret-looking names; repeatable (env FLYBALL_REDACT_HEADERS)")
	// Given empty (a script's unset variable), a list replaced its
	// variable's with none: --deny-cidr= dropped FLYBALL_DENY_CIDRS, and
	// --redact-header= FLYBALL_REDACT_HEADERS, so those values went into
	// RUNS as they were.
	for _, name := range []string{"allow-cidr", "deny-cidr", "redact-header"} {
		markNonEmpty(fs, name)
	}
	fs.IntVar(&f.concurrency, "concurrency", 64, "executor: calls in flight at once")
	fs.IntVar(&f.perHost, "per-host", 16, "executor: calls in flight at once to one target host")
	fs.IntVar(&f.govWorkers, "governor-workers", 16, "governor: messages decided at once per stream (sharded by task)")
	fs.DurationVar(&f.timerLead, "timer-lead", timer.DefaultLead, "timer: the longest a dispatch is published before its slot (each gets a quarter of the time since its task's previous slot, at most this); the executor holds it until the slot (0: at the slot)")
	fs.DurationVar(&f.timerLease, "timer-lease", 0, "timer: elect one dispatching timer through a lease in KV flyball-leases, taken over when it goes this long without renewal (from 1s to 1m; the runs due meanwhile start late by up to that); 0: every timer dispatches every run, and JetStream drops the copies")
	fs.DurationVar(&f.zombieAfter, "zombie-after", sweeper.DefaultZombieAfter, "sweeper: how long past its slot a run may go without a dispatch or an outcome before it is dispatched again, and a task without a schedule before its task.created is published again (at least twice the executor's 1m late-dispatch check)")
	fs.BoolVar(&f.perTask, "per-task-metrics", false, "sweeper: export per-task staleness series (switched off above 1000 tasks)")
	// Any value but "true" read as false: FLYBALL_PPROF=1 served no
	// profiles, and said nothing.
	f.pprof, f.pprofEnvErr = envBool("FLYBALL_PPROF", false)
	fs.BoolVar(&f.pprof, "pprof", f.pprof, "serve Go profiles under /debug/pprof/ on --metrics-addr, which has no auth: keep it private (env FLYBALL_PPROF=true)")
}

// stackConfig is the stack.Config that dev and serve share: what the run
// flags set, plus the connection, logger, metrics, checked guard and API
// tokens each has resolved. Each adds its own fields (services, instance,
// version) to the result.
func (f *runFlags) stackConfig(js jetstream.JetStream, log *slog.Logger, m *metrics.Set, guard executor.Guard, tokens []string) stack.Config {
	return stack.Config{
		JS: js, Logger: log, Metrics: m, Guard: guard,
		Concurrency: f.concurrency, PerHost: f.perHost, RedactHeaders: f.redact, GovernorWorkers: f.govWorkers,
		TimerLead: f.lead(), TimerLease: f.timerLease, ZombieAfter: f.zombieAfter, APIAddr: f.apiAddr, APITokens: tokens, PerTaskMetrics: f.perTask,
		APITLSCertFile: f.apiTLSCert, APITLSKeyFile: f.apiTLSKey,
	}
}

// checkAPITLS refuses --api-tls-cert without --api-tls-key or the other
// way round, and files that do not hold a certificate and its key, naming
// where each came from, before anything connects or listens: found only
// by api.New, they would stop serve after it had connected and started
// the services before the API.
func (f *runFlags) checkAPITLS() error {
	cert := f.origin("api-tls-cert", "FLYBALL_API_TLS_CERT")
	key := f.origin("api-tls-key", "FLYBALL_API_TLS_KEY")
	switch {
	case f.apiTLSCert != "" && f.apiTLSKey == "":
		return fmt.Errorf("%s is set but --api-tls-key (FLYBALL_API_TLS_KEY) is not: give both (HTTPS), or neither (plain HTTP)", cert)
	case f.apiTLSKey != "" && f.apiTLSCert == "":
		return fmt.Errorf("%s is set but --api-tls-cert (FLYBALL_API_TLS_CERT) is not: give both (HTTPS), or neither (plain HTTP)", key)
	case f.apiTLSCert != "":
		if _, err := api.TLSConfig(f.apiTLSCert, f.apiTLSKey); err != nil {
			return fmt.Errorf("%s/%s: %w", cert, key, err)
		}
	}
	return nil
}

// lead maps --timer-lead to timer.Config.Lead, where 0 means the default
// and a negative value means none.
func (f *runFlags) lead() time.Duration {
	if f.timerLead == 0 {
		return -1
	}
	return f.timerLead
}

// origin names where the value of flag came from, for an error about it:
// env when the flag was not given and env is set (its value is the
// flag's default), else the flag. "--log-level: want debug, …" sent an
// operator who had set FLYBALL_LOG_LEVEL looking for a flag nobody gave.
func (f *runFlags) origin(flag, env string) string { return origin(f.fs, flag, env) }

// origin is runFlags.origin for any flag set; a nil fs names the flag.
func origin(fs *pflag.FlagSet, flag, env string) string {
	if fs != nil && !fs.Changed(flag) && os.Getenv(env) != "" {
		return env
	}
	return "--" + flag
}

// envBool reads a boolean environment variable as strconv.ParseBool does
// (true, false, 1, 0, …); def when it is unset or empty. A value that does
// not parse is returned as an error naming the variable, for the caller
// to refuse unless the flag it backs is given.
func envBool(k string, def bool) (bool, error) {
	v := os.Getenv(k)
	if v == "" {
		return def, nil
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		return def, fmt.Errorf("%s: want true or false, got %q", k, v)
	}
	return on, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// splitEnv splits a comma-separated environment variable, trimming the
// spaces around each element and dropping empty ones: "a, b," is a and b.
func splitEnv(k string) []string {
	var out []string
	for v := range strings.SplitSeq(os.Getenv(k), ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func (f *runFlags) logger() (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, fmt.Errorf("%s: want debug, info, warn or error, got %q", f.origin("log-level", "FLYBALL_LOG_LEVEL"), f.logLevel)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch f.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("%s: want text or json, got %q", f.origin("log-format", "FLYBALL_LOG_FORMAT"), f.logFormat)
}

func (f *runFlags) guard() (executor.Guard, error) {
	g := executor.Guard{AllowLoopback: f.allowLoopback}
	for _, e := range []struct {
		flag string
		err  error
	}{{"pprof", f.pprofEnvErr}, {"allow-loopback", f.loopbackEnvErr}} {
		if e.err != nil && (f.fs == nil || !f.fs.Changed(e.flag)) {
			return g, e.err
		}
	}
	// The limits are checked here too: guard() is the one flag check both
	// dev and serve run before starting anything.
	for _, n := range []struct {
		name string
		v    int
	}{{"--concurrency", f.concurrency}, {"--per-host", f.perHost}, {"--governor-workers", f.govWorkers}} {
		if n.v < 1 || n.v > 100_000 {
			return g, fmt.Errorf("%s: want a number from 1 to 100000, got %d", n.name, n.v)
		}
	}
	for _, h := range f.redact {
		if h == "" || strings.ContainsAny(h, " \t\r\n:=&?") {
			return g, fmt.Errorf("%s: want a header or query parameter name, got %q", f.origin("redact-header", "FLYBALL_REDACT_HEADERS"), h)
		}
	}
	// Empty, it fell back to the API's own default, 127.0.0.1:8080: "serve
	// api --api-addr $ADDR" with $ADDR unset listened where nothing
	// outside the host or container could reach it.
	if f.apiAddr == "" {
		return g, errors.New("--api-addr: empty; give a listen address such as :8080")
	}
	// Found by the listen, it was found after connecting and starting
	// the services, and named --metrics-addr whatever set it. The host
	// is left to the listen: resolving it here would ask DNS.
	if a := f.metricsAddr; a != "" {
		_, port, err := net.SplitHostPort(a)
		if err == nil {
			_, err = net.LookupPort("tcp", port)
		}
		if err != nil {
			return g, fmt.Errorf("%s: want host:port such as :9090 (empty: no metrics), got %q", f.origin("metrics-addr", "FLYBALL_METRICS_ADDR"), a)
		}
	}
	// The governor treats a slot due within InFlightWindow as dispatched.
	if f.timerLead < 0 || f.timerLead > governor.MaxLead {
		return g, fmt.Errorf("--timer-lead: want a duration from 0 to %s, got %s", governor.MaxLead, f.timerLead)
	}
	if f.timerLease != 0 && (f.timerLease < time.Second || f.timerLease > time.Minute) {
		return g, fmt.Errorf("--timer-lease: want 0 or a duration from 1s to 1m, got %s", f.timerLease)
	}
	// A lost-write re-dispatch sooner than the executor's late-dispatch
	// check after its slot is not checked for a stored outcome, and calls
	// the target again (sweeper.Config.ZombieAfter).
	if minZombie := 2 * executor.LateRedispatch; f.zombieAfter < minZombie || f.zombieAfter > 24*time.Hour {
		return g, fmt.Errorf("--zombie-after: want a duration from %s to 24h, got %s", minZombie, f.zombieAfter)
	}
	for _, flag := range []struct {
		name string
		in   []string
		out  *[]netip.Prefix
	}{
		{f.origin("allow-cidr", "FLYBALL_ALLOW_CIDRS"), f.allowCIDRs, &g.Allow},
		{f.origin("deny-cidr", "FLYBALL_DENY_CIDRS"), f.denyCIDRs, &g.Deny},
	} {
		for _, s := range flag.in {
			p, err := netip.ParsePrefix(strings.TrimSpace(s))
			if err != nil {
				return g, fmt.Errorf("%s: want a CIDR prefix like 10.0.0.0/8, got %q", flag.name, s)
			}
			*flag.out = append(*flag.out, p)
		}
	}
	return g, nil
}

// tokens collects API tokens from flags and the token file. generate makes
// a random one when none is configured (dev only).
func (f *runFlags) tokens(generate bool) ([]string, bool, error) {
	// The API trims the token it is sent, so a configured token is
	// trimmed too ("--api-token 'a, b'" is a and b).
	// A short token is refused here, naming where it came from (never
	// the token), before anything connects.
	var toks []string
	for _, t := range f.apiTokens {
		if t = strings.TrimSpace(t); t != "" {
			toks = append(toks, t)
			if len(t) < api.MinTokenLength {
				return nil, false, fmt.Errorf("--api-token (or FLYBALL_API_TOKENS): token %d has %d characters, want at least %d", len(toks), len(t), api.MinTokenLength)
			}
		}
	}
	var (
		fromFile []string
		content  []byte
	)
	if f.apiTokenFile != "" {
		var err error
		if content, err = os.ReadFile(f.apiTokenFile); err != nil {
			return nil, false, fmt.Errorf("%s: %w", f.origin("api-token-file", "FLYBALL_API_TOKEN_FILE"), err)
		}
		if fromFile, err = parseTokenFile(f.apiTokenFile, content); err != nil {
			return nil, false, fmt.Errorf("%s %w", f.origin("api-token-file", "FLYBALL_API_TOKEN_FILE"), err)
		}
	}
	generated := false
	if len(toks) == 0 && len(fromFile) == 0 && generate {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return nil, false, err
		}
		toks, generated = []string{hex.EncodeToString(b)}, true
	}
	if f.apiTokenFile != "" {
		// The file's tokens replace only the file's on a reload: those
		// from the flags, or the one generated (which dev printed for its
		// clients, and which a reload dropped), stay.
		f.tokenFile = newTokenFile(f.apiTokenFile, toks, fromFile, string(content))
	}
	return append(toks, fromFile...), generated, nil
}

// newMetricsServer serves h on the metrics listener. An idle keep-alive
// connection is closed after a minute (Prometheus scrapes every 15 s by
// default, so its own stays open), so a client that goes away does not
// hold one for ever. There is no write timeout:
// /debug/pprof/profile?seconds=N writes for N seconds.
func newMetricsServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, IdleTimeout: time.Minute}
}

// listenMetrics binds the metrics listener (nil when --metrics-addr is
// empty). dev and serve bind it before anything connects or starts: an
// address in use was found only after connecting and starting the
// services (and, for dev, the embedded server).
func (f *runFlags) listenMetrics() (net.Listener, error) {
	if f.metricsAddr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", f.metricsAddr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", f.origin("metrics-addr", "FLYBALL_METRICS_ADDR"), f.metricsAddr, err)
	}
	return ln, nil
}

// listenAPI binds the API's listener, for dev and serve api, before
// anything connects or starts: an --api-addr in use was found by the API
// when it started, after the connection and the services before it, and
// the error did not say which setting gave the address.
func (f *runFlags) listenAPI() (net.Listener, error) {
	ln, err := net.Listen("tcp", f.apiAddr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", f.origin("api-addr", "FLYBALL_API_ADDR"), f.apiAddr, err)
	}
	return ln, nil
}

// serveMetrics serves /metrics and /healthz on ln (from listenMetrics;
// nil: nothing) until the returned stop, and with withPprof the Go
// profiles under /debug/pprof/ (net/http/pprof).
func serveMetrics(ctx context.Context, ln net.Listener, m *metrics.Set, withPprof bool, log *slog.Logger) func() {
	if ln == nil {
		return func() {}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	})
	if withPprof {
		// Index serves the named profiles (heap, allocs, goroutine, …). The
		// command line is left out: it may carry --api-token.
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	srv := newMetricsServer(mux)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	return func() {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(c)
	}
}
