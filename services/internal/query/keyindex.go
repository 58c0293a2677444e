package query

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/kvcache"
)

// catchUp bounds how long a page waits for the key index to apply the
// writes stored before the page asked, before it lists the keys itself.
const catchUp = time.Second

// errIndexDown says the key index cannot answer a page: its watch failed
// or lags; the page lists the keys of the bucket instead.
var errIndexDown = errors.New("key index not current")

// keyIndex is the sorted key set of a KV bucket, kept by one long-lived
// watch of entry headers (no values): a page finds its keys in it in
// O(log n + page) instead of listing every key. The watch starts with the
// first page, and again with the page after it failed; a page uses the
// index only once it holds every write stored before the page asked (the
// stream's last sequence), so it never answers from a stale or partial
// set.
type keyIndex struct {
	kv   jetstream.KeyValue
	life context.Context
	wg   sync.WaitGroup

	mu sync.Mutex
	// keys is the set; only a live index holds any.
	keys sortedKeys
	// seq is the stream sequence the set reflects.
	seq uint64
	// created is when the stream the watch reads was created (zero
	// until the watch read it): a stream deleted and provisioned again,
	// or restored, starts its sequences again from 1.
	created time.Time
	// applied counts the entries the watches applied: a page waiting
	// on a watch tells progress from a stall by it.
	applied uint64
	// live: the initial load is done and the watch runs. watching: a
	// watch goroutine runs (loading, or live).
	live, watching bool
	// gen counts watches; a watch that is no longer x.gen stops.
	gen int
	// stopWatch cancels the running watch.
	stopWatch context.CancelFunc
	// changed is closed, and replaced, when seq or the state change.
	changed chan struct{}
	// restarts counts the watches started after the first (for tests).
	restarts int
}

func newKeyIndex(life context.Context, kv jetstream.KeyValue) *keyIndex {
	return &keyIndex{kv: kv, life: life, changed: make(chan struct{})}
}

// notify wakes every waiter. x.mu is held.
func (x *keyIndex) notify() {
	close(x.changed)
	x.changed = make(chan struct{})
}

// start starts a watch unless one runs or the index was stopped. x.mu is
// held.
func (x *keyIndex) start() {
	if x.watching || x.life.Err() != nil {
		return
	}
	if x.gen > 0 {
		x.restarts++
	}
	x.gen++
	x.watching, x.live = true, false
	x.keys = sortedKeys{}
	// A new watch reflects nothing yet: the sequences of a stream
	// provisioned again start from 1, below the old stream's.
	x.seq, x.created = 0, time.Time{}
	ctx, cancel := context.WithCancel(x.life)
	x.stopWatch = cancel
	gen := x.gen
	x.wg.Go(func() {
		defer cancel()
		x.watch(ctx, gen)
	})
}

// drop ends watch gen and forgets its keys, so that the next page starts
// another watch. x.mu is held.
func (x *keyIndex) drop(gen int) {
	if gen != x.gen || !x.watching {
		return
	}
	x.stopWatch()
	x.watching, x.live = false, false
	x.keys = sortedKeys{}
	x.notify()
}

// watch keeps the index until ctx ends or the watch fails.
func (x *keyIndex) watch(ctx context.Context, gen int) {
	fail := func() {
		x.mu.Lock()
		x.drop(gen)
		x.mu.Unlock()
	}
	// Every write up to last is in the initial values: the index is
	// current up to it once they are in, even when the stream's last
	// message was since removed and never comes through the watch.
	st, err := kvcache.ReadStream(ctx, x.kv)
	if err != nil {
		fail()
		return
	}
	last := st.LastSeq
	x.mu.Lock()
	if gen == x.gen {
		x.created = st.Created
	}
	x.mu.Unlock()
	w, err := x.kv.WatchAll(ctx, jetstream.MetaOnly())
	if err != nil {
		fail()
		return
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			fail()
			return
		case e, ok := <-w.Updates():
			if !ok { // the subscription closed: the ordered consumer could not be recreated, or the connection closed
				fail()
				return
			}
			x.mu.Lock()
			if gen != x.gen {
				x.mu.Unlock()
				return
			}
			if e == nil { // the initial values are in
				x.live = true
				x.seq = max(x.seq, last)
				x.notify()
				x.mu.Unlock()
				continue
			}
			if e.Operation() == jetstream.KeyValuePut {
				// A clone: the key is a slice of the message's subject.
				x.keys.add(strings.Clone(e.Key()))
			} else {
				x.keys.remove(e.Key())
			}
			x.seq = max(x.seq, e.Revision())
			x.applied++
			if x.live {
				x.notify()
			}
			x.mu.Unlock()
		}
	}
}

// replaced reports whether the watch reads another stream than now,
// whose state a page read: the bucket's stream was deleted and
// provisioned again, or restored, and its sequences started again from
// 1 (kvcache.Stream.Replaces, as the services' views tell). Its watch may still run, on the old stream's
// keys, and its sequence, above the new stream's, would make it current
// until the new stream passed it. x.mu is held.
func (x *keyIndex) replaced(now kvcache.Stream) bool {
	if !x.watching {
		return false
	}
	var seen uint64
	if x.live {
		seen = x.seq
	}
	return now.Replaces(x.created, seen)
}

