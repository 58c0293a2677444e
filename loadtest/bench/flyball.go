package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/stack"
	"github.com/flyballhq/flyball/streams"
)

// benchServices is every service but the API, which the benchmark does not
// call.
func benchServices(except ...string) []string {
	return slices.DeleteFunc(slices.Clone(stack.All), func(s string) bool {
		return s == "api" || slices.Contains(except, s)
	})
}

// inprocStack is flyball running inside this process on env's server.
type inprocStack struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	st      *stack.Stack
	stopped sync.Once
}

// startStack connects the stack's own connection, ensures the streams and
// starts services (all but the API when empty).
func (r *runner) startStack(ctx context.Context, env *natsEnv, services ...string) (*inprocStack, error) {
	return r.startStackWith(ctx, env, nil, services...)
}

// startStackWith is startStack with tune applied to the stack's config
// (when not nil) before it starts.
func (r *runner) startStackWith(ctx context.Context, env *natsEnv, tune func(*stack.Config), services ...string) (*inprocStack, error) {
	if len(services) == 0 {
		services = benchServices()
	}
	nc, err := env.connect("flyball-stack")
	if err != nil {
		return nil, err
	}
	js, err := stack.NewJetStream(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := streams.Ensure(ectx, js, streams.WithAsyncPersist(r.cfg.AsyncPersist)); err != nil {
		nc.Close()
		return nil, err
	}
	cfg := stack.Config{
		JS:          js,
		Services:    services,
		Version:     "bench",
		Logger:      r.cfg.StackLogger,
		Guard:       executor.Guard{AllowLoopback: true},
		Concurrency: r.cfg.Concurrency,
		// The benchmark's target is one host (or a few): a per-host limit
		// below the concurrency would cap flyball where the floor and the
		// nats-server baseline have no such cap.
		PerHost:   r.cfg.Concurrency,
		TimerLead: r.cfg.TimerLead,
	}
	if tune != nil {
		tune(&cfg)
	}
	st, err := stack.Start(ctx, cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &inprocStack{nc: nc, js: js, st: st}, nil
}

// stop stops the services and closes the connection, once: a later call
// does nothing.
func (s *inprocStack) stop() {
	s.stopped.Do(func() {
		s.st.Stop()
		s.nc.Close()
	})
}

func (r *runner) runFlyball(ctx context.Context, tier Tier, sr *SystemResult) error {
	start := r.startNATS
	if r.cfg.Stack == StackProcess {
		start = r.startDev
	}
	env, err := start(ctx)
	if err != nil {
		return err
	}
	defer env.close()
	probe := &breakdownProbe{js: env.js}
	switch r.cfg.Stack {
	case StackInProcess:
		st, err := r.startStack(ctx, env)
		if err != nil {
			return err
		}
		defer st.stop()
		probe.gatherer = st.st.Metrics().Registry
		probe.srv = env.srv
	case StackProcess:
		probe.gatherer = scrape(env.metricsURL)
	}
	ids := r.taskIDs(tier, SystemFlyball, tier.Tasks)
	begin := time.Now()
	first := begin.Add(r.lead(tier.Tasks)).Truncate(time.Second).Add(time.Second)
	off, err := r.createTasks(ctx, env, ids, func(i int, id string) events.TaskSpec {
		return r.taskSpec(i, id, tier.Interval, first)
	}, first.Add(time.Minute))
	sr.SetupSeconds = time.Since(begin).Seconds()
	sr.AcceptRate = float64(len(ids)) / sr.SetupSeconds
	if r.cfg.Stack == StackExternal {
		defer r.deleteTasks(context.WithoutCancel(ctx), env, ids)
	}
	if err != nil {
		return err
	}
	sr.OffStart = off
	if off > 0 {
		sr.Notes = append(sr.Notes, fmt.Sprintf(
			"%d tasks were accepted after their startAt and run off the grid: raise --lead or lower --create-rate", off))
	}
	if late := time.Since(first); late > 0 {
		sr.Notes = append(sr.Notes, fmt.Sprintf("task creation finished %s after the first slot", late.Round(time.Millisecond)))
	}
	sr.Window = r.window(first, tier.Interval)
	err = r.measure(ctx, measurement{
		sys:     sr,
		grid:    uniformGrid(ids, first, tier.Interval),
		pids:    env.pids(r.cfg.StackPIDs),
		notSelf: env.child != nil,
		prof:    env.profiler(ctx),
		profile: r.profilePath(r.cfg.CPUProfile, tier),
		heap:    r.profilePath(r.cfg.AllocProfile, tier),
		onOpen:  probe.open,
		onClose: probe.close,
	})
	if err != nil {
		return err
	}
	sr.Breakdown = probe.finish(ctx, sr)
	return nil
}

// taskSpec is the benchmark's task: GET the target every interval from
// first on, with no jitter.
func (r *runner) taskSpec(i int, id string, interval time.Duration, first time.Time) events.TaskSpec {
	at := first.UTC()
	return events.TaskSpec{
		ID:       id,
		Target:   events.Target{HTTP: &events.HTTPTarget{URL: r.urlFor(i, id)}},
		Schedule: events.Schedule{Interval: events.Duration(interval)},
		StartAt:  &at,
	}
}

// stall lets an async publish wait up to a minute for room when the window
// of pending acks is full.
var stall = jetstream.WithStallWait(time.Minute)

// publishAsync publishes m without waiting for its ack.
func publishAsync(js jetstream.JetStream, m *nats.Msg) error {
	_, err := js.PublishMsgAsync(m, stall)
	return err
}

// createTasks publishes task.created for every id (with the spec that spec
// returns) asynchronously and waits, until deadline at most, for the
// governor to accept all of them. It returns how many were accepted with a
// first run other than their startAt.
func (r *runner) createTasks(ctx context.Context, env *natsEnv, ids []string, spec func(i int, id string) events.TaskSpec, deadline time.Time) (int, error) {
	var (
		mu       sync.Mutex
		want     = make(map[string]time.Time, len(ids))
		off      int
		rejected string
		done     = make(chan struct{})
	)
	specs := make([]events.TaskSpec, len(ids))
	for i, id := range ids {
		specs[i] = spec(i, id)
		want[id] = *specs[i].StartAt
	}
	acc, err := env.nc.Subscribe(events.TaskSubject(events.VerbAccepted, "*"), func(m *nats.Msg) {
		id := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		mu.Lock()
		defer mu.Unlock()
		first, ok := want[id]
		if !ok {
			return
		}
		delete(want, id)
		var a events.TaskAccepted
		e, err := events.Decode(m.Header, m.Data)
		if err == nil {
			err = events.DecodeData(e, &a)
		}
		if err != nil || a.NextRunAt == nil || !a.NextRunAt.Equal(first) {
			off++
		}
		if len(want) == 0 {
			close(done)
		}
	})
	if err != nil {
		return 0, err
	}
	defer func() { _ = acc.Unsubscribe() }()
	rej, err := env.nc.Subscribe(events.TaskSubject(events.VerbRejected, "*"), func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if rejected == "" {
			rejected = string(m.Data)
		}
	})
	if err != nil {
		return 0, err
	}
	defer func() { _ = rej.Unsubscribe() }()
	for _, s := range []*nats.Subscription{acc, rej} {
		if err := s.SetPendingLimits(-1, -1); err != nil {
			return 0, err
		}
	}
	if err := env.nc.Flush(); err != nil {
		return 0, err
	}
	source := "loadtest/flyball-bench"
	now := time.Now().UTC()
	for i, id := range ids {
		eventID := "bench-" + r.tag + "-create-" + id
		body, err := events.Marshal(events.TypeTaskCreated, source, id, specs[i], now, eventID)
		if err != nil {
			return 0, err
		}
		m := &nats.Msg{Subject: events.TaskSubject(events.VerbCreated, id), Data: body, Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, eventID)
		m.Header.Set("Content-Type", events.ContentTypeStructured)
		if err := publishAsync(env.js, m); err != nil {
			return 0, fmt.Errorf("publish task.created: %w", err)
		}
	}
	if err := env.waitPublished(ctx); err != nil {
		return 0, fmt.Errorf("publish task.created: %w", err)
	}
	timeout := time.NewTimer(time.Until(deadline))
	defer timeout.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			mu.Lock()
			defer mu.Unlock()
			return off, nil
		case <-tick.C:
			mu.Lock()
			rj := rejected
			mu.Unlock()
			if rj != "" {
				return 0, fmt.Errorf("governor rejected a task: %s", truncate(rj, 400))
			}
		case <-timeout.C:
			mu.Lock()
			left := len(want)
			mu.Unlock()
			return 0, fmt.Errorf("governor accepted %d of %d tasks before the deadline", len(ids)-left, len(ids))
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// deleteTasks publishes task.deleted for every id (external stacks only,
// so the next tier starts clean).
func (r *runner) deleteTasks(ctx context.Context, env *natsEnv, ids []string) {
	now := time.Now().UTC()
	for _, id := range ids {
		eventID := "bench-" + r.tag + "-delete-" + id
		body, err := events.Marshal(events.TypeTaskDeleted, "loadtest/flyball-bench", id, events.TaskRef{ID: id}, now, eventID)
		if err != nil {
			continue
		}
		m := &nats.Msg{Subject: events.TaskSubject(events.VerbDeleted, id), Data: body, Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, eventID)
		m.Header.Set("Content-Type", events.ContentTypeStructured)
		if err := publishAsync(env.js, m); err != nil {
			r.log.Warn("delete task", "task", id, "err", err)
			return
		}
	}
	if err := env.waitPublished(ctx); err != nil {
		r.log.Warn("delete tasks", "err", err)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
