package embedded

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/flyballhq/flyball/services/internal/natstest"
)

func TestParseListen(t *testing.T) {
	t.Parallel()
	host, port, err := ParseListen("127.0.0.1:4222")
	if err != nil || host != "127.0.0.1" || port != 4222 {
		t.Fatalf("ParseListen(127.0.0.1:4222) = %q, %d, %v", host, port, err)
	}
	for addr, want := range map[string]string{
		"4222":            `want host:port, got "4222"`,
		"127.0.0.1:http":  `bad port "http"`,
		"127.0.0.1:70000": `bad port "70000"`,
	} {
		if _, _, err := ParseListen(addr); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseListen(%q) = %v, want an error containing %q", addr, err, want)
		}
	}
}

func TestParseSync(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]Sync{
		"always": {Always: true},
		"2m":     {Interval: 2 * time.Minute},
		"250ms":  {Interval: 250 * time.Millisecond},
	} {
		got, err := ParseSync(v)
		if err != nil || got != want {
			t.Errorf("ParseSync(%q) = %+v, %v; want %+v", v, got, err, want)
		}
		if back, err := ParseSync(got.String()); err != nil || back != got {
			t.Errorf("ParseSync(%q.String() = %q) = %+v, %v", v, got.String(), back, err)
		}
	}
	for _, v := range []string{"", "0s", "-1s", "never", "Always", "2"} {
		if _, err := ParseSync(v); err == nil || !strings.Contains(err.Error(), "want always or a positive duration") {
			t.Errorf("ParseSync(%q) = %v, want an error", v, err)
		}
	}
	if got := (Sync{}).String(); got != "2m0s" {
		t.Errorf("the zero Sync reads %q, want nats-server's default 2m0s", got)
	}
}

// TestStartAppliesSync checks the running server's JetStream settings,
// which /varz and `nats server info` report to an operator.
func TestStartAppliesSync(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sync         Sync
		wantInterval time.Duration
		wantAlways   bool
	}{
		{Sync{}, DefaultSyncInterval, false},
		{Sync{Interval: 5 * time.Second}, 5 * time.Second, false},
		{Sync{Always: true}, DefaultSyncInterval, true},
	} {
		srv, err := Start(Config{StoreDir: t.TempDir(), DontListen: true, Sync: tc.sync})
		if err != nil {
			t.Fatal(err)
		}
		got := srv.JetStreamConfig()
		srv.Shutdown()
		srv.WaitForShutdown()
		if got == nil || got.SyncInterval != tc.wantInterval || got.SyncAlways != tc.wantAlways {
			t.Errorf("Start with Sync %+v: JetStream config %+v, want sync_interval %s and sync_always %v", tc.sync, got, tc.wantInterval, tc.wantAlways)
		}
	}
}

// TestStartReportsAnUnusableStoreDirAtOnce: a store directory that cannot
// be created (here, under a regular file), or one where nats-server's
// own directory in it is no directory, is an error naming it, at once.
// nats-server logged "Can't start JetStream" to no logger and never
// listened, so Start waited 30 s and said "(is the port in use?)".
func TestStartReportsAnUnusableStoreDirAtOnce(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// nats-server keeps its files in the store's subdirectory jetstream.
	blocked := t.TempDir()
	if err := os.WriteFile(filepath.Join(blocked, "jetstream"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ dir, want string }{
		{filepath.Join(file, "jetstream"), "not a directory"},
		{blocked, "Can't start JetStream: storage directory is not a directory"},
	} {
		start := time.Now()
		srv, err := Start(Config{Port: -1, StoreDir: tc.dir})
		took := time.Since(start)
		if err == nil {
			srv.Shutdown()
			t.Fatalf("Start with the store %s: no error", tc.dir)
		}
		if took > 5*time.Second || !strings.Contains(err.Error(), tc.dir) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "port in use") {
			t.Errorf("Start with the store %s: %v after %s; want an error naming it and saying %q within 5s", tc.dir, err, took.Round(time.Millisecond), tc.want)
		}
	}
}

// TestStartReportsAPortInUseAtOnce: nats-server's own fatal error, here
// the listener's, is Start's error at once, with or without Debug. It
// was logged to no logger (Start waited 30 s and guessed) or, with Debug,
// ended the process through log.Fatalf, with no deferred call run.
func TestStartReportsAPortInUseAtOnce(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := busy.Addr().(*net.TCPAddr).Port
	for _, debug := range []bool{false, true} {
		start := time.Now()
		srv, err := Start(Config{Host: "127.0.0.1", Port: port, StoreDir: t.TempDir(), Debug: debug})
		took := time.Since(start)
		if err == nil {
			srv.Shutdown()
			t.Fatalf("Start (Debug %v) on a port in use: no error", debug)
		}
		if took > 5*time.Second || !strings.Contains(err.Error(), strconv.Itoa(port)) || !strings.Contains(err.Error(), "address already in use") {
			t.Errorf("Start (Debug %v) on a port in use: %v after %s; want nats-server's listen error within 5s", debug, err, took.Round(time.Millisecond))
		}
	}
}

