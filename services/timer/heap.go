package timer

// item is one task's pending due time. Times are Unix nanoseconds to keep
// the item small: the timer holds one per task.
type item struct {
	id     string
	at     int64 // when to publish (the heap key): due minus its lead, or a retry's time
	due    int64 // the scheduled nextRunAt
	fired  int64 // the due time last dispatched, to ignore re-puts of it; noSlot when none
	source string
	// created is the schedule's createdAt (Unix nanoseconds, 0 when it has
	// none), copied into every dispatch: which task of this ID it is.
	created int64
	index   int32 // position in the heap, -1 when not queued
	// waits counts the tries of this slot refused because an earlier
	// dispatch of the task was still in DISPATCH (10077); it sets the
	// backoff. int32 with index.
	waits int32
	// tried is when the earliest try of slot due that may have been
	// stored went out (Unix nanoseconds; 0 when none): its ack was lost
	// or timed out. A later try answered duplicate records that try's
	// lateness.
	tried int64
	// written is when the schedule of slot due was written (the KV
	// entry's server timestamp, Unix nanoseconds; 0 when unknown), the
	// earliest the timer could have published it: a slot written for
	// "now" (a run-now hint, a requeue, a catch-up) is not late by its
	// lead. With it the item takes 88 bytes (the 96-byte size class).
	written int64
}

// dueHeap is a min-heap of items by publish time (item.at).
type dueHeap []*item

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].id < h[j].id
}

func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = int32(i)
	h[j].index = int32(j)
}

func (h *dueHeap) Push(x any) {
	it := x.(*item)
	it.index = int32(len(*h))
	*h = append(*h, it)
}

func (h *dueHeap) Pop() any {
	old := *h
	n := len(old)
	it := old[n-1]
	old[n-1] = nil
	it.index = -1
	*h = old[:n-1]
	return it
}
