// Package stack starts a chosen set of flyball services in one process,
// in dependency order, and stops them in reverse. `flyball dev`, `flyball
// serve`, the end-to-end tests and the load test all use it, so they run
// exactly the same code.
package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/api"
	"github.com/flyballhq/flyball/services/breaker"
	"github.com/flyballhq/flyball/services/deadletter"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/governor"
	"github.com/flyballhq/flyball/services/internal/heartbeat"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/services/sweeper"
	"github.com/flyballhq/flyball/services/timer"
)

// All lists the service names in start order. Consumers of results start before their
// producers, so nothing waits on a service that is not up yet.
var All = []string{"governor", "breaker", "deadletter", "sweeper", "executor", "timer", "api"}

// Config configures a stack.
type Config struct {
	// JS is the JetStream context. Required.
	JS jetstream.JetStream
	// Services to run. Defaults to All.
	Services []string
	// Instance names this process's replicas. Defaults to host-pid. It is
	// sanitized as heartbeat names are (events.SanitizeToken: a dot
	// becomes _), so the services' event sources and the timer's lease
	// name each replica as `flyball runtime` does.
	Instance string
	// Version is reported in heartbeats and User-Agent. Defaults to "dev".
	Version string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics defaults to a new set shared by every service.
	Metrics *metrics.Set
	// Guard is the SSRF guard: the executor applies it when it dials, and
	// the governor and the API to the target URLs of created and updated
	// tasks (a literal address or a well-known metadata hostname it
	// refuses is rejected). Run apart, each service must be given the
	// same settings.
	Guard executor.Guard
	// Concurrency is the executor's global limit. Defaults to 64.
	Concurrency int
	// PerHost is the executor's limit per target host. Defaults to 16.
	PerHost int
	// RedactHeaders are the executor's extra names to redact in run
	// records (executor.Config.RedactHeaders).
	RedactHeaders []string
	// GovernorWorkers is the governor's parallelism per stream. Defaults to 16.
	GovernorWorkers int
	// TimerLead is timer.Config.Lead, the longest a dispatch is published
	// before its slot: 0 for timer.DefaultLead, negative for none.
	TimerLead time.Duration
	// TimerLease is timer.Config.Lease: with several timers, one holds
	// the lease and dispatches (0: every timer dispatches).
	TimerLease time.Duration
	// APIAddr and APITokens configure the API (required when it runs).
	APIAddr   string
	APITokens []string
	// APIListener is api.Config.Listener: a listener the caller bound,
	// served instead of listening on APIAddr. Defaults to nil.
	APIListener net.Listener
	// APITLSCertFile and APITLSKeyFile are api.Config.TLSCertFile and
	// TLSKeyFile: both, and the API serves HTTPS; neither, plain HTTP.
	APITLSCertFile string
	APITLSKeyFile  string
	// HeartbeatInterval defaults to 15s; OfflineAfter to 45s; SweepInterval to 15s.
	HeartbeatInterval time.Duration
	OfflineAfter      time.Duration
	SweepInterval     time.Duration
	// ZombieAfter is sweeper.Config.ZombieAfter: how long a slot may stay
	// past due with no dispatch or outcome, and a task without a schedule,
	// before the sweeper repairs it. Defaults to 5m.
	ZombieAfter time.Duration
	// PerTaskMetrics enables per-task metric series (at most 1000 tasks).
	PerTaskMetrics bool
}

// service is a flyball service. Stop must be safe, and return, after a
// Start that failed partway or before it started anything: Start calls it
// on the service whose Start failed, to stop what that Start started.
type service interface {
	Start(ctx context.Context) error
	Stop()
}

// Stack is a running set of services.
type Stack struct {
	cfg     Config
	started []service
	names   []string
	beaters []*heartbeat.Beater
	// clock is the first beater started, the only one that measures the
	// process's clock against the NATS server's (ClockOffset); the others
	// skip the read-back (heartbeat.Config.NoClock).
	clock atomic.Pointer[heartbeat.Beater]
	// API is the running API server, if any.
	API *api.Service
	// Timer is the running timer, if any.
	Timer *timer.Service
	// Sweeper is the running sweeper, if any.
	Sweeper *sweeper.Service
}

// NewJetStream is jetstream.New with the options flyball's services rely
// on (an async publish ack timeout): use it for the JetStream a Config
// carries.
func NewJetStream(nc *nats.Conn) (jetstream.JetStream, error) { return jsutil.New(nc) }

// Validate checks service names (an *UnknownServiceError), and that none
// is named twice: a service runs once however often it is named, so
// "serve timer timer" meant two timers to someone and ran one.
func Validate(names []string) error {
	for i, n := range names {
		if !slices.Contains(All, n) {
			return &UnknownServiceError{Index: i, Name: n}
		}
		if slices.Contains(names[:i], n) {
			return fmt.Errorf("service %q named twice: a process runs each service once (run more processes for more replicas)", n)
		}
	}
	return nil
}

// UnknownServiceError is a name, the Index-th (from 0), that is no
// service. Its message does not quote the name: given on a command line,
// a stray argument is often a secret parted from its flag by a space
// ("--api-token= <token>").
type UnknownServiceError struct {
	Index int
	Name  string
}

func (e *UnknownServiceError) Error() string {
	return fmt.Sprintf("unknown service (argument %d, not shown): want one of %s", e.Index+1, strings.Join(All, ", "))
}

