package executor

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/metrics"
)

// Config configures the executor.
type Config struct {
	// JS is the JetStream context. Required.
	JS jetstream.JetStream
	// Instance names this replica in event sources. Defaults to "executor".
	Instance string
	// Version is sent in the User-Agent. Defaults to "dev".
	Version string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics defaults to a private set.
	Metrics *metrics.Set
	// Concurrency bounds calls in flight. Defaults to 64.
	Concurrency int
	// PerHost bounds calls in flight to one host: its name in ASCII
	// (punycode for an internationalized name) and lower-cased, with its
	// port unless that is the scheme's default (canonicalHost).
	// Defaults to 16.
	PerHost int
	// Guard is the SSRF guard. The zero value blocks loopback, link-local
	// and metadata addresses.
	Guard Guard
	// RedactHeaders adds names (case-insensitive) of headers and query
	// parameters whose values run records redact.
	RedactHeaders []string
	// AckWait is the DISPATCH consumer's ack wait, read from the consumer
	// at Start. A dispatch kept longer than half of it (a wait for a slot,
	// a long call, a run event the outbox is still storing) sends
	// InProgress. Defaults to 30s (the value in streams).
	AckWait time.Duration
	// ShutdownGrace is how long Stop lets in-flight calls finish before
	// cancelling them. Defaults to 10s.
	ShutdownGrace time.Duration
	// EmitStarted publishes run.started before each call. It costs one
	// more persisted message per run. Defaults to false.
	EmitStarted bool
	// ClockOffset, when set, reports this process's clock minus the NATS
	// server's, as the heartbeat last measured it (heartbeat.Beater.Offset),
	// and ok false before any measurement. The executor waits for a slot,
	// judges a dispatch too far ahead of it (MaxDispatchAhead), judges a
	// slot missed under catchUp "none", and stamps its run events'
	// startedAt and finishedAt, on the server's clock (Now less the
	// offset), the clock the governor plans slots on. Unset, or not ok, it
	// uses Now.
	ClockOffset func() (offset time.Duration, ok bool)
	// Now is this process's own clock, the one ClockOffset corrects to the
	// server's. Tests run an executor whose clock is off the server's with
	// it. Defaults to time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() error {
	if c.JS == nil {
		return errors.New("executor: Config.JS is required")
	}
	if c.Instance == "" {
		c.Instance = "executor"
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Metrics = metrics.OrNew(c.Metrics)
	if c.Concurrency <= 0 {
		c.Concurrency = 64
	}
	if c.PerHost <= 0 {
		c.PerHost = 16
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 10 * time.Second
	}
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	// Lower-cased once here: isSecretName compares lower-cased names.
	c.RedactHeaders = slices.Clone(c.RedactHeaders)
	for i, h := range c.RedactHeaders {
		c.RedactHeaders[i] = strings.ToLower(h)
	}
	return nil
}
