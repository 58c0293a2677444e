package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/flyballhq/flyball/loadtest/stats"
	"github.com/flyballhq/flyball/services/embedded"
)

// The targets.
const (
	w1Slack          = 5 * time.Millisecond
	stressSlack      = 25 * time.Millisecond
	maxCPUPer1kRuns  = 0.15
	minCeilingRatio  = 0.2
	maxScaleLoad     = 10 * time.Second
	maxHeapPerTask   = 300
	scaleTargetTasks = 1_000_000
)

// evaluate marks each of the targets met or not, with the reason.
func evaluate(res *Result) []Verdict {
	var out []Verdict
	add := func(v Verdict) { out = append(out, v) }
	bestRatio, bestRatioTier := 0.0, ""
	peakSeen := false
	for _, tr := range res.Tiers {
		name := tr.Tier.Name
		if tr.Tier.Kind == KindScale {
			if sc := tr.Scale; sc != nil && tr.Error == "" {
				out = append(out, scaleVerdicts(sc)...)
			} else {
				add(Verdict{Target: "Scale: 1M schedules loaded in ≤ 10 s at ≤ 300 B/task", Tier: name, Reason: "not measured: " + tr.Error})
			}
			continue
		}
		if name == TierSmoke {
			continue // the CI check: the issue sets no target for it
		}
		fly := tr.system(SystemFlyball)
		if fly == nil {
			reason := "flyball not measured"
			for _, s := range tr.Systems {
				if s.System == SystemFlyball && s.Error != "" {
					reason += ": " + s.Error
				}
			}
			add(Verdict{Target: "flyball runs", Tier: name, Reason: reason})
			continue
		}
		floor := tr.system(SystemFloor)
		switch name {
		case TierW1a, TierW1b, TierW1c, TierW1d:
			add(missedVerdict("W1: 0 missed", name, fly))
			add(dupVerdict("W1: 0 duplicates", name, fly))
			add(latenessVerdict("W1: lateness p99 ≤ floor p99 + 5 ms", name, fly, floor, w1Slack))
		case TierStress:
			add(missedVerdict("Stress: 0 missed", name, fly))
			add(latenessVerdict("Stress: lateness p99 ≤ floor p99 + 25 ms", name, fly, floor, stressSlack))
		}
		switch {
		case fly.Stats.Completed > 0 && fly.Uncharged != "":
			add(Verdict{
				Target: "CPU ≤ 0.15 s per 1,000 runs", Tier: name,
				Measured: "not measured",
				Reason:   "a process to charge could not be read: " + fly.Uncharged,
			})
		case fly.Stats.Completed > 0:
			add(Verdict{
				Target: "CPU ≤ 0.15 s per 1,000 runs", Tier: name,
				Met:      fly.CPUPer1kRuns <= maxCPUPer1kRuns,
				Measured: fmt.Sprintf("%.3f s", fly.CPUPer1kRuns),
				Reason:   cpuReason(res, fly, tr.system(SystemPipeline)),
			})
		}
		if fly.CeilingRatio > bestRatio {
			bestRatio, bestRatioTier = fly.CeilingRatio, name
		}
		if tr.Tier.Kind == KindPeak {
			peakSeen = true
			add(Verdict{
				Target: "completed runs/s ÷ raw publish msg/s ≥ 0.2", Tier: name,
				Met:      fly.CeilingRatio >= minCeilingRatio,
				Measured: fmt.Sprintf("%.3f (%.0f runs/s ÷ %.0f msg/s)", fly.CeilingRatio, fly.RunsPerSec, rawRate(res)),
				Reason:   peakReason(fly, tr.system(SystemFloor), rawRate(res)),
			})
		}
	}
	if !peakSeen && bestRatioTier != "" {
		add(Verdict{
			Target: "completed runs/s ÷ raw publish msg/s ≥ 0.2", Tier: bestRatioTier,
			Met:      bestRatio >= minCeilingRatio,
			Measured: fmt.Sprintf("%.3f", bestRatio),
			Reason:   "the peak tier did not run: the offered load of the tiers that did caps the ratio",
		})
	}
	return out
}

func rawRate(res *Result) float64 {
	if res.Ceiling == nil {
		return 0
	}
	return res.Ceiling.MsgsPerSec
}

