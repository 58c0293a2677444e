package kvcache

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/natstest"
)

func newBucket(t *testing.T) jetstream.KeyValue {
	t.Helper()
	srv := natstest.Start(t)
	kv, err := srv.JS.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "cache-test", History: 1})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// decodeInt counts its calls so the tests can check decoding is lazy.
func decodeInt(calls *atomic.Int64) Decode[int] {
	return func(_ string, raw []byte) (int, error) {
		calls.Add(1)
		return strconv.Atoi(string(raw))
	}
}

func run[T any](t *testing.T, c *Cache[T]) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-c.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("cache not ready")
	}
}

func TestCacheFollowsTheBucket(t *testing.T) {
	kv := newBucket(t)
	ctx := t.Context()
	for i := range 100 {
		if _, err := kv.Put(ctx, "k"+strconv.Itoa(i), []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	var calls atomic.Int64
	c := New(kv, decodeInt(&calls), nil)
	if r := c.Lookup("k1"); r.Known {
		t.Fatalf("before the snapshot the cache must answer unknown, got %+v", r)
	}
	run(t, c)
	if got := c.Len(); got != 100 {
		t.Fatalf("Len after snapshot = %d, want 100", got)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("loading decoded %d values; decoding must wait for a lookup", n)
	}
	for range 3 {
		if r := c.Lookup("k7"); !r.Known || !r.Found || r.Value != 7 || r.Err != nil {
			t.Fatalf("Lookup(k7) = %+v", r)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("three lookups of one revision decoded %d times, want 1", n)
	}
	if r := c.Lookup("nope"); !r.Known || r.Found {
		t.Fatalf("Lookup of an absent key = %+v, want known and not found", r)
	}

	if _, err := kv.Put(ctx, "k7", []byte("70")); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, "update reaches the cache", func() bool { return c.Lookup("k7").Value == 70 })
	if err := kv.Delete(ctx, "k7"); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, "delete reaches the cache", func() bool { return !c.Lookup("k7").Found })

	if _, err := kv.Put(ctx, "bad", []byte("x")); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, "bad value reaches the cache", func() bool { return c.Lookup("bad").Found })
	if r := c.Lookup("bad"); r.Err == nil {
		t.Fatalf("an undecodable value must report its decode error, got %+v", r)
	}
}

func TestGetFallsBackToTheBucket(t *testing.T) {
	kv := newBucket(t)
	ctx := t.Context()
	var calls atomic.Int64
	c := New(kv, decodeInt(&calls), nil) // never Run: every Get reads KV
	if _, _, err := c.Get(ctx, "k"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("Get of a missing key: err = %v, want ErrKeyNotFound", err)
	}
	rev, err := kv.Put(ctx, "k", []byte("5"))
	if err != nil {
		t.Fatal(err)
	}
	v, gotRev, err := c.Get(ctx, "k")
	if err != nil || v != 5 || gotRev != rev {
		t.Fatalf("Get = %d, %d, %v; want 5, %d, nil", v, gotRev, err, rev)
	}
	// A deletion this process recorded, newer than the bucket's value,
	// wins over the bucket (it is still being applied there). The
	// stream holds its revision (another key's write stands in for it):
	// a revision above the stream's last is from a stream that is gone
	// (TestCacheFollowsABucketReCreatedUnderIt).
	if _, err := kv.Put(ctx, "other", []byte("1")); err != nil {
		t.Fatal(err)
	}
	c.Delete("k", rev+1)
	if _, _, err := c.Get(ctx, "k"); !errors.Is(err, jetstream.ErrKeyDeleted) {
		t.Fatalf("Get after a newer local delete: err = %v, want ErrKeyDeleted", err)
	}
}

