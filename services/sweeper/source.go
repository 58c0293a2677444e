package sweeper

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/query"
)

// Where a sweep gets the schedules from. Every run rewrites its task's
// schedule, so watching flyball-schedules costs one delivery per run, for
// a view that is read once per sweep. Reading every schedule at the sweep
// (a scan) costs one delivery per task per sweep instead. Which is cheaper
// depends on the load: 1,000 tasks at 1s write 15,000 schedules per 15 s
// sweep, 10,000 tasks at 1h write about 42. Before each sweep the sweeper
// compares the bucket's writes since the previous sweep with its number of
// keys, and scans while the writes are more than twice the keys; it goes
// back to watching once they fall under half (the gap keeps a load near
// the line from switching every sweep). Both give a sweep the same view:
// the latest schedule of every task.

// pickScheduleSource switches between watching and scanning by the
// bucket's write rate. Only the sweep goroutine calls it.
func (s *Service) pickScheduleSource(ctx context.Context) {
	info, err := s.schedStream.Info(ctx)
	if err != nil {
		s.cfg.Logger.Warn("schedule bucket info failed; keeping the schedule source", "err", err)
		return
	}
	seq, keys := info.State.LastSeq, info.State.Msgs
	prev, known := s.lastSeq, s.seqKnown
	s.lastSeq, s.seqKnown = seq, true
	if !known || seq < prev {
		// The first sweep, or the bucket was re-created: a scan reads
		// the new one, and the schedules watch notices the new stream
		// itself and replays it (kvcache.Follower, within 5 s).
		return
	}
	writes := seq - prev
	switch {
	case !s.scanning() && writes > 2*keys:
		s.stopWatch()
		s.stopWatch = nil
		s.cfg.Logger.Info("schedules change faster than sweeps: reading them at each sweep instead of watching every write",
			"writes", writes, "keys", keys)
	case s.scanning() && 2*writes < keys:
		s.view.mu.Lock()
		s.view.caughtUp = false // the watch's initial load decodes at once
		s.view.mu.Unlock()
		watchCtx, stop := context.WithCancel(ctx)
		if err := s.watchSchedules(watchCtx, func() {}); err != nil {
			stop()
			s.cfg.Logger.Warn("schedule watch failed; scanning again at the next sweep", "err", err)
			return
		}
		s.stopWatch = stop
		s.cfg.Logger.Info("schedules change slower than sweeps: watching them again", "writes", writes, "keys", keys)
	}
	scanning := 0.0
	if s.scanning() {
		scanning = 1
	}
	s.cfg.Metrics.SweeperScanning.Set(scanning)
}

// scanning reports whether the sweeper reads every schedule at each sweep:
// it does whenever it has no schedules watch.
func (s *Service) scanning() bool { return s.stopWatch == nil }

// scanSchedules replaces the view's schedules with every schedule stored
// now. A value that cannot be decoded, or names no decision, is left
// out, as in the watch (view.decode). On error the view keeps the previous scan.
func (s *Service) scanSchedules(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Interval)
	defer cancel()
	raw, err := query.Entries(ctx, s.schedules)
	if err != nil {
		return err
	}
	fresh := make(map[string]schedule, len(raw))
	for k, e := range raw {
		if st, ok := decodeSchedule(e.Value()); ok {
			fresh[k] = st
		}
	}
	v := s.view
	v.mu.Lock()
	defer v.mu.Unlock()
	v.schedules = fresh
	clear(v.stale)
	return nil
}

// watchSchedules mirrors flyball-schedules into the view until ctx ends;
// loaded runs once its initial load is done (or the watch ends first).
func (s *Service) watchSchedules(ctx context.Context, loaded func()) error {
	v := s.view
	return s.watch(ctx, s.schedules, func(e jetstream.KeyValueEntry) {
		if e.Operation() != jetstream.KeyValuePut {
			v.deleteSchedule(e.Key())
			return
		}
		v.putSchedule(e.Key(), e.Value())
	}, v.pruneSchedules, func() { v.caughtUp = true }, loaded)
}
