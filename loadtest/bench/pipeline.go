package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/streams"
)

// The sizes of flyball's three stored messages for a plain 1 s interval
// task, as the pipeline sends them: the dispatch's and the run event's
// CloudEvents, and the schedule's KV value. Measured on `flyball dev`
// (2026-11-27, 5ff4d7f) with `nats sub flyball.dispatch.<id> --raw`,
// `nats stream get RUNS --last-for flyball.run.succeeded.<id>` and `nats kv
// get flyball-schedules <id> --raw`: 458, 856 and 568 bytes.
const (
	pipeDispatchBytes = 460
	pipeRunBytes      = 860
	pipeScheduleBytes = 570
)

// Workers of the pipeline's stages: the executor's calls in flight are
// Config.Concurrency, like flyball dev's --concurrency; the governor's
// default --governor-workers is 16.
const pipeGovernorWorkers = 16

// PipelineCounts are what the pipeline system did, warm-up included.
type PipelineCounts struct {
	// Dispatched counts dispatches published (the timer's stage),
	// Refused included.
	Dispatched int64 `json:"dispatched"`
	// Calls counts target calls (the executor's stage).
	Calls int64 `json:"calls"`
	// RunEvents counts run events stored, each before its dispatch's ack.
	RunEvents int64 `json:"runEvents"`
	// ScheduleWrites counts compare-and-set writes to flyball-schedules
	// (the governor's stage).
	ScheduleWrites int64 `json:"scheduleWrites"`
	// BreakerAcks counts run events the breaker's consumer acked: it takes
	// failures and run.recovered, as flyball's breaker does, and every
	// call of the flow succeeds, so none.
	BreakerAcks int64 `json:"breakerAcks"`
	// Watched counts schedule writes the timer's watch received.
	Watched int64 `json:"watched"`
	// Refused counts dispatches DISPATCH refused because the task's
	// previous one was still pending (an overloaded executor stage).
	Refused int64 `json:"refused"`
	// Failures counts failed calls, publishes, writes and acks.
	Failures int64 `json:"failures"`
}

// String is a one-line summary for the markdown notes.
func (c *PipelineCounts) String() string {
	return fmt.Sprintf("stages, warm-up included: %d dispatched (%d refused: the task's previous one still pending), %d calls, %d run events, %d schedule writes, %d breaker acks, %d watched; %d failures",
		c.Dispatched, c.Refused, c.Calls, c.RunEvents, c.ScheduleWrites, c.BreakerAcks, c.Watched, c.Failures)
}

// pipeline is flyball's message flow with none of its logic: the floor's
// timers publish each slot's dispatch to DISPATCH; executor workers pull
// it, call the target, store the run event in RUNS and confirm the ack;
// governor workers pull the run event and write the task's schedule to
// flyball-schedules with a compare-and-set; the breaker's consumer acks
// what its filter gives it (failures and run.recovered: none, since every
// call succeeds and this flow sends no run.recovered, as flyball sends
// none for a settled breaker); a watch of flyball-schedules receives every write. The
// streams, consumers and buckets are flyball's own (streams.Ensure), the
// message sizes and headers flyball's. It is a plain implementation (a
// publish-ack wait per run event, no batching), not the cheapest possible:
// what it costs is what the flow's messages cost on the machine, and what
// flyball costs above it is its logic.
type pipeline struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	client *http.Client
	urls   map[string]string

	exec, gov puller

	dispatched, refused, calls, runEvents, writes, breakerAcks, watched, failures atomic.Int64
}

