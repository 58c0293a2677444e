package lifecycle_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flyballhq/flyball/services/internal/lifecycle"
)

// stuck is a consume context whose drain never finishes, as nats.go's
// does while its connection is down; Stop closes it.
type stuck struct {
	closed  chan struct{}
	stopped atomic.Bool
}

func newStuck() *stuck { return &stuck{closed: make(chan struct{})} }

func (c *stuck) Drain() {}

func (c *stuck) Stop() {
	if c.stopped.CompareAndSwap(false, true) {
		close(c.closed)
	}
}

func (c *stuck) Closed() <-chan struct{} { return c.closed }

// TestStopStopsEveryConsumerLeftAtTheDrainDeadline: once the drain
// deadline has passed, every consumer still draining is stopped. The
// first one took the deadline and was stopped; each later one then
// waited for its own Closed, and one that never closed held Stop for
// good.
func TestStopStopsEveryConsumerLeftAtTheDrainDeadline(t *testing.T) {
	t.Parallel()
	var b lifecycle.Base
	b.SetDrainTimeout(50 * time.Millisecond)
	if _, err := b.Begin(context.Background()); err != nil {
		t.Fatal(err)
	}
	first, second := newStuck(), newStuck()
	b.Track(first, nil)
	b.Track(second, nil)
	done := make(chan struct{})
	go func() {
		b.Stop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop still waits for a consumer that never drains")
	}
	if !first.stopped.Load() || !second.stopped.Load() {
		t.Errorf("stopped: first %v, second %v; want both", first.stopped.Load(), second.stopped.Load())
	}
}
