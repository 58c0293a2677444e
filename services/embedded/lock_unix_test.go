//go:build unix

package embedded

import (
	"log/slog"
	"strings"
	"syscall"
	"testing"
)

// TestStartRunsWithoutTheLockWhereFlockFails: a store directory on a
// filesystem whose flock fails (ENOLCK on NFS without lockd, EOPNOTSUPP
// or EINVAL on some FUSE and CIFS mounts) stopped flyball dev at start
// with ErrStoreDir, where it ran before it took the lock. It runs
// without the lock, as where there is no flock (Windows), and warns once
// that a second server on the store would not be refused. Not parallel:
// it replaces flock.
func TestStartRunsWithoutTheLockWhereFlockFails(t *testing.T) {
	flock = func(int, int) error { return syscall.ENOLCK }
	t.Cleanup(func() { flock = syscall.Flock })
	dir := t.TempDir()
	logs := make(chan string, 100)
	srv, err := StartContext(t.Context(), Config{Port: -1, StoreDir: dir, Log: slog.New(slog.NewTextHandler(chanWriter(logs), nil))})
	if err != nil {
		t.Fatalf("StartContext on a store whose flock fails with ENOLCK: %v; want it started without the lock", err)
	}
	srv.Shutdown()
	srv.WaitForShutdown()
	close(logs)
	var warnings []string
	for line := range logs {
		if strings.Contains(line, "level=WARN") {
			warnings = append(warnings, line)
		}
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], dir) || !strings.Contains(warnings[0], "would not be refused") || !strings.Contains(warnings[0], "no locks available") {
		t.Fatalf("warnings %q; want one naming the store %s, the flock error, and that a second server on it would not be refused", warnings, dir)
	}
}