func (r *runner) runPipeline(ctx context.Context, tier Tier, sr *SystemResult) error {
	// Config.validate refuses it with an external stack: it creates
	// flyball's streams, consumers and buckets.
	env, err := r.startNATS(ctx)
	if err != nil {
		return err
	}
	defer env.close()
	if err := streams.Ensure(ctx, env.js, streams.WithAsyncPersist(r.cfg.AsyncPersist)); err != nil {
		return fmt.Errorf("create flyball's streams: %w", err)
	}
	// One connection for every stage, as flyball dev shares one.
	nc, err := env.connect("flyball-pipeline")
	if err != nil {
		return err
	}
	defer nc.Close()
	p := &pipeline{
		client: newClient(r.cfg.Concurrency),
		urls:   make(map[string]string, tier.Tasks),
	}
	defer p.client.CloseIdleConnections()
	p.js, err = jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(4096),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
			if streams.IsSubjectFull(err) {
				// DISPATCH holds one pending run per task: the slot before
				// is still waiting for an executor (flyball's timer counts
				// these as dispatch_total{result="pending"}).
				p.refused.Add(1)
				return
			}
			p.failures.Add(1)
		}))
	if err != nil {
		return err
	}
	if p.kv, err = p.js.KeyValue(ctx, streams.BucketSchedules); err != nil {
		return err
	}
	execCons, err := p.js.Consumer(ctx, streams.StreamDispatch, streams.ConsumerExecutor)
	if err != nil {
		return err
	}
	govCons, err := p.js.Consumer(ctx, streams.StreamRuns, streams.ConsumerGovernor)
	if err != nil {
		return err
	}
	brkCons, err := p.js.Consumer(ctx, streams.StreamRuns, streams.ConsumerBreaker)
	if err != nil {
		return err
	}

	ids := r.taskIDs(tier, SystemPipeline, tier.Tasks)
	for i, id := range ids {
		p.urls[id] = r.urlFor(i, id)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	watch, err := p.kv.WatchAll(runCtx, jetstream.UpdatesOnly())
	if err != nil {
		return err
	}
	defer func() { _ = watch.Stop() }()
	var watcher sync.WaitGroup
	watcher.Go(func() {
		for e := range watch.Updates() {
			if e != nil {
				p.watched.Add(1)
			}
		}
	})
	brk, err := brkCons.Consume(func(m jetstream.Msg) {
		if m.Ack() != nil {
			p.failures.Add(1)
			return
		}
		p.breakerAcks.Add(1)
	}, jetstream.PullExpiry(5*time.Second))
	if err != nil {
		return err
	}
	defer brk.Stop()

	stopStages := p.startStages(runCtx, execCons, govCons, r.cfg.Concurrency)
	timers := &floor{interval: tier.Interval, do: p.dispatch}
	begin := time.Now()
	first := begin.Add(time.Second).Truncate(time.Second).Add(time.Second)
	timers.start(runCtx, ids, r.urlFor, first)
	sr.SetupSeconds = time.Since(begin).Seconds()
	sr.Window = r.window(first, tier.Interval)
	probe := &breakdownProbe{js: env.js, srv: env.srv, noRunEvents: true}
	err = r.measure(ctx, measurement{
		sys: sr, grid: uniformGrid(ids, first, tier.Interval), pids: env.pids(r.cfg.StackPIDs),
		onOpen: probe.open, onClose: probe.close,
		profile: withPart(r.profilePath(r.cfg.CPUProfile, tier), SystemPipeline),
		heap:    withPart(r.profilePath(r.cfg.AllocProfile, tier), SystemPipeline),
	})
	timers.stop()
	stopStages()
	if err == nil {
		sr.Breakdown = probe.finish(ctx, sr)
	}
	sr.Pipeline = &PipelineCounts{
		Dispatched: p.dispatched.Load(), Calls: p.calls.Load(), RunEvents: p.runEvents.Load(),
		ScheduleWrites: p.writes.Load(), BreakerAcks: p.breakerAcks.Load(), Watched: p.watched.Load(),
		Refused: p.refused.Load(), Failures: p.failures.Load(),
	}
	sr.Notes = append(sr.Notes, sr.Pipeline.String())
	if n := p.exec.fetchErrors.Load() + p.gov.fetchErrors.Load(); n > 0 {
		sr.Notes = append(sr.Notes, fmt.Sprintf("%d fetches failed", n))
	}
	return err
}

// startStages starts the executor's and the governor's pullers and
// workers; the returned func stops them and waits.
func (p *pipeline) startStages(ctx context.Context, execCons, govCons jetstream.Consumer, concurrency int) (stop func()) {
	p.exec.msgs = make(chan jetstream.Msg, concurrency)
	// The governor's workers are sharded by task, as flyball's are: a
	// task's run events are written in order, each on the revision the
	// one before it wrote, which its worker keeps (as flyball's state
	// cache does).
	shards := make([]chan jetstream.Msg, pipeGovernorWorkers)
	for i := range shards {
		shards[i] = make(chan jetstream.Msg, 64)
	}
	seed := maphash.MakeSeed()
	p.gov.route = func(m jetstream.Msg) chan<- jetstream.Msg {
		return shards[maphash.String(seed, taskOf(m.Subject()))%uint64(len(shards))]
	}
	fetchCtx, stopFetch := context.WithCancel(ctx)
	var fetchers, workers sync.WaitGroup
	fetchers.Go(func() { p.exec.fetch(fetchCtx, execCons, concurrency) })
	// Pulls and queues sized as flyball's sharded consumers size them
	// (services/internal/jsutil.ConsumeWorkers): 2 × workers per pull, 64
	// per shard.
	fetchers.Go(func() { p.gov.fetch(fetchCtx, govCons, 2*pipeGovernorWorkers) })
	for range concurrency {
		workers.Go(func() {
			for m := range p.exec.msgs {
				p.execute(ctx, m)
			}
		})
	}
	for _, shard := range shards {
		workers.Go(func() {
			revs := map[string]uint64{}
			for m := range shard {
				p.govern(ctx, m, revs)
			}
		})
	}
	return func() {
		stopFetch()
		fetchers.Wait()
		close(p.exec.msgs)
		for _, shard := range shards {
			close(shard)
		}
		workers.Wait()
	}
}

