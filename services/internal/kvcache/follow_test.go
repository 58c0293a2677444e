package kvcache

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/natstest"
)

// TestFollowerWatchesAgainWhenAWatchEnds ends a watch the way nats.go does
// when it cannot re-create the watch's consumer (its Updates channel
// closes), changes the bucket while no watch is up, and checks that the
// follower replays it: changed keys are applied, a key purged without a
// trace is pruned, and writes after the replay keep arriving.
func TestFollowerWatchesAgainWhenAWatchEnds(t *testing.T) {
	kv := newBucket(t)
	ctx := t.Context()
	for _, k := range []string{"a", "b", "c"} {
		if _, err := kv.Put(ctx, k, []byte(k+"1")); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	view := map[string]string{}
	applied := make(chan string, 16)
	loads := make(chan map[string]string, 4)
	watchers := make(chan jetstream.KeyWatcher, 4)
	ended := make(chan error, 4)
	f := Follower{
		KV: kv,
		Apply: func(e jetstream.KeyValueEntry) {
			mu.Lock()
			if e.Operation() == jetstream.KeyValuePut {
				view[e.Key()] = string(e.Value())
			} else {
				delete(view, e.Key())
			}
			mu.Unlock()
			applied <- e.Key()
		},
		Loaded: func() {
			mu.Lock()
			loads <- maps.Clone(view)
			mu.Unlock()
		},
		Prune: func(keep func(string) bool) {
			mu.Lock()
			maps.DeleteFunc(view, func(k, _ string) bool { return !keep(k) })
			mu.Unlock()
		},
		// The bucket changes while no watch is up: b is purged with its
		// marker, c rewritten, d created.
		Ended: func(err error) {
			if err := kv.Purge(ctx, "b"); err != nil {
				t.Error(err)
			}
			if err := kv.PurgeDeletes(ctx, jetstream.DeleteMarkersOlderThan(-1)); err != nil {
				t.Error(err)
			}
			if _, err := kv.Put(ctx, "c", []byte("c2")); err != nil {
				t.Error(err)
			}
			if _, err := kv.Put(ctx, "d", []byte("d1")); err != nil {
				t.Error(err)
			}
			ended <- err
		},
		Watching: func(w jetstream.KeyWatcher) { watchers <- w },
	}
	runFollower(t, &f)

	want := map[string]string{"a": "a1", "b": "b1", "c": "c1"}
	if got := recv(t, loads, "first snapshot"); !maps.Equal(got, want) {
		t.Fatalf("first snapshot = %v, want %v", got, want)
	}
	drain(applied)
	if err := recv(t, watchers, "first watcher").Stop(); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, ended, "end of the first watch"); err == nil {
		t.Fatal("Ended got no reason")
	}
	recv(t, watchers, "second watcher")
	want = map[string]string{"a": "a1", "c": "c2", "d": "d1"}
	if got := recv(t, loads, "replay"); !maps.Equal(got, want) {
		t.Fatalf("after the replay the view is %v, want %v (b purged while no watch was up must be pruned)", got, want)
	}
	drain(applied)
	if _, err := kv.Put(ctx, "e", []byte("e1")); err != nil {
		t.Fatal(err)
	}
	if k := recv(t, applied, "a write after the replay"); k != "e" {
		t.Fatalf("applied %q after the replay, want e", k)
	}
}

func TestFollowerStartFailsOnAMissingBucket(t *testing.T) {
	srv := natstest.Start(t)
	kv, err := srv.JS.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.JS.DeleteKeyValue(t.Context(), "gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := (Follower{KV: kv, Apply: func(jetstream.KeyValueEntry) {}}).Start(t.Context()); err == nil {
		t.Fatal("Start on a deleted bucket succeeded")
	}
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for the %s", what)
		panic("unreachable")
	}
}

