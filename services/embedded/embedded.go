// Package embedded runs a nats-server with JetStream inside the flyball
// process, for `flyball dev` and the load test.
package embedded

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Config configures the embedded server.
type Config struct {
	// Host and Port to listen on, so the `nats` CLI can connect. Port -1
	// picks a free port; DontListen disables the listener entirely.
	// Defaults to 127.0.0.1:4222.
	Host       string
	Port       int
	DontListen bool
	// StoreDir is the JetStream file store. Required.
	StoreDir string
	// Debug enables the server's own logging.
	Debug bool
	// Sync is when the file store forces its writes to disk. The zero
	// value is nats-server's default.
	Sync Sync
}

// Sync is when JetStream's file store calls fsync. Every message reaches
// the operating system before the server acknowledges it (outside
// streams in async persist mode), so a crashed or killed nats-server
// loses none it acknowledged either way. What Sync decides is what a
// power loss or a kernel crash can take: with an interval, up to that
// much of the last acknowledged messages on a single server; with
// Always, none, for an fsync per write. Consumer state (deliveries,
// acks) is synced only with Always.
type Sync struct {
	// Always syncs every write before it is acknowledged.
	Always bool
	// Interval syncs in the background this often; zero is nats-server's
	// default, DefaultSyncInterval.
	Interval time.Duration
}

// DefaultSyncInterval is nats-server's own sync interval.
const DefaultSyncInterval = 2 * time.Minute

// RecommendedSync is flyball's choice, the default of `flyball dev` and of
// the compose stack's nats-server configs: a power loss takes at most
// about a second of acknowledged messages, and the benchmark measured no
// cost against DefaultSyncInterval (benchmarks.md, finding 41).
var RecommendedSync = Sync{Interval: time.Second}

// ParseSync reads a --nats-sync value: "always", or an interval such as
// "2m" or "1s".
func ParseSync(v string) (Sync, error) {
	if v == "always" {
		return Sync{Always: true}, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return Sync{}, fmt.Errorf("want always or a positive duration such as 2m or 1s, got %q", v)
	}
	return Sync{Interval: d}, nil
}

// IsZero reports whether s leaves nats-server's default (an interval of
// DefaultSyncInterval).
func (s Sync) IsZero() bool { return s == Sync{} }

// String is the value ParseSync reads back.
func (s Sync) String() string {
	switch {
	case s.Always:
		return "always"
	case s.IsZero():
		return DefaultSyncInterval.String()
	}
	return s.Interval.String()
}

// ParseListen splits a --listen address ("127.0.0.1:4222") into the Host
// and Port of a Config.
func ParseListen(addr string) (host string, port int, err error) {
	host, portS, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("want host:port, got %q", addr)
	}
	port, err = strconv.Atoi(portS)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q in %q", portS, addr)
	}
	return host, port, nil
}

// Start starts the server and waits until it accepts connections.
func Start(cfg Config) (*server.Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("embedded: Config.StoreDir is required")
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.Port == 0 {
		cfg.Port = 4222
	}
	s, err := server.NewServer(&server.Options{
		ServerName: "flyball-dev",
		Host:       cfg.Host,
		Port:       cfg.Port,
		DontListen: cfg.DontListen,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		NoSigs:     true,
		NoLog:      !cfg.Debug,
		// nats-server reads a zero SyncInterval as its default.
		SyncInterval: cfg.Sync.Interval,
		SyncAlways:   cfg.Sync.Always,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	if cfg.Debug {
		s.ConfigureLogger()
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return nil, errors.New("embedded nats-server: not ready within 30s (is the port in use?)")
	}
	return s, nil
}
