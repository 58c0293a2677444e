package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc/pool"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/lifecycle"
	"github.com/flyballhq/flyball/streams"
)

// Service is the executor service.
type Service struct {
	lifecycle.Base
	cfg       Config
	log       *slog.Logger
	source    string
	client    *http.Client
	tasks     jetstream.KeyValue
	schedules jetstream.KeyValue
	breakers  jetstream.KeyValue
	attempts  jetstream.KeyValue
	work      *pool.Pool
	workDone  chan struct{} // closed once the pool's single Wait returns
	// maxDeliver is the consumer's MaxDeliver: a transient failure on the
	// last possible delivery is final, because no redelivery can follow.
	maxDeliver int

	hostMu sync.Mutex
	hosts  map[string]chan struct{}
}

// New validates cfg and returns an executor ready to Start.
func New(cfg Config) (*Service, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	return &Service{
		cfg:    cfg,
		log:    cfg.Logger.With("service", "executor"),
		source: jsutil.Source("executor", cfg.Instance),
		client: newHTTPClient(&cfg.Guard),
		hosts:  make(map[string]chan struct{}),
	}, nil
}

// Start binds the KV buckets and starts consuming DISPATCH.
func (s *Service) Start(ctx context.Context) error {
	runCtx, err := s.Begin(ctx)
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	for _, b := range []struct {
		name string
		kv   *jetstream.KeyValue
	}{
		{streams.BucketTasks, &s.tasks},
		{streams.BucketSchedules, &s.schedules},
		{streams.BucketBreakers, &s.breakers},
		{streams.BucketAttempts, &s.attempts},
	} {
		if *b.kv, err = s.cfg.JS.KeyValue(ctx, b.name); err != nil {
			return fmt.Errorf("executor: bind %s: %w", b.name, err)
		}
	}
	cons, err := s.cfg.JS.Consumer(ctx, streams.StreamDispatch, streams.ConsumerExecutor)
	if err != nil {
		return fmt.Errorf("executor: consumer %s/%s: %w", streams.StreamDispatch, streams.ConsumerExecutor, err)
	}
	s.maxDeliver = cons.CachedInfo().Config.MaxDeliver
	if ackWait := cons.CachedInfo().Config.AckWait; ackWait > 0 {
		s.cfg.AckWait = ackWait
	}
	s.work = pool.New().WithMaxGoroutines(s.cfg.Concurrency)
	cc, err := jsutil.Consume(ctx, s.cfg.JS, streams.StreamDispatch, streams.ConsumerExecutor, s.log,
		func(m jetstream.Msg) { s.work.Go(func() { s.handle(runCtx, m) }) },
		jetstream.PullMaxMessages(s.cfg.Concurrency))
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	s.Track(cc)
	s.OnDrained(s.waitInflight)
	s.workDone = make(chan struct{})
	s.OnStop(func() {
		<-s.workDone
		s.client.CloseIdleConnections()
	})
	return nil
}

// waitInflight gives in-flight calls up to ShutdownGrace to finish before
// Stop cancels them.
func (s *Service) waitInflight() {
	go func() { s.work.Wait(); close(s.workDone) }() // conc pools allow one Wait
	t := time.NewTimer(s.cfg.ShutdownGrace)
	defer t.Stop()
	select {
	case <-s.workDone:
	case <-t.C:
		s.log.Warn("shutdown grace expired; cancelling in-flight calls (they will be redelivered)", "grace", s.cfg.ShutdownGrace)
	}
}

