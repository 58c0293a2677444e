package governor

import (
	"sync"

	gov "github.com/flyballhq/flyball/pkg/governor"
)

// stateCache remembers the schedule state and KV revision this replica last
// wrote or read for each task, so the next decision is a single
// compare-and-set Update at the known revision instead of a Get and an
// Update. A stale entry (another replica wrote since, or a deletion) only
// costs a revision mismatch, after which the decision re-reads KV. The
// cache is bounded: past max entries an arbitrary entry is dropped, which
// again only costs one read.
type stateCache struct {
	mu  sync.Mutex
	max int
	m   map[string]cachedState
}

type cachedState struct {
	st  gov.State
	rev uint64
}

func newStateCache(maxEntries int) *stateCache {
	return &stateCache{max: maxEntries, m: make(map[string]cachedState)}
}

func (c *stateCache) get(id string) (gov.State, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[id]
	return e.st, e.rev, ok
}

func (c *stateCache) put(id string, st gov.State, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[id]; !ok && len(c.m) >= c.max {
		for k := range c.m { // Go randomises map iteration: a random victim
			delete(c.m, k)
			break
		}
	}
	c.m[id] = cachedState{st: st, rev: rev}
}

func (c *stateCache) drop(id string) {
	c.mu.Lock()
	delete(c.m, id)
	c.mu.Unlock()
}
