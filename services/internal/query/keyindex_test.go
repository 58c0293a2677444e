package query

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortedKeysMatchASortedSet: random adds and removes, enough to split
// chunks, empty them and merge neighbours, leave the set as a sorted
// slice of the same keys would be, and after answers as a search of it.
func TestSortedKeysMatchASortedSet(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 11))
	var s sortedKeys
	want := map[string]bool{}
	key := func() string { return fmt.Sprintf("k%05d", rng.IntN(5000)) }
	check := func(step int) {
		t.Helper()
		sorted := make([]string, 0, len(want))
		for k := range want {
			sorted = append(sorted, k)
		}
		slices.Sort(sorted)
		if got := s.after(nil, "", len(sorted)+1); !slices.Equal(got, sorted) || s.n != len(sorted) {
			t.Fatalf("step %d: %d keys (n %d), want %d", step, len(got), s.n, len(sorted))
		}
		for _, c := range s.chunks {
			if len(c) == 0 || len(c) > maxChunk {
				t.Fatalf("step %d: a chunk of %d keys", step, len(c))
			}
		}
		for range 20 {
			after, n := key(), 1+rng.IntN(700)
			i, found := slices.BinarySearch(sorted, after)
			if found {
				i++
			}
			if got := s.after(nil, after, n); !slices.Equal(got, sorted[i:min(len(sorted), i+n)]) {
				t.Fatalf("step %d: %d keys after %s: %v…, want %d", step, n, after, got[:min(3, len(got))], len(sorted[i:min(len(sorted), i+n)]))
			}
		}
	}
	for step := range 40_000 {
		k := key()
		// Adds first, then mostly removes, to empty chunks.
		if (step < 20_000) == (rng.IntN(4) != 0) {
			s.add(k)
			want[k] = true
		} else {
			s.remove(k)
			delete(want, k)
		}
		if step%2000 == 0 {
			check(step)
		}
	}
	check(40_000)
}
