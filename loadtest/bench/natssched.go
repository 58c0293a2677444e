package bench

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/loadtest/stats"
)

// Message-scheduling headers of nats-server 2.12+ (server/stream.go:
// JSSchedulePattern, JSScheduleTarget; JSScheduler and JSScheduleNext are
// added by the server to every message it fires).
const (
	hdrSchedule       = "Nats-Schedule"
	hdrScheduleTarget = "Nats-Schedule-Target"
	hdrScheduler      = "Nats-Scheduler"
	hdrScheduleNext   = "Nats-Schedule-Next"
)

// runNATSScheduler drives nats-server's own message scheduler: one schedule
// message per task ("Nats-Schedule: @every <interval>") on a stream with
// AllowMsgSchedules, and a durable pull consumer on the target subjects
// whose workers GET the target and ack. This is what a user could build
// without flyball.
//
// The server anchors "@every" on the schedule message's store time rounded
// to the second (server/scheduler.go: parseMsgSchedule), so the schedules
// are published at a whole second P and first fire at P + interval.
func (r *runner) runNATSScheduler(ctx context.Context, tier Tier, sr *SystemResult) error {
	env, err := r.startNATS(ctx)
	if err != nil {
		return err
	}
	defer env.close()
	name, prefix := "BENCHSCHED", "benchsched"
	if r.cfg.Stack == StackExternal {
		name, prefix = name+"_"+r.tag, prefix+r.tag
	}
	stream, err := env.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:              name,
		Subjects:          []string{prefix + ".>"},
		Storage:           jetstream.FileStorage,
		Retention:         jetstream.WorkQueuePolicy,
		AllowMsgSchedules: true,
		PersistMode:       r.persistMode(),
	})
	if err != nil {
		return fmt.Errorf("create stream with AllowMsgSchedules: %w", err)
	}
	defer func() { _ = env.js.DeleteStream(context.WithoutCancel(ctx), name) }()
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       "bench",
		FilterSubject: prefix + ".t.>",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: max(1000, 2*tier.Tasks),
	})
	if err != nil {
		return err
	}

	ids := r.taskIDs(tier, SystemNATS, tier.Tasks)
	urls := make(map[string]string, len(ids))
	for i, id := range ids {
		urls[id] = r.urlFor(i, id)
	}
	client := newClient(r.cfg.Concurrency)
	defer client.CloseIdleConnections()
	w := &natsWorkers{
		interval: tier.Interval, urls: urls, client: client,
		subjPrefix: prefix + ".t.",
	}
	w.msgs = make(chan jetstream.Msg, r.cfg.Concurrency)
	callCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	for range r.cfg.Concurrency {
		w.wg.Go(func() { w.work(callCtx) })
	}
	fetchCtx, stopFetch := context.WithCancel(callCtx)
	var fetcher sync.WaitGroup
	fetcher.Go(func() { w.fetch(fetchCtx, cons, r.cfg.Concurrency) })
	defer func() {
		stopFetch()
		fetcher.Wait()
		close(w.msgs)
		w.wg.Wait()
	}()

	begin := time.Now()
	publishAt := begin.Add(time.Second).Truncate(time.Second).Add(time.Second)
	first := publishAt.Add(tier.Interval)
	// Start a little early so that every schedule is stored within half a
	// second of P even if publishing takes most of a second.
	if err := waitUntil(ctx, publishAt.Add(-450*time.Millisecond)); err != nil {
		return err
	}
	every := "@every " + tier.Interval.String()
	for _, id := range ids {
		m := &nats.Msg{Subject: prefix + ".s." + id, Header: nats.Header{}}
		m.Header.Set(hdrSchedule, every)
		m.Header.Set(hdrScheduleTarget, prefix+".t."+id)
		if err := publishAsync(env.js, m); err != nil {
			return fmt.Errorf("publish schedule: %w", err)
		}
	}
	if err := env.waitPublished(ctx); err != nil {
		return fmt.Errorf("publish schedules: %w", err)
	}
	sr.SetupSeconds = time.Since(begin).Seconds()
	grid, err := scheduleGrid(ctx, env.js, name, prefix+".s.", tier.Interval, len(ids))
	if err != nil {
		return err
	}
	shifted := 0
	for _, a := range grid.Anchors {
		if a != first.UnixNano() {
			shifted++
		}
	}
	if shifted > 0 {
		sr.Notes = append(sr.Notes, fmt.Sprintf(
			"%d schedules were stored more than 0.5s from %s: their grid (and the checks) are a second off the others'",
			shifted, publishAt.Format(time.RFC3339)))
	}
	sr.Window = r.window(first, tier.Interval)
	err = r.measure(ctx, measurement{sys: sr, grid: grid, pids: env.pids(r.cfg.StackPIDs)})
	sr.Notes = append(sr.Notes, fmt.Sprintf("consumer received %d fired messages (%d redeliveries, %d fetch errors); %d calls made",
		w.received.Load(), w.redelivered.Load(), w.fetchErrors.Load(), w.calls.Load()))
	if n := w.failures.Load(); n > 0 {
		sr.Notes = append(sr.Notes, fmt.Sprintf("%d calls or acks failed", n))
	}
	if n := w.noNext.Load(); n > 0 {
		sr.Notes = append(sr.Notes, fmt.Sprintf("%d fired messages had no usable %s header", n, hdrScheduleNext))
	}
	return err
}

