// Package api is flyball's HTTP API. Every route but /healthz needs a
// bearer token. Writes publish the same control-plane events as the CLI
// (task.created and friends on TASKS, through internal/control) and answer
// with the governor's verdict; reads go through internal/query, which the
// CLI uses too. The routes are listed once, in routes(), and documented in
// openapi.json (served at /api/v1/openapi.json); a test keeps the two equal.
package api

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/flyballhq/flyball/services/internal/control"
	"github.com/flyballhq/flyball/services/internal/lifecycle"
	"github.com/flyballhq/flyball/services/internal/query"
	"github.com/flyballhq/flyball/services/internal/ssrf"
	"github.com/flyballhq/flyball/services/internal/svcconf"
)

// Config configures the API server.
type Config struct {
	svcconf.Common
	// Addr is the listen address. Defaults to 127.0.0.1:8080.
	Addr string
	// Listener, when set, is an already bound listener to serve on
	// instead of listening on Addr, so a caller can find an address in
	// use before it connects or starts anything. Stop closes it.
	// Defaults to nil (listen on Addr).
	Listener net.Listener
	// Tokens are the accepted bearer tokens, each at least 16 characters.
	// At least one is required. SetTokens replaces them while running.
	Tokens []string
	// AnswerTimeout bounds the wait for the governor's verdict on a
	// command. Defaults to 5s.
	AnswerTimeout time.Duration
	// MaxBodyBytes caps request bodies. Defaults to 1 MiB.
	MaxBodyBytes int64
	// ReadTimeout bounds reading one request, headers and body (a body
	// not read in time is answered 408), and how long an idle keep-alive
	// connection stays open. Defaults to 30s.
	ReadTimeout time.Duration
	// WriteTimeout bounds handling one request and writing its response,
	// from the end of its headers: a client that does not read the
	// response is disconnected after it. A handler has it less a
	// quarter (at most 1s) to answer: its reads of NATS end then, and
	// it answers 503 saying what did not finish. That must exceed
	// AnswerTimeout. Defaults to 60s.
	WriteTimeout time.Duration
	// Guard is the executors' SSRF guard (give it the same settings): a
	// created or updated task whose target.http.url is a literal address
	// or a well-known metadata hostname it refuses is answered 400, as the
	// governor would reject it. The zero value is the executor's default.
	Guard ssrf.Guard
	// TLSCertFile and TLSKeyFile, both or neither, are the PEM
	// certificate (chain) and private key the API serves HTTPS with, TLS
	// 1.2 or later (TLSConfig). New reads them; they are not read again.
	// Without them the API is plain HTTP and its bearer tokens cross the
	// network in the clear: keep it on loopback or behind a TLS proxy.
	TLSCertFile string
	TLSKeyFile  string
}

// MinTokenLength is the shortest bearer token the API accepts.
const MinTokenLength = 16

// Service is the API server.
type Service struct {
	lifecycle.Base
	cfg Config
	// tokens holds the digests of the accepted tokens; SetTokens swaps
	// the whole set, so a request sees the old one or the new one.
	tokens atomic.Pointer[[][sha256.Size]byte]
	ctl    *control.Client
	q      *query.Reader
	srv    *http.Server
	ln     net.Listener
	// tls is the HTTPS configuration; nil serves plain HTTP.
	tls *tls.Config
}

// TLSConfig is the API's HTTPS configuration for the PEM certificate
// (chain) in certFile and its private key in keyFile: TLS 1.2 or later.
// It reads both files, so a caller can check them before it starts
// anything.
func TLSConfig(certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}, nil
}

