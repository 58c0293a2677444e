// Package svcconf holds the configuration fields every service shares and
// their defaults, so each service's Config stays small and consistent.
package svcconf

import (
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/metrics"
)

// Common is embedded in service configs.
type Common struct {
	// JS is the JetStream context. Required.
	JS jetstream.JetStream
	// Instance names this replica in event sources. Defaults to the
	// service name.
	Instance string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics defaults to a private set.
	Metrics *metrics.Set
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// SetDefaults fills absent fields; service names the service in errors.
func (c *Common) SetDefaults(service string) error {
	if c.JS == nil {
		return errors.New(service + ": Config.JS is required")
	}
	if c.Instance == "" {
		c.Instance = service
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Logger = c.Logger.With("service", service)
	c.Metrics = metrics.OrNew(c.Metrics)
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}
