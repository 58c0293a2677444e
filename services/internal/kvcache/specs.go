package kvcache

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
)

// ErrUnreadable marks a stored value that does not decode: reading it
// again will not help (it was written by hand, or by another version).
var ErrUnreadable = errors.New("unreadable")

// DecodeSpec decodes a flyball-tasks value into a normalized spec. Cached
// specs are shared between goroutines: treat them as read-only. An error
// wraps ErrUnreadable. The createdAt stored with the spec is not read (a
// value whose createdAt does not decode still decodes here); a caller
// that needs it calls DecodeStoredSpec.
func DecodeSpec(id string, raw []byte) (*events.TaskSpec, error) {
	spec := new(events.TaskSpec)
	if err := decodeSpecInto(id, raw, spec, spec); err != nil {
		return nil, err
	}
	return spec, nil
}

// DecodeStoredSpec decodes a flyball-tasks value once: the spec,
// normalized as DecodeSpec does, and the createdAt stored with it
// (gov.StoredSpec; zero when the value has none). An error wraps
// ErrUnreadable, and a createdAt that does not decode is one, as it is
// for the executor.
func DecodeStoredSpec(id string, raw []byte) (*events.TaskSpec, time.Time, error) {
	ss := gov.StoredSpec{TaskSpec: new(events.TaskSpec)}
	if err := decodeSpecInto(id, raw, &ss, ss.TaskSpec); err != nil {
		return nil, time.Time{}, err
	}
	return ss.TaskSpec, ss.CreatedAt, nil
}

// decodeSpecInto unmarshals raw into v and normalizes spec, which v is
// or holds: DecodeSpec passes the spec alone, so a createdAt is not read
// and its errors name events.TaskSpec; DecodeStoredSpec passes the
// gov.StoredSpec around it.
func decodeSpecInto(id string, raw []byte, v any, spec *events.TaskSpec) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("stored spec %s is %w: %w", id, ErrUnreadable, err)
	}
	spec.Normalize()
	return nil
}

// Specs is a cache of the flyball-tasks bucket.
func Specs(tasks jetstream.KeyValue, log *slog.Logger) *Cache[*events.TaskSpec] {
	return New(tasks, DecodeSpec, log)
}
