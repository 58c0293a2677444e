package breaker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/kvcache"
)

// watchOpen moves each open breaker to half-open when its retryAt passes,
// so the state is visible (KV, HEALTH) while the probe is in flight. It
// watches the bucket it writes (kvcache.Follower, which watches again if
// a watch ends); several breaker replicas race on CAS and only one
// transition wins (the event also deduplicates by Nats-Msg-Id).
func (s *Service) watchOpen(ctx context.Context) error {
	o := &openBreakers{due: map[string]time.Time{}, wake: make(chan struct{}, 1), now: s.cfg.Now}
	o.republishWithin = republishWithin(s.health.CachedInfo().Config.MaxAge)
	f := kvcache.Follower{KV: s.breakers, Conn: s.cfg.JS.Conn(), Log: s.cfg.Logger, Apply: o.apply, Prune: o.prune}
	if s.tuneFollow != nil {
		s.tuneFollow(&f)
	}
	follow, err := f.Start(ctx)
	if err != nil {
		return err
	}
	s.Go(follow)
	s.Go(func() { s.halfOpenDue(ctx, o) })
	return nil
}

// republishWithin is how old a replayed half-open transition may be to
// be published again under HEALTH's max age keeps (0: no max age, any
// age). It leaves a margin, an hour or half of keeps if that is shorter:
// publish reads the key's last event on HEALTH, and must find it if it
// was published, whatever the clocks and a publish that came late. A
// short max age (an operator's, kept by provision) made it 0 before, and
// each start published hours-old transitions again. It is the check by
// age, with no I/O, that drops most replayed records before a key is
// even due; healthDropped is the exact check, one HEALTH info read per
// replayed key that passes this one, and covers drops by count or size
// too.
func republishWithin(keeps time.Duration) time.Duration {
	if keeps <= 0 {
		return 0
	}
	return keeps - min(keeps/2, time.Hour)
}

// healthClockMargin is how far the clock of the replica that made a
// transition may be ahead of the NATS server's for healthDropped to
// judge it right.
const healthClockMargin = time.Minute

// healthDropped reports whether HEALTH may have dropped the event of a
// transition made at at: it has dropped events from its front (a max
// age, max_msgs or max_bytes; an operator's purge) and the oldest event
// it still holds was stored after at, less healthClockMargin. Otherwise
// an event published for it is still there, and publish, which reads the
// key's last event, finds it. The front moves in stream order, so one
// stream info settles it whichever limit dropped the events.
func (s *Service) healthDropped(ctx context.Context, at time.Time) (bool, error) {
	info, err := s.health.Info(ctx)
	if err != nil {
		return false, fmt.Errorf("HEALTH info: %w", err)
	}
	st := info.State
	if st.FirstSeq <= 1 {
		return false, nil // never dropped one
	}
	front := st.FirstTime
	if st.Msgs == 0 {
		front = st.LastTime // all dropped, up to the last stored
	}
	return front.After(at.Add(-healthClockMargin)), nil
}

// openBreakers is when each open breaker falls due for half-open.
type openBreakers struct {
	mu   sync.Mutex
	due  map[string]time.Time // key → retryAt
	wake chan struct{}        // a change that may move the earliest retryAt
	// republishWithin is how old a half-open record's transition may be
	// for apply to make it due (0: any age, HEALTH has no max age). Past
	// HEALTH's max age its event is gone whether it was published or
	// not, and publish, which reads the key's last event, would publish
	// it again. halfOpen then also asks HEALTH (healthDropped).
	republishWithin time.Duration
	now             func() time.Time
}

// apply follows one record: an open one falls due at its retryAt. So
// does, at once, a half-open one holding its half-open transition: the
// replica that stored it may have stopped (or failed to publish) before
// it reached HEALTH, and kept its retry only in memory. halfOpen then
// publishes it, unless HEALTH already has it (publish reads the key's
// last event): one KV get and one message get for each half-open
// transition, and for each half-open record a watch replays. A transition
// older than HEALTH keeps events (republishWithin) is left alone: HEALTH
// would have dropped its event either way.
func (o *openBreakers) apply(e jetstream.KeyValueEntry) {
	var b record
	put := e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &b) == nil
	open := put && b.State == events.BreakerOpen
	var due time.Time
	switch {
	case open:
		due = b.RetryAt
	case put && b.State == events.BreakerHalfOpen && b.Transition != nil && b.Transition.To == events.BreakerHalfOpen:
		// Due now, for its publish, unless HEALTH has dropped it by now.
		open = o.republishWithin <= 0 || o.now().Sub(b.Transition.At) < o.republishWithin
	}
	o.mu.Lock()
	if open {
		o.due[strings.Clone(e.Key())] = due
	} else {
		delete(o.due, e.Key())
	}
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

func (o *openBreakers) prune(keep func(string) bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	maps.DeleteFunc(o.due, func(k string, _ time.Time) bool { return !keep(k) })
}

// take removes and returns the breakers due at now, and returns when the
// next one falls due (zero with none left).
func (o *openBreakers) take(now time.Time) (keys []string, next time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for key, at := range o.due {
		switch {
		case !at.After(now):
			keys = append(keys, key)
			delete(o.due, key)
		case next.IsZero() || at.Before(next):
			next = at
		}
	}
	return keys, next
}

