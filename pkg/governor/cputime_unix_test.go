//go:build unix

package governor_test

import (
	"syscall"
	"testing"
	"time"
)

// processCPU is the CPU time this process has used (user + system, all
// threads, so the garbage collector's share counts too).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds a cpu-ns/op metric: CPU time per operation, which other
// processes competing for the machine do not inflate the way they inflate
// wall-clock ns/op.
func reportCPU(b *testing.B, start time.Duration) {
	if used := processCPU() - start; start > 0 && b.N > 0 {
		b.ReportMetric(float64(used.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}
