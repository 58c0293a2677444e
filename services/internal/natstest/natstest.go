// Package natstest starts a real embedded nats-server with JetStream for one
// test. It is internal and imported only from _test.go files (depguard
// enforces this), so production code cannot depend on it.
package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/streams"
)

// Server is an embedded JetStream server with one client connection.
type Server struct {
	Server *server.Server
	NC     *nats.Conn
	JS     jetstream.JetStream
}

// Start starts a server with a file store in a per-test temporary directory
// and connects to it in-process. Everything is shut down in t.Cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, &server.Options{DontListen: true})
}

// StartListening starts a server like StartWithStreams (every flyball
// stream, consumer and KV bucket exists) that also listens on a random
// 127.0.0.1 port, for tests that run a separate process (the CLI binary)
// against it. It returns the server and its client URL (nats://127.0.0.1:<port>).
func StartListening(t testing.TB) (*Server, string) {
	t.Helper()
	srv := start(t, &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT})
	ensure(t, srv)
	return srv, srv.Server.ClientURL()
}

func start(t testing.TB, opts *server.Options) *Server {
	t.Helper()
	opts.JetStream = true
	opts.StoreDir = t.TempDir()
	opts.NoSigs = true
	opts.NoLog = true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("natstest: new server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("natstest: server not ready within 10s")
	}
	nc, err := nats.Connect("", nats.InProcessServer(s))
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	t.Cleanup(func() {
		nc.Close()
		s.Shutdown()
		s.WaitForShutdown()
	})
	return &Server{Server: s, NC: nc, JS: js}
}

// StartWithStreams starts a server and creates every flyball stream,
// consumer and KV bucket.
func StartWithStreams(t testing.TB) *Server {
	t.Helper()
	srv := Start(t)
	ensure(t, srv)
	return srv
}

func ensure(t testing.TB, srv *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := streams.Ensure(ctx, srv.JS); err != nil {
		t.Fatalf("natstest: ensure streams: %v", err)
	}
}

// Connect opens an extra in-process client connection, closed in t.Cleanup.
func (s *Server) Connect(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect("", nats.InProcessServer(s.Server))
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	return nc, js
}

// Eventually polls cond every 10ms until it returns true or the deadline
// passes, then fails the test with msg. It replaces sleeps in tests.
func Eventually(t testing.TB, within time.Duration, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, msg)
		}
		<-tick.C
	}
}
