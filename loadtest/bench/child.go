package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/flyballhq/flyball/services/embedded"
)

// child is a process the benchmark started for one system run with
// StackProcess: `flyball dev`, or a bare nats-server for the ceiling and
// the nats-server baseline. It owns a scratch directory (the JetStream
// store and the process's log) that stop removes.
type child struct {
	name    string
	cmd     *exec.Cmd
	dir     string
	logPath string
	exited  chan struct{}
	waitErr error
}

// childStopTimeout is how long stop waits after SIGTERM before it kills.
const childStopTimeout = 30 * time.Second

// startChild runs exe with args, its stdout and stderr going to
// dir/<name>.log. dir belongs to the child from here on.
func startChild(name, dir, exe string, args ...string) (*child, error) {
	c := &child{name: name, dir: dir, logPath: filepath.Join(dir, name+".log"), exited: make(chan struct{})}
	logf, err := os.Create(c.logPath)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	c.cmd = exec.Command(exe, args...)
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	c.cmd.SysProcAttr = childAttrs()
	err = c.cmd.Start()
	_ = logf.Close() // the child holds its own descriptor
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s (%s): %w", name, exe, err)
	}
	go func() {
		c.waitErr = c.cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// waitReady polls ready every 50 ms until it returns true. It fails at
// once if the child exits, and after timeout, with the tail of its log.
func (c *child) waitReady(ctx context.Context, timeout time.Duration, ready func() bool) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !ready() {
		select {
		case <-c.exited:
			return fmt.Errorf("%s exited before it was ready (%s): %s", c.name, c.exitStatus(), c.tail())
		case <-deadline.C:
			return fmt.Errorf("%s not ready within %s: %s", c.name, timeout, c.tail())
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// stop sends SIGTERM, kills the child if it has not exited within
// childStopTimeout, and removes its directory. It reports an exit that
// was not clean.
func (c *child) stop() error {
	defer func() { _ = os.RemoveAll(c.dir) }()
	select {
	case <-c.exited:
		return fmt.Errorf("%s had already exited (%s): %s", c.name, c.exitStatus(), c.tail())
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
		if c.waitErr != nil {
			return fmt.Errorf("%s: %w: %s", c.name, c.waitErr, c.tail())
		}
		return nil
	case <-time.After(childStopTimeout):
		_ = c.cmd.Process.Kill()
		<-c.exited
		return fmt.Errorf("%s did not stop within %s of SIGTERM and was killed: %s", c.name, childStopTimeout, c.tail())
	}
}

// exitStatus describes how the child exited; call it once exited is closed.
func (c *child) exitStatus() string {
	if c.waitErr == nil {
		return "exit status 0"
	}
	return c.waitErr.Error()
}

// tail is the end of the child's log, on one line.
func (c *child) tail() string {
	const n = 600
	f, err := os.Open(c.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	s := strings.Join(strings.Fields(string(b)), " ")
	if s == "" {
		return "(its log is empty)"
	}
	return "log: …" + s
}

// freeAddr is a loopback address with a port that was free a moment ago.
// A child that loses the race for it fails to start, and says so.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// ServeNATS is the `flyball-bench nats-server` child: the embedded server
// `flyball dev` runs, alone, listening on --listen with its store in
// --store, until SIGTERM or ctx ends. With StackProcess it hosts the
// ceiling and the nats-server baseline, so that they run in a process of
// their own as flyball does.
func ServeNATS(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("nats-server", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	listen := fs.String("listen", "", "host:port to listen on")
	store := fs.String("store", "", "JetStream store directory")
	syncFlag := fs.String("sync", embedded.DefaultSyncInterval.String(), "when to fsync JetStream writes: always, or an interval")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("nats-server: %w", err)
	}
	if *listen == "" || *store == "" || fs.NArg() > 0 {
		return errors.New("nats-server: want --listen host:port --store dir")
	}
	host, port, err := embedded.ParseListen(*listen)
	if err != nil {
		return fmt.Errorf("nats-server: --listen: %w", err)
	}
	fsync, err := embedded.ParseSync(*syncFlag)
	if err != nil {
		return fmt.Errorf("nats-server: --sync: %w", err)
	}
	srv, err := embedded.Start(embedded.Config{Host: host, Port: port, StoreDir: *store, Sync: fsync})
	if err != nil {
		return err
	}
	<-ctx.Done()
	srv.Shutdown()
	srv.WaitForShutdown()
	return nil
}
