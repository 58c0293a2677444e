package bench

import (
	"log/slog"
	"runtime"
	"testing"
)

// TestEachSystemStartsOnReleasedMemory: a window resets the peak RSS to
// the RSS at its start, so the memory an earlier system left behind in
// this process must go back to the OS before the next system starts, or
// it counts in that system's peak RSS. Not parallel: it reads the whole
// process's heap.
func TestEachSystemStartsOnReleasedMemory(t *testing.T) {
	const size = 256 << 20
	func() {
		left := make([]byte, size)
		for i := 0; i < len(left); i += 4096 {
			left[i] = 1
		}
		runtime.KeepAlive(left)
	}()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r := &runner{log: slog.New(slog.DiscardHandler)}
	r.runSystem(t.Context(), Tier{Name: "none"}, "none") // no such system: it only starts
	runtime.ReadMemStats(&after)
	if freed := int64(after.HeapReleased) - int64(before.HeapReleased); freed < size/2 {
		t.Errorf("starting a system returned %d MiB to the OS, want the %d MiB the last one left (at least half)", freed>>20, size>>20)
	}
}
