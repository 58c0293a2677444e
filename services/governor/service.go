package governor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/lifecycle"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/streams"
)

// Config configures the governor service.
type Config struct {
	// JS is the JetStream context. Required.
	JS jetstream.JetStream
	// Instance names this replica in event sources. Defaults to host-pid.
	Instance string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics defaults to a private set.
	Metrics *metrics.Set
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// CASAttempts bounds compare-and-set retries per decision. Defaults to 10.
	CASAttempts int
}

func (c *Config) setDefaults() error {
	if c.JS == nil {
		return errors.New("governor: Config.JS is required")
	}
	if c.Instance == "" {
		c.Instance = DefaultInstance()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Metrics = metrics.OrNew(c.Metrics)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.CASAttempts <= 0 {
		c.CASAttempts = 10
	}
	return nil
}

// DefaultInstance is "<hostname>-<pid>".
func DefaultInstance() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "host"
	}
	return h + "-" + strconv.Itoa(os.Getpid())
}

// Service is the governor service.
type Service struct {
	lifecycle.Base
	cfg       Config
	log       *slog.Logger
	source    string
	tasks     jetstream.KeyValue
	schedules jetstream.KeyValue
}

// New validates cfg and returns a service ready to Start.
func New(cfg Config) (*Service, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	return &Service{
		cfg:    cfg,
		log:    cfg.Logger.With("service", "governor"),
		source: jsutil.Source("governor", cfg.Instance),
	}, nil
}

// Start binds the KV buckets and starts consuming TASKS and RUNS.
func (s *Service) Start(ctx context.Context) error {
	runCtx, err := s.Begin(ctx)
	if err != nil {
		return fmt.Errorf("governor: %w", err)
	}
	if s.tasks, err = s.cfg.JS.KeyValue(ctx, streams.BucketTasks); err != nil {
		return fmt.Errorf("governor: bind %s: %w", streams.BucketTasks, err)
	}
	if s.schedules, err = s.cfg.JS.KeyValue(ctx, streams.BucketSchedules); err != nil {
		return fmt.Errorf("governor: bind %s: %w", streams.BucketSchedules, err)
	}
	cc, err := jsutil.Consume(ctx, s.cfg.JS, streams.StreamTasks, streams.ConsumerGovernor, s.log,
		func(m jetstream.Msg) { s.handleCommand(runCtx, m) })
	if err != nil {
		return fmt.Errorf("governor: %w", err)
	}
	s.Track(cc)
	for _, c := range []struct {
		stream string
		h      func(context.Context, jetstream.Msg)
	}{
		{streams.StreamRuns, s.handleSignal},
		{streams.StreamHealth, s.handleSignal},
		{streams.StreamDeadLetter, s.handleSignal},
	} {
		cc, err = jsutil.Consume(ctx, s.cfg.JS, c.stream, streams.ConsumerGovernor, s.log,
			func(m jetstream.Msg) { c.h(runCtx, m) })
		if err != nil {
			return fmt.Errorf("governor: %w", err)
		}
		s.Track(cc)
	}
	return nil
}

// ack acknowledges m, logging (not failing) on error: an unacked message is
// redelivered, and every handler here is idempotent.
func (s *Service) ack(m jetstream.Msg) {
	if err := m.Ack(); err != nil {
		s.log.Warn("ack failed; message will be redelivered", "subject", m.Subject(), "err", err)
	}
}

// retry asks for redelivery after a transient failure (NATS or KV trouble).
func (s *Service) retry(m jetstream.Msg, err error) {
	s.log.Warn("transient failure; will retry", "subject", m.Subject(), "err", err)
	if nerr := m.NakWithDelay(time.Second); nerr != nil {
		s.log.Warn("nak failed", "subject", m.Subject(), "err", nerr)
	}
}

func (s *Service) loadSpec(ctx context.Context, id string) (*events.TaskSpec, error) {
	e, err := s.tasks.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	var spec events.TaskSpec
	if err := json.Unmarshal(e.Value(), &spec); err != nil {
		return nil, fmt.Errorf("stored spec %s: %w", id, err)
	}
	return &spec, nil
}

func isMissing(err error) bool {
	return errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted)
}

// decide applies step to the task's stored state with compare-and-set and
// returns the decision that was stored.
func (s *Service) decide(ctx context.Context, spec *events.TaskSpec, step Step) (gov.Decision, error) {
	var dec gov.Decision
	_, err := jsutil.CAS(ctx, s.schedules, spec.ID, s.cfg.CASAttempts, func(cur []byte) ([]byte, error) {
		var st gov.State
		if cur != nil {
			if err := json.Unmarshal(cur, &st); err != nil {
				s.log.Error("stored schedule is corrupt; rebuilding it", "task", spec.ID, "err", err)
				st = gov.State{TaskID: spec.ID}
			}
		}
		dec = Apply(spec, st, step)
		if dec.Ignored {
			return nil, jsutil.ErrNoChange
		}
		return json.Marshal(dec.State)
	})
	if errors.Is(err, jsutil.ErrNoChange) {
		return dec, nil
	}
	if err != nil {
		return dec, err
	}
	s.cfg.Metrics.Decisions.WithLabelValues(string(dec.Source)).Inc()
	s.log.Debug("decision", "task", spec.ID, "input", step.Input.Kind, "nextRunAt", dec.NextRunAt, "source", dec.Source)
	return dec, nil
}
