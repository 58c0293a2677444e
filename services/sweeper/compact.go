package sweeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/jsutil"
)

// Deleting a task deletes its spec (flyball-tasks), its schedule
// (flyball-schedules) and its breaker record (flyball-breakers); the
// sweeper deletes orphans and idle host breakers. A KV delete or purge
// stores a marker under the key, and flyball-tasks keeps up to 4 older
// revisions of the spec behind it. None of the three buckets has a
// max_age, so nothing removed them: 10,000 tasks created and deleted a
// day left 600,000 messages (190 MB) a month in KV_flyball-tasks for no
// live task, and every watch of the buckets replayed every marker at
// each start and reconnect.
//
// Every CompactEvery the sweeper removes, in each of the three buckets,
// the markers older than DeleteMarkerAge, with what the key held before
// them. It watches the bucket's latest entries (headers only), and for
// each marker stamped before the cutoff purges the key's subject up to
// and including the marker's sequence: a key written again since keeps
// its new value. Every replica does it; a second pass finds nothing to
// remove.
//
// Nothing in flyball reads a marker after its watches have applied it:
// the deleted-namesake checks compare the task's createdAt (OtherTask)
// or read TASKS (deletedSince), never KV history, and a Get of a key
// whose marker is gone answers "not found" where it answered "deleted",
// which every caller treats alike (jsutil.IsKeyMissing). The age is a
// margin over the longest window in which a copy of an event may still
// arrive and be dropped as a duplicate: DEADLETTER's duplicate window,
// 24 h (the KV buckets', TASKS' and RUNS' are 2 min; AckWait is 30 s).

// maxCompactPerPass caps the markers a pass removes from one bucket, the
// oldest first (one purge request each): a backlog of a million markers
// (a bucket from before the compaction) is removed over 100 hourly
// passes, each adding at most 10,000 purge requests per bucket to one
// sweep, rather than holding one sweep for minutes. Deletes at up to 240,000 a day keep up.
const maxCompactPerPass = 10_000

// purgeRefusedMsg is the warning of a pass whose purge the server refused:
// the sweeper's NATS user may not publish to the subject in its
// "permission" attribute. Each of the three buckets has its own.
const purgeRefusedMsg = "old delete markers not removed: the sweeper's NATS user may not publish to the subject in permission; " +
	"grant it in accounts.conf, or leave it out and the markers stay (this warning each hour)"

// DeleteMarkerAge is the age of a delete marker the sweeper removes.
const DeleteMarkerAge = 24 * time.Hour

// CompactEvery is how often the sweeper removes old delete markers.
const CompactEvery = time.Hour

// compactDue starts a pass that removes old delete markers if
// CompactEvery has passed since the last one started (the first sweep
// starts one). The pass runs on a goroutine of its own, one at a time:
// run inside the sweep, three full-bucket watches and up to 30,000
// purges (10,000 took about 4 s on one server) held the sweep's zombie
// checks, backlog metrics and offline marking meanwhile. Only the sweep
// goroutine calls it.
func (s *Service) compactDue(ctx context.Context, now time.Time) {
	if !s.compacted.IsZero() && now.Sub(s.compacted) < CompactEvery {
		return
	}
	if !s.compacting.CompareAndSwap(false, true) {
		return // the last pass is still running
	}
	s.compacted = now
	cutoff := now.Add(-DeleteMarkerAge)
	s.compactions.Add(1)
	s.Go(func() {
		defer s.compactions.Done()
		defer s.compacting.Store(false)
		for _, kv := range []jetstream.KeyValue{s.tasks, s.schedules, s.breakers} {
			n, err := s.compactBucket(ctx, kv, cutoff)
			if n > 0 {
				s.cfg.Metrics.MarkersCompacted.WithLabelValues(kv.Bucket()).Add(float64(n))
				s.cfg.Logger.Info("old delete markers removed", "bucket", kv.Bucket(), "markers", n, "olderThan", DeleteMarkerAge)
			}
			var refused *jsutil.PubViolation
			switch {
			case err == nil || ctx.Err() != nil:
			case errors.As(err, &refused):
				s.cfg.Logger.Warn(purgeRefusedMsg, "bucket", kv.Bucket(), "permission", refused.Subject, "removed", n, "err", err)
			default:
				s.cfg.Logger.Warn("removing old delete markers failed; the next pass retries", "bucket", kv.Bucket(), "removed", n, "err", err)
			}
		}
	})
}

// compactBucket removes the delete markers of kv stamped before cutoff,
// with the revisions behind them, and returns how many it removed.
func (s *Service) compactBucket(ctx context.Context, kv jetstream.KeyValue, cutoff time.Time) (int, error) {
	stream, err := s.cfg.JS.Stream(ctx, "KV_"+kv.Bucket())
	if err != nil {
		return 0, err
	}
	type marker struct {
		key string
		rev uint64
	}
	var old []marker
	w, err := kv.WatchAll(ctx, jetstream.MetaOnly())
	if err != nil {
		return 0, err
	}
	defer func() { _ = w.Stop() }()
read:
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return 0, jsutil.WatchClosed(ctx, "read KV "+kv.Bucket())
			case e == nil:
				break read // the latest entry of every key is in
			case e.Operation() != jetstream.KeyValuePut && e.Created().Before(cutoff):
				old = append(old, marker{e.Key(), e.Revision()})
				if len(old) == s.compactCap {
					break read // the rest is the next pass's: no need to read it now
				}
			}
		}
	}
	_ = w.Stop()
	// A purge the sweeper's user may not make draws no reply, only the
	// server's asynchronous -ERR: watched, it ends the purge at once, and
	// the bucket's other purges, refused alike, are not tried.
	pctx, unwatch := s.refusals.Watch(ctx, jsutil.APISubject(s.cfg.JS, "STREAM.PURGE.KV_"+kv.Bucket()))
	defer unwatch()
	for i, m := range old {
		// Up to and including the marker: a value written since stays.
		if err := stream.Purge(pctx, jetstream.WithPurgeSubject("$KV."+kv.Bucket()+"."+m.key), jetstream.WithPurgeSequence(m.rev+1)); err != nil {
			if v, ok := jsutil.Refusal(pctx); ok {
				err = v
			}
			return i, fmt.Errorf("purge %s up to its marker: %w", m.key, err)
		}
	}
	return len(old), nil
}