// New validates cfg.
func New(cfg Config) (*Service, error) {
	if err := cfg.SetDefaults("api"); err != nil {
		return nil, err
	}
	s := &Service{}
	if err := s.SetTokens(cfg.Tokens); err != nil {
		return nil, fmt.Errorf("api: Config.Tokens: %w", err)
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:8080"
	}
	if cfg.AnswerTimeout <= 0 {
		cfg.AnswerTimeout = 5 * time.Second
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = 30 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 60 * time.Second
	}
	if d := cfg.handlerTimeout(); d <= cfg.AnswerTimeout {
		return nil, fmt.Errorf("api: Config.WriteTimeout: must exceed AnswerTimeout (%s) plus the %s kept to write the answer in (a quarter of it, at most 1s), got %s", cfg.AnswerTimeout, cfg.WriteTimeout-d, cfg.WriteTimeout)
	}
	switch {
	case cfg.TLSCertFile != "" && cfg.TLSKeyFile == "":
		return nil, errors.New("api: Config.TLSCertFile is set but Config.TLSKeyFile is not: give both, or neither")
	case cfg.TLSKeyFile != "" && cfg.TLSCertFile == "":
		return nil, errors.New("api: Config.TLSKeyFile is set but Config.TLSCertFile is not: give both, or neither")
	case cfg.TLSCertFile != "":
		var err error
		if s.tls, err = TLSConfig(cfg.TLSCertFile, cfg.TLSKeyFile); err != nil {
			return nil, fmt.Errorf("api: Config.TLSCertFile/TLSKeyFile: %w", err)
		}
	}
	s.cfg = cfg
	return s, nil
}

// handlerTimeout is how long a handler has to answer, from its start:
// WriteTimeout less a quarter of it, at most 1s, which leaves the answer
// time to be written before the write deadline cuts the connection. Zero
// (no deadline) without a WriteTimeout.
func (c *Config) handlerTimeout() time.Duration {
	return c.WriteTimeout - min(c.WriteTimeout/4, time.Second)
}

// Addr is the bound address, available after Start.
func (s *Service) Addr() string { return s.ln.Addr().String() }

// route is one entry of the API's route table.
type route struct {
	method  string
	path    string
	handler http.HandlerFunc
	// public routes need no token.
	public bool
	// query lists the query parameters the route reads; any other is a
	// 400, as an unknown body field is.
	query []string
	// repeatable lists the parameters of query that take several values;
	// any other given twice is a 400, as a JSON key given twice is.
	repeatable []string
	// conditional routes honour If-Match: their handler reads it (ifMatch)
	// and carries it as a precondition. On every other route any If-Match
	// is a 400 naming it, answered before the handler runs: ignored, it
	// was taken for a precondition that held (If-Match: garbage on a
	// pause was 202). A new route refuses If-Match unless it says so.
	conditional bool
}

// routes is the API, in one table: Handler registers it and the OpenAPI
// test compares it with openapi.json.
func (s *Service) routes() []route {
	metrics := promhttp.HandlerFor(s.cfg.Metrics.Registry, promhttp.HandlerOpts{})
	return []route{
		{method: http.MethodGet, path: "/healthz", handler: s.healthz, public: true},
		{method: http.MethodGet, path: "/metrics", handler: metrics.ServeHTTP},
		{method: http.MethodGet, path: "/api/v1/openapi.json", handler: serveOpenAPI},
		{method: http.MethodPost, path: "/api/v1/tasks", handler: s.createTask},
		{method: http.MethodGet, path: "/api/v1/tasks", handler: s.listTasks, query: []string{"job", "label", "limit", "after"}, repeatable: []string{"label"}},
		{method: http.MethodGet, path: "/api/v1/tasks/{id}", handler: s.getTask},
		{method: http.MethodPut, path: "/api/v1/tasks/{id}", handler: s.updateTask, conditional: true},
		{method: http.MethodDelete, path: "/api/v1/tasks/{id}", handler: s.deleteTask, query: []string{"reason"}, conditional: true},
		{method: http.MethodPost, path: "/api/v1/tasks/{id}/pause", handler: s.pauseTask},
		{method: http.MethodPost, path: "/api/v1/tasks/{id}/resume", handler: s.resumeTask},
		{method: http.MethodPost, path: "/api/v1/tasks/{id}/hint", handler: s.hintTask},
		{method: http.MethodPost, path: "/api/v1/tasks/{id}/run-now", handler: s.runNow},
		{method: http.MethodGet, path: "/api/v1/tasks/{id}/runs", handler: s.listRuns, query: []string{"limit", "before"}},
		{method: http.MethodGet, path: "/api/v1/deadletter", handler: s.listDeadLetters, query: []string{"task", "limit", "before"}},
		{method: http.MethodGet, path: "/api/v1/deadletter/{seq}", handler: s.getDeadLetter},
		{method: http.MethodPost, path: "/api/v1/deadletter/{seq}/retry", handler: s.retryDeadLetter, query: []string{"force"}},
		{method: http.MethodGet, path: "/api/v1/runtime", handler: s.runtime},
		{method: http.MethodGet, path: "/api/v1/scheduler/health", handler: s.health, query: []string{"staleness"}},
	}
}