// Start starts the configured services. On error, whatever started is
// stopped: the services started before, and whatever the failed one's
// Start had started (its Stop is called too).
func Start(ctx context.Context, cfg Config) (*Stack, error) {
	if cfg.JS == nil {
		return nil, errors.New("stack: Config.JS is required")
	}
	if len(cfg.Services) == 0 {
		cfg.Services = All
	}
	if err := Validate(cfg.Services); err != nil {
		return nil, err
	}
	if cfg.Instance == "" {
		cfg.Instance = governor.DefaultInstance()
	}
	cfg.Instance = events.SanitizeToken(cfg.Instance)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Metrics = metrics.OrNew(cfg.Metrics)
	st := &Stack{cfg: cfg}
	for _, name := range All {
		if !slices.Contains(cfg.Services, name) {
			continue
		}
		svc, err := st.build(name)
		if err != nil {
			st.Stop()
			return nil, fmt.Errorf("start %s: %w", name, err)
		}
		if err := svc.Start(ctx); err != nil {
			// Its Start may have started consumers, KV watches and
			// goroutines before it failed: a governor whose RUNS
			// consumer is missing was already consuming TASKS.
			svc.Stop()
			st.Stop()
			return nil, fmt.Errorf("start %s: %w", name, err)
		}
		st.started = append(st.started, svc)
		st.names = append(st.names, name)
		b := heartbeat.Start(ctx, heartbeat.Config{
			JS: cfg.JS, Kind: name, Name: cfg.Instance, Version: cfg.Version,
			Interval: cfg.HeartbeatInterval, Logger: cfg.Logger, Metrics: cfg.Metrics,
			NoClock: len(st.beaters) > 0, // one clock, measured by the first
		})
		st.beaters = append(st.beaters, b)
		st.clock.CompareAndSwap(nil, b)
	}
	return st, nil
}

func (st *Stack) common() svcconf.Common {
	return svcconf.Common{JS: st.cfg.JS, Instance: st.cfg.Instance, Logger: st.cfg.Logger, Metrics: st.cfg.Metrics}
}

func (st *Stack) build(name string) (service, error) {
	c := st.common()
	switch name {
	case "governor":
		return governor.New(governor.Config{JS: c.JS, Instance: c.Instance, Logger: c.Logger, Metrics: c.Metrics, Workers: st.cfg.GovernorWorkers, Guard: st.cfg.Guard})
	case "breaker":
		return breaker.New(breaker.Config{Common: c})
	case "deadletter":
		return deadletter.New(deadletter.Config{Common: c})
	case "sweeper":
		s, err := sweeper.New(sweeper.Config{
			Common: c, Interval: st.cfg.SweepInterval, OfflineAfter: st.cfg.OfflineAfter, ZombieAfter: st.cfg.ZombieAfter, PerTaskMetrics: st.cfg.PerTaskMetrics,
		})
		st.Sweeper = s
		return s, err
	case "executor":
		return executor.New(executor.Config{
			JS: c.JS, Instance: c.Instance, Version: st.cfg.Version, Logger: c.Logger, Metrics: c.Metrics,
			Guard: st.cfg.Guard, Concurrency: st.cfg.Concurrency, PerHost: st.cfg.PerHost, RedactHeaders: st.cfg.RedactHeaders,
			ClockOffset: st.clockOffset,
		})
	case "timer":
		t, err := timer.New(timer.Config{JS: c.JS, Instance: c.Instance, Logger: c.Logger, Metrics: c.Metrics, Lead: st.cfg.TimerLead, Lease: st.cfg.TimerLease})
		st.Timer = t
		return t, err
	case "api":
		a, err := api.New(api.Config{
			Common: c, Addr: st.cfg.APIAddr, Listener: st.cfg.APIListener, Tokens: st.cfg.APITokens, Guard: st.cfg.Guard,
			TLSCertFile: st.cfg.APITLSCertFile, TLSKeyFile: st.cfg.APITLSKeyFile,
		})
		st.API = a
		return a, err
	}
	return nil, fmt.Errorf("unknown service %q", name)
}

// clockOffset is this process's clock minus the NATS server's, as its
// heartbeats last measured it, and false before the first measurement
// (executor.Config.ClockOffset).
func (st *Stack) clockOffset() (time.Duration, bool) {
	b := st.clock.Load()
	if b == nil {
		return 0, false
	}
	off, _, ok := b.Offset()
	return off, ok
}

// Names lists the running services in start order.
func (st *Stack) Names() []string { return st.names }

// Metrics is the shared metric set.
func (st *Stack) Metrics() *metrics.Set { return st.cfg.Metrics }

// Stop stops services in reverse start order: the API and timer stop
// first so no new work enters, then the executor drains in-flight calls,
// then the consumers of results. Heartbeats deregister last.
func (st *Stack) Stop() {
	for i := len(st.started) - 1; i >= 0; i-- {
		st.started[i].Stop()
	}
	// Together: each deregistration may wait its 2s for a NATS that is
	// gone, and one after another they held a stopping process for 15s.
	var wg conc.WaitGroup
	for _, b := range st.beaters {
		wg.Go(b.Stop)
	}
	wg.Wait()
	st.started, st.beaters = nil, nil
}
