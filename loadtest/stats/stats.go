// Package stats turns the requests a load-test target received into the
// figures the benchmark reports: lateness percentiles, and missed and
// duplicate runs checked twice, once from the headers the scheduler sent and
// once from arrival times alone against the expected grid of slots.
//
// Everything here is pure: no clock, no I/O. Times are Unix nanoseconds.
package stats

import (
	"math"
	"slices"
	"time"
)

// Summary describes a distribution of durations.
type Summary struct {
	Count int           `json:"count"`
	Min   time.Duration `json:"min"`
	Mean  time.Duration `json:"mean"`
	P50   time.Duration `json:"p50"`
	P90   time.Duration `json:"p90"`
	P99   time.Duration `json:"p99"`
	P999  time.Duration `json:"p999"`
	Max   time.Duration `json:"max"`
}

// Summarize sorts ds in place and summarizes it. An empty slice gives the
// zero Summary.
func Summarize(ds []time.Duration) Summary {
	if len(ds) == 0 {
		return Summary{}
	}
	slices.Sort(ds)
	var sum float64
	for _, d := range ds {
		sum += float64(d)
	}
	return Summary{
		Count: len(ds),
		Min:   ds[0],
		Mean:  time.Duration(sum / float64(len(ds))),
		P50:   Percentile(ds, 0.50),
		P90:   Percentile(ds, 0.90),
		P99:   Percentile(ds, 0.99),
		P999:  Percentile(ds, 0.999),
		Max:   ds[len(ds)-1],
	}
}

// Percentile returns the p-quantile (p in [0, 1]) of sorted by the
// nearest-rank method: the smallest value such that at least p of all values
// are less than or equal to it. It never interpolates, so the answer is
// always an observed value. An empty slice gives 0.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if p <= 0 {
		return sorted[0]
	}
	if p >= 1 {
		return sorted[n-1]
	}
	// The tiny epsilon keeps 0.99*100 = 99.00000000000001 at rank 99.
	rank := int(math.Ceil(p*float64(n) - 1e-9))
	return sorted[max(rank, 1)-1]
}
