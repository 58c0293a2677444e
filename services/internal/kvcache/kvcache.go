// Package kvcache keeps an in-memory, watch-fed view of a JetStream KV
// bucket, so a hot path reads rarely-changing values (task specs, breaker
// records) without a server round trip per message.
//
// The view is eventually consistent: it lags the bucket by the watch's
// delivery delay (sub-millisecond on a local server). Callers that need
// read-your-writes record their own writes with Put/Delete, which take the
// written revision so a late watch delivery never rolls a value back.
// Until the initial snapshot is loaded, and while the watch is down, Lookup
// answers "unknown" and the caller reads the bucket itself.
package kvcache

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Decode turns a stored value into the cached form. It runs lazily, on the
// first Lookup of each revision, never on the watch goroutine, so loading a
// bucket of a million keys costs a map insert per key, not a decode.
type Decode[T any] func(key string, value []byte) (T, error)

// Cache is a watch-fed view of one bucket.
type Cache[T any] struct {
	kv     jetstream.KeyValue
	decode Decode[T]
	log    *slog.Logger

	mu      sync.RWMutex
	entries map[string]*entry[T]
	// watched is the newest revision the watch has applied (a revision is
	// the bucket stream's sequence, and the watch delivers in that order):
	// a key it does not hold at or below watched was deleted or never
	// written as of then. It lets a deleted key leave no entry behind.
	watched uint64
	// live: the initial snapshot is loaded and the watch is up. Cleared
	// under mu, with the view emptied, and read under mu by Lookup.
	live  atomic.Bool
	ready chan struct{}
	once  sync.Once
	// beforeRLock, set by tests only, runs in Lookup before it takes mu.
	beforeRLock func()

	// Changed, when set before Run, is called with the key of every put,
	// delete or purge the watch delivers, once the view holds it, on the
	// watch's goroutine: keep it short.
	Changed func(key string)
	// Conn, when set before Run, is the bucket's connection: a reconnect
	// makes the view watch again (Follower.Conn).
	Conn *nats.Conn
}

type entry[T any] struct {
	rev     uint64
	deleted bool
	raw     []byte
	once    sync.Once
	val     T
	err     error
}

func (e *entry[T]) value(key string, decode Decode[T]) (T, error) {
	e.once.Do(func() {
		e.val, e.err = decode(key, e.raw)
		e.raw = nil
	})
	return e.val, e.err
}

// New returns a cache of kv. Call Run to fill it.
func New[T any](kv jetstream.KeyValue, decode Decode[T], log *slog.Logger) *Cache[T] {
	if log == nil {
		log = slog.Default()
	}
	return &Cache[T]{kv: kv, decode: decode, log: log, entries: map[string]*entry[T]{}, ready: make(chan struct{})}
}

// Keys returns a view of which keys kv holds, for a bucket where a key's
// presence is the information (flyball-pauses). Values are not decoded.
func Keys(kv jetstream.KeyValue, log *slog.Logger) *Cache[struct{}] {
	return New(kv, func(string, []byte) (struct{}, error) { return struct{}{}, nil }, log)
}

// Ready is closed once the first snapshot of the bucket is loaded.
func (c *Cache[T]) Ready() <-chan struct{} { return c.ready }

// Run watches the bucket until ctx ends, re-establishing the watch (and
// answering "unknown" meanwhile) if it ever closes. Run it in a goroutine.
func (c *Cache[T]) Run(ctx context.Context) {
	Follower{
		KV: c.kv, Log: c.log, Conn: c.Conn,
		Apply: func(e jetstream.KeyValueEntry) {
			key := strings.Clone(e.Key())
			c.apply(key, e.Revision(), e.Operation() != jetstream.KeyValuePut, e.Value())
			if c.Changed != nil {
				c.Changed(key)
			}
		},
		Loaded: func() {
			c.live.Store(true)
			c.once.Do(func() { close(c.ready) })
		},
		// Until the replay is loaded, Lookup answers "unknown" and callers
		// read the bucket. The replay starts from an empty view, so keys
		// deleted (and purged) meanwhile do not linger, and a bucket
		// re-created meanwhile (revisions start over) is not hidden behind
		// the old revisions.
		Ended: c.ended,
	}.Run(ctx)
}