// TestStartWaitsForARecoveryThatTakesLong: JetStream recovers its whole
// store before the server accepts connections; Start waits as long as
// that takes, and says every few seconds that it is waiting. The store
// here holds a stream whose metadata file is a FIFO, so its recovery
// lasts until the test writes to it. Start gave up after 30 s, in the
// middle of the recovery, with "not ready within 30s (is the port in
// use?)".
func TestStartWaitsForARecoveryThatTakesLong(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	stream := filepath.Join(dir, "jetstream", "$G", "streams", "S")
	if err := os.MkdirAll(stream, 0o750); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(stream, "meta.inf")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	progress := make(chan string, 100)
	log := slog.New(slog.NewTextHandler(chanWriter(progress), nil))
	type result struct {
		srv *server.Server
		err error
	}
	done := make(chan result, 1)
	go func() {
		srv, err := Start(Config{Port: -1, StoreDir: dir, Log: log, progressEvery: 50 * time.Millisecond})
		done <- result{srv, err}
	}()
	// Three progress lines, then the recovery may end.
	for range 3 {
		select {
		case line := <-progress:
			if !strings.Contains(line, "still starting") || !strings.Contains(line, dir) {
				t.Errorf("progress line %q, want it to say the server is still starting and name %s", line, dir)
			}
		case r := <-done:
			t.Fatalf("Start returned (%v) while JetStream was still recovering", r.err)
		}
	}
	f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("Start after the recovery: %v", r.err)
	}
	r.srv.Shutdown()
	r.srv.WaitForShutdown()
}

// TestStartContextEndsWithItsContext: the wait for a server still
// starting ends with the context (dev's Ctrl-C), naming the store.
func TestStartContextEndsWithItsContext(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	stream := filepath.Join(dir, "jetstream", "$G", "streams", "S")
	if err := os.MkdirAll(stream, 0o750); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(stream, "meta.inf")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	progress := make(chan string, 100)
	log := slog.New(slog.NewTextHandler(chanWriter(progress), nil))
	done := make(chan error, 1)
	go func() {
		srv, err := StartContext(ctx, Config{Port: -1, StoreDir: dir, Log: log, progressEvery: 50 * time.Millisecond})
		if srv != nil {
			srv.Shutdown()
		}
		done <- err
	}()
	<-progress
	cancel()
	// The recovery goroutine stays blocked on the FIFO until it has a
	// writer: give it one, so the test leaves nothing behind.
	defer func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			_ = f.Close()
		}
	}()
	if err := <-done; err == nil || !strings.Contains(err.Error(), dir) || !errors.Is(err, context.Canceled) {
		t.Fatalf("StartContext cancelled while starting: %v, want context.Canceled naming %s", err, dir)
	}
}

// TestStartRefusesAStoreInUse: a second server on a store directory a
// running one holds fails at once with a *StoreInUseError naming the
// store and the holder's pid; once the first has shut down, the store
// starts again. Two servers on one store (two flyball dev on one
// --data-dir) both started: both ran every task, and the store could be
// damaged.
func TestStartRefusesAStoreInUse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, err := Start(Config{Port: -1, StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { first.Shutdown(); first.WaitForShutdown() }()
	second, err := Start(Config{Port: -1, StoreDir: dir})
	if second != nil {
		second.Shutdown()
		second.WaitForShutdown()
	}
	var inUse *StoreInUseError
	if !errors.As(err, &inUse) || inUse.PID != os.Getpid() || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("a second Start on the store %s while the first runs: %v; want a StoreInUseError naming it and pid %d", dir, err, os.Getpid())
	}
	first.Shutdown()
	first.WaitForShutdown()
	natstest.Eventually(t, 10*time.Second, "the store starts again once its server has shut down", func() bool {
		again, err := Start(Config{Port: -1, StoreDir: dir})
		if err != nil {
			return false
		}
		again.Shutdown()
		again.WaitForShutdown()
		return true
	})
}

// chanWriter sends each write (a log line) on a channel.
type chanWriter chan string

func (c chanWriter) Write(p []byte) (int, error) {
	c <- string(p)
	return len(p), nil
}
