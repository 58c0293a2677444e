package kvcache

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
)

// ErrUnreadable marks a stored value that does not decode: reading it
// again will not help (it was written by hand, or by another version).
var ErrUnreadable = errors.New("unreadable")

// DecodeSpec decodes a flyball-tasks value into a normalized spec. Cached
// specs are shared between goroutines: treat them as read-only. An error
// wraps ErrUnreadable.
func DecodeSpec(id string, raw []byte) (*events.TaskSpec, error) {
	var spec events.TaskSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, fmt.Errorf("stored spec %s is %w: %w", id, ErrUnreadable, err)
	}
	spec.Normalize()
	return &spec, nil
}

// Specs is a cache of the flyball-tasks bucket.
func Specs(tasks jetstream.KeyValue, log *slog.Logger) *Cache[*events.TaskSpec] {
	return New(tasks, DecodeSpec, log)
}
