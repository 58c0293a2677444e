// Package natstest starts a real embedded nats-server with JetStream for one
// test. It is internal and imported only from _test.go files (depguard
// enforces this), so production code cannot depend on it.
package natstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
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

// StartListeningEmpty starts a listening server like StartListening with
// none of flyball's streams: a cluster to restore a backup into.
func StartListeningEmpty(t testing.TB) (*Server, string) {
	t.Helper()
	srv := start(t, &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT})
	return srv, srv.Server.ClientURL()
}

func start(t testing.TB, opts *server.Options) *Server {
	t.Helper()
	s := launch(t, opts)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("natstest: server not ready within 10s")
	}
	nc, js := connect(t, "", nats.InProcessServer(s))
	return &Server{Server: s, NC: nc, JS: js}
}

// launch starts a JetStream server with a store in a per-test temporary
// directory, shut down in t.Cleanup. It does not wait for it to be ready.
func launch(t testing.TB, opts *server.Options) *server.Server {
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
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// StartWithUsers starts a listening JetStream server, without flyball's
// streams, whose clients log in as one of users (each with its own
// permissions); ConnectAs connects to it. It is shut down in t.Cleanup.
func StartWithUsers(t testing.TB, users ...*server.User) *server.Server {
	t.Helper()
	s := launch(t, &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, Users: users})
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("natstest: server not ready within 10s")
	}
	return s
}

// ConnectAs opens a connection to s as user, closed in t.Cleanup. opts
// come after its own, so a test can add one (an error handler).
func ConnectAs(t testing.TB, s *server.Server, user, password string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return connect(t, s.ClientURL(), append([]nats.Option{nats.UserInfo(user, password)}, opts...)...)
}

// StartDenying starts a server like StartWithUsers with two users, both
// with password "pw": admin, with every permission, and user, who may
// publish to any subject but deny (a service user missing one grant). It
// creates every flyball stream, consumer and KV bucket as admin and
// returns the server, admin's connection, and one as user with opts (an
// error handler, for the violations the server reports asynchronously).
func StartDenying(t testing.TB, user, deny string, opts ...nats.Option) (srv *server.Server, admin, js jetstream.JetStream) {
	t.Helper()
	srv = StartWithUsers(t,
		&server.User{Username: "admin", Password: "pw"},
		&server.User{Username: user, Password: "pw", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{deny}},
		}},
	)
	nc, admin := ConnectAs(t, srv, "admin", "pw")
	ensure(t, &Server{Server: srv, NC: nc, JS: admin})
	_, js = ConnectAs(t, srv, user, "pw", opts...)
	return srv, admin, js
}

// LostAcks starts a server with two users and connects as each: js as
// one with every permission, and lossy as one that may not subscribe to
// its inboxes, so that its publishes are stored but their acks reach
// nobody (a publish whose ack was lost, on demand). lossy's default
// timeout is timeout (nats.go's own when zero). Refused subscriptions are
// the point, so its connection does not report them.
func LostAcks(t testing.TB, timeout time.Duration) (srv *server.Server, js jetstream.JetStream, lossyNC *nats.Conn, lossy jetstream.JetStream) {
	t.Helper()
	srv = StartWithUsers(t,
		&server.User{Username: "flyball", Password: "pw"},
		&server.User{Username: "lossy", Password: "pw", Permissions: &server.Permissions{
			Subscribe: &server.SubjectPermission{Deny: []string{"_INBOX.>"}},
		}},
	)
	_, js = ConnectAs(t, srv, "flyball", "pw")
	lossyNC, err := nats.Connect(srv.ClientURL(), nats.UserInfo("lossy", "pw"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lossyNC.Close)
	var opts []jetstream.JetStreamOpt
	if timeout > 0 {
		opts = append(opts, jetstream.WithDefaultTimeout(timeout))
	}
	lossy, err = jetstream.New(lossyNC, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return srv, js, lossyNC, lossy
}

// PutJSON stores v, encoded as JSON, under key in KV bucket.
func PutJSON(t testing.TB, js jetstream.JetStream, bucket, key string, v any) {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), key, b); err != nil {
		t.Fatal(err)
	}
}

