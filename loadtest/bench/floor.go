package bench

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// floorTask is one task of the floor: a timer re-armed on the grid.
type floorTask struct {
	id, url string
	// next is the slot the timer is armed for (Unix ns).
	next  atomic.Int64
	timer atomic.Pointer[time.Timer]
}

// floor is the instrument's floor: one plain Go timer per task, re-armed on
// the same grid, calling the same target with the executor's HTTP settings.
// No scheduler, no persistence, no queue: whatever lateness it shows is the
// cost of the timers, the client, the target and the machine.
type floor struct {
	interval time.Duration
	sem      chan struct{}
	mu       sync.RWMutex
	closed   bool
	inflight sync.WaitGroup
	tasks    []*floorTask
	failures atomic.Int64
}

func (r *runner) runFloor(ctx context.Context, tier Tier, sr *SystemResult) error {
	ids := r.taskIDs(tier, SystemFloor, tier.Tasks)
	begin := time.Now()
	first := begin.Add(time.Second).Truncate(time.Second).Add(time.Second)
	client := newClient(r.cfg.Concurrency)
	defer client.CloseIdleConnections()
	f := &floor{interval: tier.Interval, sem: make(chan struct{}, r.cfg.Concurrency)}
	callCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	for i, id := range ids {
		t := &floorTask{id: id, url: r.urlFor(i, id)}
		f.tasks = append(f.tasks, t)
		f.arm(callCtx, client, t, first.UnixNano())
	}
	sr.SetupSeconds = time.Since(begin).Seconds()
	sr.Window = r.window(first, tier.Interval)
	err := r.measure(ctx, measurement{sys: sr, grid: uniformGrid(ids, first, tier.Interval)})
	f.stop()
	if n := f.failures.Load(); n > 0 {
		sr.Notes = append(sr.Notes, fmt.Sprintf("%d calls failed", n))
	}
	return err
}

// arm sets a timer for the task's slot at (Unix ns).
func (f *floor) arm(ctx context.Context, client *http.Client, t *floorTask, at int64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed {
		return
	}
	t.next.Store(at)
	t.timer.Store(time.AfterFunc(time.Until(time.Unix(0, at)), func() { f.fire(ctx, client, t) }))
}

// fire arms the task's timer for the next slot, then makes the call.
func (f *floor) fire(ctx context.Context, client *http.Client, t *floorTask) {
	f.mu.RLock()
	if f.closed {
		f.mu.RUnlock()
		return
	}
	f.inflight.Add(1)
	f.mu.RUnlock()
	defer f.inflight.Done()

	slot := t.next.Load()
	f.arm(ctx, client, t, slot+int64(f.interval))

	f.sem <- struct{}{}
	defer func() { <-f.sem }()
	if err := get(ctx, client, t.url, t.id, time.Unix(0, slot)); err != nil {
		f.failures.Add(1)
	}
}

func (f *floor) stop() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	for _, t := range f.tasks {
		if tm := t.timer.Load(); tm != nil {
			tm.Stop()
		}
	}
	f.inflight.Wait()
}
