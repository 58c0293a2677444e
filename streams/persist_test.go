package streams

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestForgottenMessagesDoNotHideTheNextOnes pins the nats-server behaviour
// that makes WithAsyncPersist safe for flyball (docs/benchmark-findings.md,
// finding 38). A server killed before its async flush forgets the last
// messages of a stream but may have written its consumers' state past
// them. At start it must move the consumer back with the stream
// (reconcileStateWithStream), or the messages stored next, under the
// forgotten sequences, would never be delivered: a run lost for good
// instead of a zombie re-dispatched. The loss is made by hand: three run
// events are delivered and acked, the server stops, and the stream's
// message files are removed, as a crash before the flush leaves them.
func TestForgottenMessagesDoNotHideTheNextOnes(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dir := t.TempDir()
	srv, js := startJSAt(t, dir)
	if err := Ensure(ctx, js, WithAsyncPersist(true)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := js.Publish(ctx, "flyball.run.succeeded.t", []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := js.Consumer(ctx, StreamRuns, ConsumerGovernor)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(3, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
		got++
	}
	if got != 3 {
		t.Fatalf("fetched %d run events, want 3", got)
	}
	srv.Shutdown()
	srv.WaitForShutdown()

	msgs := filepath.Join(dir, "jetstream", server.DEFAULT_GLOBAL_ACCOUNT, "streams", StreamRuns, "msgs")
	entries, err := os.ReadDir(msgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Remove(filepath.Join(msgs, e.Name())); err != nil {
			t.Fatal(err)
		}
	}

	_, js = startJSAt(t, dir)
	runs, err := js.Stream(ctx, StreamRuns)
	if err != nil {
		t.Fatal(err)
	}
	if last := runs.CachedInfo().State.LastSeq; last != 0 {
		t.Fatalf("RUNS last sequence %d after its files were removed, want 0: the loss was not made", last)
	}
	info, err := js.Consumer(ctx, StreamRuns, ConsumerGovernor)
	if err != nil {
		t.Fatal(err)
	}
	// The consumer kept its three deliveries (it was ahead of the
	// stream), and its stream position went back to the stream's.
	if d := info.CachedInfo().Delivered; d.Consumer != 3 || d.Stream != 0 {
		t.Fatalf("governor consumer delivered %+v after the loss, want consumer sequence 3 kept and stream sequence moved back to 0", d)
	}
	if _, err := js.Publish(ctx, "flyball.run.succeeded.t", []byte(`{"after":"restart"}`)); err != nil {
		t.Fatal(err)
	}
	cons, err = js.Consumer(ctx, StreamRuns, ConsumerGovernor)
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatalf("the run event stored after the loss, under a forgotten sequence, was not delivered: %v", err)
	}
	if string(m.Data()) != `{"after":"restart"}` {
		t.Fatalf("delivered %q, want the event stored after the restart", m.Data())
	}
}

// startJSAt starts an in-process JetStream server storing under dir and
// connects to it; both are closed in t.Cleanup.
func startJSAt(t *testing.T, dir string) (*server.Server, jetstream.JetStream) {
	t.Helper()
	s, err := server.NewServer(&server.Options{JetStream: true, StoreDir: dir, DontListen: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	nc, err := nats.Connect("", nats.InProcessServer(s))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return s, js
}