// PublishMany publishes n messages, the i-th one's subject and data
// from msg, asynchronously: thousands of tasks are seeded in a fraction
// of the time a Put each takes. It waits for the acks every 1,000 (nats.go
// lets 4,000 wait at most, and a publish past that gives up after 200 ms,
// "stalled with too many outstanding async published messages", which a
// loaded machine's server took to ack one), until ctx ends.
func PublishMany(ctx context.Context, t testing.TB, js jetstream.JetStream, n int, msg func(i int) (subject string, data []byte)) {
	t.Helper()
	const batch = 1000
	for i := range n {
		subject, data := msg(i)
		if _, err := js.PublishAsync(subject, data); err != nil {
			t.Fatal(err)
		}
		if (i+1)%batch == 0 || i == n-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				t.Fatalf("natstest: publishing %d messages did not complete: %v", n, ctx.Err())
			}
		}
	}
}

// StartWithStreams starts a server and creates every flyball stream,
// consumer and KV bucket, with opts.
func StartWithStreams(t testing.TB, opts ...streams.Option) *Server {
	t.Helper()
	srv := Start(t)
	ensure(t, srv, opts...)
	return srv
}

func ensure(t testing.TB, srv *Server, opts ...streams.Option) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := streams.Ensure(ctx, srv.JS, opts...); err != nil {
		t.Fatalf("natstest: ensure streams: %v", err)
	}
}

// Connect opens an extra in-process client connection, closed in t.Cleanup.
func (s *Server) Connect(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return connect(t, "", nats.InProcessServer(s.Server))
}

// connect opens a client connection and its JetStream context; the
// connection is closed in t.Cleanup (before a server started earlier in
// the test shuts down).
func connect(t testing.TB, addr string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	return connectJS(t, addr, nil, opts...)
}

func connectJS(t testing.TB, addr string, jsOpts []jetstream.JetStreamOpt, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	// nats.go's 2 s connect timeout is shorter than the stalls a loaded
	// CI machine gives a -race run (make test failed once with "read
	// pipe: i/o timeout" while every pull of the test missed its
	// heartbeat at the same instant); the caller's options come after,
	// so a test of the timeout itself can set its own.
	opts = append([]nats.Option{nats.Timeout(10 * time.Second)}, opts...)
	nc, err := nats.Connect(addr, opts...)
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jsOpts...)
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

// Cluster is n embedded JetStream servers joined by routes, each listening
// on random 127.0.0.1 client and cluster ports. Every route runs through a
// proxy of the test's own, so Kill can cut a server off without warning.
type Cluster struct {
	Servers []*server.Server
	links   []*link
}

// AwaitAcked waits up to 30 s (a huge message takes long to decode under
// -race on a busy machine) until the durable has acked stream
// sequence seq (its ack floor reaches it): the service consuming it has
// handled the message.
func AwaitAcked(t testing.TB, js jetstream.JetStream, stream, durable string, seq uint64) {
	t.Helper()
	cons, err := js.Consumer(context.Background(), stream, durable)
	if err != nil {
		t.Fatal(err)
	}
	Eventually(t, 30*time.Second, fmt.Sprintf("%s/%s acks sequence %d", stream, durable, seq), func() bool {
		info, err := cons.Info(context.Background())
		return err == nil && info.AckFloor.Stream >= seq
	})
}