// scheduleGrid reads back when the server stored each schedule message and
// derives each task's first slot the way the server does
// (server/scheduler.go parseMsgSchedule: store time rounded to the second,
// plus the interval). It does not look at any fired message.
func scheduleGrid(ctx context.Context, js jetstream.JetStream, stream, subjPrefix string, interval time.Duration, n int) (stats.Grid, error) {
	g := stats.Grid{Interval: interval, Anchors: make(map[string]int64, n)}
	// A work-queue stream allows only explicit-ack pull consumers. This one
	// never acks (an ack would delete the schedule) and is deleted after.
	cons, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
		FilterSubject:     subjPrefix + ">",
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           time.Hour,
		MaxAckPending:     -1,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return g, err
	}
	defer func() { _ = js.DeleteConsumer(context.WithoutCancel(ctx), stream, cons.CachedInfo().Name) }()
	for len(g.Anchors) < n {
		batch, err := cons.Fetch(min(n-len(g.Anchors), 1000), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return g, err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				return g, err
			}
			g.Anchors[strings.TrimPrefix(m.Subject(), subjPrefix)] = md.Timestamp.Round(time.Second).Add(interval).UnixNano()
		}
		if err := batch.Error(); err != nil {
			return g, err
		}
		if got == 0 {
			return g, fmt.Errorf("read %d of %d schedule messages back", len(g.Anchors), n)
		}
	}
	return g, nil
}

// natsWorkers make the calls for messages the scheduler fired.
type natsWorkers struct {
	puller
	interval    time.Duration
	urls        map[string]string
	client      *http.Client
	subjPrefix  string
	wg          sync.WaitGroup
	failures    atomic.Int64
	noNext      atomic.Int64
	calls       atomic.Int64
	redelivered atomic.Int64
}

func (w *natsWorkers) work(ctx context.Context) {
	for m := range w.msgs {
		w.handle(ctx, m)
	}
}

// handle calls the target for one fired message. The message says when the
// schedule fires next (Nats-Schedule-Next); the slot it was fired for is
// one interval earlier.
func (w *natsWorkers) handle(ctx context.Context, m jetstream.Msg) {
	if md, err := m.Metadata(); err == nil && md.NumDelivered > 1 {
		w.redelivered.Add(1)
	}
	id := strings.TrimPrefix(m.Subject(), w.subjPrefix)
	var scheduled time.Time
	if next, err := time.Parse(time.RFC3339Nano, m.Headers().Get(hdrScheduleNext)); err == nil {
		scheduled = next.Add(-w.interval)
	} else {
		w.noNext.Add(1)
	}
	url, ok := w.urls[id]
	if !ok {
		w.failures.Add(1)
		_ = m.Term()
		return
	}
	w.calls.Add(1)
	if err := get(ctx, w.client, url, id, scheduled); err != nil {
		w.failures.Add(1)
	}
	if err := m.Ack(); err != nil {
		w.failures.Add(1)
	}
}
