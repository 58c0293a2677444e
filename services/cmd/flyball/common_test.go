package main

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/flyballhq/flyball/services/internal/metrics"
)

// TestStackConfigCarriesTheRunFlags: every run flag that configures a
// service reaches the stack.Config that dev and serve both start.
func TestStackConfigCarriesTheRunFlags(t *testing.T) {
	t.Parallel()
	var rf runFlags
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	rf.register(fs, false)
	err := fs.Parse([]string{
		"--concurrency", "32", "--per-host", "4", "--governor-workers", "3", "--timer-lead", "500ms",
		"--redact-header", "X-Tenant", "--redact-header", "account", "--api-addr", "127.0.0.1:0", "--per-task-metrics",
	})
	if err != nil {
		t.Fatal(err)
	}
	guard, err := rf.guard()
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	cfg := rf.stackConfig(nil, slog.New(slog.DiscardHandler), m, guard, []string{"token-0123456789abcdef"})
	switch {
	case cfg.Concurrency != 32 || cfg.PerHost != 4 || cfg.GovernorWorkers != 3:
		t.Errorf("limits %d/%d/%d, want 32/4/3", cfg.Concurrency, cfg.PerHost, cfg.GovernorWorkers)
	case cfg.TimerLead != 500*time.Millisecond:
		t.Errorf("timer lead %s, want 500ms", cfg.TimerLead)
	case !slices.Equal(cfg.RedactHeaders, []string{"X-Tenant", "account"}):
		t.Errorf("redact names %q, want the two given", cfg.RedactHeaders)
	case cfg.APIAddr != "127.0.0.1:0" || len(cfg.APITokens) != 1 || !cfg.PerTaskMetrics:
		t.Errorf("api %q tokens %d per-task %v", cfg.APIAddr, len(cfg.APITokens), cfg.PerTaskMetrics)
	case cfg.Metrics != m || cfg.Guard.AllowLoopback:
		t.Errorf("metrics not passed through, or serve's guard allows loopback: %+v", cfg.Guard)
	}
}
