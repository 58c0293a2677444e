package bench

import "syscall"

// childAttrs has the kernel send SIGTERM to a stack process when the
// benchmark dies, so that a killed run does not leave `flyball dev`
// listening and writing its store. (The signal follows the thread that
// started the child; Go keeps that thread unless a goroutine locked to it
// exits, which the benchmark never does.)
func childAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
