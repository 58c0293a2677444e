// Package embedded runs a nats-server with JetStream inside the flyball
// process, for `flyball dev` and the load test.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	srvlog "github.com/nats-io/nats-server/v2/logger"
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
	// Log, if set, gets a line every few seconds while the server is
	// still starting, which is JetStream recovering its store, and a
	// warning when the store's filesystem cannot lock it.
	Log *slog.Logger

	// progressEvery is how often Log hears of a start still under way;
	// zero is every 5 s. For tests.
	progressEvery time.Duration
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
// cost against DefaultSyncInterval (benchmark-findings.md, finding 41).
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

// ErrStoreDir marks a StartContext error about the JetStream store
// directory (Config.StoreDir): it cannot be created or written.
var ErrStoreDir = errors.New("unusable JetStream store directory")

// checkStoreDir creates the JetStream store directory dir if it is
// missing and checks that a file can be written in it. nats-server
// checks the same as it starts, but only logs what it finds.
func checkStoreDir(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".flyball-write-check-")
	if err != nil {
		return fmt.Errorf("not writable: %w", err)
	}
	name := f.Name()
	err = f.Close()
	if rmErr := os.Remove(name); err == nil {
		err = rmErr
	}
	if err != nil {
		return fmt.Errorf("not writable: %w", err)
	}
	return nil
}

// errNoLock marks a lockStore failure of the lock itself on a
// filesystem without working flock(2): StartContext warns and runs
// without the lock.
var errNoLock = errors.New("the filesystem does not support file locks")

// lockFile is the file in Config.StoreDir whose lock (lockStore) a
// server holds while it runs.
const lockFile = "flyball.lock"

// StoreInUseError is StartContext's error for a store directory another
// server holds, in this process or another one: two servers on one file
// store would each run every task (the target called twice a run) and
// could damage the store.
type StoreInUseError struct {
	Dir string // Config.StoreDir
	PID int    // the holder's process id; 0 if unknown
}

// Error names the store and its holder.
func (e *StoreInUseError) Error() string {
	holder := "another process"
	if e.PID > 0 {
		holder += fmt.Sprintf(" (pid %d)", e.PID)
	}
	return fmt.Sprintf("embedded nats-server: JetStream store %s is in use by %s", e.Dir, holder)
}

// Start is StartContext without a context: it waits as long as the
// server is starting.
func Start(cfg Config) (*server.Server, error) {
	return StartContext(context.Background(), cfg)
}