// Read returns every message stream holds on subject (a filter), in
// stream order, through an ordered consumer: as many as the consumer
// counted pending when it was created.
func Read(t testing.TB, js jetstream.JetStream, stream, subject string) []jetstream.Msg {
	t.Helper()
	ctx := context.Background()
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	pending := int(cons.CachedInfo().NumPending)
	var msgs []jetstream.Msg
	for len(msgs) < pending {
		batch, err := cons.Fetch(pending-len(msgs), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := len(msgs)
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		if len(msgs) == n {
			t.Fatalf("read %d of the %d messages on %s %s: %v", n, pending, stream, subject, batch.Error())
		}
	}
	return msgs
}

// ReadEvents returns every message stream holds on subject, like Read,
// decoded as CloudEvents. A message that does not decode fails the test,
// naming its stream sequence and subject: a test reading events never
// carries on with one it skipped.
func ReadEvents(t testing.TB, js jetstream.JetStream, stream, subject string) []events.Event {
	t.Helper()
	msgs := Read(t, js, stream, subject)
	evs := make([]events.Event, 0, len(msgs))
	for _, m := range msgs {
		e, err := events.Decode(m.Headers(), m.Data())
		if err != nil {
			var seq uint64
			if meta, merr := m.Metadata(); merr == nil {
				seq = meta.Sequence.Stream
			}
			t.Fatalf("%s sequence %d (%s): not a CloudEvent: %v", stream, seq, m.Subject(), err)
		}
		evs = append(evs, e)
	}
	return evs
}

// Subscribe subscribes nc to subject with cb and flushes, so that the
// server has the interest before the caller publishes: without the flush
// a message published right after can reach the server first and be
// missed. The subscription ends in t.Cleanup.
func Subscribe(t testing.TB, nc *nats.Conn, subject string, cb nats.MsgHandler) *nats.Subscription {
	t.Helper()
	sub, err := nc.Subscribe(subject, cb)
	return subscribed(t, nc, subject, sub, err)
}

// ChanSubscribe is Subscribe delivering to ch (nats.go's ChanSubscribe):
// flushed, so the server has the interest before the caller publishes,
// and ended in t.Cleanup.
func ChanSubscribe(t testing.TB, nc *nats.Conn, subject string, ch chan *nats.Msg) *nats.Subscription {
	t.Helper()
	sub, err := nc.ChanSubscribe(subject, ch)
	return subscribed(t, nc, subject, sub, err)
}

func subscribed(t testing.TB, nc *nats.Conn, subject string, sub *nats.Subscription, err error) *nats.Subscription {
	t.Helper()
	if err != nil {
		t.Fatalf("natstest: subscribe to %s: %v", subject, err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatalf("natstest: flush the subscription to %s: %v", subject, err)
	}
	return sub
}

// CaughtUp reports whether durable has settled (acked or terminated)
// every message its stream holds for it. It is a condition for
// Eventually. NumPending and NumAckPending alone are not enough: the
// server counts a stored message into a consumer's NumPending
// asynchronously, after it has acked the publish, so a consumer read an
// instant after a publish can show nothing pending and nothing in flight
// before it has even seen the message. The ack floor reaching the last
// matching sequence cannot be read early.
func CaughtUp(ctx context.Context, js jetstream.JetStream, stream, durable string) bool {
	cons, err := js.Consumer(ctx, stream, durable)
	if err != nil {
		return false
	}
	info, err := cons.Info(ctx)
	if err != nil || info.NumPending != 0 || info.NumAckPending != 0 {
		return false
	}
	last, err := lastFor(ctx, js, stream, info.Config)
	return err == nil && info.AckFloor.Stream >= last
}

// lastFor is the sequence of the stream's last message that cfg's
// filters match, or 0 when none does.
func lastFor(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig) (uint64, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	filters := cfg.FilterSubjects
	if cfg.FilterSubject != "" {
		filters = append(filters, cfg.FilterSubject)
	}
	if len(filters) == 0 {
		info, err := s.Info(ctx)
		if err != nil {
			return 0, err
		}
		return info.State.LastSeq, nil
	}
	var last uint64
	for _, f := range filters {
		m, err := s.GetLastMsgForSubject(ctx, f)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, err
		}
		last = max(last, m.Sequence)
	}
	return last, nil
}

// ElectionCluster starts a 3-node cluster for a test that kills a leader
// and waits out the raft election, and connects to n1. Under -short it
// skips the test: an election takes 4-9 s.
func ElectionCluster(t *testing.T) (*Cluster, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: a raft election takes 4-9 s")
	}
	cl := StartCluster(t, 3)
	nc, js := cl.ConnectTo(t, "n1")
	return cl, nc, js
}

// StartCluster starts an n-node JetStream cluster (named n1, n2, …) and
// waits until its meta leader sees every peer. Each server has its own
// store in a per-test temporary directory; all are shut down in t.Cleanup.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	// Each server binds a route port of its own choosing (RANDOM_PORT),
	// and a link looks its target's up when a route connects through it
	// (until then it refuses the route, which the server dials again). A
	// clustered JetStream server binds its route listener only once it is
	// otherwise up, and ports picked beforehand (freePort) were free only a
	// moment: on a loaded runner another test's connection could take one
	// first, and that server would never become ready, the likely cause of
	// "cluster server n3 not ready within 20s" in
	// TestProvisionWithoutReplicasKeepsAClustersReplicas while four test
	// runs shared the machine.
	var mu sync.Mutex // c.Servers, while they are launched
	c := &Cluster{}
	routeAddr := func(j int) string {
		mu.Lock()
		var s *server.Server
		if j < len(c.Servers) {
			s = c.Servers[j]
		}
		mu.Unlock()
		if s == nil {
			return ""
		}
		if a := s.ClusterAddr(); a != nil {
			return a.String()
		}
		return ""
	}
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		var routes []*url.URL
		for j := range n {
			if j == i {
				continue
			}
			l := startLink(t, name, fmt.Sprintf("n%d", j+1), func() string { return routeAddr(j) })
			c.links = append(c.links, l)
			routes = append(routes, &url.URL{Scheme: "nats", Host: l.ln.Addr().String()})
		}
		s := launch(t, &server.Options{
			ServerName: name,
			Host:       "127.0.0.1", Port: server.RANDOM_PORT,
			// NoAdvertise: peers must not learn the real route ports and
			// connect around the proxies.
			Cluster: server.ClusterOpts{Name: "flyball-test", Host: "127.0.0.1", Port: server.RANDOM_PORT, NoAdvertise: true},
			Routes:  routes,
		})
		mu.Lock()
		c.Servers = append(c.Servers, s)
		mu.Unlock()
	}
	for _, s := range c.Servers {
		if !s.ReadyForConnections(20 * time.Second) {
			t.Fatalf("natstest: cluster server %s not ready within 20s", s.Name())
		}
	}
	// Ready for placement: a meta leader that sees every peer online, and
	// every server current with it.
	Eventually(t, 30*time.Second, fmt.Sprintf("a JetStream meta leader with %d peers online", n), func() bool {
		leader := false
		for _, s := range c.Servers {
			if s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == n {
				leader = true
			}
			if !s.JetStreamIsCurrent() {
				return false
			}
		}
		return leader
	})
	return c
}

