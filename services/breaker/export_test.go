package breaker

import (
	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/kvcache"
)

// TuneFollow sets the test hook that adjusts the half-open loop's watch.
func (s *Service) TuneFollow(f func(*kvcache.Follower)) { s.tuneFollow = f }

// Publishing sets the test hook that runs before a transition is
// published.
func (s *Service) Publishing(f func(key string, to events.BreakerState)) { s.publishing = f }
