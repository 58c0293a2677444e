//go:build unix

package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockStore takes the exclusive lock of the store directory dir, an
// flock(2) on its file lockFile, and writes this process's id in it for
// the next one refused; release gives the lock back. A lock another
// holds is a *StoreInUseError. Any other failure of flock (ENOLCK on NFS
// without lockd, EOPNOTSUPP or EINVAL on some FUSE and CIFS mounts) wraps
// errNoLock: the filesystem has no working lock, and the caller runs
// without one, as where there is no flock(2). The kernel drops an flock
// when its holder exits, killed or not, so a crash leaves no stale lock,
// and the file left behind locks nothing.
func lockStore(dir string) (release func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &StoreInUseError{Dir: dir, PID: readPID(f)}
		}
		return nil, fmt.Errorf("lock %s: %w (%w)", f.Name(), err, errNoLock)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() { _ = f.Close() }, nil
}

// flock is flock(2); tests replace it.
var flock = syscall.Flock

// readPID is the process id a lock file holds, or 0: the holder writes it
// just after it takes the lock.
func readPID(f *os.File) int {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}
