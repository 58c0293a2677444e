// Package lifecycle gives every flyball service the same Start/Stop shape:
// Start once, an idempotent Stop that first drains consumers (stop taking
// new work, finish what is buffered), then cancels and waits for every
// goroutine, and a Stopped channel.
package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"
)

// ErrStarted is returned by a second Start.
var ErrStarted = errors.New("already started")

// DrainTimeout bounds how long Stop waits for consumers to drain.
const DrainTimeout = 10 * time.Second

// Base is embedded by services.
type Base struct {
	mu       sync.Mutex
	started  bool
	cancel   context.CancelFunc
	wg       conc.WaitGroup
	consumes []jetstream.ConsumeContext
	onStop   []func()
	drained  []func()
	stopOnce sync.Once
	stopped  chan struct{}
	conn     *nats.Conn // DrainsOver
	// drainTimeout replaces DrainTimeout in tests.
	drainTimeout time.Duration
}

// Begin marks the service started and returns its run context, cancelled
// by Stop.
func (b *Base) Begin(ctx context.Context) (context.Context, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.started {
		return nil, ErrStarted
	}
	b.started = true
	b.stopped = make(chan struct{})
	ctx, b.cancel = context.WithCancel(context.WithoutCancel(ctx))
	return ctx, nil
}

// Go runs fn in a goroutine that Stop waits for.
func (b *Base) Go(fn func()) { b.wg.Go(fn) }

// DrainsOver tells Stop the connection the tracked consumers pull over:
// while it is not connected, a drain cannot finish (its pull is never
// answered), and Stop stops them without waiting out DrainTimeout.
func (b *Base) DrainsOver(nc *nats.Conn) {
	b.mu.Lock()
	b.conn = nc
	b.mu.Unlock()
}

// awaitDrained waits for each consumer to drain, at most DrainTimeout in
// all, and not at all while the connection is down: a consumer still
// draining then is stopped. Once the deadline passed, every consumer
// left is stopped too: each waited for its own Closed after the first
// had taken the deadline, and one that never closed held Stop for good.
func (b *Base) awaitDrained(consumes []jetstream.ConsumeContext) {
	b.mu.Lock()
	nc := b.conn
	b.mu.Unlock()
	offline := func() bool { return nc != nil && !nc.IsConnected() }
	deadline := time.NewTimer(cmp.Or(b.drainTimeout, DrainTimeout))
	defer deadline.Stop()
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	expired := false
	for _, cc := range consumes {
	wait:
		for !expired {
			if offline() {
				break
			}
			select {
			case <-cc.Closed():
				break wait
			case <-deadline.C:
				expired = true
			case <-poll.C:
			}
		}
		select {
		case <-cc.Closed():
		default:
			cc.Stop()
		}
	}
}

// Track registers a consume context to drain on Stop.
func (b *Base) Track(cc jetstream.ConsumeContext) {
	b.mu.Lock()
	b.consumes = append(b.consumes, cc)
	b.mu.Unlock()
}

// OnDrained registers fn to run once consumers have drained and before the
// run context is cancelled: the place to give in-flight work a soft timeout.
func (b *Base) OnDrained(fn func()) {
	b.mu.Lock()
	b.drained = append(b.drained, fn)
	b.mu.Unlock()
}

// OnStop registers fn to run after consumers drained and goroutines ended,
// in reverse registration order.
func (b *Base) OnStop(fn func()) {
	b.mu.Lock()
	b.onStop = append(b.onStop, fn)
	b.mu.Unlock()
}

// Stop drains consumers, runs the OnDrained hooks, cancels the run context,
// waits for goroutines and runs the OnStop hooks. It is idempotent and safe before Start.
func (b *Base) Stop() {
	b.mu.Lock()
	started := b.started
	b.mu.Unlock()
	if !started {
		return
	}
	b.stopOnce.Do(func() {
		b.mu.Lock()
		consumes := b.consumes
		b.mu.Unlock()
		for _, cc := range consumes {
			cc.Drain()
		}
		b.awaitDrained(consumes)
		b.mu.Lock()
		drained := b.drained
		b.mu.Unlock()
		for _, fn := range drained {
			fn()
		}
		b.cancel()
		b.wg.Wait()
		b.mu.Lock()
		hooks := b.onStop
		b.mu.Unlock()
		for i := len(hooks) - 1; i >= 0; i-- {
			hooks[i]()
		}
		close(b.stopped)
	})
}

// Stopped is closed when Stop has finished. It is nil before Start.
func (b *Base) Stopped() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stopped
}
