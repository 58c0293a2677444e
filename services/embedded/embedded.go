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
