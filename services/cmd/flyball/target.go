package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// newTargetCmd runs a demo HTTP endpoint for tasks to call. Its answer
// (status, latency, body) can be switched at runtime, and it records every
// call so a test can reconcile flyball's run history against what the
// endpoint actually saw.
func newTargetCmd() *cobra.Command {
	var (
		addr     string
		logLevel string
		maxLog   int
		def      targetBehaviour
		latency  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "target",
		Short: "Run a demo HTTP endpoint with switchable status, latency and body",
		Long: `target is an HTTP endpoint for tasks to call in demos and end-to-end tests.

Any method on any path answers with the current behaviour and is recorded:
  GET|POST|… /<anything>  answers status, after latency, with body
Control routes (not recorded):
  GET  /healthz           200 {"status":"ok"}, whatever the behaviour
  GET  /control           the current behaviour
  POST /control           change it: {"status":500,"latency":"50ms","body":"down"}
                          fields left out keep their value; "path":"/x" changes
                          only that path; {"reset":true} restores the start-up
                          behaviour and clears path overrides
  GET  /requests          the request log, oldest first, as a JSON list of
                          {time, method, path, idempotencyKey, task, attempt, status};
                          ?task=<id> filters by the Flyball-Task header
  DELETE /requests        clear the log

flyball's executor sends Idempotency-Key (the dispatch ID), Flyball-Task and
Flyball-Attempt on every call, so the log can be matched against RUNS.`,
		Example: `  flyball target --addr :8000
  curl -s localhost:8000/control -d '{"status":500}'
  curl -s 'localhost:8000/requests?task=demo'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("%s: want debug, info, warn or error, got %q", origin(cmd.Flags(), "log-level", "FLYBALL_LOG_LEVEL"), logLevel)
			}
			if err := def.validate(); err != nil {
				return err
			}
			// Served as none, while POST /control refuses a negative one.
			if latency < 0 {
				return fmt.Errorf("--latency: want a duration of 0 or more, got %s", latency)
			}
			if maxLog < 1 {
				return fmt.Errorf("--max-requests: must be at least 1, got %d", maxLog)
			}
			def.Latency = latency.String()
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
			t := newTarget(def, maxLog, log)
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("%s %s: %w", origin(cmd.Flags(), "addr", "FLYBALL_TARGET_ADDR"), addr, err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			srv := &http.Server{Handler: t.handler(), ReadHeaderTimeout: 5 * time.Second}
			errc := make(chan error, 1)
			go func() { errc <- srv.Serve(ln) }()
			log.Info("target listening", "addr", ln.Addr().String(), "status", def.Status, "latency", def.Latency)
			select {
			case err := <-errc:
				return fmt.Errorf("target: %w", err)
			case <-ctx.Done():
			}
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := srv.Shutdown(sctx); err != nil {
				return fmt.Errorf("target: shutdown: %w", err)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&addr, "addr", envOr("FLYBALL_TARGET_ADDR", "127.0.0.1:8000"), "listen address (env FLYBALL_TARGET_ADDR)")
	markNonEmpty(fs, "addr") // given empty, it listened on a random port of every interface
	fs.IntVar(&def.Status, "status", 200, "HTTP status to answer with at start-up")
	fs.DurationVar(&latency, "latency", 0, "delay before answering at start-up")
	fs.StringVar(&def.Body, "body", `{"ok":true}`, "response body at start-up")
	fs.IntVar(&maxLog, "max-requests", 100000, "requests kept in the log; the oldest are dropped first")
	fs.StringVar(&logLevel, "log-level", envOr("FLYBALL_LOG_LEVEL", "info"), "log level; debug logs every request (env FLYBALL_LOG_LEVEL)")
	return cmd
}

// targetBehaviour is how the target answers.
type targetBehaviour struct {
	Status  int    `json:"status"`
	Latency string `json:"latency"`
	Body    string `json:"body"`
	latency time.Duration
}

func (b *targetBehaviour) validate() error {
	// Not a 1xx: net/http sends one as an informational answer and the
	// body after it with a 200, so callers would see 200 while
	// /requests recorded the 1xx.
	if b.Status < 200 || b.Status > 999 {
		return fmt.Errorf("status: want 200-999 (a 1xx is an informational answer, which the server follows with a 200), got %d", b.Status)
	}
	return nil
}

// targetControl is the body of POST /control. Absent fields keep their value.
type targetControl struct {
	Path    string  `json:"path,omitempty"`
	Status  *int    `json:"status,omitempty"`
	Latency *string `json:"latency,omitempty"`
	Body    *string `json:"body,omitempty"`
	Reset   bool    `json:"reset,omitempty"`
}

// targetRequest is one entry of the request log.
type targetRequest struct {
	Time           time.Time `json:"time"`
	Method         string    `json:"method"`
	Path           string    `json:"path"`
	IdempotencyKey string    `json:"idempotencyKey,omitempty"`
	Task           string    `json:"task,omitempty"`
	Attempt        int       `json:"attempt,omitempty"`
	Status         int       `json:"status"`
}

type target struct {
	log     *slog.Logger
	initial targetBehaviour
	max     int

	mu      sync.Mutex
	def     targetBehaviour
	paths   map[string]targetBehaviour
	reqs    []targetRequest
	dropped int
}

func newTarget(def targetBehaviour, maxLog int, log *slog.Logger) *target {
	def.latency, _ = time.ParseDuration(def.Latency)
	return &target{log: log, initial: def, def: def, max: maxLog, paths: map[string]targetBehaviour{}}
}

func (t *target) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeTargetJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /control", t.getControl)
	mux.HandleFunc("POST /control", t.postControl)
	mux.HandleFunc("GET /requests", t.getRequests)
	mux.HandleFunc("DELETE /requests", t.deleteRequests)
	mux.HandleFunc("/", t.serve)
	return mux
}

func (t *target) serve(w http.ResponseWriter, r *http.Request) {
	t.mu.Lock()
	b, ok := t.paths[r.URL.Path]
	if !ok {
		b = t.def
	}
	attempt, _ := strconv.Atoi(r.Header.Get("Flyball-Attempt"))
	req := targetRequest{
		Time: time.Now().UTC(), Method: r.Method, Path: r.URL.Path,
		IdempotencyKey: r.Header.Get("Idempotency-Key"), Task: r.Header.Get("Flyball-Task"),
		Attempt: attempt, Status: b.Status,
	}
	if len(t.reqs) >= t.max {
		n := len(t.reqs) - t.max + 1
		t.reqs = append(t.reqs[:0], t.reqs[n:]...)
		t.dropped += n
	}
	t.reqs = append(t.reqs, req)
	t.mu.Unlock()
	t.log.Debug("request", "method", r.Method, "path", r.URL.Path, "task", req.Task,
		"idempotencyKey", req.IdempotencyKey, "attempt", attempt, "status", b.Status)
	if b.latency > 0 {
		timer := time.NewTimer(b.latency)
		select {
		case <-timer.C:
		case <-r.Context().Done():
			timer.Stop()
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(b.Status)
	_, _ = w.Write([]byte(b.Body))
}

type targetState struct {
	targetBehaviour
	Paths map[string]targetBehaviour `json:"paths,omitempty"`
}

func (t *target) state() targetState {
	st := targetState{targetBehaviour: t.def, Paths: map[string]targetBehaviour{}}
	for p, b := range t.paths {
		st.Paths[p] = b
	}
	return st
}

func (t *target) getControl(w http.ResponseWriter, _ *http.Request) {
	t.mu.Lock()
	st := t.state()
	t.mu.Unlock()
	writeTargetJSON(w, http.StatusOK, st)
}

func (t *target) postControl(w http.ResponseWriter, r *http.Request) {
	var c targetControl
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		writeTargetJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid control JSON: " + err.Error()})
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.Reset {
		t.def, t.paths = t.initial, map[string]targetBehaviour{}
	}
	b := t.def
	if pb, ok := t.paths[c.Path]; ok && c.Path != "" {
		b = pb
	}
	if c.Status != nil {
		b.Status = *c.Status
	}
	if c.Latency != nil {
		d, err := time.ParseDuration(*c.Latency)
		if err != nil || d < 0 {
			writeTargetJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("latency: want a Go duration like 50ms, got %q", *c.Latency)})
			return
		}
		b.latency, b.Latency = d, d.String()
	}
	if c.Body != nil {
		b.Body = *c.Body
	}
	if err := b.validate(); err != nil {
		writeTargetJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if c.Path != "" {
		t.paths[c.Path] = b
	} else {
		t.def = b
	}
	t.log.Info("behaviour changed", "path", c.Path, "status", b.Status, "latency", b.Latency, "reset", c.Reset)
	writeTargetJSON(w, http.StatusOK, t.state())
}

func (t *target) getRequests(w http.ResponseWriter, r *http.Request) {
	task := r.URL.Query().Get("task")
	t.mu.Lock()
	out := make([]targetRequest, 0, len(t.reqs))
	for _, q := range t.reqs {
		if task == "" || q.Task == task {
			out = append(out, q)
		}
	}
	dropped := t.dropped
	t.mu.Unlock()
	w.Header().Set("Flyball-Target-Dropped", strconv.Itoa(dropped))
	writeTargetJSON(w, http.StatusOK, out)
}

func (t *target) deleteRequests(w http.ResponseWriter, _ *http.Request) {
	t.mu.Lock()
	t.reqs, t.dropped = nil, 0
	t.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func writeTargetJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
