package query

import "math"

// Page selects one page of a listing read back from the newest end of a
// stream (runs, dead letters): the newest Limit entries stored before the
// sequence Before, oldest first. The page of older entries is asked for
// with Before set to the next cursor the page returned, the sequence of
// its oldest entry, so entries stored meanwhile do not shift the pages.
type Page struct {
	// Limit is the most entries returned. Zero or less returns every one,
	// and never a next page.
	Limit int
	// Before, if not zero, keeps only the entries stored before this
	// stream sequence.
	Before uint64
}

// empty reports whether the page can hold no entry: nothing is stored
// before sequence 1.
func (p Page) empty() bool { return p.Before == 1 }

// endSeq is the ScanOptions.EndSeq of the page (zero: the last message).
func (p Page) endSeq() uint64 {
	if p.Before == 0 {
		return 0
	}
	return p.Before - 1
}

// keep is how many of the newest entries a listing keeps: one more than
// the page holds, so that it knows whether an older page follows.
func (p Page) keep() int {
	if p.Limit <= 0 {
		return 0
	}
	return plusOne(p.Limit)
}

// plusOne is n+1 for a limit n, but math.MaxInt for math.MaxInt: no
// listing holds that many, so it keeps every entry either way, where n+1
// overflowed to a negative count (flyball dlq list --limit
// 9223372036854775807 panicked).
func plusOne(n int) int {
	if n == math.MaxInt {
		return n
	}
	return n + 1
}

// cut trims items (oldest first, at most p.keep() of them) to the page and
// returns the next cursor: the sequence of the oldest entry returned when
// an older one was left out, else zero.
func cut[T any](p Page, items []T, seq func(*T) uint64) ([]T, uint64) {
	if p.Limit <= 0 || len(items) <= p.Limit {
		return items, 0
	}
	items = items[len(items)-p.Limit:]
	return items, seq(&items[0])
}
