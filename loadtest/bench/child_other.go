//go:build !linux

package bench

import "syscall"

// childAttrs is empty where the kernel cannot tie a child to its parent:
// a killed benchmark leaves its stack process to be stopped by hand.
func childAttrs() *syscall.SysProcAttr { return nil }
