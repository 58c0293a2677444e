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
	consumes []tracked
	onStop   []func()
	drained  []func()
	stopOnce sync.Once
	stopped  chan struct{}
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

// tracked is a consume context and the connection it pulls over.
type tracked struct {
	cc jetstream.ConsumeContext
	nc *nats.Conn
}

// awaitDrained waits for each consumer to drain, at most DrainTimeout in
// all, and not at all while its connection is down (a drain cannot
// finish: its pull is never answered): a consumer still draining then is
// stopped. Once the deadline passed, every consumer left is stopped too:
// each waited for its own Closed after the first had taken the deadline,
// and one that never closed held Stop for good.
func (b *Base) awaitDrained(consumes []tracked) {
	deadline := time.NewTimer(cmp.Or(b.drainTimeout, DrainTimeout))
	defer deadline.Stop()
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	expired := false
	for _, t := range consumes {
		offline := func() bool { return t.nc != nil && !t.nc.IsConnected() }
	wait:
		for !expired && !offline() {
			select {
			case <-t.cc.Closed():
				break wait
			case <-deadline.C:
				expired = true
			case <-poll.C:
			}
		}
		select {
		case <-t.cc.Closed():
		default:
			t.cc.Stop()
		}
	}
}

// Track registers a consume context to drain on Stop, and nc, the
// connection it pulls over (nil: unknown), so that Stop does not wait out
// DrainTimeout for a drain that cannot finish while nc is down.
func (b *Base) Track(cc jetstream.ConsumeContext, nc *nats.Conn) {
	b.mu.Lock()
	b.consumes = append(b.consumes, tracked{cc: cc, nc: nc})
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
		for _, t := range consumes {
			t.cc.Drain()
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
