package bench

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestFloorSkipsASlotWhileTheTasksCallRuns: with skipBusy (the peak
// tier) a slot that comes while the task's previous call still runs is
// skipped, so an overloaded floor does not queue a call per slot; without
// it the slot waits its turn.
func TestFloorSkipsASlotWhileTheTasksCallRuns(t *testing.T) {
	t.Parallel()
	for _, skip := range []bool{true, false} {
		release := make(chan struct{})
		began := make(chan struct{}, 2)
		var calls atomic.Int32
		f := &floor{interval: time.Hour, skipBusy: skip, do: func(context.Context, *floorTask, int64) {
			calls.Add(1)
			began <- struct{}{}
			<-release
		}}
		// Each fire re-arms the task an hour on, beyond the test.
		task := &floorTask{id: "t"}
		task.next.Store(time.Now().UnixNano())
		f.tasks = append(f.tasks, task)
		go f.fire(t.Context(), task)
		<-began
		second := make(chan struct{})
		go func() {
			f.fire(t.Context(), task)
			close(second)
		}()
		if skip {
			select {
			case <-second: // returned at once: the slot was skipped
			case <-time.After(10 * time.Second):
				close(release)
				t.Fatal("skipBusy: the second slot waited for the first call")
			}
		}
		close(release)
		<-second
		f.stop()
		want := int32(2)
		if skip {
			want = 1
		}
		if got := calls.Load(); got != want {
			t.Errorf("skipBusy %v: %d calls, want %d", skip, got, want)
		}
	}
}