// ended empties the view when the watch ends. It marks the view down
// under the lock, so a Lookup holding the lock reads the view whole and
// one taking it after reads "unknown".
func (c *Cache[T]) ended(error) {
	c.mu.Lock()
	c.live.Store(false)
	c.entries = map[string]*entry[T]{}
	c.watched = 0
	c.mu.Unlock()
}

// apply records what the watch delivered. A delete or purge drops the
// key's entry: a deleted key leaves nothing behind. Before, every key
// ever deleted kept an entry for good, and a restart loaded one per
// delete marker (10,000 tasks created and deleted a day: 79 MB a month
// in every cache of flyball-tasks).
func (c *Cache[T]) apply(key string, rev uint64, deleted bool, raw []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watched = max(c.watched, rev)
	cur, ok := c.entries[key]
	switch {
	case deleted && (!ok || cur.rev <= rev): // its own record of this delete too
		delete(c.entries, key)
	case ok && cur.rev >= rev: // this process's own write, newer
	default:
		c.entries[key] = &entry[T]{rev: rev, raw: raw}
	}
}

// store records key at rev, written or read by this process, unless a
// newer revision is already known, and returns the entry now held (nil
// when it holds none). A key with no entry whose rev the watch has
// passed was deleted since (or written again, which the watch holds):
// the value is not cached, so a read answered before a delete and stored
// after the watch applied it does not bring the deleted value back. A
// deletion stays as an entry (deleted) only until the watch delivers it.
func (c *Cache[T]) store(key string, rev uint64, deleted bool, raw []byte) *entry[T] {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur, ok := c.entries[key]
	switch {
	case ok && cur.rev >= rev:
		return cur
	case !ok && rev <= c.watched:
		return nil
	}
	e := &entry[T]{rev: rev, deleted: deleted, raw: raw}
	c.entries[key] = e
	return e
}

// Put records a value this process wrote at rev (read-your-writes).
func (c *Cache[T]) Put(key string, rev uint64, raw []byte) { _ = c.store(key, rev, false, raw) }

// Delete records a deletion this process made at rev. With rev 0
// (unknown) it drops the entry instead: Lookup then reports the key
// absent, as the watch will once it delivers the delete, and Get reads
// the bucket (TestOwnWritesAreNotRolledBack).
func (c *Cache[T]) Delete(key string, rev uint64) {
	if rev == 0 {
		c.mu.Lock()
		delete(c.entries, key)
		c.mu.Unlock()
		return
	}
	_ = c.store(key, rev, true, nil)
}

// Lagging makes the view hold raw at rev for key, as a view whose watch
// has not delivered the key's newer revisions yet holds it: for tests of
// callers that must read the bucket again when a cached value does not
// fit. (Put refuses a revision the watch has passed for a key it holds
// no entry for: deleted since, as far as the view can tell.)
func (c *Cache[T]) Lagging(key string, rev uint64, raw []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries[key] = &entry[T]{rev: rev, raw: raw}
}

// Result is the answer to a Lookup.
type Result[T any] struct {
	// Known is false when the cache cannot answer (not loaded yet, watch
	// down): read the bucket.
	Known bool
	// Found is false for a key the cache has no value for: deleted, or
	// never seen. A key written an instant ago may not have arrived yet,
	// so callers that must not miss a fresh key read the bucket then.
	Found    bool
	Value    T
	Revision uint64
	// Err is the decode error of a stored value that could not be decoded.
	Err error
}

