package bench_test

import (
	"context"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flyballhq/flyball/loadtest/bench"
	"github.com/flyballhq/flyball/services/embedded"
)

// TestMain lets this test binary serve as the benchmark's nats-server
// child (Config.Executable nats-server …), as flyball-bench itself does,
// and as the killed parent of TestChildDiesWithTheBenchmark.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "child-parent" {
		err := bench.ChildParent(os.Args[2]) // returns only on failure
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	if len(os.Args) > 1 && os.Args[1] == "nats-server" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := bench.ServeNATS(ctx, os.Args[2:])
		stop()
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSmokeProcessStack runs the smoke tier with StackProcess: flyball as
// a real `flyball dev` child built from this workspace, the baseline on a
// nats-server child. Each must run every slot, be charged for its own
// process, and the flyball breakdown and profiles must come from the
// child's /metrics and /debug/pprof/.
func TestSmokeProcessStack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "flyball")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "github.com/flyballhq/flyball/services/cmd/flyball")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build flyball: %v\n%s", err, out)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := testSmokeConfig()
	cfg.Tiers = []string{bench.TierSmoke}
	cfg.Stack, cfg.FlyballBin, cfg.Executable = bench.StackProcess, bin, exe
	cfg.Lead = 2 * time.Second // the child starts before the tasks are created
	cfg.RawMsgs = 2000
	cfg.CPUProfile = filepath.Join(dir, "cpu.pprof")
	cfg.AllocProfile = filepath.Join(dir, "heap.pprof")
	// The child runs as flyball dev --async-persist, and the ceiling's and
	// the baseline's streams are made the same way.
	cfg.AsyncPersist = true
	// Both children take the sync setting: flyball dev as --nats-sync, the
	// baseline's nats-server as --sync. A flag either one refused would
	// stop it from starting.
	cfg.NATSSync = embedded.Sync{Interval: 30 * time.Second}
	res, md := runSmoke(t, cfg)
	if c := res.Ceiling; c == nil || c.MsgsPerSec <= 0 || c.CPUSeconds <= 0 {
		t.Errorf("ceiling = %+v, want a throughput and the child's CPU", c)
	}
	for _, s := range res.Tiers[0].Systems {
		if s.Stats.Expected != 40 || s.Stats.Completed != 40 || s.Stats.Missed != 0 {
			t.Errorf("%s: expected %d, completed %d, missed %d; want 40, 40, 0", s.System, s.Stats.Expected, s.Stats.Completed, s.Stats.Missed)
		}
		if s.PeakRSSBytes <= 0 {
			t.Errorf("%s: peak RSS %d, want the stack's", s.System, s.PeakRSSBytes)
		}
		if s.System != bench.SystemFlyball {
			continue
		}
		b := s.Breakdown
		if b == nil || b.AllocsPerRun <= 0 || b.StoredTotalPerRun < 3 {
			t.Fatalf("flyball breakdown = %+v, want allocations from the child's /metrics and 3 stored messages per run", b)
		}
		if got := b.Counters["flyball_runs_total{result=succeeded}"]; got < 40 {
			t.Errorf("child's runs_total{result=succeeded} over the window = %v, want >= 40 (counters %v)", got, b.Counters)
		}
	}
	// The child's own profiles, through its --pprof endpoint.
	for _, p := range []string{"cpu.pprof", "heap.start.pprof", "heap.pprof"} {
		if st, err := os.Stat(filepath.Join(dir, p)); err != nil || st.Size() == 0 {
			t.Errorf("profile %s of the flyball dev child: %v, want a non-empty file", p, err)
		}
	}
	if !strings.Contains(md, "stack process") || !strings.Contains(md, "persist mode async") || !strings.Contains(md, "nats sync 30s") {
		t.Errorf("report does not say the stack ran in a process with async persist and a 30s sync interval:\n%s", md)
	}
}
