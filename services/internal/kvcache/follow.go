package kvcache

import (
	"context"
	"errors"
	"fmt"
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
//
// A watch can also outlive its bucket's stream: deleted and created again
// (flyball provision) or restored while the watch runs, quicker than
// nats.go's missed-heartbeat check (two 5 s heartbeats). nats.go then
// re-creates the watch's consumer on the new stream at the old stream's
// last sequence + 1, and never closes the watch: the new bucket's writes
// below that sequence never arrive. Every streamCheck the follower reads
// the stream's state (one request, off the watch's goroutine) and ends
// the watch, to replay the bucket, when the stream is another one
// (Stream.Replaces).
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

// errReplaced is a watch ended because its bucket's stream is another one.
var errReplaced = errors.New("the bucket's stream was replaced (deleted and created again, or restored)")

// streamCheck is how often a follower reads its bucket's stream state to
// notice the stream was replaced under the watch: a view of a re-created
// bucket is stale for up to this long. One stream info request per
// watch per period.
var streamCheck = 5 * time.Second

// streamReadTimeout bounds the read of the stream's state before a watch.
const streamReadTimeout = 2 * time.Second

// Stream is the state of a bucket's stream that tells one stream from
// the next of the same name.
type Stream struct {
	// LastSeq is the last sequence stored: the newest revision.
	LastSeq uint64
	// Created is when the stream was created.
	Created time.Time
}

// ReadStream reads the state of kv's stream: one JetStream request.
func ReadStream(ctx context.Context, kv jetstream.KeyValue) (Stream, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return Stream{}, fmt.Errorf("read status of KV %s: %w", kv.Bucket(), err)
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return Stream{}, fmt.Errorf("read status of KV %s: no stream info", kv.Bucket())
	}
	info := bs.StreamInfo()
	return Stream{LastSeq: info.State.LastSeq, Created: info.Created}, nil
}

// Replaces reports whether s is another stream than the one a reader
// watched: created at created (zero: not known), and holding revision
// seen (0: none). The bucket was deleted and provisioned again, or
// restored, and its sequences started again below what the reader saw. A
// stream's last sequence never goes back (a purge keeps it), so one below
// a revision read from it is a stream that is not the same.
func (s Stream) Replaces(created time.Time, seen uint64) bool {
	return !created.IsZero() && !s.Created.Equal(created) || s.LastSeq < seen
}

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
	created := f.created(ctx)
	w, err := f.KV.WatchAll(ctx)
	if err != nil {
		return nil, err
	}
	return func() { f.run(ctx, w, created) }, nil
}

// created is when the bucket's stream was created, read before a watch
// starts (so a stream replaced meanwhile reads as replaced, and the
// watch is replayed once more, never the other way): zero when it cannot
// be read within streamReadTimeout, and the first periodic check fills
// it in. A status request that hangs does not hold up the watch.
func (f Follower) created(ctx context.Context) time.Time {
	ctx, cancel := context.WithTimeout(ctx, streamReadTimeout)
	defer cancel()
	s, err := ReadStream(ctx, f.KV)
	if err != nil {
		return time.Time{}
	}
	return s.Created
}

func (f Follower) logger() *slog.Logger {
	if f.Log == nil {
		return slog.Default()
	}
	return f.Log
}

// Run follows the bucket until ctx ends, retrying the first watch too.
func (f Follower) Run(ctx context.Context) { f.run(ctx, nil, time.Time{}) }

func (f Follower) run(ctx context.Context, w jetstream.KeyWatcher, created time.Time) {
	log := f.logger()
	wait := followRetry
	var err error
	for replay := false; ; replay = true {
		for w == nil {
			created = f.created(ctx)
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
		loaded, ended := f.follow(ctx, w, replay, created)
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
// holds, to prune the rest. Every streamCheck it reads the stream's
// state, and ends when the stream is not the one it watches (created at
// created, zero if not known).
func (f Follower) follow(ctx context.Context, w jetstream.KeyWatcher, replay bool, created time.Time) (bool, error) {
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
	var keys *keySet
	if replay && f.Prune != nil {
		keys = newKeySet()
	}
	check := time.NewTicker(streamCheck)
	defer check.Stop()
	type checked struct {
		s    Stream
		err  error
		seen uint64
	}
	results := make(chan checked, 1) // one check in flight: never blocks
	checking := false
	var seen uint64 // the newest revision applied
	loaded := false
	for {
		select {
		case <-ctx.Done():
			return loaded, ctx.Err()
		case <-reconnected:
			return loaded, errReconnected
		case <-check.C:
			if checking {
				continue
			}
			checking = true
			go func(seen uint64) {
				cctx, cancel := context.WithTimeout(ctx, streamCheck)
				defer cancel()
				s, err := ReadStream(cctx, f.KV)
				results <- checked{s: s, err: err, seen: seen}
			}(seen) // seen before the request: the stream holds it
		case r := <-results:
			checking = false
			if r.err != nil {
				// NATS unreachable, or the stream gone: the watch's
				// own recovery, or the reconnect, deals with it.
				continue
			}
			if created.IsZero() {
				created = r.s.Created
			}
			if r.s.Replaces(created, r.seen) {
				f.logger().Warn("kv bucket's stream was replaced under its watch (deleted and created again, or restored): the view held the old stream's keys",
					"bucket", f.KV.Bucket(), "created", created, "stream_created", r.s.Created, "last_seq", r.s.LastSeq, "seen_seq", r.seen)
				return loaded, errReplaced
			}
		case e, ok := <-w.Updates():
			if !ok {
				return loaded, errWatchClosed
			}
			if e == nil { // the snapshot is delivered
				if keys != nil {
					f.Prune(keys.has)
					keys = nil
				}
				loaded = true
				if f.Loaded != nil {
					f.Loaded()
				}
				continue
			}
			if keys != nil {
				keys.add(e.Key())
			}
			seen = max(seen, e.Revision())
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