// Handler returns the routes. It needs a started service (Start binds
// the KV buckets the handlers read).
func (s *Service) Handler() http.Handler {
	return s.handler(s.routes())
}

// handler serves the route table routes: each route behind its checks,
// in this order: the token (unless public), the query parameters
// (knownQuery), If-Match (noIfMatch, unless conditional), then the
// handler.
func (s *Service) handler(routes []route) http.Handler {
	var conditional []string
	for _, rt := range routes {
		if rt.conditional {
			conditional = append(conditional, rt.method+" "+rt.path)
		}
	}
	mux := http.NewServeMux()
	// paths answers "does this path exist with another method?" for 405s,
	// and allowed lists the methods it has (the Allow header of a 405).
	paths := http.NewServeMux()
	allowed := map[string][]string{}
	// public holds the paths whose every route is public: another method
	// on one is a 405 without a token too (POST /healthz was a 401).
	public := map[string]bool{}
	for _, rt := range routes {
		next := withRawBody(rt.handler)
		if !rt.conditional {
			next = noIfMatch(conditional, next)
		}
		h := knownQuery(rt.query, rt.repeatable, next)
		if !rt.public {
			h = s.auth(h)
		}
		mux.Handle(rt.method+" "+rt.path, h)
		if allowed[rt.path] == nil {
			paths.Handle(rt.path, http.NotFoundHandler())
			public[rt.path] = true
		}
		allowed[rt.path] = append(allowed[rt.path], rt.method)
		public[rt.path] = public[rt.path] && rt.public
	}
	fallback := func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := paths.Handler(r); pattern != "" {
			methods := allowed[pattern]
			w.Header().Set("Allow", strings.Join(methods, ", "))
			writeError(w, http.StatusMethodNotAllowed, "", fmt.Sprintf("%s is not allowed on %s (allowed: %s); see /api/v1/openapi.json", r.Method, r.URL.Path, strings.Join(methods, ", ")))
			return
		}
		writeError(w, http.StatusNotFound, "", "no route "+r.Method+" "+r.URL.Path+"; see /api/v1/openapi.json")
	}
	authed := s.auth(http.HandlerFunc(fallback))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := paths.Handler(r); public[pattern] {
			fallback(w, r)
			return
		}
		authed.ServeHTTP(w, r)
	})
	return s.withTimeLimit(mux)
}

// withTimeLimit ends each request's context after Config.handlerTimeout,
// with errOutOfTime as its cause. The server's WriteTimeout does not
// cancel the request's context: a handler that read NATS for longer (a
// task page filtered by a job that few tasks have reads spec after spec)
// ran on past it, and its client got the connection closed, with no
// status, once it was done. Now its reads end in time for its answer, a
// 503 saying so (unavailable). The context is cancelled rather than
// given a deadline: nats.go's JetStream takes a context's deadline in
// place of its own per-request timeout (5s), so a publish whose ack was
// lost, say, waited out the handler's whole time instead of being tried
// again.
func (s *Service) withTimeLimit(next http.Handler) http.Handler {
	d := s.cfg.handlerTimeout()
	if d <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancelCause(r.Context())
		timer := time.AfterFunc(d, func() { cancel(errOutOfTime) })
		defer func() {
			timer.Stop()
			cancel(nil)
		}()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// errOutOfTime is the cause of a request's context ended by withTimeLimit.
var errOutOfTime = errors.New("the request ran out of time")

// withRawBody gives the request a place for readBody to keep the body it
// read, for the idempotency key's hash.
func withRawBody(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		next(w, r.WithContext(context.WithValue(r.Context(), rawBodyKey{}, new([]byte))))
	}
}

