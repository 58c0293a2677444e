// Package promtest finds the promtool that the alert rule tests run.
package promtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Path returns the promtool make test installs (bin/promtool, passed in
// FLYBALL_TEST_PROMTOOL), else the repository's bin/promtool, else one on
// PATH. Without one the test fails: the alert tests are never skipped.
func Path(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("FLYBALL_TEST_PROMTOOL"); p != "" {
		return p
	}
	// This file is services/internal/promtest/promtest.go.
	if _, file, _, ok := runtime.Caller(0); ok {
		p := filepath.Join(filepath.Dir(file), "..", "..", "..", "bin", "promtool")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	t.Fatal("promtool not found: run `make promtool-install` (installs bin/promtool) or `apt-get install prometheus`, or set FLYBALL_TEST_PROMTOOL")
	return ""
}
