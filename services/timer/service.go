package timer

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/lifecycle"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/streams"
)

// Config configures the timer.
type Config struct {
	// JS is the JetStream context. Required.
	JS jetstream.JetStream
	// Instance names this replica in event sources. Defaults to host-pid.
	Instance string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics defaults to a private set.
	Metrics *metrics.Set
	// RetryDelay is the wait before re-publishing a dispatch whose publish
	// failed. Defaults to 250ms.
	RetryDelay time.Duration
}

// Service is the timer service.
type Service struct {
	lifecycle.Base
	cfg    Config
	log    *slog.Logger
	source string

	mu    sync.Mutex
	items map[string]*item
	queue dueHeap
	wake  chan struct{}
	ready chan struct{}
	acks  chan pending
}

type pending struct {
	it     *item
	at     int64
	future jetstream.PubAckFuture
}

// New validates cfg and returns a timer ready to Start.
func New(cfg Config) (*Service, error) {
	if cfg.JS == nil {
		return nil, errors.New("timer: Config.JS is required")
	}
	if cfg.Instance == "" {
		cfg.Instance = "timer"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Metrics = metrics.OrNew(cfg.Metrics)
	if cfg.RetryDelay <= 0 {
		cfg.RetryDelay = 250 * time.Millisecond
	}
	return &Service{
		cfg:    cfg,
		log:    cfg.Logger.With("service", "timer"),
		source: jsutil.Source("timer", cfg.Instance),
		items:  make(map[string]*item),
		wake:   make(chan struct{}, 1),
		ready:  make(chan struct{}),
		acks:   make(chan pending, 4096),
	}, nil
}

// Ready is closed once the initial snapshot of flyball-schedules is loaded.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Start begins watching schedules and dispatching.
func (s *Service) Start(ctx context.Context) error {
	runCtx, err := s.Begin(ctx)
	if err != nil {
		return fmt.Errorf("timer: %w", err)
	}
	kv, err := s.cfg.JS.KeyValue(ctx, streams.BucketSchedules)
	if err != nil {
		return fmt.Errorf("timer: bind %s: %w", streams.BucketSchedules, err)
	}
	w, err := kv.WatchAll(runCtx)
	if err != nil {
		return fmt.Errorf("timer: watch %s: %w", streams.BucketSchedules, err)
	}
	s.Go(func() { s.watch(runCtx, w) })
	s.Go(func() { s.fire(runCtx) })
	s.Go(func() { s.confirm(runCtx) })
	return nil
}

// watch applies schedule changes to the heap.
func (s *Service) watch(ctx context.Context, w jetstream.KeyWatcher) {
	defer func() { _ = w.Stop() }()
	var once sync.Once
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				once.Do(func() { close(s.ready) })
				continue
			}
			s.apply(e)
		}
	}
}

// scheduled is the part of a stored schedule the timer needs.
type scheduled struct {
	NextRunAt time.Time `json:"nextRunAt"`
	Source    string    `json:"source"`
}

func (s *Service) apply(e jetstream.KeyValueEntry) {
	id := e.Key()
	if e.Operation() != jetstream.KeyValuePut {
		s.remove(id)
		return
	}
	var sc scheduled
	if err := json.Unmarshal(e.Value(), &sc); err != nil {
		s.log.Error("unreadable schedule; task not scheduled until it is rewritten", "task", id, "err", err)
		s.remove(id)
		return
	}
	if sc.NextRunAt.IsZero() {
		s.remove(id)
		return
	}
	s.upsert(id, sc.NextRunAt.UnixNano(), intern(sc.Source))
}

func (s *Service) upsert(id string, at int64, source string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.items[id]
	if !ok {
		it = &item{id: id, index: -1}
		s.items[id] = it
	}
	it.source = source
	if at == it.fired {
		// A re-put of a slot already dispatched (another input changed the
		// state but not the time): dispatching it again would be a duplicate.
		if it.index >= 0 {
			heap.Remove(&s.queue, it.index)
		}
		return
	}
	it.at, it.due = at, at
	if it.index >= 0 {
		heap.Fix(&s.queue, it.index)
	} else {
		heap.Push(&s.queue, it)
	}
	s.cfg.Metrics.DispatchPending.Set(float64(len(s.queue)))
	s.poke()
}

