package bench_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/loadtest/bench"
)

// smokeScaleTasks is TestSmoke's scale load.
const smokeScaleTasks = 20000

// TestSmoke runs the smoke tier end to end on every system, with a small
// ceiling and scale load: it must measure something everywhere. Timings are
// not asserted; the machine may be busy.
func TestSmoke(t *testing.T) {
	t.Parallel()
	cfg := testSmokeConfig()
	cfg.Lead = time.Second
	cfg.RawMsgs = 5000
	// Enough schedules that the timer's heap (about 160 B each, 3.2 MB)
	// stands out of what the rest of the process allocates meanwhile: at
	// 2,000 (320 KB) the embedded server's own growth once made the heap
	// the timer released negative.
	cfg.ScaleTasks = smokeScaleTasks
	dir := t.TempDir()
	cfg.Out = filepath.Join(dir, "result.json")
	cfg.AllocProfile = filepath.Join(dir, "heap.pprof")
	res, md := runSmoke(t, cfg)
	if len(res.Tiers) != 2 {
		t.Fatalf("tiers = %d, want smoke and scale", len(res.Tiers))
	}
	smoke := res.Tiers[0]
	if len(smoke.Systems) != len(bench.AllSystems) {
		t.Fatalf("smoke ran %d systems, want %d", len(smoke.Systems), len(bench.AllSystems))
	}
	for _, s := range smoke.Systems {
		// 20 tasks × 2 slots.
		if s.Stats.Expected != 40 {
			t.Errorf("%s: expected %d runs in the window, want 40", s.System, s.Stats.Expected)
		}
		if s.Stats.Completed == 0 || s.Stats.Lateness.Count == 0 {
			t.Errorf("%s: no completed runs: %+v", s.System, s.Stats)
		}
		// CPU is counted in 10ms ticks: the floor's 40 calls may not reach one.
		if s.CPUSeconds < 0 || s.PeakRSSBytes <= 0 {
			t.Errorf("%s: CPU %.3fs, peak RSS %d: want CPU >= 0 and RSS > 0", s.System, s.CPUSeconds, s.PeakRSSBytes)
		}
		if s.System == bench.SystemPipeline {
			// Every stage handled every run of the window (and the
			// warm-up's), and the flow stored three messages per run.
			// The breaker's consumer takes failures and run.recovered,
			// and every call succeeds: it got nothing.
			c := s.Pipeline
			if c == nil {
				t.Errorf("pipeline: no counts")
				continue
			}
			done := int64(s.Stats.Completed)
			if c.Failures != 0 || c.Dispatched < done || c.Calls < done || c.RunEvents < done ||
				c.ScheduleWrites < done || c.BreakerAcks != 0 || c.Watched < done {
				t.Errorf("pipeline counts = %+v, want no failures, no breaker acks and every other stage at least %d", *c, done)
			}
			if b := s.Breakdown; b == nil || b.StoredPerRun["DISPATCH"] == 0 || b.StoredPerRun["RUNS"] == 0 || b.StoredPerRun["KV_flyball-schedules"] == 0 {
				t.Errorf("pipeline breakdown = %+v, want messages stored in DISPATCH, RUNS and KV_flyball-schedules", b)
			}
		}
		if s.System != bench.SystemFlyball {
			continue
		}
		// A run publishes at least its dispatch, its run event and its
		// schedule, and each is delivered at least once.
		if b := s.Breakdown; b == nil || b.ServerInPerRun < 3 || b.ServerOutPerRun < 3 || b.AllocsPerRun <= 0 || b.AllocBytesPerRun <= 0 {
			t.Errorf("flyball breakdown = %+v, want >= 3 server messages in and out per run and allocations counted", b)
		}
	}
	// Two tiers: the smoke window's profiles carry its name.
	for _, p := range []string{"heap.smoke.start.pprof", "heap.smoke.pprof", "heap.smoke.pipeline.start.pprof", "heap.smoke.pipeline.pprof"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("alloc profile: %v", err)
		}
	}
	sc := res.Tiers[1].Scale
	if sc == nil || sc.Tasks != smokeScaleTasks || sc.LoadSeconds <= 0 || sc.HeapReleasedBytes <= 0 {
		t.Errorf("scale = %+v, want %d tasks loaded and heap held", sc, smokeScaleTasks)
	}
	// The standby may take the lease only once the key has not moved for
	// the lease's TTL by its own clock; the holder's last renewal came at
	// most a third of the TTL before the cut.
	if sc != nil && (sc.TakeoverLeaseSeconds < 2*bench.TakeoverLease.Seconds()/3 || sc.TakeoverSeconds < sc.TakeoverLeaseSeconds) {
		t.Errorf("takeover after a crash: lease after %.2f s, every schedule after %.2f s; want the lease after at least 2/3 of its %v TTL, and the schedules after that (notes: %v)",
			sc.TakeoverLeaseSeconds, sc.TakeoverSeconds, bench.TakeoverLease, sc.Notes)
	}
	// A stopping holder releases the lease, so the standby takes it at
	// its next read, a third of the TTL, without waiting for it to expire.
	if sc != nil && (sc.TakeoverStopLeaseSeconds <= 0 || sc.TakeoverStopLeaseSeconds >= 2*bench.TakeoverLease.Seconds()/3 || sc.TakeoverStopSeconds < sc.TakeoverStopLeaseSeconds) {
		t.Errorf("takeover after a stop: lease after %.2f s, every schedule after %.2f s; want the lease within 2/3 of its %v TTL (it was released), and the schedules after that (notes: %v)",
			sc.TakeoverStopLeaseSeconds, sc.TakeoverStopSeconds, bench.TakeoverLease, sc.Notes)
	}
	for _, want := range []string{"| Smoke 20 tasks @1s | flyball |", "| Smoke 20 tasks @1s | floor |", "| Smoke 20 tasks @1s | nats-scheduler |", "| Smoke 20 tasks @1s | pipeline |", "| scale |", "| target |"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	b, err := os.ReadFile(cfg.Out)
	if err != nil {
		t.Fatal(err)
	}
	var back bench.Result
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("result JSON: %v", err)
	}
	if back.Ceiling == nil || back.Ceiling.MsgsPerSec <= 0 {
		t.Errorf("JSON ceiling = %+v, want a throughput", back.Ceiling)
	}
}

// testSmokeConfig is the smoke variant, shortened for a test: a 2 s
// window, the target in process, 16 calls at once.
func testSmokeConfig() bench.Config {
	cfg := bench.SmokeConfig()
	cfg.Target = bench.TargetInProcess
	cfg.Duration = 2 * time.Second
	cfg.Grace = 500 * time.Millisecond
	cfg.Concurrency = 16
	return cfg
}

// runSmoke runs cfg and fails the test if the instrument broke; it
// returns the result and the markdown report.
func runSmoke(t *testing.T, cfg bench.Config) (*bench.Result, string) {
	t.Helper()
	var md bytes.Buffer
	cfg.Stdout = &md
	res, err := bench.Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p := res.Problems(); len(p) > 0 {
		t.Fatalf("the instrument is broken:\n%s\n\n%s", strings.Join(p, "\n"), md.String())
	}
	return res, md.String()
}
