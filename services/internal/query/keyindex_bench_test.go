package query

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// BenchmarkSortedKeys adds a million task IDs, in random order (as a
// watch delivers them: by stream sequence), to the index's key set, and
// reports the heap it then holds per key: the API's memory per task for
// its task index, at flyball's Scale tier.
//
//	go test -run '^$' -bench BenchmarkSortedKeys ./internal/query/
func BenchmarkSortedKeys(b *testing.B) {
	const n = 1_000_000
	for _, c := range []struct {
		name string
		id   func(i int) string
	}{
		{"12-byte-ids", func(i int) string { return fmt.Sprintf("task-%07d", i) }},
		{"36-byte-ids", func(i int) string { return fmt.Sprintf("%08x-0000-4000-8000-%012x", i*2654435761%(1<<32), i) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			keys := make([]string, n)
			for i := range keys {
				keys[i] = c.id(i)
			}
			rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
			var held float64
			for b.Loop() {
				before := heapAlloc()
				var s sortedKeys
				for _, k := range keys {
					s.add(k)
				}
				// The keys' bytes are shared with keys here; the index
				// holds its own clone of each.
				held = float64(heapAlloc()-before)/n + float64(sizeClass(len(keys[0])))
				runtime.KeepAlive(&s)
			}
			b.ReportMetric(held, "B/key")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/add")
		})
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// sizeClass is the bytes the allocator gives a small string of n bytes.
func sizeClass(n int) int {
	for _, c := range []int{8, 16, 24, 32, 48, 64, 80, 96, 112, 128} {
		if n <= c {
			return c
		}
	}
	return n
}