// handle processes one dispatch delivery.
func (s *Service) handle(ctx context.Context, m jetstream.Msg) {
	e, err := events.Decode(m.Headers(), m.Data())
	if err != nil {
		jsutil.Terminate(m, "malformed event: "+err.Error(), s.cfg.Metrics, s.log)
		return
	}
	var d events.Dispatch
	if err := events.DecodeData(e, &d); err != nil {
		jsutil.Terminate(m, "malformed dispatch: "+err.Error(), s.cfg.Metrics, s.log)
		return
	}
	if !events.ValidToken(d.TaskID) || events.DispatchSubject(d.TaskID) != m.Subject() || d.DispatchID == "" {
		jsutil.Terminate(m, "malformed dispatch: taskId/dispatchId do not match the subject", s.cfg.Metrics, s.log)
		return
	}
	md, err := m.Metadata()
	if err != nil {
		jsutil.Terminate(m, "not a JetStream message: "+err.Error(), s.cfg.Metrics, s.log)
		return
	}
	spec, st, err := s.lookup(ctx, d.TaskID)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
		s.skip(ctx, m, &d, "task deleted")
		return
	case err != nil:
		s.nak(m, time.Second, err)
		return
	}
	if st.Paused && (st.PausedUntil.IsZero() || st.PausedUntil.After(d.ScheduledAt)) {
		s.skip(ctx, m, &d, "task paused")
		return
	}
	why := explain(&d, &st)
	if wait := s.breakerWait(ctx, spec); wait > 0 {
		s.cfg.Metrics.RunsTotal.WithLabelValues("deferred").Inc()
		s.log.Debug("breaker open: deferring", "task", d.TaskID, "wait", wait)
		s.nak(m, wait, nil)
		return
	}
	s.execute(ctx, m, md, spec, &d, why)
}

// decisionRef is the governor decision behind a dispatch.
type decisionRef struct {
	source string
	trail  []string
}

// explain returns the decision that scheduled d: the stored trail when the
// schedule still names d's slot, else just the source the timer recorded.
func explain(d *events.Dispatch, st *gov.State) decisionRef {
	if st.NextRunAt.Equal(d.ScheduledAt) {
		return decisionRef{source: string(st.Source), trail: st.Trail}
	}
	return decisionRef{source: d.Source}
}

func (s *Service) lookup(ctx context.Context, id string) (*events.TaskSpec, gov.State, error) {
	var spec events.TaskSpec
	var st gov.State
	ent, err := s.tasks.Get(ctx, id)
	if err != nil {
		return nil, st, err
	}
	if err := json.Unmarshal(ent.Value(), &spec); err != nil {
		return nil, st, fmt.Errorf("stored spec %s: %w", id, err)
	}
	if ent, err := s.schedules.Get(ctx, id); err == nil {
		_ = json.Unmarshal(ent.Value(), &st)
	}
	return &spec, st, nil
}

// BreakerKey is the flyball-breakers key for a task: its ID, or with scope
// "host" the target host (dots replaced, as KV keys are subject tokens).
func BreakerKey(spec *events.TaskSpec) string {
	if spec.Breaker != nil && spec.Breaker.Scope == "host" && spec.Target.HTTP != nil {
		if u, err := url.Parse(spec.Target.HTTP.URL); err == nil && u.Host != "" {
			return "host_" + events.SanitizeToken(u.Host)
		}
	}
	return spec.ID
}

// BreakerRecord is the value stored in KV flyball-breakers.
type BreakerRecord struct {
	Key       string              `json:"key"`
	State     events.BreakerState `json:"state"`
	Failures  int                 `json:"failures"`
	OpenDelay events.Duration     `json:"openDelay,omitempty"`
	RetryAt   time.Time           `json:"retryAt,omitzero"`
	UpdatedAt time.Time           `json:"updatedAt"`
}

// breakerWait returns how long to defer while the breaker is open; zero
// means call the target (closed, half-open, or open past retryAt: the probe).
func (s *Service) breakerWait(ctx context.Context, spec *events.TaskSpec) time.Duration {
	ent, err := s.breakers.Get(ctx, BreakerKey(spec))
	if err != nil {
		return 0
	}
	var b BreakerRecord
	if json.Unmarshal(ent.Value(), &b) != nil || b.State != events.BreakerOpen {
		return 0
	}
	return time.Until(b.RetryAt)
}