// Server returns the server named name, or nil.
func (c *Cluster) Server(name string) *server.Server {
	for _, s := range c.Servers {
		if s.Name() == name {
			return s
		}
	}
	return nil
}

// Other names a server of the cluster other than name: where a test's
// client connects so that killing name measures the failover, not the
// client's reconnect.
func (c *Cluster) Other(name string) string {
	for _, s := range c.Servers {
		if s.Name() != name {
			return s.Name()
		}
	}
	return ""
}

// Kill cuts every route of the server named name at once, as a crash or a
// network partition does (no leadership is handed over: its peers learn
// of the loss only when its raft heartbeats stop), then shuts it down.
func (c *Cluster) Kill(t testing.TB, name string) {
	t.Helper()
	s := c.Server(name)
	if s == nil {
		t.Fatalf("natstest: no server %q", name)
	}
	for _, l := range c.links {
		if l.from == name || l.to == name {
			l.cut()
		}
	}
	s.Shutdown()
	s.WaitForShutdown()
}

// Settle runs op, an idempotent JetStream API call on a cluster that may
// still be settling (creating a replicated stream or consumer), until it
// succeeds or within has passed, giving each try its own settleTry
// deadline. One request whose reply is lost while a raft group elects its
// leader would otherwise wait out its whole timeout and fail the test
// before it measured anything (TestConsumersResumeAfterLeaderLoss did, on
// a loaded CI runner, after 30 s).
func Settle[T any](t testing.TB, within time.Duration, what string, op func(ctx context.Context) (T, error)) T {
	t.Helper()
	deadline := time.Now().Add(within)
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(t.Context(), settleTry)
		v, err := op(ctx)
		cancel()
		if err == nil {
			return v
		}
		if time.Now().After(deadline) || t.Context().Err() != nil {
			t.Fatalf("%s: not within %s (%d tries): %v", what, within, try, err)
		}
		pause := time.NewTimer(250 * time.Millisecond)
		select {
		case <-pause.C:
		case <-t.Context().Done():
			pause.Stop()
		}
	}
}

// settleTry is how long one Settle try waits for its reply.
const settleTry = 10 * time.Second

// clusterAPITimeout bounds a cluster client's JetStream API requests that
// carry no deadline of their own. Creating an R3 stream or consumer waits
// for its raft group to elect a leader, which on a loaded 2-core CI runner
// (the test packages run side by side) took longer than nats.go's default
// 5 s and failed the test before it measured anything.
const clusterAPITimeout = 30 * time.Second

// ConnectTo opens a TCP client connection to the server named name, closed
// in t.Cleanup. Its JetStream API requests time out after
// clusterAPITimeout unless their context has a deadline.
func (c *Cluster) ConnectTo(t testing.TB, name string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	s := c.Server(name)
	if s == nil {
		t.Fatalf("natstest: no server %q", name)
	}
	return connectJS(t, s.ClientURL(), []jetstream.JetStreamOpt{jetstream.WithDefaultTimeout(clusterAPITimeout)}, nats.NoReconnect())
}

// link is a TCP proxy carrying the routes one server dials to another.
type link struct {
	from, to string
	// target is the address of the route listener the link carries to,
	// empty while that server has none yet.
	target func() string
	ln     net.Listener
	mu     sync.Mutex
	conns  []net.Conn
	down   bool
}

