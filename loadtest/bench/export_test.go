package bench

import (
	"fmt"
	"os"
	"path/filepath"
)

// TakeoverLease is the lease the scale tier's takeover runs under.
const TakeoverLease = takeoverLease

// ChildParent is the benchmark's part in TestChildDiesWithTheBenchmark,
// run by TestMain in a process of its own: it starts a long-lived child
// as startChild does for a stack, prints the child's PID and blocks until
// it is killed.
func ChildParent(dir string) error {
	dir = filepath.Join(dir, "child")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	c, err := startChild("sleeper", dir, "/bin/sh", "-c", "exec sleep 600")
	if err != nil {
		return err
	}
	fmt.Printf("child pid %d\n", c.pid())
	select {}
}