func TestOwnWritesAreNotRolledBack(t *testing.T) {
	kv := newBucket(t)
	ctx := t.Context()
	var calls atomic.Int64
	c := New(kv, decodeInt(&calls), nil)
	run(t, c)
	rev1, err := kv.Put(ctx, "k", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	rev2, err := kv.Update(ctx, "k", []byte("2"), rev1)
	if err != nil {
		t.Fatal(err)
	}
	// The writer records its write before the watch delivers either revision.
	c.Put("k", rev2, []byte("2"))
	natstest.Eventually(t, 5*time.Second, "watch catches up", func() bool {
		r := c.Lookup("k")
		return r.Revision == rev2
	})
	// An out-of-order delivery of the older revision is ignored.
	c.store("k", rev1, false, []byte("1"))
	if r := c.Lookup("k"); r.Value != 2 || r.Revision != rev2 {
		t.Fatalf("older revision rolled the value back: %+v", r)
	}
	// Delete with an unknown revision drops the entry: the next Get reads KV.
	// First let the watch deliver both revisions of k (it is ordered: a
	// later key seen means k's are in), or a late one would re-add it.
	if _, err := kv.Put(ctx, "fence", []byte("0")); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, "the watch delivers the fence", func() bool { return c.Lookup("fence").Found })
	c.Delete("k", 0)
	if r := c.Lookup("k"); r.Found {
		t.Fatalf("Delete(k, 0) left %+v", r)
	}
	if v, _, err := c.Get(ctx, "k"); err != nil || v != 2 {
		t.Fatalf("Get after Delete(k, 0) = %d, %v; want the bucket's 2", v, err)
	}
}