func startLink(t testing.TB, from, to string, target func() string) *link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("natstest: route proxy: %v", err)
	}
	l := &link{from: from, to: to, target: target, ln: ln}
	go l.serve()
	t.Cleanup(l.cut)
	return l
}

func (l *link) serve() {
	for {
		in, err := l.ln.Accept()
		if err != nil {
			return
		}
		target := l.target()
		if target == "" {
			in.Close()
			continue
		}
		out, err := net.Dial("tcp", target)
		if err != nil {
			in.Close()
			continue
		}
		l.mu.Lock()
		if l.down {
			l.mu.Unlock()
			in.Close()
			out.Close()
			return
		}
		l.conns = append(l.conns, in, out)
		l.mu.Unlock()
		go pipe(in, out)
		go pipe(out, in)
	}
}

func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// cut closes the listener and every connection through it.
func (l *link) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return
	}
	l.down = true
	l.ln.Close()
	for _, c := range l.conns {
		c.Close()
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("natstest: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// EndWatch ends a KV watch the way nats.go does when it cannot re-create
// the watch's ordered consumer: it stops the next watcher from watchers,
// which closes its Updates channel. It then waits up to 10 s for the
// follower to load the bucket again (a receive from loads).
func EndWatch(t testing.TB, watchers <-chan jetstream.KeyWatcher, loads <-chan struct{}) {
	t.Helper()
	if err := (<-watchers).Stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-loads:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch was not established again")
	}
}

// Restartable is a listening JetStream server whose store outlives it: a
// NATS outage, then the server back on the same port with the same data.
type Restartable struct {
	Server *server.Server
	URL    string // nats://127.0.0.1:<port>, the same after Restart
	opts   server.Options
}

// StartRestartable starts a Restartable server with every flyball stream,
// consumer and KV bucket. It is shut down in t.Cleanup.
func StartRestartable(t testing.TB) *Restartable {
	t.Helper()
	r := &Restartable{opts: server.Options{Host: "127.0.0.1", Port: freePort(t), JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true}}
	r.start(t)
	nc, js := connect(t, r.URL)
	ensure(t, &Server{Server: r.Server, NC: nc, JS: js})
	t.Cleanup(func() {
		r.Server.Shutdown()
		r.Server.WaitForShutdown()
	})
	return r
}

// Connect opens a client that reconnects forever, every 50ms, as the
// services' connections do, closed at the end of the test. opts come
// after those (nats.ReconnectBufSize(-1), as flyball serve connects).
func (r *Restartable) Connect(t testing.TB, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(r.URL, append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// Restart shuts the server down and starts it again on the same port and
// store. Clients configured to reconnect come back on their own.
func (r *Restartable) Restart(t testing.TB) {
	t.Helper()
	r.Server.Shutdown()
	r.Server.WaitForShutdown()
	r.start(t)
}

func (r *Restartable) start(t testing.TB) {
	t.Helper()
	opts := r.opts
	s, err := server.NewServer(&opts)
	if err != nil {
		t.Fatalf("natstest: new server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("natstest: server not ready within 10s")
	}
	r.Server, r.URL = s, s.ClientURL()
}

// LastData decodes the data of the last CloudEvent stream holds on
// subject into v, and returns that data as stored.
func LastData(t testing.TB, js jetstream.JetStream, stream, subject string, v any) string {
	t.Helper()
	msgs := Read(t, js, stream, subject)
	if len(msgs) == 0 {
		t.Fatalf("nothing on %s %s", stream, subject)
	}
	m := msgs[len(msgs)-1]
	e, err := events.Decode(m.Headers(), m.Data())
	if err != nil {
		t.Fatal(err)
	}
	if err := events.DecodeData(e, v); err != nil {
		t.Fatal(err)
	}
	return string(e.Data())
}

// FetchOne fetches the one message pending for durable on stream (within
// 5 s) and settles it with settle (an ack, a nak), as a consumer would:
// a test that stands in for a service's delivery.
func FetchOne(t testing.TB, js jetstream.JetStream, stream, durable string, settle func(jetstream.Msg) error) {
	t.Helper()
	c, err := js.Consumer(t.Context(), stream, durable)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range batch.Messages() {
		n++
		if err := settle(m); err != nil {
			t.Fatal(err)
		}
	}
	if n != 1 {
		t.Fatalf("fetched %d messages of %s/%s, want 1 (err %v)", n, stream, durable, batch.Error())
	}
}
