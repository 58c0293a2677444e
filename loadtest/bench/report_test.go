package bench

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/loadtest/stats"
)

func TestWindow(t *testing.T) {
	t.Parallel()
	first := time.Unix(1_000_000, 0)
	s := int64(time.Second)
	tests := []struct {
		name             string
		warmup, duration time.Duration
		interval         time.Duration
		wantFrom, wantTo int64 // seconds after first, ×2 to keep halves exact
		wantSlots        int
	}{
		{name: "1s grid, 10s warm-up, 60s window", warmup: 10 * time.Second, duration: time.Minute, interval: time.Second, wantFrom: 19, wantTo: 139, wantSlots: 60},
		{name: "10s grid, 10s warm-up, 60s window", warmup: 10 * time.Second, duration: time.Minute, interval: 10 * time.Second, wantFrom: 10, wantTo: 130, wantSlots: 6},
		{name: "60s grid keeps one slot in a short window", warmup: 10 * time.Second, duration: 20 * time.Second, interval: time.Minute, wantFrom: 60, wantTo: 180, wantSlots: 1},
		{name: "no warm-up still skips slot 0", warmup: 0, duration: 3 * time.Second, interval: time.Second, wantFrom: 1, wantTo: 7, wantSlots: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &runner{cfg: Config{Warmup: tt.warmup, Duration: tt.duration}}
			w := r.window(first, tt.interval)
			if got := (w.From - first.UnixNano()) * 2 / s; got != tt.wantFrom {
				t.Errorf("from = first + %.1fs, want + %.1fs", float64(got)/2, float64(tt.wantFrom)/2)
			}
			if got := (w.To - first.UnixNano()) * 2 / s; got != tt.wantTo {
				t.Errorf("to = first + %.1fs, want + %.1fs", float64(got)/2, float64(tt.wantTo)/2)
			}
			if n := stats.ExpectedSlots(first.UnixNano(), tt.interval, w); n != tt.wantSlots {
				t.Errorf("slots in the window = %d, want %d", n, tt.wantSlots)
			}
		})
	}
}

func runResult(system string, p99 time.Duration, missed, dups int) *SystemResult {
	return &SystemResult{
		System: system, Tasks: 100, Interval: time.Second,
		Stats: stats.Report{
			Expected: 1000, Completed: 1000 - missed, Missed: missed, GridMissed: missed,
			Duplicates: dups, Lateness: stats.Summary{Count: 1000, P99: p99},
		},
		RunsPerSec: 100, CPUPer1kRuns: 0.1,
	}
}

func TestEvaluate(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	res := &Result{
		Ceiling: &Ceiling{MsgsPerSec: 1000},
		Tiers: []*TierResult{
			{Tier: Tier{Name: TierW1a, Title: "W1a", Kind: KindRuns}, Systems: []*SystemResult{
				runResult(SystemFlyball, 10*ms, 0, 0), runResult(SystemFloor, 6*ms, 0, 0),
			}},
			{Tier: Tier{Name: TierW1c, Title: "W1c", Kind: KindRuns}, Systems: []*SystemResult{
				runResult(SystemFlyball, 60*ms, 3, 1), runResult(SystemFloor, 40*ms, 0, 0),
			}},
			{Tier: Tier{Name: TierPeak, Kind: KindPeak}, Systems: []*SystemResult{
				func() *SystemResult { s := runResult(SystemFlyball, 0, 0, 0); s.CeilingRatio = 0.25; return s }(),
			}},
			{Tier: Tier{Name: TierScale, Kind: KindScale}, Scale: &ScaleResult{
				Tasks: 1_000_000, LoadSeconds: 12, HeapReleasedPerTask: 200,
				TakeoverTTLSeconds: 3, TakeoverLeaseSeconds: 3.4, TakeoverSeconds: 8.1,
				TakeoverStopLeaseSeconds: 0.9, TakeoverStopSeconds: 5.2,
			}},
		},
	}
	got := map[string]bool{}
	for _, v := range evaluate(res) {
		got[v.Tier+" "+v.Target] = v.Met
	}
	want := map[string]bool{
		"w1a W1: 0 missed":                                      true,
		"w1a W1: 0 duplicates":                                  true,
		"w1a W1: lateness p99 ≤ floor p99 + 5 ms":               true,
		"w1a CPU ≤ 0.15 s per 1,000 runs":                       true,
		"w1c W1: 0 missed":                                      false,
		"w1c W1: 0 duplicates":                                  false,
		"w1c W1: lateness p99 ≤ floor p99 + 5 ms":               false,
		"w1c CPU ≤ 0.15 s per 1,000 runs":                       true,
		"peak completed runs/s ÷ raw publish msg/s ≥ 0.2":       true,
		"peak CPU ≤ 0.15 s per 1,000 runs":                      true,
		"scale Scale: 1M schedules loaded in ≤ 10 s":            false,
		"scale Scale: ≤ 300 B of timer heap per scheduled task": true,
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("no verdict %q", k)
			continue
		}
		if g != w {
			t.Errorf("%q met = %v, want %v", k, g, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("verdicts = %v, want exactly %d", got, len(want))
	}

	if got := fmtDelta(-100 * time.Microsecond); got != "-0.1 ms" {
		t.Errorf("fmtDelta(-0.1 ms) = %q, want a plain minus", got)
	}

	var md bytes.Buffer
	res.Targets = evaluate(res)
	if err := RenderMarkdown(&md, res); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"| W1a | flyball |", "| W1c | floor |", "60.0 ms", "| not met |", "| scale |",
		"p99 10.0 ms vs floor 6.0 ms (+4.0 ms)", "p99 60.0 ms vs floor 40.0 ms (+20.0 ms)",
		"| crash: 3.40 s, 8.10 s; stop: 0.90 s, 5.20 s (3 s lease) |",
	} {
		if !strings.Contains(md.String(), s) {
			t.Errorf("markdown lacks %q:\n%s", s, md.String())
		}
	}
}

