package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/embedded"
	"github.com/flyballhq/flyball/streams"
)

// natsEnv is the NATS side of one system run: a fresh embedded server with
// its own file store (StackInProcess), a child process serving a fresh one
// (StackProcess: `flyball dev` for flyball, a bare server otherwise), or
// the external server.
type natsEnv struct {
	srv   *server.Server
	dir   string
	url   string
	child *child
	// metricsURL is flyball dev's /metrics (StackProcess, flyball only).
	metricsURL string
	log        *slog.Logger
	// nc and js are the load generator's own connection.
	nc *nats.Conn
	js jetstream.JetStream
	// pubErrs counts async publishes the server refused.
	pubErrs atomic.Int64
	// lastPubErr is the most recent refusal.
	lastPubErr atomic.Value
}

// startNATS starts a fresh server (embedded, or a child process serving
// one) or connects to the external one, and connects the load generator.
func (r *runner) startNATS(ctx context.Context) (*natsEnv, error) {
	e := &natsEnv{url: r.cfg.NATSURL, log: r.log}
	switch r.cfg.Stack {
	case StackInProcess:
		dir, err := os.MkdirTemp("", "flyball-bench-")
		if err != nil {
			return nil, err
		}
		e.dir = dir
		srv, err := embedded.Start(embedded.Config{StoreDir: dir, DontListen: true, Sync: r.cfg.NATSSync})
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		e.srv = srv
	case StackProcess:
		if err := e.spawn(ctx, "nats-server", r.cfg.Executable, func(dir, natsAddr string) []string {
			return []string{"nats-server", "--listen", natsAddr, "--store", filepath.Join(dir, "jetstream"), "--sync", r.cfg.NATSSync.String()}
		}, nil); err != nil {
			return nil, err
		}
	}
	return e, e.connectGenerator()
}

// startDev starts `flyball dev` (Config.FlyballBin) in a child process on
// a fresh store, waits until it serves /healthz (its services have
// started), and connects the load generator to its NATS server.
func (r *runner) startDev(ctx context.Context) (*natsEnv, error) {
	e := &natsEnv{log: r.log}
	metricsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := func(dir, natsAddr string) []string {
		a := []string{
			"dev", "--listen", natsAddr, "--data-dir", dir, "--metrics-addr", metricsAddr,
			"--api-addr", "127.0.0.1:0", "--api-token", "bench-" + r.tag + "-" + strconv.Itoa(os.Getpid()) + "-token",
			"--concurrency", strconv.Itoa(r.cfg.Concurrency), "--per-host", strconv.Itoa(r.cfg.Concurrency),
			"--log-level", "warn", "--pprof",
		}
		if r.cfg.AsyncPersist {
			a = append(a, "--async-persist")
		}
		if !r.cfg.NATSSync.IsZero() { // unset, a flyball binary older than the flag still runs
			a = append(a, "--nats-sync", r.cfg.NATSSync.String())
		}
		switch {
		case r.cfg.TimerLead > 0:
			a = append(a, "--timer-lead", r.cfg.TimerLead.String())
		case r.cfg.TimerLead < 0:
			a = append(a, "--timer-lead", "0") // dev's 0 is "at the slot"
		}
		return a
	}
	healthz := &http.Client{Timeout: time.Second}
	ready := func() bool {
		resp, err := healthz.Get("http://" + metricsAddr + "/healthz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	if err := e.spawn(ctx, "flyball-dev", r.cfg.FlyballBin, args, ready); err != nil {
		return nil, err
	}
	e.metricsURL = "http://" + metricsAddr + "/metrics"
	if err := e.connectGenerator(); err != nil {
		return nil, err
	}
	if err := r.checkPersistMode(ctx, e.js); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// checkPersistMode fails the run when the child made flyball's streams in
// another persist mode than the report will say (a flyball binary that
// ignores --async-persist, or a store left from another run).
func (r *runner) checkPersistMode(ctx context.Context, js jetstream.JetStream) error {
	for _, name := range streams.AsyncPersistStreams {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("flyball dev's stream %s: %w", name, err)
		}
		if got := s.CachedInfo().Config.PersistMode; got != r.persistMode() {
			return fmt.Errorf("flyball dev made %s with persist mode %v, want %v", name, got, r.persistMode())
		}
	}
	return nil
}

// spawn starts a child serving NATS on a free loopback port, with a fresh
// scratch directory, and waits until ready (by default: a NATS connection
// succeeds).
func (e *natsEnv) spawn(ctx context.Context, name, exe string, args func(dir, natsAddr string) []string, ready func() bool) error {
	natsAddr, err := freeAddr()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "flyball-bench-"+name+"-")
	if err != nil {
		return err
	}
	c, err := startChild(name, dir, exe, args(dir, natsAddr)...)
	if err != nil {
		return err
	}
	e.child, e.url = c, "nats://"+natsAddr
	if ready == nil {
		ready = func() bool {
			nc, err := nats.Connect(e.url, nats.Timeout(time.Second))
			if err != nil {
				return false
			}
			nc.Close()
			return true
		}
	}
	if err := c.waitReady(ctx, time.Minute, ready); err != nil {
		e.close()
		return err
	}
	return nil
}

