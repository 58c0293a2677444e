package bench

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
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

// TestChildDiesWithTheBenchmark checks that a stack process does not
// outlive a benchmark that is killed: the kernel sends it SIGTERM.
func TestChildDiesWithTheBenchmark(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("Pdeathsig is Linux-only; elsewhere a killed benchmark leaves its stack process running")
	}
	// This test binary plays the benchmark (TestMain's "child-parent"):
	// it starts a child with startChild, prints its PID and is killed.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	parent := exec.Command(exe, "child-parent", t.TempDir())
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	pid := 0
	for sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "child pid "); ok {
			pid, _ = strconv.Atoi(n)
			break
		}
	}
	if pid == 0 {
		_ = parent.Process.Kill()
		t.Fatal("the parent did not report its child")
	}
	_ = parent.Process.Kill()
	_ = parent.Wait()
	if err := poll(t.Context(), 30*time.Second, 20*time.Millisecond, func() bool { return !running(pid) }); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("child %d still runs after its parent was killed: %v", pid, err)
	}
}

// running reports whether pid is a live process (a zombie nobody has
// reaped yet counts as ended).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}
