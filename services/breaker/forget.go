package breaker

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/kvcache"
)

// watchDeletes follows flyball-tasks and deletes a task-scoped breaker
// record nothing will write again:
//
//   - when a task is deleted, its record. A task re-created under the
//     same ID starts with a closed breaker whether or not it goes: the
//     record names the task it counts (taskCreatedAt), the executor does
//     not apply it to another task's calls (executor.BreakerRecord.OtherTask),
//     and the new task's first outcome starts from a closed breaker
//     (apply). A delete this watch misses (replayed, seen after a watch
//     ended, a CAS conflict, a failed read) leaves the record to the
//     sweeper, which deletes it once no spec has its ID, or the spec
//     names another createdAt;
//   - when a task's spec switches to breaker.scope: host, its own record:
//     the executor keys its outcomes host_<host> since, so an open record
//     turned half-open at retryAt and stayed so for good, counted in
//     flyball_breakers_open (FlyballBreakerOpen) and listed by the health
//     view. A switch back to scope task then starts from a closed breaker.
//
// The changes a watch replays (at start, or after a watch ended) are left
// to the sweeper's orphan removal, so a start does not write for every task
// ever deleted or host-scoped. Host-scoped records belong to no task: the
// sweeper deletes one once no task names its host.
func (s *Service) watchDeletes(ctx context.Context, tasks jetstream.KeyValue) error {
	live := false // the watch has delivered its snapshot; only the follower goroutine touches it
	f := kvcache.Follower{
		KV: tasks, Conn: s.cfg.JS.Conn(), Log: s.cfg.Logger,
		Apply: func(e jetstream.KeyValueEntry) {
			switch {
			case !live:
			case e.Operation() != jetstream.KeyValuePut:
				s.forget(ctx, e.Key(), nil)
			case executor.HostScoped(e.Value()):
				s.forget(ctx, e.Key(), tasks)
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

// forget deletes the breaker record under key, if there is one: the
// record of a deleted task (tasks nil), or of a task switched to scope
// host (tasks set: the spec is read again after the record, and the
// record is kept if the spec no longer says so, switched back to scope
// task meanwhile). Every replica tries; the delete is a compare-and-set on
// the record read, so a record written in between (an outcome of the
// deleted task still in flight, or of the task switched back) is left to
// the sweeper.
func (s *Service) forget(ctx context.Context, key string, tasks jetstream.KeyValue) {
	if r := s.records.Lookup(key); r.Known && !r.Found {
		return // no record: nothing to write
	}
	why := "deleted task"
	if tasks != nil {
		why = "task switched to breaker scope host"
	}
	ctx, cancel := context.WithTimeout(ctx, forgetTimeout)
	defer cancel()
	ent, err := s.breakers.Get(ctx, key)
	if jsutil.IsKeyMissing(err) {
		return
	}
	if err == nil && tasks != nil {
		var spec jetstream.KeyValueEntry
		if spec, err = tasks.Get(ctx, key); err == nil && !executor.HostScoped(spec.Value()) {
			return // switched back to scope task: the record is its breaker again
		}
		if jsutil.IsKeyMissing(err) {
			err = nil // deleted since: its record goes all the same
		}
	}
	if err == nil {
		err = s.breakers.Delete(ctx, key, jetstream.LastRevision(ent.Revision()))
	}
	switch {
	case err == nil:
		s.cfg.Logger.Info("breaker record of a "+why+" removed", "key", key)
	case jsutil.IsCASConflict(err), errors.Is(err, jetstream.ErrKeyNotFound):
		// another replica removed it, or an outcome rewrote it
	default:
		s.cfg.Logger.Warn("breaker record of a "+why+" not removed; the sweeper deletes it", "key", key, "err", err)
	}
}
