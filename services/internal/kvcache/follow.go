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
// below that sequence never arrive. As a watch starts, and every
// streamCheck after, the follower reads the stream's state (one request,
// off the watch's goroutine: a watch never waits for it) and ends the
// watch, to replay the bucket, when the stream is another one
// (Stream.Replaces). A read that keeps failing (NATS slow, or an ACL
// without $JS.API.STREAM.INFO) is logged once: until one succeeds, a
// re-created bucket goes unnoticed.
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

// streamReadTimeout bounds one read of the stream's state.
var streamReadTimeout = 5 * time.Second

// streamCheckFailures is how many reads of the stream's state in a row
// fail before the follower warns that it cannot tell a re-created bucket.
const streamCheckFailures = 3

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
	first := f.readStream(ctx, 0)
	w, err := f.KV.WatchAll(ctx)
	if err != nil {
		return nil, err
	}
	return func() { f.run(ctx, w, first) }, nil
}

// checked is a read of the stream's state, and the newest revision the
// watch had applied when it was asked for (the stream held it).
type checked struct {
	s    Stream
	err  error
	seen uint64
}

// readStream reads the stream's state on its own goroutine, and answers
// on the channel it returns, once.
func (f Follower) readStream(ctx context.Context, seen uint64) <-chan checked {
	ch := make(chan checked, 1) // never blocks, read or not
	go func() {
		ctx, cancel := context.WithTimeout(ctx, streamReadTimeout)
		defer cancel()
		s, err := ReadStream(ctx, f.KV)
		ch <- checked{s: s, err: err, seen: seen}
	}()
	return ch
}

func (f Follower) logger() *slog.Logger {
	if f.Log == nil {
		return slog.Default()
	}
	return f.Log
}

// Run follows the bucket until ctx ends, retrying the first watch too.
func (f Follower) Run(ctx context.Context) { f.run(ctx, nil, nil) }

// run follows the bucket with w, when not nil, and first, the read of
// the stream's state started before w.
func (f Follower) run(ctx context.Context, w jetstream.KeyWatcher, first <-chan checked) {
	log := f.logger()
	wait := followRetry
	var err error
	checks := &streamChecks{}
	for replay := false; ; replay = true {
		for w == nil {
			first = f.readStream(ctx, 0)
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
		loaded, ended := f.follow(ctx, w, replay, first, checks)
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
// state, and ends when the stream is not the one it watches.
//
// Which stream the watch reads is told by first, a read sent before
// WatchAll but not waited for: a watch (every view's, after each
// reconnect) never waits on it while JetStream comes up. A stream
// replaced between that read and WatchAll reads as replaced, and the
// bucket is replayed once more, never the other way. When first fails
// (NATS slow, not permitted) the first later read that succeeds stands
// for the watch's stream: one replaced before it is still noticed by its
// sequence (the new stream's last sequence is below the revisions the
// watch applied from the old one), but not once the new bucket has had
// more writes than the view saw.
func (f Follower) follow(ctx context.Context, w jetstream.KeyWatcher, replay bool, first <-chan checked, checks *streamChecks) (bool, error) {
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
	results := first      // the read in flight, one at most; nil: none
	var created time.Time // the watched stream's, once a read succeeds
	var seen uint64       // the newest revision applied
	loaded := false
	for {
		select {
		case <-ctx.Done():
			return loaded, ctx.Err()
		case <-reconnected:
			return loaded, errReconnected
		case <-check.C:
			if results == nil {
				results = f.readStream(ctx, seen)
			}
		case r := <-results:
			results = nil
			if r.err != nil {
				// NATS unreachable or the stream gone (the watch's own
				// recovery, or the reconnect, deals with it), or not
				// permitted: said once if it lasts.
				if ctx.Err() == nil {
					checks.failed(f.logger(), f.KV.Bucket(), r.err)
				}
				continue
			}
			checks.succeeded(f.logger(), f.KV.Bucket())
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

// streamChecks counts a follower's reads of its stream's state that
// failed in a row, across its watches, to warn once when they keep
// failing and say when they work again.
type streamChecks struct {
	failures int
	warned   bool
}

func (c *streamChecks) failed(log *slog.Logger, bucket string, err error) {
	c.failures++
	if c.failures == streamCheckFailures {
		c.warned = true
		log.Warn("cannot read the kv bucket's stream state (needs $JS.API.STREAM.INFO); noticing a bucket deleted and created again, or restored, under the watch is off until a read succeeds",
			"bucket", bucket, "err", err, "failures", c.failures)
	}
}

func (c *streamChecks) succeeded(log *slog.Logger, bucket string) {
	if c.warned {
		log.Info("reading the kv bucket's stream state works again; a re-created bucket is noticed again",
			"bucket", bucket, "after_failures", c.failures)
	}
	c.failures, c.warned = 0, false
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