func (s *Service) remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.items[id]
	if !ok {
		return
	}
	if it.index >= 0 {
		heap.Remove(&s.queue, it.index)
	}
	delete(s.items, id)
	s.cfg.Metrics.DispatchPending.Set(float64(len(s.queue)))
}

func (s *Service) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// fire waits for the earliest due time and dispatches everything due.
func (s *Service) fire(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		wait := s.dispatchDue(ctx)
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.wake:
		}
	}
}

// dispatchDue publishes every due item and returns how long to wait for
// the next one.
func (s *Service) dispatchDue(ctx context.Context) time.Duration {
	for {
		now := time.Now()
		s.mu.Lock()
		if len(s.queue) == 0 {
			s.mu.Unlock()
			return time.Hour
		}
		it := s.queue[0]
		if wait := time.Duration(it.at - now.UnixNano()); wait > 0 {
			s.mu.Unlock()
			return wait
		}
		heap.Pop(&s.queue)
		it.fired = it.due
		at, id, source := it.due, it.id, it.source
		s.cfg.Metrics.DispatchPending.Set(float64(len(s.queue)))
		s.mu.Unlock()

		f, err := s.publish(id, at, source, now)
		if err != nil {
			s.log.Warn("dispatch publish failed; retrying", "task", id, "err", err)
			s.cfg.Metrics.DispatchTotal.WithLabelValues("error").Inc()
			s.retryLater(it, at)
			continue
		}
		select {
		case s.acks <- pending{it: it, at: at, future: f}:
		case <-ctx.Done():
			return time.Hour
		}
	}
}

func (s *Service) publish(id string, at int64, source string, now time.Time) (jetstream.PubAckFuture, error) {
	scheduledAt := time.Unix(0, at).UTC()
	d := events.Dispatch{
		DispatchID:  events.DispatchID(id, scheduledAt),
		TaskID:      id,
		ScheduledAt: scheduledAt,
		FiredAt:     now.UTC(),
		Source:      source,
	}
	body, err := events.Marshal(events.TypeRunDue, s.source, id, d, now.UTC(), d.DispatchID)
	if err != nil {
		return nil, err
	}
	m := &nats.Msg{Subject: events.DispatchSubject(id), Data: body, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, d.DispatchID)
	m.Header.Set("Content-Type", events.ContentTypeStructured)
	s.cfg.Metrics.DispatchLateness.Observe(now.Sub(scheduledAt).Seconds())
	return s.cfg.JS.PublishMsgAsync(m)
}

// confirm checks publish acks: a duplicate or a full subject means the run
// is already pending; any other error re-queues the dispatch.
func (s *Service) confirm(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-s.acks:
			select {
			case ack := <-p.future.Ok():
				result := "new"
				if ack.Duplicate {
					result = "duplicate"
				}
				s.cfg.Metrics.DispatchTotal.WithLabelValues(result).Inc()
			case err := <-p.future.Err():
				if jsutil.IsDuplicateInProcess(err) {
					s.cfg.Metrics.DispatchTotal.WithLabelValues("duplicate").Inc()
					continue
				}
				if jsutil.IsSubjectFull(err) {
					s.cfg.Metrics.DispatchTotal.WithLabelValues("pending").Inc()
					continue
				}
				s.cfg.Metrics.DispatchTotal.WithLabelValues("error").Inc()
				s.log.Warn("dispatch not stored; retrying", "task", p.it.id, "err", err)
				s.retryLater(p.it, p.at)
			case <-ctx.Done():
				return
			}
		}
	}
}

// retryLater re-queues a failed dispatch unless the schedule moved on.
func (s *Service) retryLater(it *item, at int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.items[it.id]; !ok || cur != it || it.index >= 0 || it.fired != at {
		return
	}
	it.fired = 0
	it.due = at
	it.at = max(at, time.Now().Add(s.cfg.RetryDelay).UnixNano())
	heap.Push(&s.queue, it)
	s.poke()
}

var sources sync.Map

// intern returns a canonical copy of a source string, so a million items
// share a handful of strings.
func intern(s string) string {
	if v, ok := sources.Load(s); ok {
		return v.(string)
	}
	v, _ := sources.LoadOrStore(s, s)
	return v.(string)
}