// MapResult is r with its value passed through f and every other field
// kept: the answer of a cache of a wider record (the breaker's view)
// to a function that reads the narrower one (executor.Settled).
func MapResult[T, U any](r Result[T], f func(T) U) Result[U] {
	return Result[U]{Known: r.Known, Found: r.Found, Value: f(r.Value), Revision: r.Revision, Err: r.Err}
}

// Lookup returns the cached value of key.
func (c *Cache[T]) Lookup(key string) Result[T] {
	if c.beforeRLock != nil {
		c.beforeRLock()
	}
	// live is read under the lock: read before it, a watch ending
	// meanwhile would leave this Lookup reading the emptied view as
	// known, and report a key it held as absent.
	c.mu.RLock()
	if !c.live.Load() {
		c.mu.RUnlock()
		return Result[T]{}
	}
	e, ok := c.entries[key]
	c.mu.RUnlock()
	if !ok || e.deleted {
		return Result[T]{Known: true}
	}
	v, err := e.value(key, c.decode)
	return Result[T]{Known: true, Found: true, Value: v, Revision: e.rev, Err: err}
}

// Get returns the value of key from the cache, or from the bucket when the
// cache cannot answer or has no value (which also covers a key written an
// instant ago). A value read from the bucket is cached. Missing keys return
// jetstream.ErrKeyNotFound.
func (c *Cache[T]) Get(ctx context.Context, key string) (T, uint64, error) {
	if r := c.Lookup(key); r.Found {
		return r.Value, r.Revision, r.Err
	}
	return c.Read(ctx, key)
}

// Read returns the value of key from the bucket, whatever the cache holds,
// and caches it: for a caller that must not act on a value the watch has
// not yet updated. Missing keys return jetstream.ErrKeyNotFound.
func (c *Cache[T]) Read(ctx context.Context, key string) (T, uint64, error) {
	var zero T
	ent, err := c.kv.Get(ctx, key)
	if err != nil {
		return zero, 0, err
	}
	e := c.store(key, ent.Revision(), false, ent.Value())
	if e != nil && e.rev > ent.Revision() && c.stale(ctx, key, e) {
		e = nil // the bucket's answer, from the stream there is now
	}
	if e == nil { // not cached (store): answered as read, decoded again
		v, err := c.decode(key, ent.Value())
		return v, ent.Revision(), err
	}
	if e.deleted { // a deletion newer than what the bucket just returned
		return zero, 0, jetstream.ErrKeyDeleted
	}
	v, err := e.value(key, c.decode)
	return v, e.rev, err
}

// stale reports whether e, held for key at a revision above the one the
// bucket just answered, is from a stream that is gone, and if so drops
// it. The bucket was deleted and created again (or restored) and its
// revisions started over: Read kept answering the old stream's value
// over the new one until the follower replayed the bucket. A write of
// this process to the stream there is now is at most its last sequence,
// so it is kept. Only a read that finds the view ahead pays the request.
// The test is Stream.Replaces by sequence alone: the entry does not say
// when its stream was created (the follower tells that).
//
// When the state cannot be read the entry is kept, and Read answers it
// as before this check: the follower replays a replaced bucket, and
// warns when it cannot read the state either.
func (c *Cache[T]) stale(ctx context.Context, key string, e *entry[T]) bool {
	s, err := ReadStream(ctx, c.kv)
	if err != nil {
		c.log.Debug("kv cache: cannot tell whether a cached entry is from a stream since replaced; keeping it",
			"bucket", c.kv.Bucket(), "key", key, "revision", e.rev, "err", err)
		return false
	}
	if !s.Replaces(time.Time{}, e.rev) {
		return false
	}
	c.mu.Lock()
	if c.entries[key] == e {
		delete(c.entries, key)
	}
	c.mu.Unlock()
	return true
}

// Len is the number of cached keys: those with a value, and deletions
// this process recorded that the watch has not delivered yet.
func (c *Cache[T]) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.entries)
}