// StartContext starts the server and waits until it accepts connections,
// it fails, or ctx is done.
//
// The server holds an exclusive lock on cfg.StoreDir (its file
// flyball.lock, where flock(2) exists) from before it starts until it
// has shut down: a second server on the same store, in this process or
// another, fails with a *StoreInUseError. On a filesystem without
// working flock (NFS without lockd, some FUSE and CIFS mounts) it runs
// without the lock, as where there is no flock, and warns on cfg.Log that
// a second server on the store would not be refused: refused, it would
// not start at all there. The lock is given back once
// WaitForShutdown returns, by a goroutine that waits for it: a server
// started again on the same store in the same process may find it still
// held for a moment.
//
// nats-server reports a failure to start (JetStream's store directory,
// the port) only to its logger, and then gives up without listening:
// Start gives it a logger that keeps the fatal and error lines, and
// returns the first fatal one at once. There is no deadline while the
// server is still starting: JetStream recovers its whole store before
// the server accepts connections, which takes longer the larger the
// store (an unclean shutdown adds to it), so any fixed deadline would
// shut down a large store's recovery on every try. Instead cfg.Log hears
// every 5 s that the server is still starting, and ctx (dev's Ctrl-C)
// ends the wait.
func StartContext(ctx context.Context, cfg Config) (*server.Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("embedded: Config.StoreDir is required")
	}
	if err := checkStoreDir(cfg.StoreDir); err != nil {
		return nil, fmt.Errorf("embedded nats-server: JetStream store %s: %w (%w)", cfg.StoreDir, err, ErrStoreDir)
	}
	unlock, err := lockStore(cfg.StoreDir)
	var inUse *StoreInUseError
	switch {
	case errors.As(err, &inUse):
		return nil, err
	case errors.Is(err, errNoLock):
		// Refused, dev would not start at all on such a filesystem.
		if cfg.Log != nil {
			cfg.Log.Warn("the JetStream store's filesystem has no working file lock; running without it, so a second server on this store (another flyball dev on its --data-dir) would not be refused",
				"store", cfg.StoreDir, "err", err)
		}
		unlock = func() {}
	case err != nil:
		return nil, fmt.Errorf("embedded nats-server: JetStream store %s: %w (%w)", cfg.StoreDir, err, ErrStoreDir)
	}
	locked := false // until the server runs, each return below unlocks
	defer func() {
		if !locked {
			unlock()
		}
	}()
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
	logger := &captureLogger{fatal: make(chan struct{})}
	if cfg.Debug {
		// What ConfigureLogger would set, but behind a Fatalf that does
		// not end the process (log.Fatalf: no deferred call would run).
		stat, err := os.Stderr.Stat()
		colors := err == nil && stat.Mode()&os.ModeCharDevice != 0
		logger.inner = srvlog.NewStdLogger(false, false, false, colors, true)
	}
	s.SetLoggerV2(logger, false, false, false)
	started := make(chan struct{})
	go func() {
		defer close(started)
		s.Start()
	}()
	every := cfg.progressEvery
	if every <= 0 {
		every = 5 * time.Second
	}
	progress := time.NewTicker(every)
	defer progress.Stop()
	begun := time.Now()
	fail := func(err error) (*server.Server, error) {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, err
	}
	for {
		select {
		case <-logger.fatal:
			// Start returns right after the fatal lines it logs; it is
			// not shut down while it still runs.
			select {
			case <-started:
			case <-time.After(5 * time.Second):
			}
			return fail(fmt.Errorf("embedded nats-server (store %s): %s", cfg.StoreDir, logger.firstFatal()))
		case <-started:
			// Start returns once the client listener is up (with
			// DontListen, once startup is complete), or on a failure,
			// which it logged.
			if msg := logger.firstFatal(); msg != "" {
				return fail(fmt.Errorf("embedded nats-server (store %s): %s", cfg.StoreDir, msg))
			}
			if err := readyNow(s); err != nil {
				if errs := logger.errors(); errs != "" {
					err = fmt.Errorf("%w; it logged: %s", err, errs)
				}
				return fail(fmt.Errorf("embedded nats-server (store %s): %w", cfg.StoreDir, err))
			}
			locked = true
			go func() {
				s.WaitForShutdown()
				unlock()
			}()
			return s, nil
		case <-progress.C:
			if cfg.Log != nil {
				cfg.Log.Info("embedded nats-server still starting: JetStream is recovering its store",
					"store", cfg.StoreDir, "elapsed", time.Since(begun).Round(time.Second))
			}
		case <-ctx.Done():
			return fail(fmt.Errorf("embedded nats-server (store %s): stopped while starting, after %s: %w",
				cfg.StoreDir, time.Since(begun).Round(time.Millisecond), context.Cause(ctx)))
		}
	}
}

// readyNow reports whether s, whose Start has returned, accepts
// connections.
func readyNow(s *server.Server) error {
	if s.ReadyForConnections(time.Second) {
		return nil
	}
	return errors.New("not accepting connections after it started")
}

// captureLogger is the embedded server's logger: it keeps nats-server's
// fatal and error lines for Start to report, and passes every line on
// to inner, if set, with a fatal one as an error: it never ends the
// process.
type captureLogger struct {
	inner server.Logger
	fatal chan struct{} // closed at the first fatal line

	mu     sync.Mutex
	fatals []string
	errs   []string
}

// maxKept is how many error lines a captureLogger keeps, the last ones.
const maxKept = 5

func (l *captureLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.mu.Lock()
	if len(l.fatals) == 0 {
		close(l.fatal)
	}
	if len(l.fatals) < maxKept {
		l.fatals = append(l.fatals, msg)
	}
	l.mu.Unlock()
	if l.inner != nil {
		l.inner.Errorf("%s", msg)
	}
}

func (l *captureLogger) Errorf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.mu.Lock()
	l.errs = append(l.errs, msg)
	if len(l.errs) > maxKept {
		l.errs = l.errs[1:]
	}
	l.mu.Unlock()
	if l.inner != nil {
		l.inner.Errorf("%s", msg)
	}
}

func (l *captureLogger) Noticef(format string, v ...any) {
	if l.inner != nil {
		l.inner.Noticef(format, v...)
	}
}

func (l *captureLogger) Warnf(format string, v ...any) {
	if l.inner != nil {
		l.inner.Warnf(format, v...)
	}
}

func (l *captureLogger) Debugf(format string, v ...any) {
	if l.inner != nil {
		l.inner.Debugf(format, v...)
	}
}

func (l *captureLogger) Tracef(format string, v ...any) {
	if l.inner != nil {
		l.inner.Tracef(format, v...)
	}
}

// firstFatal is the first fatal line, or "".
func (l *captureLogger) firstFatal() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.fatals) == 0 {
		return ""
	}
	return l.fatals[0]
}

// errors is the error lines kept, joined by "; ".
func (l *captureLogger) errors() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.errs, "; ")
}