func (s *Service) skip(ctx context.Context, m jetstream.Msg, d *events.Dispatch, reason string) {
	run := events.Run{DispatchID: d.DispatchID, TaskID: d.TaskID, ScheduledAt: d.ScheduledAt, Reason: reason, FinishedAt: time.Now().UTC()}
	if err := s.publishRun(ctx, events.OutcomeSkipped, &run, d.DispatchID+":skipped"); err != nil {
		s.nak(m, time.Second, err)
		return
	}
	s.cfg.Metrics.RunsTotal.WithLabelValues("skipped").Inc()
	s.ack(m)
}

// execute performs one attempt and settles the message.
func (s *Service) execute(ctx context.Context, m jetstream.Msg, md *jetstream.MsgMetadata, spec *events.TaskSpec, d *events.Dispatch, why decisionRef) {
	attempt, err := s.attemptNumber(ctx, md, d)
	if err != nil {
		s.nak(m, time.Second, err)
		return
	}
	release := s.acquireHost(ctx, spec)
	defer release()
	stopProgress := s.keepAlive(m, spec)
	if s.cfg.EmitStarted {
		started := events.Run{
			DispatchID: d.DispatchID, TaskID: d.TaskID, ScheduledAt: d.ScheduledAt, Attempt: attempt,
			StartedAt: time.Now().UTC(), Source: why.source,
		}
		if err := s.publishRun(ctx, events.OutcomeStarted, &started, fmt.Sprintf("%s:%d:started", d.DispatchID, attempt)); err != nil {
			s.log.Warn("run.started not published", "task", d.TaskID, "err", err)
		}
	}
	s.cfg.Metrics.Inflight.Inc()
	start := time.Now()
	var res *result
	if spec.Target.HTTP != nil {
		res = s.callHTTP(ctx, spec.Target.HTTP, d, attempt)
	} else {
		res = s.callNATS(ctx, spec.Target.NATS, d, attempt)
	}
	finish := time.Now()
	s.cfg.Metrics.Inflight.Dec()
	stopProgress()
	s.cfg.Metrics.RunDuration.Observe(finish.Sub(start).Seconds())
	if ctx.Err() != nil {
		// Cancelled mid-call by shutdown: hand the dispatch straight back so
		// another executor runs it, without counting the attempt. Had this
		// process died instead, JetStream would redeliver after AckWait.
		if err := m.Nak(); err != nil {
			s.log.Warn("nak on shutdown failed; redelivery after AckWait", "task", d.TaskID, "err", err)
		}
		return
	}
	run := events.Run{
		DispatchID: d.DispatchID, TaskID: d.TaskID, ScheduledAt: d.ScheduledAt, Attempt: attempt,
		StartedAt: start.UTC(), FinishedAt: finish.UTC(), Duration: events.Duration(finish.Sub(start)),
		Status: res.status, Body: res.body, BodyTruncated: res.truncated, Fingerprint: res.fingerprint,
		Request: res.request, Source: why.source, Trail: why.trail,
	}
	msgID := fmt.Sprintf("%s:%d", d.DispatchID, attempt)
	if res.ok() {
		if err := s.publishRun(ctx, events.OutcomeSucceeded, &run, msgID+":succeeded"); err != nil {
			s.nak(m, time.Second, err)
			return
		}
		s.cfg.Metrics.RunsTotal.WithLabelValues("succeeded").Inc()
		s.ack(m)
		s.forgetAttempts(ctx, d, attempt)
		return
	}
	retry := spec.Retry
	run.Error = res.err.Error()
	run.ErrorKind = events.ErrorTransient
	if res.permanent {
		run.ErrorKind = events.ErrorPermanent
	}
	lastDelivery := s.maxDeliver > 0 && int(md.NumDelivered) >= s.maxDeliver
	if res.permanent || attempt >= retry.MaxAttempts || lastDelivery {
		run.Final = true
		run.Dispatch = d
		if err := s.publishRun(ctx, events.OutcomeFailed, &run, msgID+":failed"); err != nil {
			s.nak(m, time.Second, err)
			return
		}
		s.cfg.Metrics.RunsTotal.WithLabelValues("failed").Inc()
		if err := m.TermWithReason(fmt.Sprintf("final failure after %d attempt(s): %s", attempt, truncate(run.Error, 150))); err != nil {
			s.log.Warn("term failed", "task", d.TaskID, "err", err)
		}
		s.forgetAttempts(ctx, d, attempt)
		return
	}
	delay := Backoff(retry, attempt, d.DispatchID)
	if res.retryAfter > 0 {
		delay = min(max(res.retryAfter, delay), retry.MaxDelay.D())
	}
	run.RetryIn = events.Duration(delay)
	if err := s.recordAttempt(ctx, d, attempt); err != nil {
		// Without the record the retry would repeat this attempt number:
		// better to retry the bookkeeping than to overrun maxAttempts.
		s.nak(m, time.Second, err)
		return
	}
	if err := s.publishRun(ctx, events.OutcomeFailed, &run, msgID+":failed"); err != nil {
		s.nak(m, time.Second, err)
		return
	}
	s.cfg.Metrics.RunsTotal.WithLabelValues("failed").Inc()
	s.cfg.Metrics.RetriesTotal.Inc()
	s.nak(m, delay, nil)
}