// current waits until the index holds every write stored before it was
// called, starting the watch if none runs. It returns errIndexDown when
// the watch fails, or stops making progress: loading, it must apply an
// entry in every catchUp; live, it must reach the writes within catchUp.
// A watch that applied nothing in a catchUp is dropped, to be started
// again by the next page. Without this bound a load that stalled held
// every page until its client gave up.
func (x *keyIndex) current(ctx context.Context) error {
	st, err := kvcache.ReadStream(ctx, x.kv)
	if err != nil {
		return err
	}
	want := st.LastSeq
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.replaced(st) {
		x.drop(x.gen) // a new watch, of the stream there is now
	}
	x.start()
	t := time.NewTimer(catchUp)
	defer t.Stop()
	from, wasLive := x.applied, x.live
	for {
		switch {
		case !x.watching:
			return fmt.Errorf("%w: its watch of %s ended (the next page starts another)", errIndexDown, x.kv.Bucket())
		case x.live && x.seq >= want:
			return nil
		case x.live && !wasLive:
			// Loaded while this page waited, and behind by the writes
			// still on their way: catchUp from now for them.
			t.Reset(catchUp)
			from, wasLive = x.applied, true
		}
		changed, gen := x.changed, x.gen
		x.mu.Unlock()
		select {
		case <-ctx.Done():
			x.mu.Lock()
			return ctx.Err()
		case <-changed:
			x.mu.Lock()
		case <-t.C:
			x.mu.Lock()
			if gen != x.gen || !x.watching {
				// Dropped meanwhile (the first case says so), or a
				// new watch runs: give it its own catchUp.
				t.Reset(catchUp)
				from, wasLive = x.applied, x.live
				continue
			}
			if x.live && x.seq >= want {
				return nil
			}
			if x.applied == from {
				x.drop(gen) // stuck: a new watch, from the stream's state
				return fmt.Errorf("%w: its watch of %s applied nothing in %s (the next page starts another)", errIndexDown, x.kv.Bucket(), catchUp)
			}
			if x.live {
				return fmt.Errorf("%w: its watch of %s did not reach sequence %d within %s", errIndexDown, x.kv.Bucket(), want, catchUp)
			}
			// Loading, and still applying entries: wait on.
			t.Reset(catchUp)
			from = x.applied
		}
	}
}

// after returns up to n keys after after, sorted. With check, it first
// waits until the index is current (a page's first batch); without, it
// reads on in the index that batch found current, which has only moved
// on since, instead of asking the server for the stream's state again
// for every batch of a filtered page.
func (x *keyIndex) after(ctx context.Context, after string, n int, check bool) ([]string, error) {
	if check {
		if err := x.current(ctx); err != nil {
			return nil, err
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.live {
		return nil, fmt.Errorf("%w: its watch of %s ended (the next page starts another)", errIndexDown, x.kv.Bucket())
	}
	return x.keys.after(make([]string, 0, min(n, x.keys.n)), after, n), nil
}

// stop ends the watch and waits for it. cancel ends x.life; it is
// called under x.mu, which start holds while it checks x.life and adds
// to x.wg, so that no watch is added once Wait has begun.
func (x *keyIndex) stop(cancel context.CancelFunc) {
	x.mu.Lock()
	cancel()
	x.mu.Unlock()
	x.wg.Wait()
}

// maxChunk is the most keys a sortedKeys chunk holds.
const maxChunk = 512

// sortedKeys is a set of strings kept sorted in chunks of at most
// maxChunk keys, each chunk's keys before the next chunk's: a lookup is
// two binary searches, and an insert or a delete moves at most maxChunk
// keys (and the chunk list when a chunk splits or empties), never every
// key as one sorted slice would.
type sortedKeys struct {
	chunks [][]string
	n      int
}

// chunkFor is the chunk that holds k, or where k belongs: the first whose
// last key is not before k, or the last chunk.
func (s *sortedKeys) chunkFor(k string) int {
	i := sort.Search(len(s.chunks), func(i int) bool { c := s.chunks[i]; return c[len(c)-1] >= k })
	return min(i, len(s.chunks)-1)
}

func (s *sortedKeys) add(k string) {
	if len(s.chunks) == 0 {
		s.chunks = [][]string{{k}}
		s.n = 1
		return
	}
	ci := s.chunkFor(k)
	c := s.chunks[ci]
	j, found := slices.BinarySearch(c, k)
	if found {
		return
	}
	c = slices.Insert(c, j, k)
	s.n++
	if len(c) <= maxChunk {
		s.chunks[ci] = c
		return
	}
	half := len(c) / 2
	// Clones, so that neither half holds the grown array.
	s.chunks[ci] = slices.Clone(c[:half])
	s.chunks = slices.Insert(s.chunks, ci+1, slices.Clone(c[half:]))
}

func (s *sortedKeys) remove(k string) {
	if len(s.chunks) == 0 {
		return
	}
	ci := s.chunkFor(k)
	c := s.chunks[ci]
	j, found := slices.BinarySearch(c, k)
	if !found {
		return
	}
	c = slices.Delete(c, j, j+1)
	s.n--
	switch {
	case len(c) == 0:
		s.chunks = slices.Delete(s.chunks, ci, ci+1)
	case ci+1 < len(s.chunks) && len(c)+len(s.chunks[ci+1]) <= maxChunk/2:
		// Two small neighbours become one, so that deletes do not leave
		// a list of near-empty chunks.
		s.chunks[ci] = append(c, s.chunks[ci+1]...)
		s.chunks = slices.Delete(s.chunks, ci+1, ci+2)
	default:
		s.chunks[ci] = c
	}
}

// after appends to dst the keys after k, in order, until dst holds n.
func (s *sortedKeys) after(dst []string, k string, n int) []string {
	ci := sort.Search(len(s.chunks), func(i int) bool { c := s.chunks[i]; return c[len(c)-1] > k })
	for ; ci < len(s.chunks) && len(dst) < n; ci++ {
		c := s.chunks[ci]
		j, found := slices.BinarySearch(c, k)
		if found {
			j++
		}
		dst = append(dst, c[j:j+min(len(c)-j, n-len(dst))]...)
	}
	return dst
}
