package breaker

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/kvcache"
)

// watchDeletes follows flyball-tasks and, when a task is deleted, deletes
// its task-scoped breaker record. A task re-created under the same ID
// then starts with a closed breaker: before, it inherited the old task's
// open breaker, and its calls were deferred until the old retryAt (up to
// maxOpenDelay), unless a sweep found the task gone in between and purged
// the record. The deletes a watch replays (at start, or after a watch
// ended) are left to the sweeper's orphan purge, so a start does not
// write for every task ever deleted. Host-scoped records belong to no
// task: the sweeper purges one once no task names its host.
func (s *Service) watchDeletes(ctx context.Context, tasks jetstream.KeyValue) error {
	live := false // the watch has delivered its snapshot; only the follower goroutine touches it
	f := kvcache.Follower{
		KV: tasks, Conn: s.cfg.JS.Conn(), Log: s.cfg.Logger,
		Apply: func(e jetstream.KeyValueEntry) {
			if live && e.Operation() != jetstream.KeyValuePut {
				s.forget(ctx, e.Key())
			}
		},
		Loaded: func() { live = true },
		Ended:  func(error) { live = false },
	}
	follow, err := f.Start(ctx)
	if err != nil {
		return err
	}
	s.Go(follow)
	return nil
}

// forgetTimeout bounds the read and delete of one record.
const forgetTimeout = 5 * time.Second

// forget deletes the breaker record under key, if there is one. Every
// replica tries; the delete is a compare-and-set on the record read, so a
// record written in between (an outcome of the deleted task still in
// flight) is left to the sweeper.
func (s *Service) forget(ctx context.Context, key string) {
	if r := s.records.Lookup(key); r.Known && !r.Found {
		return // no record: nothing to write
	}
	ctx, cancel := context.WithTimeout(ctx, forgetTimeout)
	defer cancel()
	ent, err := s.breakers.Get(ctx, key)
	if jsutil.IsKeyMissing(err) {
		return
	}
	if err == nil {
		err = s.breakers.Delete(ctx, key, jetstream.LastRevision(ent.Revision()))
	}
	switch {
	case err == nil:
		s.cfg.Logger.Info("breaker record of a deleted task removed", "key", key)
	case jsutil.IsCASConflict(err), errors.Is(err, jetstream.ErrKeyNotFound):
		// another replica removed it, or an outcome rewrote it
	default:
		s.cfg.Logger.Warn("breaker record of a deleted task not removed; the sweeper purges it", "key", key, "err", err)
	}
}
