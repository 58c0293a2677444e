package sweeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sourcegraph/conc"

	"github.com/flyballhq/flyball/services/internal/query"
	"github.com/flyballhq/flyball/services/internal/repeatlog"
	"github.com/flyballhq/flyball/streams"
)

// backlogTimeout bounds each read of the backlog report, a JetStream API
// request answered in about a millisecond by a healthy server. The reads
// run side by side, so a slow server delays a sweep by at most this.
const backlogTimeout = 2 * time.Second

// backlogLogWindow is how often one failed read is logged again; the
// repeats between are counted in a line written by the first sweep after
// the window, or at stop (and every failure is counted in
// flyball_backlog_read_failures_total).
const backlogLogWindow = 5 * time.Minute

// reportBacklog reads the state of every durable consumer and the
// account's JetStream usage into the metrics: a backlog that grows while
// its service runs (or because none does) shows here before tasks grow
// stale. The sweeper reads every durable, not only its own, so a
// consumer whose service is down is still reported. The reads run side
// by side, each bounded by backlogTimeout, so one that goes unanswered (a
// user without the permission, a consumer leader election) delays the
// sweep by at most that and does not starve the others. A failed read
// keeps the series at their last reading and is counted; a durable that
// does not exist loses its series.
func (s *Service) reportBacklog(ctx context.Context) {
	var wg conc.WaitGroup
	for _, d := range s.durables {
		wg.Go(func() { s.readDurable(ctx, d) })
	}
	wg.Go(func() { s.readAccount(ctx) })
	wg.Wait()
	s.flushBacklogLogs(false)
}

// flushBacklogLogs writes the counts of repeated failed reads whose window
// is over (all of them, when all is set: at stop), so a count is not held
// until the next failure, which may come weeks later.
func (s *Service) flushBacklogLogs(all bool) {
	now := s.cfg.Now()
	for _, d := range s.durables {
		d.log.Flush(now, all)
	}
	s.accountLog.Flush(now, all)
}

// durable is a consumer the backlog report reads and the log of its
// failed reads. The log's lines, its count too, name the durable, so one
// durable's failures are not counted in another's line.
type durable struct {
	streams.Durable
	log *repeatlog.Log
}

// readDurable reads one durable's state into flyball_consumer_*.
func (s *Service) readDurable(parent context.Context, d durable) {
	ctx, cancel := context.WithTimeout(parent, backlogTimeout)
	defer cancel()
	m := s.cfg.Metrics
	b, err := query.ReadBacklog(ctx, s.cfg.JS, d.Durable)
	if err != nil {
		if parent.Err() != nil { // stopping: not a failure of the read
			return
		}
		m.BacklogReadFailures.WithLabelValues("consumer").Inc()
		if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			for _, g := range []*prometheus.GaugeVec{m.ConsumerPending, m.ConsumerAckPending, m.ConsumerMaxAckPending, m.ConsumerRedelivered} {
				g.DeleteLabelValues(d.Stream, d.Name)
			}
		}
		backlogWarn(s.cfg.Now(), d.log, "reading a durable consumer's state failed; its backlog metrics keep their last reading", err)
		return
	}
	m.ConsumerPending.WithLabelValues(d.Stream, d.Name).Set(float64(b.Pending))
	m.ConsumerAckPending.WithLabelValues(d.Stream, d.Name).Set(float64(b.AckPending))
	m.ConsumerMaxAckPending.WithLabelValues(d.Stream, d.Name).Set(float64(b.MaxAckPending))
	m.ConsumerRedelivered.WithLabelValues(d.Stream, d.Name).Set(float64(b.Redelivered))
}

// readAccount reads the account's JetStream usage and limits into
// flyball_jetstream_*_bytes. The account's usage counts every replica
// (nats-server sums each server's), so an R3 stream counts three times;
// flyball_jetstream_storage_bytes sums each stream's bytes once instead,
// at most what one server stores, the figure to compare with a server's
// max_file_store.
func (s *Service) readAccount(parent context.Context) {
	ctx, cancel := context.WithTimeout(parent, backlogTimeout)
	defer cancel()
	m := s.cfg.Metrics
	// Each reading is kept on its own: a user without $JS.API.STREAM.LIST
	// (permissions from before the per-stream figure) lost the account's
	// figures and limits with it, and FlyballJetStreamStorageHigh, reading
	// an absent series after a restart, could not fire.
	ai, err := s.cfg.JS.AccountInfo(ctx)
	if err == nil {
		for _, t := range []struct {
			name  string
			used  uint64
			limit int64
		}{{"file", ai.Store, ai.Limits.MaxStore}, {"memory", ai.Memory, ai.Limits.MaxMemory}} {
			m.JetStreamAccountStorage.WithLabelValues(t.name).Set(float64(t.used))
			if t.limit > 0 {
				m.JetStreamStorageLimit.WithLabelValues(t.name).Set(float64(t.limit))
			} else {
				m.JetStreamStorageLimit.DeleteLabelValues(t.name)
			}
		}
		var perStream map[string]uint64
		if perStream, err = oneCopyOfEachStream(ctx, s.cfg.JS); err == nil {
			for _, t := range []string{"file", "memory"} {
				m.JetStreamStorage.WithLabelValues(t).Set(float64(perStream[t]))
			}
			return
		}
		err = fmt.Errorf("list the streams (each stream's bytes once; the user needs $JS.API.STREAM.LIST): %w", err)
	}
	if parent.Err() != nil {
		return
	}
	m.BacklogReadFailures.WithLabelValues("account").Inc()
	backlogWarn(s.cfg.Now(), s.accountLog, "reading the account's JetStream usage failed; its storage metrics keep their last reading", err)
}

// oneCopyOfEachStream sums the bytes of every stream of the account once,
// by storage type (file, memory).
func oneCopyOfEachStream(ctx context.Context, js jetstream.JetStream) (map[string]uint64, error) {
	sum := map[string]uint64{}
	l := js.ListStreams(ctx)
	for si := range l.Info() {
		t := "file"
		if si.Config.Storage == jetstream.MemoryStorage {
			t = "memory"
		}
		sum[t] += si.State.Bytes
	}
	if err := l.Err(); err != nil {
		return nil, err
	}
	return sum, nil
}

// backlogWarn logs a failed backlog read to log, at most once per
// backlogLogWindow: a NATS outage fails every read of every sweep.
func backlogWarn(now time.Time, log *repeatlog.Log, msg string, err error) {
	log.Log(now, slog.LevelWarn, msg, "err", err)
}
