package streams

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// maxReplicas is the largest replica count JetStream supports.
const maxReplicas = 5

type options struct {
	replicas int // 0: as in the files
	err      error
}

// Option configures [Ensure].
type Option func(*options)

// WithReplicas overrides the replica count of every stream, including the
// streams backing KV buckets. Consumers keep num_replicas 0 and so inherit
// the replica count of their stream. n must be between 1 and 5.
func WithReplicas(n int) Option {
	return func(o *options) {
		if n < 1 || n > maxReplicas {
			o.err = fmt.Errorf("streams: WithReplicas(%d): replicas must be between 1 and %d", n, maxReplicas)
			return
		}
		o.replicas = n
	}
}

// Ensure creates or updates every stream (including the KV_<bucket> streams
// backing the KV buckets), then every durable consumer, so that their
// configs match the embedded definitions. It is idempotent: on a server that
// already matches, it changes nothing. Settings the server cannot change in
// place (for example storage type or retention policy) make Ensure fail.
// Errors name the definition file and wrap the underlying error.
func Ensure(ctx context.Context, js jetstream.JetStream, opts ...Option) error {
	if js == nil {
		return errors.New("streams: Ensure: nil JetStream")
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.err != nil {
		return o.err
	}

	streams, consumers, err := load()
	if err != nil {
		return err
	}
	for _, d := range streams {
		cfg := d.cfg
		if o.replicas > 0 {
			cfg.Replicas = o.replicas
		}
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("streams: ensure stream %s (%s): %w", cfg.Name, d.file, err)
		}
	}
	for _, d := range consumers {
		if _, err := js.CreateOrUpdateConsumer(ctx, d.stream, d.cfg); err != nil {
			return fmt.Errorf("streams: ensure consumer %s.%s (%s): %w", d.stream, d.cfg.Name, d.file, err)
		}
	}
	return nil
}