// noIfMatch answers 400 naming If-Match, before next, to a request with
// any If-Match header: next's route takes no revision precondition, and
// ignored, one was taken for a precondition that held. conditional lists
// the routes that take one, for the answer.
func noIfMatch(conditional []string, next http.HandlerFunc) http.HandlerFunc {
	takes := "no route takes one"
	if len(conditional) > 0 {
		takes = "the routes that take one: " + strings.Join(conditional, ", ")
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if vals := r.Header.Values("If-Match"); len(vals) > 0 {
			writeError(w, http.StatusBadRequest, "If-Match", fmt.Sprintf("%s takes no If-Match (%s): send it without, got %q", r.Pattern, takes, strings.Join(vals, ", ")))
			return
		}
		next(w, r)
	}
}

// knownQuery answers 400 to a query string that does not parse, that
// holds a parameter not in names, or that gives a parameter not in
// repeatable twice, naming it; next sees only known ones, each once
// unless repeatable (a second value was ignored: ?limit=5&limit=500).
func knownQuery(names, repeatable []string, next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			writeError(w, http.StatusBadRequest, "", "malformed query string: "+err.Error())
			return
		}
		for _, k := range slices.Sorted(maps.Keys(q)) {
			if !slices.Contains(names, k) {
				takes := "takes no query parameters"
				if len(names) > 0 {
					takes = "takes only " + strings.Join(names, ", ")
				}
				writeError(w, http.StatusBadRequest, k, fmt.Sprintf("unknown query parameter: %s %s", r.Pattern, takes))
				return
			}
			if len(q[k]) > 1 && !slices.Contains(repeatable, k) {
				writeError(w, http.StatusBadRequest, k, fmt.Sprintf("given %d times: %s takes one %s", len(q[k]), r.Pattern, k))
				return
			}
		}
		next(w, r)
	})
}

// Start binds the readers and starts listening.
func (s *Service) Start(ctx context.Context) error {
	runCtx, err := s.Begin(ctx)
	if err != nil {
		return fmt.Errorf("api: %w", err)
	}
	if s.q, err = query.NewReader(ctx, s.cfg.JS); err != nil {
		return fmt.Errorf("api: %w", err)
	}
	s.q.Now = s.cfg.Now
	// The API serves page after page: an index of the task IDs saves
	// listing every one for each.
	s.q.IndexFallback = func(reason error) {
		s.cfg.Metrics.TaskIndexFallbacks.Inc()
		s.cfg.Logger.Warn("task page listed every task key", "err", reason)
	}
	s.OnStop(s.q.IndexTasks(runCtx))
	s.ctl = &control.Client{NC: s.cfg.JS.Conn(), JS: s.cfg.JS, Source: "flyball/api/" + s.cfg.Instance}
	if s.ln = s.cfg.Listener; s.ln == nil {
		s.ln, err = net.Listen("tcp", s.cfg.Addr)
		if err != nil {
			return fmt.Errorf("api: listen %s: %w", s.cfg.Addr, err)
		}
	}
	s.srv = &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: min(10*time.Second, s.cfg.ReadTimeout),
		ReadTimeout:       s.cfg.ReadTimeout, // the idle timeout too
		WriteTimeout:      s.cfg.WriteTimeout,
		ErrorLog:          slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelWarn),
	}
	serve := func() error { return s.srv.Serve(s.ln) }
	if s.tls != nil {
		s.srv.TLSConfig = s.tls.Clone()
		// HTTP/1.1, as over plain HTTP: the timeouts above (a body late
		// by ReadTimeout answered 408, an idle keep-alive closed, a
		// response not read cut off) are HTTP/1.1's.
		s.srv.Protocols = new(http.Protocols)
		s.srv.Protocols.SetHTTP1(true)
		serve = func() error { return s.srv.ServeTLS(s.ln, "", "") }
	}
	s.Go(func() {
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.cfg.Logger.Error("api server stopped", "err", err)
		}
	})
	return nil
}

// Stop shuts the server down gracefully, then stops the service.
func (s *Service) Stop() {
	if s.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.srv.Shutdown(ctx)
		cancel()
	} else if s.cfg.Listener != nil {
		_ = s.cfg.Listener.Close() // Start failed before serving it
	}
	s.Base.Stop()
}

func (s *Service) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}