func drain[T any](ch <-chan T) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// TestKeySetHasExactlyTheAddedKeys checks the replay's key set, which
// keeps hashes instead of the keys: every added key is found, before and
// after more adds, and keys never added are not.
func TestKeySetHasExactlyTheAddedKeys(t *testing.T) {
	t.Parallel()
	k := newKeySet()
	const n = 10000
	for i := range n / 2 {
		k.add(fmt.Sprintf("task-%d", i))
	}
	if !k.has("task-0") || k.has("task-x") {
		t.Fatal("after the first adds: want task-0 found and task-x not")
	}
	for i := n / 2; i < n; i++ { // adds after a lookup are found too
		k.add(fmt.Sprintf("task-%d", i))
	}
	for i := range n {
		if !k.has(fmt.Sprintf("task-%d", i)) {
			t.Fatalf("task-%d added but not found", i)
		}
	}
	for i := n; i < 2*n; i++ {
		if k.has(fmt.Sprintf("task-%d", i)) {
			t.Fatalf("task-%d found but never added", i)
		}
	}
	if newKeySet().has("task-0") {
		t.Fatal("an empty set has task-0")
	}
}

// TestFollowerCatchesUpAfterNATSRestarts: the server goes down and comes
// back with its store. A write after the reconnect reaches the follower
// at once. Before, the watch's consumer, gone with the old server, was
// re-created only when nats.go's heartbeat check noticed (two 5 s
// heartbeats missed): a timer dispatched no slot written in those 5-20 s.
func TestFollowerCatchesUpAfterNATSRestarts(t *testing.T) {
	t.Parallel()
	srv := natstest.StartRestartable(t)
	nc, js := srv.Connect(t)
	ctx := t.Context()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "restart", Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	applied := make(chan string, 16)
	loads := make(chan struct{}, 4)
	f := Follower{
		KV: kv, Conn: nc,
		Apply:  func(e jetstream.KeyValueEntry) { applied <- e.Key() + "=" + string(e.Value()) },
		Loaded: func() { loads <- struct{}{} },
	}
	runFollower(t, &f)
	recv(t, loads, "first snapshot")

	srv.Restart(t)
	natstest.Eventually(t, 10*time.Second, "the client reconnects", nc.IsConnected)
	if _, err := kv.Put(ctx, "k", []byte("after")); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(3 * time.Second)
	for {
		select {
		case got := <-applied:
			if got == "k=after" {
				return
			}
		case <-deadline:
			t.Fatal("a write 3 s after NATS came back has not reached the follower")
		}
	}
}

// runFollower starts f and runs its loop until the test ends.
func runFollower(t *testing.T, f *Follower) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	loop, err := f.Start(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); loop() }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestFollowerReplaysABucketReCreatedUnderIt deletes the bucket's stream
// and creates it again while the watch runs, quicker than nats.go's
// missed-heartbeat check (two 5 s heartbeats): the watch does not end.
// nats.go re-creates its consumer later at the old stream's last
// sequence + 1, so the new bucket's first writes would never arrive.
// The follower must notice the new stream, apply its writes and prune
// the old keys: with fewer writes in the new bucket than the view saw
// (its sequence went back, and it was created again), and with more
// (only its creation time tells it from the old one).
func TestFollowerReplaysABucketReCreatedUnderIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		writes int // to the new bucket; the old one got 10
	}{
		{"fewer writes", 3},
		{"more writes", 25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := natstest.Start(t)
			ctx := t.Context()
			cfg := jetstream.KeyValueConfig{Bucket: "recreated", History: 1}
			kv, err := srv.JS.CreateKeyValue(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 10 {
				if _, err := kv.Put(ctx, fmt.Sprintf("old-%d", i), []byte("1")); err != nil {
					t.Fatal(err)
				}
			}
			var mu sync.Mutex
			view := map[string]string{}
			loads := make(chan struct{}, 4)
			f := Follower{
				KV: kv, Conn: srv.NC,
				Apply: func(e jetstream.KeyValueEntry) {
					mu.Lock()
					defer mu.Unlock()
					if e.Operation() == jetstream.KeyValuePut {
						view[e.Key()] = string(e.Value())
					} else {
						delete(view, e.Key())
					}
				},
				Prune: func(keep func(string) bool) {
					mu.Lock()
					defer mu.Unlock()
					maps.DeleteFunc(view, func(k, _ string) bool { return !keep(k) })
				},
				Loaded: func() { trySend(loads) }, // replays past the buffer must not block
			}
			runFollower(t, &f)
			recv(t, loads, "first snapshot")

			recreate(t, srv.JS, cfg)
			want := map[string]string{}
			for i := range tc.writes {
				k := fmt.Sprintf("new-%d", i)
				if _, err := kv.Put(ctx, k, []byte("2")); err != nil {
					t.Fatal(err)
				}
				want[k] = "2"
			}
			natstest.Eventually(t, 15*time.Second, "the follower's view is the re-created bucket (its writes applied, the old keys pruned)", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return maps.Equal(view, want)
			})
		})
	}
}

