package kvcache

import (
	"context"
	"errors"
	"hash/maphash"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Follower mirrors a bucket into state its caller keeps, and keeps the
// watch up for as long as the caller runs.
//
// A KV watch can end while the connection is fine: nats.go closes the
// watcher's Updates channel when it cannot re-create the watch's ordered
// consumer (the stream was unavailable during a leader change or a
// restore, say), and nothing re-creates it after that. A service that
// stops at that point keeps acting on a view that no longer changes: a
// timer would dispatch no slot written after it. Follower watches again,
// with backoff, and replays the bucket into Apply; keys deleted or purged
// while it was down are handed to Prune.
type Follower struct {
	KV  jetstream.KeyValue
	Log *slog.Logger
	// Apply receives every put, delete and purge, in bucket order, on
	// the goroutine that runs the follower. Required.
	Apply func(jetstream.KeyValueEntry)
	// Loaded runs when a watch has delivered every stored key: once
	// after the first snapshot and once after each replay.
	Loaded func()
	// Prune runs after a replay, before Loaded: the caller forgets each key
	// for which keep returns false (gone from the bucket while the watch
	// was down). Optional.
	Prune func(keep func(key string) bool)
	// Ended runs when a watch ends, before the follower watches again.
	// Optional.
	Ended func(error)
	// Watching, when set, is given each new watcher (tests end a watch
	// with it, as nats.go would).
	Watching func(jetstream.KeyWatcher)
	// Conn, when set, is the connection KV uses: a reconnect ends the
	// watch, and the follower watches again and replays the bucket. A
	// restarted server has lost the watch's consumer, and nats.go re-creates
	// it only after two idle heartbeats (5 s each) go missing: until then
	// the view stood still, up to 20 s after NATS was back (a timer fired
	// no slot the governor wrote meanwhile). Optional.
	Conn *nats.Conn
}

// errWatchClosed is a watch whose Updates channel closed.
var errWatchClosed = errors.New("watch channel closed")

// errReconnected is a watch ended because the connection reconnected.
var errReconnected = errors.New("reconnected to NATS")

// Backoff between tries to watch again: it doubles from followRetry up to
// followMaxRetry, and starts over once a watch has loaded.
var (
	followRetry    = 100 * time.Millisecond
	followMaxRetry = 5 * time.Second
)

// Start watches the bucket, so a bucket that cannot be watched (missing,
// or not permitted) fails the caller's start, and returns the loop that
// follows it until ctx ends; run that on its own goroutine.
func (f Follower) Start(ctx context.Context) (func(), error) {
	w, err := f.KV.WatchAll(ctx)
	if err != nil {
		return nil, err
	}
	return func() { f.run(ctx, w) }, nil
}

// Run follows the bucket until ctx ends, retrying the first watch too.
func (f Follower) Run(ctx context.Context) { f.run(ctx, nil) }

func (f Follower) run(ctx context.Context, w jetstream.KeyWatcher) {
	log := f.Log
	if log == nil {
		log = slog.Default()
	}
	wait := followRetry
	var err error
	for replay := false; ; replay = true {
		for w == nil {
			if w, err = f.KV.WatchAll(ctx); err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			log.Warn("kv watch failed; trying again", "bucket", f.KV.Bucket(), "err", err, "in", wait)
			if !sleep(ctx, wait) {
				return
			}
			wait = min(2*wait, followMaxRetry)
		}
		loaded, ended := f.follow(ctx, w, replay)
		w = nil
		if ctx.Err() != nil {
			return
		}
		if loaded {
			wait = followRetry
		}
		if f.Ended != nil {
			f.Ended(ended)
		}
		log.Warn("kv watch ended; watching again and replaying the bucket", "bucket", f.KV.Bucket(), "err", ended, "in", wait)
		if !sleep(ctx, wait) {
			return
		}
		wait = min(2*wait, followMaxRetry)
	}
}

// follow applies one watch until it ends, and reports whether it
// delivered its snapshot. On a replay it tracks the keys the snapshot
// holds, to prune the rest.
func (f Follower) follow(ctx context.Context, w jetstream.KeyWatcher, replay bool) (bool, error) {
	defer func() {
		// Stopping a watcher deletes its consumer, a JetStream request
		// that waits out its 5s timeout while NATS is unreachable: a
		// service stopping then took 5s per watch. The server drops the
		// consumer itself once it is inactive.
		if f.Conn != nil && !f.Conn.IsConnected() {
			go func() { _ = w.Stop() }()
			return
		}
		_ = w.Stop()
	}()
	if f.Watching != nil {
		f.Watching(w)
	}
	var reconnected chan nats.Status // nil without Conn: never ready
	if f.Conn != nil {
		reconnected = f.Conn.StatusChanged(nats.CONNECTED)
		defer f.Conn.RemoveStatusListener(reconnected)
	}
	var seen *keySet
	if replay && f.Prune != nil {
		seen = newKeySet()
	}
	loaded := false
	for {
		select {
		case <-ctx.Done():
			return loaded, ctx.Err()
		case <-reconnected:
			return loaded, errReconnected
		case e, ok := <-w.Updates():
			if !ok {
				return loaded, errWatchClosed
			}
			if e == nil { // the snapshot is delivered
				if seen != nil {
					f.Prune(seen.has)
					seen = nil
				}
				loaded = true
				if f.Loaded != nil {
					f.Loaded()
				}
				continue
			}
			if seen != nil {
				seen.add(e.Key())
			}
			f.Apply(e)
		}
	}
}

// keySet is the set of keys a replay's snapshot holds, kept as sorted
// 64-bit hashes: 8 bytes a key where a map of the key strings took about
// 70 (a million 13-byte keys: 8.4 MB against 72 MB, held for the seconds
// a replay takes, next to the caller's own view). Two keys share a hash
// with a chance of at most n²/2⁶⁵ for n keys, 3·10⁻⁸ at a million. The
// cost of a shared hash is small: a key purged while the watch was down
// that shares one with a key still there stays in the caller's view, as
// if it had not been purged, until the key is written again.
type keySet struct {
	seed   maphash.Seed
	hashes []uint64
	sorted bool
}

func newKeySet() *keySet { return &keySet{seed: maphash.MakeSeed()} }

func (k *keySet) add(key string) {
	k.hashes = append(k.hashes, maphash.String(k.seed, key))
	k.sorted = false
}

// has reports whether key was added. The first call after an add sorts
// the hashes; Prune calls it once per key the caller holds.
func (k *keySet) has(key string) bool {
	if !k.sorted {
		slices.Sort(k.hashes)
		k.sorted = true
	}
	_, found := slices.BinarySearch(k.hashes, maphash.String(k.seed, key))
	return found
}

// sleep waits d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