// halfOpenDue moves breakers to half-open as they fall due, until ctx ends.
// A breaker whose transition failed (KV or HEALTH unavailable) is tried
// again after halfOpenRetry, doubling up to halfOpenRetryMax, until it is
// written and published or the record moves on.
func (s *Service) halfOpenDue(ctx context.Context, o *openBreakers) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	retry := map[string]halfOpenRetryState{}
	for {
		now := time.Now()
		keys, next := o.take(now)
		for key, r := range retry {
			if !r.at.After(now) && !slices.Contains(keys, key) {
				keys = append(keys, key)
			}
		}
		for _, key := range keys {
			// A key not retrying may be a replayed half-open record;
			// one retrying still is, unless the try before wrote a fresh
			// transition and failed to publish it (wrote). A
			// try that failed earlier, at its read of the record (KV
			// electing at a start) or at the HEALTH check, keeps it.
			r, retrying := retry[key]
			replayed := !retrying || r.replayed
			wrote, err := s.halfOpen(ctx, key, replayed)
			if err == nil || ctx.Err() != nil {
				delete(retry, key)
				continue
			}
			r.replayed = replayed && !wrote
			r.wait = min(max(2*r.wait, halfOpenRetry), halfOpenRetryMax)
			r.at = time.Now().Add(r.wait)
			retry[key] = r
			s.cfg.Logger.Warn("half-open transition failed; retrying (the executor still lets the probe through)",
				"key", key, "retryIn", r.wait, "err", err)
		}
		for _, r := range retry {
			if next.IsZero() || r.at.Before(next) {
				next = r.at
			}
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-o.wake:
		case <-timer.C:
		}
	}
}

// The half-open loop's retry delays.
const (
	halfOpenRetry    = time.Second
	halfOpenRetryMax = 30 * time.Second
)

type halfOpenRetryState struct {
	at   time.Time
	wait time.Duration
	// replayed: the failure was healthDropped's read, which the retry
	// makes again.
	replayed bool
}

// halfOpen performs open → half-open for key if it is still open and due.
// The transition is stored with the record; when the record is already
// half-open with that transition (its publish failed, and the loop
// retries, or another replica won the race), it publishes it again, and
// Nats-Msg-Id drops a copy already stored. Either publish is dropped once
// a later transition superseded it (publish). With replayed (the key came
// from the watch, not from a retry of a publish this loop saw fail), a
// stored transition whose event HEALTH may have dropped is not published
// again (healthDropped): HEALTH with a lowered max_msgs or max_bytes drops
// events younger than its max age, and the governor would apply an old
// transition as new. wrote reports whether this try stored the transition
// itself: its retry is no replayed record (its event was never stored).
func (s *Service) halfOpen(ctx context.Context, key string, replayed bool) (wrote bool, err error) {
	now := s.cfg.Now().UTC()
	var rec record
	_, err = jsutil.CAS(ctx, s.breakers, key, 10, func(cur []byte) ([]byte, error) {
		rec = record{}
		if cur == nil || json.Unmarshal(cur, &rec) != nil {
			return nil, jsutil.ErrNoChange
		}
		if rec.State == events.BreakerHalfOpen && rec.Transition != nil && rec.Transition.To == events.BreakerHalfOpen {
			return nil, errApplied
		}
		if rec.State != events.BreakerOpen || rec.RetryAt.After(now) {
			return nil, jsutil.ErrNoChange
		}
		tr := events.BreakerTransition{
			Key: key, From: events.BreakerOpen, To: events.BreakerHalfOpen, Failures: rec.Failures,
			OpenDelay: rec.OpenDelay, At: now, Reason: "open delay elapsed: the next call is the probe",
		}
		if events.ValidToken(key) && !isHostKey(key) {
			tr.TaskID, tr.TaskCreatedAt = key, rec.TaskCreatedAt
		}
		rec.Transition = &storedTransition{
			EventID:           fmt.Sprintf("breaker:%s:half-open:%d", key, rec.RetryAt.UnixMilli()),
			BreakerTransition: tr,
		}
		rec.State, rec.UpdatedAt = events.BreakerHalfOpen, now
		return json.Marshal(rec)
	})
	switch {
	case errors.Is(err, errApplied):
		if replayed {
			dropped, err := s.healthDropped(ctx, rec.Transition.At)
			if err != nil {
				return false, err
			}
			if dropped {
				s.cfg.Logger.Debug("half-open transition older than HEALTH's oldest event; not published again", "key", key, "event", rec.Transition.EventID)
				return false, nil
			}
		}
		return false, s.publish(ctx, rec.Transition)
	case errors.Is(err, jsutil.ErrNoChange):
		return false, nil
	case err != nil:
		return false, err
	}
	s.cfg.Metrics.BreakerTransitions.WithLabelValues(string(events.BreakerHalfOpen)).Inc()
	return true, s.publish(ctx, rec.Transition)
}

func isHostKey(key string) bool {
	return len(key) > len(events.HostKeyPrefix) && strings.HasPrefix(key, events.HostKeyPrefix)
}