func missedVerdict(target, tier string, s *SystemResult) Verdict {
	st := s.Stats
	v := Verdict{
		Target: target, Tier: tier,
		Met:      st.Missed == 0 && st.GridMissed == 0 && st.Expected > 0,
		Measured: fmt.Sprintf("%d of %d missed (grid check: %d)", st.Missed, st.Expected, st.GridMissed),
	}
	switch {
	case st.Expected == 0:
		v.Reason = "no slot in the window"
	case st.Missed > 0 && s.OffStart > 0:
		v.Reason = fmt.Sprintf("%d tasks were accepted after their first slot (setup, not steady state)", s.OffStart)
	case st.Missed > 0 && st.OffGrid > 0:
		v.Reason = fmt.Sprintf("%d runs were dispatched off the grid (a slot was skipped and the next one shifted)", st.OffGrid)
	case st.Missed > 0:
		v.Reason = "runs did not arrive within the window plus the grace period"
	case st.GridMissed > 0:
		v.Reason = "every slot was called, but some so late they fell in the next slot's window (later than the interval less min(10% of it, 100 ms))"
	}
	return v
}

// dupVerdict holds both checks to zero, as missedVerdict does: a call
// whose header names a time off the grid repeats no header slot, but the
// grid check sees its slot called twice.
func dupVerdict(target, tier string, s *SystemResult) Verdict {
	st := s.Stats
	v := Verdict{
		Target: target, Tier: tier,
		Met:      st.Duplicates == 0 && st.GridDuplicates == 0 && st.OffGrid == 0 && st.Expected > 0,
		Measured: fmt.Sprintf("%d (same key: %d; grid check: %d; off grid: %d)", st.Duplicates, st.KeyDuplicates, st.GridDuplicates, st.OffGrid),
	}
	switch {
	case st.Duplicates > 0:
		v.Reason = "a slot was called more than once"
	case st.OffGrid > 0:
		v.Reason = fmt.Sprintf("%d calls named a time off the task's grid", st.OffGrid)
	case st.GridDuplicates > 0 && st.GridMissed > 0:
		v.Reason = "by arrival time a slot saw two calls: a call late enough to fall in the next slot's window, or an extra call"
	case st.GridDuplicates > 0:
		v.Reason = "by arrival time a slot saw more than one call"
	}
	return v
}

// dupCell is the markdown's dup column: the header check's duplicates,
// and the calls whose header named a time off the grid.
func dupCell(st stats.Report) string {
	if st.OffGrid == 0 {
		return strconv.Itoa(st.Duplicates)
	}
	return fmt.Sprintf("%d, %d off grid", st.Duplicates, st.OffGrid)
}

func latenessVerdict(target, tier string, fly, floor *SystemResult, slack time.Duration) Verdict {
	v := Verdict{Target: target, Tier: tier}
	if floor == nil {
		v.Measured = "p99 " + fmtDur(fly.Stats.Lateness.P99)
		v.Reason = "the floor was not measured in this run"
		return v
	}
	p, f := fly.Stats.Lateness.P99, floor.Stats.Lateness.P99
	v.Met = fly.Stats.Lateness.Count > 0 && p <= f+slack
	v.Measured = fmt.Sprintf("p99 %s vs floor %s (%s)", fmtDur(p), fmtDur(f), fmtDelta(p-f))
	if !v.Met {
		v.Reason = fmt.Sprintf("%s over the allowance", fmtDur(p-f-slack))
	}
	return v
}

// cpuReason explains a CPU verdict; pipe, if measured, is flyball's
// message flow with no logic on the same tier.
func cpuReason(res *Result, fly, pipe *SystemResult) string {
	var parts []string
	if pipe != nil && pipe.CPUPer1kRuns > 0 && pipe.Stats.Completed > 0 {
		parts = append(parts, fmt.Sprintf("the pipeline (flyball's streams and messages, no logic) took %.3f s: flyball %.2f× that",
			pipe.CPUPer1kRuns, fly.CPUPer1kRuns/pipe.CPUPer1kRuns))
	}
	// With StackProcess flyball is charged its child alone, so the
	// target in the benchmark process is not in its CPU.
	if res.Settings.Target == TargetInProcess && res.Settings.Stack != StackProcess {
		parts = append(parts, "includes the in-process target's CPU")
	}
	if fly.Stats.Missed > 0 {
		parts = append(parts, "per completed run; missed runs cost CPU too")
	}
	return strings.Join(parts, "; ")
}

// peakReason says why the ratio is missed and, when the floor ran at the
// same load, what the machine serves with no scheduler at all: a floor
// ratio under 0.2 means no scheduler can meet the target here.
func peakReason(fly, floor *SystemResult, raw float64) string {
	if fly.CeilingRatio >= minCeilingRatio {
		return ""
	}
	reason := fmt.Sprintf("flyball completed %.0f of %d offered runs/s", fly.RunsPerSec, fly.Tasks)
	if floor != nil && floor.RunsPerSec > 0 && raw > 0 {
		reason += fmt.Sprintf("; the floor, calling the target with no scheduler, completed %.0f (%.3f of the ceiling", floor.RunsPerSec, floor.RunsPerSec/raw)
		if floor.RunsPerSec/raw < minCeilingRatio {
			reason += ": under 0.2 on this machine whatever schedules the calls"
		}
		reason += ")"
	}
	return reason
}