// Backoff is the delay before attempt+1: initialDelay × multiplier^(attempt-1),
// capped at maxDelay, with ± jitter drawn deterministically from the
// dispatch ID and attempt (so every replica computes the same delay).
func Backoff(r *events.Retry, attempt int, dispatchID string) time.Duration {
	base := float64(r.InitialDelay.D()) * math.Pow(r.Multiplier, float64(max(attempt-1, 0)))
	base = math.Min(base, float64(r.MaxDelay.D()))
	j := 0.0
	if r.Jitter != nil {
		j = *r.Jitter
	}
	if j > 0 {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s:%d", dispatchID, attempt)
		u := float64(h.Sum64()%1_000_000) / 1_000_000 // [0,1)
		base *= 1 + j*(2*u-1)
	}
	return time.Duration(math.Max(base, float64(100*time.Millisecond)))
}

func (s *Service) publishRun(ctx context.Context, o events.Outcome, run *events.Run, msgID string) error {
	return jsutil.PublishEvent(ctx, s.cfg.JS, events.RunSubject(o, run.TaskID), msgID, o.Type(), s.source, run.TaskID, run, time.Now().UTC())
}

func (s *Service) ack(m jetstream.Msg) {
	if err := m.Ack(); err != nil {
		s.log.Warn("ack failed; the run may be redelivered", "subject", m.Subject(), "err", err)
	}
}

func (s *Service) nak(m jetstream.Msg, delay time.Duration, cause error) {
	if cause != nil {
		s.log.Warn("transient failure; redelivering", "subject", m.Subject(), "delay", delay, "err", cause)
	}
	if err := m.NakWithDelay(delay); err != nil {
		s.log.Warn("nak failed", "subject", m.Subject(), "err", err)
	}
}

// keepAlive sends InProgress every AckWait/2 while a call that may outlast
// half the AckWait is running.
func (s *Service) keepAlive(m jetstream.Msg, spec *events.TaskSpec) func() {
	timeout := events.DefaultNATSTimeout
	if spec.Target.HTTP != nil {
		timeout = spec.Target.HTTP.Timeout.D()
	} else if spec.Target.NATS != nil {
		timeout = spec.Target.NATS.Timeout.D()
	}
	if timeout < s.cfg.AckWait/2 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(s.cfg.AckWait / 2)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = m.InProgress()
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func (s *Service) acquireHost(ctx context.Context, spec *events.TaskSpec) func() {
	host := ""
	if spec.Target.HTTP != nil {
		if u, err := url.Parse(spec.Target.HTTP.URL); err == nil {
			host = u.Host
		}
	}
	if host == "" {
		return func() {}
	}
	s.hostMu.Lock()
	sem, ok := s.hosts[host]
	if !ok {
		sem = make(chan struct{}, s.cfg.PerHost)
		s.hosts[host] = sem
	}
	s.hostMu.Unlock()
	select {
	case sem <- struct{}{}:
		return func() { <-sem }
	case <-ctx.Done():
		return func() {}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
