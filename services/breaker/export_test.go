package breaker

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/kvcache"
)

// TuneFollow sets the test hook that adjusts the half-open loop's watch.
func (s *Service) TuneFollow(f func(*kvcache.Follower)) { s.tuneFollow = f }

// TuneKV sets the test hook that wraps flyball-breakers or flyball-tasks
// (bucket) once bound.
func (s *Service) TuneKV(bucket string, f func(jetstream.KeyValue) jetstream.KeyValue) {
	s.tuneKV = func(b string, kv jetstream.KeyValue) jetstream.KeyValue {
		if b == bucket {
			return f(kv)
		}
		return kv
	}
}

// Publishing sets the test hook that runs before a transition is
// published.
func (s *Service) Publishing(f func(key string, to events.BreakerState)) { s.publishing = f }

// Checked sets the test hook that runs once a transition's publish found
// the record still holding it, right before the conditional publish;
// false drops that publish.
func (s *Service) Checked(f func(key string, to events.BreakerState) bool) { s.checked = f }

// PublishRecorded publishes the transition that value, a flyball-breakers
// record of key read earlier, holds: the late publish of a replica that
// read the record before it moved on.
func (s *Service) PublishRecorded(ctx context.Context, key string, value []byte) error {
	return s.publish(ctx, decodeRecord(key, value).Transition)
}

// SpecRevision is the revision of id's spec the view of flyball-tasks
// holds (0: none, or the view is not loaded).
func (s *Service) SpecRevision(id string) uint64 { return s.specs.Lookup(id).Revision }

// RecordsLoaded is closed once the view of flyball-breakers has loaded:
// from then on a success for a settled breaker takes the header shortcut.
func (s *Service) RecordsLoaded() <-chan struct{} { return s.records.Ready() }