func TestCPUVerdictNamesThePipelinesCost(t *testing.T) {
	t.Parallel()
	fly, pipe := runResult(SystemFlyball, 0, 0, 0), runResult(SystemPipeline, 0, 0, 0)
	fly.CPUPer1kRuns, pipe.CPUPer1kRuns = 0.2, 0.16
	res := &Result{Tiers: []*TierResult{{
		Tier:    Tier{Name: TierW1c, Title: "W1c", Kind: KindRuns},
		Systems: []*SystemResult{fly, runResult(SystemFloor, 0, 0, 0), pipe},
	}}}
	cpu := verdict(t, res, "CPU")
	if want := "the pipeline (flyball's streams and messages, no logic) took 0.160 s: flyball 1.25× that"; cpu.Met || cpu.Reason != want {
		t.Errorf("CPU verdict = %+v, want not met with reason %q", cpu, want)
	}
	// Without the pipeline the reason does not mention it.
	res.Tiers[0].Systems = res.Tiers[0].Systems[:2]
	for _, v := range evaluate(res) {
		if strings.HasPrefix(v.Target, "CPU") && strings.Contains(v.Reason, "pipeline") {
			t.Errorf("reason %q names a pipeline that did not run", v.Reason)
		}
	}
}

// TestPeakVerdictNamesTheFloor: with the floor run at the peak load, the
// ratio's reason gives what the machine serves with no scheduler, and
// says when that alone is under the target.
func TestPeakVerdictNamesTheFloor(t *testing.T) {
	t.Parallel()
	fly, floor := runResult(SystemFlyball, 0, 0, 0), runResult(SystemFloor, 0, 0, 0)
	fly.RunsPerSec, fly.CeilingRatio, fly.Tasks = 5000, 0.02, 70000
	floor.RunsPerSec = 17000
	res := &Result{
		Ceiling: &Ceiling{MsgsPerSec: 250_000},
		Tiers: []*TierResult{{
			Tier: Tier{Name: TierPeak, Kind: KindPeak}, Systems: []*SystemResult{fly, floor},
		}},
	}
	ratio := verdict(t, res, "completed runs/s")
	want := "flyball completed 5000 of 70000 offered runs/s; the floor, calling the target with no scheduler, completed 17000 (0.068 of the ceiling: under 0.2 on this machine whatever schedules the calls)"
	if ratio.Met || ratio.Reason != want {
		t.Fatalf("verdict met %v, reason %q; want not met, %q", ratio.Met, ratio.Reason, want)
	}
}

// verdict is the verdict of res whose target starts with prefix.
func verdict(t *testing.T, res *Result, prefix string) Verdict {
	t.Helper()
	for _, v := range evaluate(res) {
		if strings.HasPrefix(v.Target, prefix) {
			return v
		}
	}
	t.Fatalf("no verdict %q…", prefix)
	return Verdict{}
}

// TestSettingsNameTheSyncInterval: the report says when the servers synced
// to disk, and does not claim a setting for a stack behind --nats-url,
// whose server has its own.
func TestSettingsNameTheSyncInterval(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    Settings
		want string
	}{
		{Settings{Stack: StackInProcess, NATSSync: "1s"}, "nats sync 1s"},
		{Settings{Stack: StackProcess, NATSSync: "always"}, "nats sync always"},
		{Settings{Stack: StackInProcess}, "nats sync nats-server's default (2m0s)"},
		{Settings{Stack: StackExternal}, "nats sync the stack's own"},
	} {
		var md strings.Builder
		if err := RenderMarkdown(&md, &Result{Settings: tc.s}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(md.String(), tc.want+"\n") {
			t.Errorf("settings %+v: the report does not say %q:\n%s", tc.s, tc.want, md.String())
		}
	}
}

