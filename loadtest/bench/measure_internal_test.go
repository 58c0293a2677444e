package bench

import (
	"log/slog"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/loadtest/stats"
	"github.com/flyballhq/flyball/loadtest/target"
)

// TestMeasureReportsAStackProcessItCannotRead: a stack PID that cannot be
// read is not dropped from the charge silently: the system's CPU and peak
// RSS are not measured, and the result says which process.
func TestMeasureReportsAStackProcessItCannotRead(t *testing.T) {
	t.Parallel()
	tg, err := target.Listen(1)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tg.Close() }()
	r := &runner{cfg: Config{}, log: slog.New(slog.DiscardHandler), target: tg}
	gone := math.MaxInt32 // above any pid_max: never a process
	from := time.Now().Add(20 * time.Millisecond).UnixNano()
	sr := &SystemResult{System: SystemFlyball, Window: stats.Window{From: from, To: from + int64(50*time.Millisecond)}}
	if err := r.measure(t.Context(), measurement{sys: sr, grid: stats.Grid{Interval: time.Second}, pids: []int{gone}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sr.Uncharged, "/proc/"+strconv.Itoa(gone)+"/") {
		t.Errorf("Uncharged = %q, want it to name /proc/%d/", sr.Uncharged, gone)
	}
	if sr.CPUSeconds != 0 || sr.PeakRSSBytes != 0 {
		t.Errorf("CPU %.3f s, peak RSS %d B: want none charged when a process was not", sr.CPUSeconds, sr.PeakRSSBytes)
	}
}
