package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/embedded"
)

// natsEnv is the NATS side of one system run: a fresh embedded server with
// its own file store (StackInProcess), or the external server.
type natsEnv struct {
	srv *server.Server
	dir string
	url string
	// nc and js are the load generator's own connection.
	nc *nats.Conn
	js jetstream.JetStream
	// pubErrs counts async publishes the server refused.
	pubErrs atomic.Int64
	// lastPubErr is the most recent refusal.
	lastPubErr atomic.Value
}

// startNATS starts a fresh embedded server (or connects to the external
// one) and connects the load generator.
func (r *runner) startNATS() (*natsEnv, error) {
	e := &natsEnv{url: r.cfg.NATSURL}
	if r.cfg.Stack == StackInProcess {
		dir, err := os.MkdirTemp("", "flyball-bench-")
		if err != nil {
			return nil, err
		}
		e.dir = dir
		srv, err := embedded.Start(embedded.Config{StoreDir: dir, DontListen: true})
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		e.srv = srv
	}
	nc, err := e.connect("flyball-bench")
	if err != nil {
		e.close()
		return nil, err
	}
	e.nc = nc
	e.js, err = jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(4096),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
			e.pubErrs.Add(1)
			e.lastPubErr.Store(err.Error())
		}))
	if err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// connect opens a new connection to the server.
func (e *natsEnv) connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	opts = append(opts, nats.Name(name), nats.MaxReconnects(-1))
	if e.srv != nil {
		opts = append(opts, nats.InProcessServer(e.srv))
		return nats.Connect("", opts...)
	}
	return nats.Connect(e.url, opts...)
}

// waitPublished waits for every async publish to be acknowledged and
// reports how many the server refused.
func (e *natsEnv) waitPublished(ctx context.Context) error {
	select {
	case <-e.js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	}
	if n := e.pubErrs.Swap(0); n > 0 {
		last, _ := e.lastPubErr.Load().(string)
		return fmt.Errorf("%d async publishes failed, last: %s", n, last)
	}
	return nil
}

func (e *natsEnv) close() {
	if e.nc != nil {
		e.nc.Close()
	}
	if e.srv != nil {
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
	}
	if e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
}

// serverVersion is the version of the server the load generator talks to.
func (e *natsEnv) serverVersion() string { return e.nc.ConnectedServerVersion() }

// waitUntil blocks until t or until ctx ends.
func waitUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// poll calls cond every interval until it returns true, ctx ends or the
// timeout passes.
func poll(ctx context.Context, timeout, interval time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(interval)
	defer t.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
