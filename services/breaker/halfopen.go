package breaker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
)

// watchOpen moves each open breaker to half-open when its retryAt passes,
// so the state is visible (KV, HEALTH) while the probe is in flight. It
// watches the bucket it writes; several breaker replicas race on CAS and
// only one transition wins (the event also deduplicates by Nats-Msg-Id).
func (s *Service) watchOpen(ctx context.Context) error {
	w, err := s.breakers.WatchAll(ctx)
	if err != nil {
		return err
	}
	s.Go(func() {
		defer func() { _ = w.Stop() }()
		due := map[string]time.Time{}
		timer := time.NewTimer(time.Hour)
		defer timer.Stop()
		for {
			next := time.Time{}
			for _, at := range due {
				if next.IsZero() || at.Before(next) {
					next = at
				}
			}
			if !next.IsZero() {
				timer.Reset(max(time.Until(next), 0))
			}
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					continue
				}
				var b executor.BreakerRecord
				if e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &b) == nil && b.State == events.BreakerOpen {
					due[e.Key()] = b.RetryAt
				} else {
					delete(due, e.Key())
				}
			case <-timer.C:
				now := time.Now()
				for key, at := range due {
					if !at.After(now) {
						delete(due, key)
						if err := s.halfOpen(ctx, key); err != nil && ctx.Err() == nil {
							s.cfg.Logger.Warn("half-open transition failed; the executor still lets the probe through", "key", key, "err", err)
						}
					}
				}
			}
		}
	})
	return nil
}

// halfOpen performs open → half-open for key if it is still open and due.
func (s *Service) halfOpen(ctx context.Context, key string) error {
	now := s.cfg.Now().UTC()
	var rec executor.BreakerRecord
	_, err := jsutil.CAS(ctx, s.breakers, key, 10, func(cur []byte) ([]byte, error) {
		if cur == nil || json.Unmarshal(cur, &rec) != nil || rec.State != events.BreakerOpen || rec.RetryAt.After(now) {
			return nil, jsutil.ErrNoChange
		}
		rec.State, rec.UpdatedAt = events.BreakerHalfOpen, now
		return json.Marshal(rec)
	})
	if errors.Is(err, jsutil.ErrNoChange) {
		return nil
	}
	if err != nil {
		return err
	}
	s.cfg.Metrics.BreakerTransitions.WithLabelValues(string(events.BreakerHalfOpen)).Inc()
	tr := events.BreakerTransition{
		Key: key, From: events.BreakerOpen, To: events.BreakerHalfOpen, Failures: rec.Failures,
		OpenDelay: rec.OpenDelay, At: now, Reason: "open delay elapsed: the next call is the probe",
	}
	if events.ValidToken(key) && !isHostKey(key) {
		tr.TaskID = key
	}
	id := fmt.Sprintf("breaker:%s:half-open:%d", key, rec.RetryAt.UnixMilli())
	return jsutil.PublishEvent(ctx, s.cfg.JS, events.BreakerSubject(events.BreakerHalfOpen, key), id,
		events.TypeBreakerHalfOpen, s.source, tr.TaskID, tr, now)
}

func isHostKey(key string) bool { return len(key) > 5 && key[:5] == "host_" }