// recreate deletes the bucket's stream and creates the bucket again, as
// an operator deleting it and running flyball provision would.
func recreate(t *testing.T, js jetstream.JetStream, cfg jetstream.KeyValueConfig) {
	t.Helper()
	if err := js.DeleteKeyValue(t.Context(), cfg.Bucket); err != nil {
		t.Fatal(err)
	}
	// The server may still be removing the old stream's store: creating
	// it again failed now and then under -race with "error creating
	// store for stream" (err_code 10049).
	natstest.Settle(t, 10*time.Second, "create the bucket again", func(ctx context.Context) (jetstream.KeyValue, error) {
		return js.CreateKeyValue(ctx, cfg)
	})
}

// TestFollowerSaysWhenItCannotReadItsStream: the follower's user loses
// $JS.API.STREAM.INFO on the bucket's stream (a custom ACL), so the
// follower cannot tell a re-created bucket any more. Before, each failed
// read was dropped without a word and detection was off for good,
// silently. It must warn once, naming the bucket and the error, and say
// when reading works again.
func TestFollowerSaysWhenItCannotReadItsStream(t *testing.T) {
	t.Parallel()
	const bucket = "unreadable"
	users := func(deny ...string) []*server.User {
		return []*server.User{{Username: "svc", Password: "pw", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: deny},
		}}}
	}
	srv := natstest.StartWithUsers(t, users()...)
	nc, js := natstest.ConnectAs(t, srv, "svc", "pw", nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	logs := make(chan slog.Record, 64)
	loads := make(chan struct{}, 16)
	f := Follower{
		KV: kv, Conn: nc, Log: slog.New(recordHandler(logs)),
		Apply:  func(jetstream.KeyValueEntry) {},
		Loaded: func() { trySend(loads) },
	}
	runFollower(t, &f)
	recv(t, loads, "first snapshot")

	reload := func(deny ...string) {
		t.Helper()
		opts := &server.Options{
			Host: "127.0.0.1", Port: srv.Addr().(*net.TCPAddr).Port,
			JetStream: true, StoreDir: filepath.Dir(srv.StoreDir()), NoSigs: true, NoLog: true,
			Users: users(deny...),
		}
		if err := srv.ReloadOptions(opts); err != nil {
			t.Fatal(err)
		}
	}
	reload("$JS.API.STREAM.INFO.KV_" + bucket)
	warn := awaitLog(t, logs, slog.LevelWarn, "warning that the stream cannot be read")
	if got := recordAttr(warn, "bucket"); got != bucket {
		t.Fatalf("warning %q names bucket %q, want %q", warn.Message, got, bucket)
	}
	if recordAttr(warn, "err") == "" {
		t.Fatalf("warning %q has no err", warn.Message)
	}
	reload()
	awaitLog(t, logs, slog.LevelInfo, "note that reading the stream works again")
}

// awaitLog returns the next record at level from logs.
func awaitLog(t *testing.T, logs <-chan slog.Record, level slog.Level, what string) slog.Record {
	t.Helper()
	for {
		if r := recv(t, logs, what); r.Level == level {
			return r
		}
	}
}

func recordAttr(r slog.Record, key string) string {
	var v string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}

// recordHandler is a slog.Handler that sends each record to ch, dropping
// it when ch is full.
type recordHandler chan<- slog.Record

func (recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h <- r:
	default:
	}
	return nil
}
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordHandler) WithGroup(string) slog.Handler      { return h }

// trySend signals ch without blocking the follower when nobody reads it.
func trySend(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