// payload is size bytes: the decimal slot (Unix ns), then padding.
func payload(slot int64, size int) []byte {
	b := strconv.AppendInt(make([]byte, 0, size), slot, 10)
	for len(b) < size {
		b = append(b, '.')
	}
	return b
}

// taskOf is the task ID of a dispatch or run subject: its last token.
func taskOf(subject string) string { return subject[strings.LastIndexByte(subject, '.')+1:] }

// slotOf reads the slot back from a payload.
func slotOf(data []byte) (int64, error) {
	digits, _, ok := bytes.Cut(data, []byte{'.'})
	if !ok {
		return 0, errors.New("no slot in the payload")
	}
	return strconv.ParseInt(string(digits), 10, 64)
}

// dispatch is the timer's stage: publish the slot's dispatch, with the
// dedup ID flyball's timer gives it.
func (p *pipeline) dispatch(_ context.Context, t *floorTask, slot int64) {
	m := &nats.Msg{Subject: events.DispatchSubject(t.id), Header: nats.Header{}, Data: payload(slot, pipeDispatchBytes)}
	m.Header.Set(jetstream.MsgIDHeader, events.DispatchID(t.id, time.Unix(0, slot)))
	m.Header.Set("Content-Type", events.ContentTypeStructured)
	if _, err := p.js.PublishMsgAsync(m, stall); err != nil {
		p.failures.Add(1)
		return
	}
	p.dispatched.Add(1)
}

// execute is the executor's stage for one dispatch: call the target, store
// the run event, confirm the ack.
func (p *pipeline) execute(ctx context.Context, m jetstream.Msg) {
	id := taskOf(m.Subject())
	slot, err := slotOf(m.Data())
	url, ok := p.urls[id]
	if err != nil || !ok {
		p.failures.Add(1)
		_ = m.Term()
		return
	}
	p.calls.Add(1)
	outcome := events.OutcomeSucceeded
	if err := get(ctx, p.client, url, id, time.Unix(0, slot)); err != nil {
		p.failures.Add(1)
		outcome = events.OutcomeFailed
	}
	run := &nats.Msg{Subject: events.RunSubject(outcome, id), Header: nats.Header{}, Data: payload(slot, pipeRunBytes)}
	// The executor's event id: the dispatch's, the attempt, the outcome.
	run.Header.Set(jetstream.MsgIDHeader, m.Headers().Get(jetstream.MsgIDHeader)+":1:"+string(outcome))
	run.Header.Set("Content-Type", events.ContentTypeStructured)
	run.Header.Set(events.HeaderBreakerKey, id)
	f, err := p.js.PublishMsgAsync(run, stall)
	if err == nil {
		select {
		case <-f.Ok():
		case err = <-f.Err():
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if err != nil {
		p.failures.Add(1)
		_ = m.Nak()
		return
	}
	p.runEvents.Add(1)
	if err := m.DoubleAck(ctx); err != nil {
		p.failures.Add(1)
	}
}

// govern is the governor's stage for one run event: write the task's next
// schedule with a compare-and-set on its last revision (revs: the
// worker's, by task), then ack.
func (p *pipeline) govern(ctx context.Context, m jetstream.Msg, revs map[string]uint64) {
	id := taskOf(m.Subject())
	slot, err := slotOf(m.Data())
	if err != nil {
		p.failures.Add(1)
		_ = m.Term()
		return
	}
	rev, err := p.kv.Update(ctx, id, payload(slot, pipeScheduleBytes), revs[id])
	if err != nil {
		// A lost reply: learn the revision, and the redelivery writes.
		p.failures.Add(1)
		if e, err := p.kv.Get(ctx, id); err == nil {
			revs[id] = e.Revision()
		}
		_ = m.Nak()
		return
	}
	revs[id] = rev
	p.writes.Add(1)
	if err := m.Ack(); err != nil {
		p.failures.Add(1)
	}
}
