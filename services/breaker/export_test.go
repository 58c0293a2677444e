package breaker

import "github.com/flyballhq/flyball/services/internal/kvcache"

// TuneFollow sets the test hook that adjusts the half-open loop's watch.
func (s *Service) TuneFollow(f func(*kvcache.Follower)) { s.tuneFollow = f }

// HalfOpenPublishing sets the test hook that runs before a half-open
// transition is published.
func (s *Service) HalfOpenPublishing(f func(key string)) { s.halfOpenPublishing = f }
