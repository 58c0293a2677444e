package executor

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/jsutil"
)

// A half-open breaker lets one call through: the probe. Every executor
// replica sees the same half-open record, so the probe is claimed in KV
// flyball-probes: the call whose Create of the claim wins is the probe,
// and every other call of that breaker key is deferred until the probe's
// outcome moves the breaker (closed: everyone calls; open with a new
// retryAt: everyone waits for it). The claim's key names the half-open
// period (the breaker key and its retryAt), so the next period has a
// claim of its own, and the claim expires with a TTL longer than the call
// can take, so a prober that dies mid-call blocks the key only that long.

// probeClaim is the value stored in KV flyball-probes: which call probes
// a half-open breaker, and until when the claim holds.
type probeClaim struct {
	TaskID     string    `json:"taskId"`
	DispatchID string    `json:"dispatchId"`
	Executor   string    `json:"executor"` // the event source of the executor that holds it
	ClaimedAt  time.Time `json:"claimedAt"`
	ExpiresAt  time.Time `json:"expiresAt"`
}

// probeKey is the flyball-probes key of a breaker's half-open period:
// "<breaker key>.<retryAt Unix ms>".
func probeKey(breakerKey string, retryAt time.Time) string {
	return breakerKey + "." + strconv.FormatInt(retryAt.UnixMilli(), 10)
}

// Deferrals of calls that lost the probe claim: each re-checks after as
// long as the probe has been running so far (so a slow probe costs each
// deferred dispatch a few deliveries, not one per probeRecheck), at least
// probeRecheck, and no later than the claim's expiry (at least
// probeRecheckFloor from now).
const (
	probeRecheck      = 500 * time.Millisecond
	probeRecheckFloor = 100 * time.Millisecond
)

// gate is what the breaker says about a call. wait > 0 defers it (open
// breaker before retryAt); otherwise the call goes through, and with
// probe set it must first claim the probe of the half-open period that
// began at retryAt. A closed breaker returns the zero gate.
type gate struct {
	wait    time.Duration
	probe   bool
	retryAt time.Time
}

// probeTTL is how long a probe claim lives: the call's timeout plus
// margin (Service.probeMargin: settleMargin, the time to store its
// outcome and settle the dispatch), rounded up to whole seconds, as the
// server counts message TTLs in seconds.
func probeTTL(spec *events.TaskSpec, margin time.Duration) time.Duration {
	ttl := callTimeout(spec) + margin
	return (ttl + time.Second - 1).Truncate(time.Second)
}

// claimProbe makes the call of d the probe of its breaker's half-open
// period, or reports how long to defer it. held is the claim's revision
// (zero when it lost); wait > 0 when another call holds the claim.
func (s *Service) claimProbe(ctx context.Context, t *task, d *events.Dispatch, retryAt time.Time) (key string, held uint64, wait time.Duration, err error) {
	key = probeKey(t.breakerKey, retryAt)
	now := time.Now().UTC()
	ttl := probeTTL(t.spec, s.probeMargin)
	v, err := json.Marshal(probeClaim{TaskID: d.TaskID, DispatchID: d.DispatchID, Executor: s.source, ClaimedAt: now, ExpiresAt: now.Add(ttl)})
	if err != nil {
		return key, 0, 0, err
	}
	rev, err := s.probes.Create(ctx, key, v, jetstream.KeyTTL(ttl))
	if err == nil {
		return key, rev, 0, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return key, 0, 0, err
	}
	ent, err := s.probes.Get(ctx, key)
	if jsutil.IsKeyMissing(err) {
		return key, 0, probeRecheckFloor, nil // expired or released since the Create: try again soon
	}
	if err != nil {
		return key, 0, 0, err
	}
	var c probeClaim
	if json.Unmarshal(ent.Value(), &c) != nil {
		return key, 0, probeRecheck, nil //nolint:nilerr // not an executor's claim: wait, it expires with the bucket's max age
	}
	return key, 0, probeDeferral(time.Since(c.ClaimedAt), time.Until(c.ExpiresAt)), nil
}

// probeDeferral is how long a call that lost the probe claim waits: as
// long as the probe has run (age), at least probeRecheck, but no longer
// than the claim has left (left), and at least probeRecheckFloor.
func probeDeferral(age, left time.Duration) time.Duration {
	return max(min(max(age, probeRecheck), left), probeRecheckFloor)
}

// releaseProbe deletes the claim this executor holds (revision rev) when
// its probe was cancelled by shutdown without an outcome, so another
// executor probes at once rather than when the claim expires. It runs in
// the background; a failure leaves the claim to expire.
func (s *Service) releaseProbe(key string, rev uint64) {
	s.records.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.probes.Delete(ctx, key, jetstream.LastRevision(rev)); err != nil {
			s.log.Debug("probe claim not released; it expires with its TTL", "claim", key, "err", err)
		}
	})
}
