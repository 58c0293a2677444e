package bench

import (
	"context"
	"fmt"
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
	// busy is set while a slot of the task runs (skipBusy).
	busy atomic.Bool
}

// floor is the instrument's floor: one plain Go timer per task, re-armed on
// the same grid, calling the same target with the executor's HTTP settings.
// No scheduler, no persistence, no queue: whatever lateness it shows is the
// cost of the timers, the client, the target and the machine. The pipeline
// system uses the same timers to publish its dispatches.
type floor struct {
	interval time.Duration
	// do runs one slot (Unix ns) of a task; it may block.
	do func(ctx context.Context, t *floorTask, slot int64)
	// skipBusy skips a slot whose task's previous slot is still running,
	// as a scheduler does when it falls behind (flyball's catch-up
	// policy): the floor then serves what it can instead of queueing a
	// call per slot without bound. The peak tier sets it; in the others
	// the floor keeps up and never skips.
	skipBusy bool
	mu       sync.RWMutex
	closed   bool
	inflight sync.WaitGroup
	tasks    []*floorTask
}

func (r *runner) runFloor(ctx context.Context, tier Tier, sr *SystemResult) error {
	ids := r.taskIDs(tier, SystemFloor, tier.Tasks)
	begin := time.Now()
	first := begin.Add(time.Second).Truncate(time.Second).Add(time.Second)
	client := newClient(r.cfg.Concurrency)
	defer client.CloseIdleConnections()
	sem := make(chan struct{}, r.cfg.Concurrency)
	var failures atomic.Int64
	f := &floor{interval: tier.Interval, skipBusy: tier.Kind == KindPeak, do: func(ctx context.Context, t *floorTask, slot int64) {
		sem <- struct{}{}
		defer func() { <-sem }()
		if err := get(ctx, client, t.url, t.id, time.Unix(0, slot)); err != nil {
			failures.Add(1)
		}
	}}
	callCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	f.start(callCtx, ids, r.urlFor, first)
	sr.SetupSeconds = time.Since(begin).Seconds()
	sr.Window = r.window(first, tier.Interval)
	err := r.measure(ctx, measurement{sys: sr, grid: uniformGrid(ids, first, tier.Interval)})
	f.stop()
	if n := failures.Load(); n > 0 {
		sr.Notes = append(sr.Notes, fmt.Sprintf("%d calls failed", n))
	}
	return err
}

// start arms a timer for every task's first slot.
func (f *floor) start(ctx context.Context, ids []string, urlFor func(int, string) string, first time.Time) {
	for i, id := range ids {
		t := &floorTask{id: id, url: urlFor(i, id)}
		f.tasks = append(f.tasks, t)
		f.arm(ctx, t, first.UnixNano())
	}
}

// arm sets a timer for the task's slot at (Unix ns).
func (f *floor) arm(ctx context.Context, t *floorTask, at int64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed {
		return
	}
	t.next.Store(at)
	t.timer.Store(time.AfterFunc(time.Until(time.Unix(0, at)), func() { f.fire(ctx, t) }))
}

// fire arms the task's timer for the next slot, then runs this one.
func (f *floor) fire(ctx context.Context, t *floorTask) {
	f.mu.RLock()
	if f.closed {
		f.mu.RUnlock()
		return
	}
	f.inflight.Add(1)
	f.mu.RUnlock()
	defer f.inflight.Done()

	slot := t.next.Load()
	f.arm(ctx, t, slot+int64(f.interval))
	if f.skipBusy {
		if !t.busy.CompareAndSwap(false, true) {
			return
		}
		defer t.busy.Store(false)
	}
	f.do(ctx, t, slot)
}

// stop disarms every timer and waits for the slots in progress.
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