// connectGenerator connects the load generator's own connection.
func (e *natsEnv) connectGenerator() error {
	nc, err := e.connect("flyball-bench")
	if err != nil {
		e.close()
		return err
	}
	e.nc = nc
	e.js, err = jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(4096),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
			e.pubErrs.Add(1)
			e.lastPubErr.Store(err.Error())
		}))
	if err != nil {
		e.close()
		return err
	}
	return nil
}

// profiler profiles the stack: flyball dev's /debug/pprof/ with
// StackProcess, this process otherwise.
func (e *natsEnv) profiler(ctx context.Context) profiler {
	if e.metricsURL != "" {
		return pprofClient{ctx: ctx, base: strings.TrimSuffix(e.metricsURL, "/metrics")}
	}
	return selfProfiler{}
}

// pids are the processes charged besides this one: the child's, or
// those given with --stack-pid.
func (e *natsEnv) pids(stackPIDs []int) []int {
	if e.child != nil {
		return []int{e.child.pid()}
	}
	return stackPIDs
}

// connect opens a new connection to the server.
func (e *natsEnv) connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	opts = append(opts, nats.Name(name), nats.MaxReconnects(-1))
	if e.srv != nil {
		opts = append(opts, nats.InProcessServer(e.srv))
		return nats.Connect("", opts...)
	}
	return nats.Connect(e.url, opts...)
}

// waitPublished waits for every async publish to be acknowledged and
// reports how many the server refused.
func (e *natsEnv) waitPublished(ctx context.Context) error {
	select {
	case <-e.js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	}
	if n := e.pubErrs.Swap(0); n > 0 {
		last, _ := e.lastPubErr.Load().(string)
		return fmt.Errorf("%d async publishes failed, last: %s", n, last)
	}
	return nil
}

func (e *natsEnv) close() {
	if e.nc != nil {
		e.nc.Close()
	}
	if e.srv != nil {
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
	}
	if e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
	if e.child != nil {
		if err := e.child.stop(); err != nil {
			e.log.Error("stack process", "err", err)
		}
	}
}

// serverVersion is the version of the server the load generator talks to.
func (e *natsEnv) serverVersion() string { return e.nc.ConnectedServerVersion() }

// waitUntil blocks until t or until ctx ends.
func waitUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// poll calls cond every interval until it returns true, ctx ends or the
// timeout passes.
func poll(ctx context.Context, timeout, interval time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(interval)
	defer t.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// persistMode is the persist mode of the streams the benchmark creates
// itself (the ceiling's and the nats-server baseline's).
func (r *runner) persistMode() jetstream.PersistModeType {
	if r.cfg.AsyncPersist {
		return jetstream.AsyncPersistMode
	}
	return jetstream.DefaultPersistMode
}