func scaleVerdicts(sc *ScaleResult) []Verdict {
	note := ""
	if sc.Tasks != scaleTargetTasks {
		note = fmt.Sprintf("measured with %d tasks, not 1,000,000", sc.Tasks)
	}
	load := Verdict{
		Target: "Scale: 1M schedules loaded in ≤ 10 s", Tier: TierScale,
		Met:      sc.LoadSeconds > 0 && sc.LoadSeconds <= maxScaleLoad.Seconds() && sc.Tasks >= scaleTargetTasks,
		Measured: fmt.Sprintf("%.2f s (ready after %.2f s)", sc.LoadSeconds, sc.ReadySeconds),
		Reason:   note,
	}
	heap := Verdict{
		Target: "Scale: ≤ 300 B of timer heap per scheduled task", Tier: TierScale,
		Met:      sc.HeapReleasedPerTask > 0 && sc.HeapReleasedPerTask <= maxHeapPerTask && sc.Tasks >= scaleTargetTasks,
		Measured: fmt.Sprintf("%.0f B held by the timer (%.0f B heap growth while loading)", sc.HeapReleasedPerTask, sc.HeapDeltaPerTask),
		Reason:   note,
	}
	return []Verdict{load, heap}
}

// RenderMarkdown writes the result as markdown tables.
func RenderMarkdown(w io.Writer, res *Result) error {
	var b strings.Builder
	m := res.Machine
	fmt.Fprintf(&b, "## flyball benchmark, %s\n\n", res.StartedAt.Format(time.RFC3339))
	fmt.Fprintf(&b, "- Machine: %d × %s, %.1f GiB RAM, Linux %s, %s, nats-server %s, nats.go %s\n",
		m.NProc, m.CPUModel, float64(m.MemTotalBytes)/(1<<30), m.Kernel, m.GoVersion, m.NATSServer, m.NATSGo)
	fmt.Fprintf(&b, "- Load average (1 min): %.2f at start, %.2f at end", m.LoadAvgAtStart, m.LoadAvgAtEnd)
	if res.Conditions != "" {
		fmt.Fprintf(&b, "; conditions: %s", res.Conditions)
	}
	b.WriteString("\n")
	if res.Command != "" {
		fmt.Fprintf(&b, "- Command: `%s`\n", res.Command)
	}
	s := res.Settings
	lead := "default"
	switch {
	case s.TimerLead > 0:
		lead = s.TimerLead.String()
	case s.TimerLead < 0:
		lead = "none"
	}
	persist := "default"
	if s.AsyncPersist {
		persist = "async (DISPATCH, RUNS, the ceiling's and the baseline's streams)"
	}
	fsync := s.NATSSync
	switch {
	case s.Stack == StackExternal:
		fsync = "the stack's own"
	case fsync == "":
		fsync = "nats-server's default (" + embedded.DefaultSyncInterval.String() + ")"
	}
	fmt.Fprintf(&b, "- Settings: warm-up %s, window %s, grace %s, stack %s, target %s (%d host), concurrency %d, timer lead %s, persist mode %s, nats sync %s\n\n",
		s.Warmup, s.Duration, s.Grace, s.Stack, s.Target, s.TargetHosts, s.Concurrency, lead, persist, fsync)

	if c := res.Ceiling; c != nil {
		if c.Error != "" {
			fmt.Fprintf(&b, "Ceiling: failed: %s\n\n", c.Error)
		} else {
			cpu := fmt.Sprintf("%.2f CPU-s", c.CPUSeconds)
			if c.Uncharged != "" {
				cpu = "CPU not measured: " + c.Uncharged
			}
			fmt.Fprintf(&b, "Ceiling: raw JetStream async publish of %d × %d B messages: %.0f msg/s (%.2f s, %s).\n\n",
				c.Msgs, c.Size, c.MsgsPerSec, c.Seconds, cpu)
		}
	}

	var notes []string
	runs := false
	for _, tr := range res.Tiers {
		if len(tr.Systems) > 0 {
			runs = true
		}
	}
	if runs {
		b.WriteString("| tier | system | expected | completed | missed | dup | grid miss/dup | p50 | p99 | p99.9 | max | runs/s | CPU-s/1k runs | peak RSS | runs/s ÷ raw msg/s |\n")
		b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, tr := range res.Tiers {
			if tr.Error != "" && tr.Tier.Kind != KindScale {
				notes = append(notes, fmt.Sprintf("%s: %s", tr.Tier.Name, tr.Error))
			}
			for _, sr := range tr.Systems {
				if sr.Breakdown != nil {
					notes = append(notes, fmt.Sprintf("%s/%s breakdown: %s", tr.Tier.Name, sr.System, sr.Breakdown))
				}
				for _, n := range sr.Notes {
					notes = append(notes, fmt.Sprintf("%s/%s: %s", tr.Tier.Name, sr.System, n))
				}
				cpu, rss := fmt.Sprintf("%.3f", sr.CPUPer1kRuns), fmtBytes(sr.PeakRSSBytes)
				if sr.Uncharged != "" {
					cpu, rss = "not measured", "not measured"
					notes = append(notes, fmt.Sprintf("%s/%s: CPU and peak RSS not measured: %s", tr.Tier.Name, sr.System, sr.Uncharged))
				}
				if sr.Error != "" {
					fmt.Fprintf(&b, "| %s | %s | failed: %s |||||||||||||\n", tr.Tier.Title, sr.System, oneLine(sr.Error))
					continue
				}
				st := sr.Stats
				l := st.Lateness
				fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %s | %d/%d | %s | %s | %s | %s | %.0f | %s | %s | %.4f |\n",
					tr.Tier.Title, sr.System, st.Expected, st.Completed, st.Missed, dupCell(st),
					st.GridMissed, st.GridDuplicates, fmtDur(l.P50), fmtDur(l.P99), fmtDur(l.P999), fmtDur(l.Max),
					sr.RunsPerSec, cpu, rss, sr.CeilingRatio)
			}
		}
		b.WriteString("\n")
	}

	for _, tr := range res.Tiers {
		if tr.Tier.Kind != KindScale {
			continue
		}
		if tr.Error != "" {
			fmt.Fprintf(&b, "Scale (%d tasks): failed: %s\n\n", tr.Tier.Tasks, oneLine(tr.Error))
			continue
		}
		sc := tr.Scale
		b.WriteString("| scale | seed | seed time | timer ready | all loaded | timer heap/task | heap growth/task | peak RSS | CPU-s | takeover: lease, all loaded |\n")
		b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		fmt.Fprintf(&b, "| %d tasks @%s | %s | %.1f s | %.2f s | %.2f s | %.0f B | %.0f B | %s | %.2f | %s |\n\n",
			sc.Tasks, tr.Tier.Interval, sc.Seed, sc.SeedSeconds, sc.ReadySeconds, sc.LoadSeconds,
			sc.HeapReleasedPerTask, sc.HeapDeltaPerTask, fmtBytes(sc.PeakRSSBytes), sc.CPUSeconds, fmtTakeover(sc))
		for _, n := range sc.Notes {
			notes = append(notes, "scale: "+n)
		}
	}

	if len(res.Targets) > 0 {
		b.WriteString("| target | tier | measured | met | reason |\n|---|---|---|---|---|\n")
		for _, v := range res.Targets {
			met := "not met"
			if v.Met {
				met = "met"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", v.Target, v.Tier, v.Measured, met, oneLine(v.Reason))
		}
		b.WriteString("\n")
	}
	if len(notes) > 0 {
		b.WriteString("Notes:\n\n")
		for _, n := range notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// fmtDur prints a duration in milliseconds with one decimal.
func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

// fmtDelta is a signed difference: "+13.0 ms", "-0.1 ms".
func fmtDelta(d time.Duration) string {
	return fmt.Sprintf("%+.1f ms", float64(d)/float64(time.Millisecond))
}

func fmtBytes(n int64) string {
	if n <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
}

func oneLine(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\n", " "), "|", "/")
}

// fmtTakeover is the scale table's takeover cell: when the standby held
// the lease and when it held every schedule, after the holder's crash
// and after its clean stop, under a lease of TakeoverTTLSeconds.
func fmtTakeover(sc *ScaleResult) string {
	if sc.TakeoverSeconds == 0 {
		return "not measured"
	}
	stop := "not measured"
	if sc.TakeoverStopSeconds > 0 {
		stop = fmt.Sprintf("%.2f s, %.2f s", sc.TakeoverStopLeaseSeconds, sc.TakeoverStopSeconds)
	}
	return fmt.Sprintf("crash: %.2f s, %.2f s; stop: %s (%.0f s lease)", sc.TakeoverLeaseSeconds, sc.TakeoverSeconds, stop, sc.TakeoverTTLSeconds)
}
