package bench

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestChildThatExitsEarlyQuotesItsLog checks that a stack process that
// dies before it is ready fails the start at once, with its exit status
// and the end of its log, and leaves no scratch directory behind.
func TestChildThatExitsEarlyQuotesItsLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir() + "/child"
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := startChild("flyball-dev", dir, "/bin/sh", "-c", "echo '--listen: address already in use' >&2; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = c.waitReady(t.Context(), time.Minute, func() bool { return false })
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("waitReady = %v, want the exit status and the log's last line", err)
	}
	if waited := time.Since(start); waited > 30*time.Second {
		t.Errorf("waitReady took %s: it should fail as soon as the child exits", waited)
	}
	if err := c.stop(); err == nil || !strings.Contains(err.Error(), "had already exited") {
		t.Errorf("stop after an early exit = %v, want it reported", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("scratch directory after stop: %v, want it removed", err)
	}
}

// TestChildStopTerminates checks that stop ends a running child with
// SIGTERM and reports an exit that was not clean.
func TestChildStopTerminates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir() + "/child"
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := startChild("nats-server", dir, "/bin/sh", "-c", "echo ready; exec sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.waitReady(t.Context(), time.Minute, func() bool {
		b, _ := os.ReadFile(c.logPath)
		return strings.Contains(string(b), "ready")
	}); err != nil {
		t.Fatal(err)
	}
	err = c.stop()
	if err == nil || !strings.Contains(err.Error(), "signal: terminated") {
		t.Fatalf("stop = %v, want the SIGTERM exit reported", err)
	}
	select {
	case <-c.exited:
	default:
		t.Fatal("stop returned before the child exited")
	}
}

// TestServeNATSRefusesBadArguments checks the nats-server child's usage
// errors.
func TestServeNATSRefusesBadArguments(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		nil,
		{"--listen", "127.0.0.1:4222"},
		{"--listen", "127.0.0.1:4222", "--store"},
		{"--port", "4222", "--store", "/tmp/x"},
		{"--listen", "nohost", "--store", "/tmp/x"},
	} {
		if err := ServeNATS(t.Context(), args); err == nil || !strings.HasPrefix(err.Error(), "nats-server: ") {
			t.Errorf("ServeNATS(%q) = %v, want a usage error", args, err)
		}
	}
}