// TestDuplicatesVerdictCountsTheGridCheck: a fourth call in three slots
// whose header names a time off the grid is no header duplicate, but the
// grid check sees slot 2 called twice: "0 duplicates" is not met, and the
// markdown's dup column shows the off-grid call.
func TestDuplicatesVerdictCountsTheGridCheck(t *testing.T) {
	t.Parallel()
	iv := time.Second
	anchor := time.Unix(1_000_000, 0).UnixNano()
	slot := func(k int) int64 { return anchor + int64(k)*int64(iv) }
	call := func(at, scheduled int64) stats.Arrival {
		return stats.Arrival{At: at, Task: "t", Scheduled: scheduled, Key: fmt.Sprintf("t:%d", scheduled/int64(time.Millisecond))}
	}
	arrivals := []stats.Arrival{
		call(slot(0)+int64(3*time.Millisecond), slot(0)),
		call(slot(1)+int64(3*time.Millisecond), slot(1)),
		call(slot(2)+int64(3*time.Millisecond), slot(2)),
		// The extra call: at slot 2 + 5 ms, labelled slot 2 + 300 ms.
		call(slot(2)+int64(5*time.Millisecond), slot(2)+int64(300*time.Millisecond)),
	}
	w := stats.Window{From: anchor - int64(iv)/2, To: anchor + 5*int64(iv)/2}
	st := stats.Analyze(arrivals, stats.Grid{Interval: iv, Anchors: map[string]int64{"t": anchor}}, w)
	if st.Expected != 3 || st.Missed != 0 || st.GridMissed != 0 || st.Duplicates != 0 || st.GridDuplicates != 1 || st.OffGrid != 1 {
		t.Fatalf("Analyze = %+v: want 3 expected, none missed, no header duplicate, 1 grid duplicate, 1 off grid", st)
	}
	fly := &SystemResult{System: SystemFlyball, Tasks: 1, Interval: iv, Window: w, Stats: st}
	res := &Result{Tiers: []*TierResult{{
		Tier:    Tier{Name: TierW1a, Title: "W1a", Kind: KindRuns},
		Systems: []*SystemResult{fly},
	}}}
	if v := verdict(t, res, "W1: 0 missed"); !v.Met {
		t.Errorf("missed verdict = %+v, want met: every slot was called", v)
	}
	dup := verdict(t, res, "W1: 0 duplicates")
	if dup.Met {
		t.Errorf("duplicates verdict = %+v, want not met: slot 2 was called twice", dup)
	}
	res.Targets = evaluate(res)
	var md strings.Builder
	if err := RenderMarkdown(&md, res); err != nil {
		t.Fatal(err)
	}
	if want := "| 0, 1 off grid | 0/1 |"; !strings.Contains(md.String(), want) {
		t.Errorf("markdown lacks the dup cells %q:\n%s", want, md.String())
	}
}

// TestCPUVerdictNotMeasuredWhenTheStackWasNotCharged: when a process to
// charge could not be read, the CPU verdict and the table say "not
// measured" instead of judging what was left.
func TestCPUVerdictNotMeasuredWhenTheStackWasNotCharged(t *testing.T) {
	t.Parallel()
	fly := runResult(SystemFlyball, 0, 0, 0)
	fly.CPUPer1kRuns, fly.PeakRSSBytes = 0, 0
	fly.Uncharged = "open /proc/4321/stat: no such file or directory"
	res := &Result{Tiers: []*TierResult{{
		Tier: Tier{Name: TierW1c, Title: "W1c", Kind: KindRuns}, Systems: []*SystemResult{fly},
	}}}
	cpu := verdict(t, res, "CPU")
	if cpu.Met || cpu.Measured != "not measured" || !strings.Contains(cpu.Reason, fly.Uncharged) {
		t.Errorf("CPU verdict = %+v, want not met, measured \"not measured\", the reason naming the process", cpu)
	}
	res.Targets = evaluate(res)
	var md strings.Builder
	if err := RenderMarkdown(&md, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| 100 | not measured | not measured |",
		"- w1c/flyball: CPU and peak RSS not measured: " + fly.Uncharged,
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
}

// TestCPUVerdictSaysWhenItHoldsTheInProcessTarget: an in-process target
// is inside flyball's CPU only when the benchmark process is charged;
// with --stack process flyball is charged its child alone.
func TestCPUVerdictSaysWhenItHoldsTheInProcessTarget(t *testing.T) {
	t.Parallel()
	const holds = "includes the in-process target's CPU"
	for _, tc := range []struct {
		stack string
		want  bool
	}{{StackInProcess, true}, {StackExternal, true}, {StackProcess, false}} {
		res := &Result{
			Settings: Settings{Stack: tc.stack, Target: TargetInProcess},
			Tiers: []*TierResult{{
				Tier: Tier{Name: TierW1c, Title: "W1c", Kind: KindRuns}, Systems: []*SystemResult{runResult(SystemFlyball, 0, 0, 0)},
			}},
		}
		if got := strings.Contains(verdict(t, res, "CPU").Reason, holds); got != tc.want {
			t.Errorf("stack %s, in-process target: reason says %q: %v, want %v", tc.stack, holds, got, tc.want)
		}
	}
}