// TestKeysTellsWhichKeysExist: a Keys view answers presence: a key put
// before or after the load is found, a deleted or purged one is known and
// not found, and its own deletion (revision unknown) reads as absent at
// once.
func TestKeysTellsWhichKeysExist(t *testing.T) {
	kv := newBucket(t)
	ctx := t.Context()
	for _, k := range []string{"a", "b"} {
		if _, err := kv.Put(ctx, k, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	c := Keys(kv, nil)
	if r := c.Lookup("a"); r.Known {
		t.Fatalf("Lookup before the load = %+v, want unknown", r)
	}
	run(t, c)
	if r := c.Lookup("a"); !r.Known || !r.Found {
		t.Fatalf("Lookup(a) = %+v, want found", r)
	}
	for _, k := range []string{"b", "never"} {
		if r := c.Lookup(k); !r.Known || r.Found {
			t.Fatalf("Lookup(%s) = %+v, want known and not found", k, r)
		}
	}
	if _, err := kv.Put(ctx, "c", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, "a key put after the load is found", func() bool { return c.Lookup("c").Found })
	if err := kv.Purge(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, "a purged key is gone", func() bool { return !c.Lookup("c").Found })
	c.Delete("a", 0)
	if r := c.Lookup("a"); !r.Known || r.Found {
		t.Fatalf("Lookup(a) after Delete(a, 0) = %+v, want known and not found", r)
	}
}

// TestDeletedKeysAreNotKept: a deleted key leaves no entry behind, in a
// running cache or in one loaded after the deletes, and a stale read of
// a key the watch saw deleted (a Get answered before the delete, stored
// after it) does not bring the value back.
func TestDeletedKeysAreNotKept(t *testing.T) {
	kv := newBucket(t)
	ctx := t.Context()
	var calls atomic.Int64
	c := New(kv, decodeInt(&calls), nil)
	run(t, c)
	const n = 500
	revs := make([]uint64, n)
	for i := range n {
		k := "k" + strconv.Itoa(i)
		rev, err := kv.Put(ctx, k, []byte(strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		revs[i] = rev
		if err := kv.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	// A delete this process records itself, with its revision, before or
	// after the watch delivers it.
	if _, err := kv.Put(ctx, "own", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "own"); err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Delete("own", st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq)
	// The watch is ordered: once it delivers the fence, every delete is in.
	if _, err := kv.Put(ctx, "fence", []byte("0")); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, "the watch delivers the fence", func() bool { return c.Lookup("fence").Found })
	if got := c.Len(); got != 1 {
		t.Fatalf("running cache holds %d entries after %d put+delete and one put, want 1 (the live key)", got, n)
	}
	// A read answered before the delete and stored after it.
	c.store("k0", revs[0], false, []byte("0"))
	if r := c.Lookup("k0"); !r.Known || r.Found {
		t.Fatalf("a stale read of a deleted key came back: %+v", r)
	}
	fresh := New(kv, decodeInt(&calls), nil)
	run(t, fresh)
	if got := fresh.Len(); got != 1 {
		t.Fatalf("a cache loaded after %d put+delete holds %d entries, want 1 (the live key)", n, got)
	}
	if r := fresh.Lookup("k3"); !r.Known || r.Found {
		t.Fatalf("Lookup of a deleted key = %+v, want known and not found", r)
	}
}

// TestLookupRacingEndedIsUnknown: a Lookup that overlaps the end of the
// watch answers unknown, never "known absent" for a key the view held.
// The Lookup is parked before it takes the view's lock (beforeRLock);
// the watch ends meanwhile, emptying the view; then the Lookup goes on.
// It must judge the view's state under the lock it reads the entries
// with: a state check moved back before the lock but above the hook
// fails here, one placed between the hook and the lock would not, which
// is what the hook's place in Lookup guards. Callers act on a
// known-absent key (a paused task's target called, an open breaker's
// target called).
func TestLookupRacingEndedIsUnknown(t *testing.T) {
	kv := newBucket(t)
	if _, err := kv.Put(t.Context(), "k", []byte("1")); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	c := New(kv, decodeInt(&calls), nil)
	run(t, c)
	if r := c.Lookup("k"); !r.Known || !r.Found {
		t.Fatalf("Lookup(k) = %+v, want found", r)
	}
	parked, release := make(chan struct{}), make(chan struct{})
	c.beforeRLock = func() { close(parked); <-release }
	got := make(chan Result[int], 1)
	go func() { got <- c.Lookup("k") }()
	<-parked
	c.ended(errors.New("watch ended"))
	close(release)
	if r := <-got; r.Known {
		t.Fatalf("Lookup(k) overlapping the end of the watch = %+v, want unknown", r)
	}
}

// BenchmarkLookup is the hot path: every run looks up its task's spec,
// pause and breaker. It must not allocate.
func BenchmarkLookup(b *testing.B) {
	c := New(nil, func(_ string, raw []byte) (int, error) { return strconv.Atoi(string(raw)) }, nil)
	c.apply("k", 1, false, []byte("1"))
	c.live.Store(true)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if r := c.Lookup("k"); !r.Found {
				b.Fatalf("Lookup(k) = %+v", r)
			}
		}
	})
}

// TestCacheFollowsABucketReCreatedUnderIt: the bucket's stream is deleted
// and created again while the cache runs (its watch does not end, see
// TestFollowerReplaysABucketReCreatedUnderIt). Read must answer the new
// bucket's value, not the old one cached at a higher revision, and the
// view must come to hold the new bucket only.
func TestCacheFollowsABucketReCreatedUnderIt(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ctx := t.Context()
	cfg := jetstream.KeyValueConfig{Bucket: "recreated-cache", History: 1}
	kv, err := srv.JS.CreateKeyValue(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := kv.Put(ctx, "k", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Put(ctx, "old", []byte("1")); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	c := New(kv, decodeInt(&calls), nil)
	c.Conn = srv.NC
	run(t, c)
	if r := c.Lookup("k"); !r.Found || r.Value != 9 {
		t.Fatalf("Lookup(k) before the re-creation = %+v, want 9", r)
	}

	recreate(t, srv.JS, cfg)
	if _, err := kv.Put(ctx, "k", []byte("100")); err != nil {
		t.Fatal(err)
	}
	if v, rev, err := c.Read(ctx, "k"); err != nil || v != 100 || rev != 1 {
		t.Fatalf("Read(k) after the bucket was re-created = %d at revision %d (err %v), want 100 at revision 1", v, rev, err)
	}
	natstest.Eventually(t, 15*time.Second, "the cache's view is the re-created bucket (k=100, old gone)", func() bool {
		k, old := c.Lookup("k"), c.Lookup("old")
		return k.Found && k.Value == 100 && old.Known && !old.Found
	})
}
