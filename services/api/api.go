// Package api is flyball's HTTP API. Every route but /healthz needs a
// bearer token. Writes go through the same control-plane events as the CLI
// (task.created and friends on TASKS) and answer with the governor's
// verdict; reads come from the KV buckets.
package api

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/control"
	"github.com/flyballhq/flyball/services/internal/lifecycle"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/streams"
)

// Config configures the API server.
type Config struct {
	svcconf.Common
	// Addr is the listen address. Defaults to 127.0.0.1:8080.
	Addr string
	// Tokens are the accepted bearer tokens. At least one is required.
	Tokens []string
	// AnswerTimeout bounds the wait for the governor's verdict. Defaults to 5s.
	AnswerTimeout time.Duration
	// MaxBodyBytes caps request bodies. Defaults to 1 MiB.
	MaxBodyBytes int64
}

// Service is the API server.
type Service struct {
	lifecycle.Base
	cfg       Config
	ctl       *control.Client
	tasks     jetstream.KeyValue
	schedules jetstream.KeyValue
	srv       *http.Server
	ln        net.Listener
}

// New validates cfg.
func New(cfg Config) (*Service, error) {
	if err := cfg.SetDefaults("api"); err != nil {
		return nil, err
	}
	if len(cfg.Tokens) == 0 {
		return nil, errors.New("api: Config.Tokens: at least one bearer token is required")
	}
	for i, t := range cfg.Tokens {
		if len(t) < 16 {
			return nil, fmt.Errorf("api: Config.Tokens[%d]: must be at least 16 characters", i)
		}
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
	return &Service{cfg: cfg}, nil
}

// Addr is the bound address, available after Start.
func (s *Service) Addr() string { return s.ln.Addr().String() }

// Handler returns the routes (for tests and embedding).
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.Handle("GET /metrics", s.auth(promhttp.HandlerFor(s.cfg.Metrics.Registry, promhttp.HandlerOpts{})))
	mux.Handle("POST /api/v1/tasks", s.auth(http.HandlerFunc(s.createTask)))
	mux.Handle("GET /api/v1/tasks", s.auth(http.HandlerFunc(s.listTasks)))
	mux.Handle("GET /api/v1/tasks/{id}", s.auth(http.HandlerFunc(s.getTask)))
	mux.Handle("/", s.auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "", "no route "+r.Method+" "+r.URL.Path)
	})))
	return mux
}

// Start binds KV and starts listening.
func (s *Service) Start(ctx context.Context) error {
	if _, err := s.Begin(ctx); err != nil {
		return fmt.Errorf("api: %w", err)
	}
	var err error
	if s.tasks, err = s.cfg.JS.KeyValue(ctx, streams.BucketTasks); err != nil {
		return fmt.Errorf("api: %w", err)
	}
	if s.schedules, err = s.cfg.JS.KeyValue(ctx, streams.BucketSchedules); err != nil {
		return fmt.Errorf("api: %w", err)
	}
	s.ctl = &control.Client{NC: s.cfg.JS.Conn(), JS: s.cfg.JS, Source: "flyball/api/" + s.cfg.Instance}
	s.ln, err = net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("api: listen %s: %w", s.cfg.Addr, err)
	}
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelWarn)}
	s.Go(func() {
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
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
	}
	s.Base.Stop()
}

func (s *Service) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		if h == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="flyball"`)
			writeError(w, http.StatusUnauthorized, "Authorization", "missing bearer token: send 'Authorization: Bearer <token>'")
			return
		}
		tok, ok := strings.CutPrefix(h, "Bearer ")
		if !ok || !s.validToken(tok) {
			writeError(w, http.StatusForbidden, "Authorization", "token not accepted")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Service) validToken(tok string) bool {
	ok := false
	for _, t := range s.cfg.Tokens {
		if subtle.ConstantTimeCompare([]byte(tok), []byte(t)) == 1 {
			ok = true
		}
	}
	return ok
}

type apiError struct {
	Error  string              `json:"error"`
	Field  string              `json:"field,omitempty"`
	Detail string              `json:"detail"`
	Errors []events.FieldError `json:"errors,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, field, detail string) {
	writeJSON(w, code, apiError{Error: http.StatusText(code), Field: field, Detail: detail})
}

func (s *Service) createTask(w http.ResponseWriter, r *http.Request) {
	var spec events.TaskSpec
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, "", fmt.Sprintf("body exceeds %d bytes", s.cfg.MaxBodyBytes))
			return
		}
		writeError(w, http.StatusBadRequest, "", "invalid JSON task spec: "+err.Error())
		return
	}
	if err := spec.Validate(); err != nil {
		reasons := events.Reasons(err)
		writeJSON(w, http.StatusBadRequest, apiError{Error: "Bad Request", Field: reasons[0].Field, Detail: err.Error(), Errors: reasons})
		return
	}
	cmdID, ans, err := s.ctl.Send(r.Context(), events.VerbCreated, spec.ID, spec, s.cfg.AnswerTimeout)
	switch {
	case errors.Is(err, control.ErrTimeout):
		writeJSON(w, http.StatusAccepted, map[string]any{"commandId": cmdID, "status": "pending", "detail": err.Error()})
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "", err.Error())
	case ans.Rejected != nil:
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"commandId": cmdID, "status": "rejected", "rejected": ans.Rejected})
	default:
		writeJSON(w, http.StatusAccepted, map[string]any{"commandId": cmdID, "status": "accepted", "accepted": ans.Accepted})
	}
}

// TaskView is a task as the API shows it.
type TaskView struct {
	Spec     events.TaskSpec `json:"spec"`
	Schedule *gov.State      `json:"schedule,omitempty"`
}

func (s *Service) getTask(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !events.ValidToken(id) {
		writeError(w, http.StatusBadRequest, "id", "must be 1-128 characters of [A-Za-z0-9_-]")
		return
	}
	v, err := s.view(r.Context(), id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		writeError(w, http.StatusNotFound, "id", "no task "+id)
		return
	}
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Service) view(ctx context.Context, id string) (*TaskView, error) {
	ent, err := s.tasks.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	var v TaskView
	if err := json.Unmarshal(ent.Value(), &v.Spec); err != nil {
		return nil, err
	}
	if se, err := s.schedules.Get(ctx, id); err == nil {
		var st gov.State
		if json.Unmarshal(se.Value(), &st) == nil {
			v.Schedule = &st
		}
	}
	return &v, nil
}

func (s *Service) listTasks(w http.ResponseWriter, r *http.Request) {
	keys, err := s.tasks.ListKeys(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "", err.Error())
		return
	}
	out := []TaskView{}
	for k := range keys.Keys() {
		if v, err := s.view(r.Context(), k); err == nil {
			out = append(out, *v)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"tasks": out})
}
