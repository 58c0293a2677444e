package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/flyballhq/flyball/loadtest/target"
)

// runner carries one benchmark run.
type runner struct {
	cfg    Config
	log    *slog.Logger
	res    *Result
	target target.Target
	// tag makes task IDs, event IDs and scratch stream names unique per run,
	// so runs against one external stack do not collide.
	tag string
	// rawRate is the ceiling's msg/s, once measured.
	rawRate float64
}

// Run runs the configured tiers and returns what they measured. A tier or
// system that fails is recorded in the result and the run goes on; Run
// itself fails only on bad configuration, on a target that cannot start,
// or when ctx ends.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &runner{
		cfg: cfg,
		log: cfg.Logger,
		tag: strconv.FormatInt(time.Now().Unix()%1_000_000, 36),
		res: &Result{
			StartedAt:  time.Now().UTC(),
			Command:    cfg.Command,
			Conditions: cfg.Conditions,
			Machine:    describeMachine(),
			Settings: Settings{
				Warmup: cfg.Warmup, Duration: cfg.Duration, Grace: cfg.Grace, Stack: cfg.Stack,
				Target: cfg.Target, TargetHosts: cfg.TargetHosts, Concurrency: cfg.Concurrency,
				TimerLead: cfg.TimerLead, AsyncPersist: cfg.AsyncPersist,
				NATSSync: syncSetting(cfg.NATSSync),
			},
		},
	}
	tg, err := r.startTarget(ctx)
	if err != nil {
		return nil, err
	}
	defer tg.Close()
	r.target = tg

	c := r.ceiling(ctx)
	r.res.Ceiling = c
	if c.Error == "" {
		r.rawRate = c.MsgsPerSec
	}
	r.log.Info("ceiling", "msgs", c.Msgs, "msgs_per_s", math.Round(c.MsgsPerSec), "err", c.Error)

	for _, name := range cfg.Tiers {
		if ctx.Err() != nil {
			break
		}
		tier, _ := lookupTier(name)
		tr := &TierResult{Tier: tier}
		r.res.Tiers = append(r.res.Tiers, tr)
		r.runTier(ctx, tr)
	}
	r.res.FinishedAt = time.Now().UTC()
	r.res.Machine.LoadAvgAtEnd = loadAvg()
	r.res.Targets = evaluate(r.res)
	if err := r.write(); err != nil {
		return r.res, err
	}
	return r.res, ctx.Err()
}

func (r *runner) startTarget(ctx context.Context) (target.Target, error) {
	if r.cfg.Target == TargetInProcess {
		return target.Listen(r.cfg.TargetHosts)
	}
	return target.Spawn(ctx, r.cfg.Executable, "target", "--hosts", strconv.Itoa(r.cfg.TargetHosts))
}

func (r *runner) runTier(ctx context.Context, tr *TierResult) {
	tier := tr.Tier
	switch tier.Kind {
	case KindScale:
		if r.cfg.ScaleTasks > 0 {
			tier.Tasks = r.cfg.ScaleTasks
			tr.Tier.Tasks = tier.Tasks
		}
		r.log.Info("tier", "name", tier.Name, "tasks", tier.Tasks)
		sc, err := r.scale(ctx, tier)
		tr.Scale = sc
		if err != nil {
			tr.Error = err.Error()
			r.log.Error("tier failed", "tier", tier.Name, "err", err)
		}
		return
	case KindPeak:
		tier.Tasks = r.cfg.PeakTasks
		if tier.Tasks == 0 {
			if r.rawRate <= 0 {
				tr.Error = "no ceiling measured: cannot size the peak tier (set --peak-tasks)"
				return
			}
			// Offer the hard limit (every run persists at least 3 messages).
			tier.Tasks = int(math.Ceil(r.rawRate/3/1000)) * 1000
		}
		tr.Tier.Tasks = tier.Tasks
		tr.Tier.Title = fmt.Sprintf("Peak %d tasks @1s (raw msg/s ÷ 3)", tier.Tasks)
		r.log.Info("tier", "name", tier.Name, "tasks", tier.Tasks)
		tr.Systems = append(tr.Systems, r.runSystem(ctx, tier, SystemFlyball))
		// The floor at the same load: the most calls per second this
		// machine serves the target with no scheduler at all, which bounds
		// the ratio any scheduler can reach here.
		if slices.Contains(r.cfg.Systems, SystemFloor) && ctx.Err() == nil {
			tr.Systems = append(tr.Systems, r.runSystem(ctx, tier, SystemFloor))
		}
		return
	}
	r.log.Info("tier", "name", tier.Name, "tasks", tier.Tasks, "interval", tier.Interval)
	for _, sys := range r.cfg.Systems {
		if ctx.Err() != nil {
			return
		}
		tr.Systems = append(tr.Systems, r.runSystem(ctx, tier, sys))
	}
}

func (r *runner) runSystem(ctx context.Context, tier Tier, system string) *SystemResult {
	sr := &SystemResult{System: system, Tasks: tier.Tasks, Interval: tier.Interval}
	r.log.Info("system", "tier", tier.Name, "system", system)
	releaseMemory()
	var err error
	switch system {
	case SystemFlyball:
		err = r.runFlyball(ctx, tier, sr)
	case SystemFloor:
		err = r.runFloor(ctx, tier, sr)
	case SystemNATS:
		err = r.runNATSScheduler(ctx, tier, sr)
	case SystemPipeline:
		err = r.runPipeline(ctx, tier, sr)
	}
	if err != nil {
		sr.Error = err.Error()
		r.log.Error("system failed", "tier", tier.Name, "system", system, "err", err)
		return sr
	}
	if r.rawRate > 0 {
		sr.CeilingRatio = sr.RunsPerSec / r.rawRate
	}
	s := sr.Stats
	r.log.Info("measured", "tier", tier.Name, "system", system,
		"expected", s.Expected, "completed", s.Completed, "missed", s.Missed, "dups", s.Duplicates,
		"p50", s.Lateness.P50, "p99", s.Lateness.P99, "max", s.Lateness.Max,
		"runs_per_s", math.Round(sr.RunsPerSec), "cpu_per_1k", fmt.Sprintf("%.3f", sr.CPUPer1kRuns))
	return sr
}

// releaseMemory returns to the OS what the systems before left in this
// process, so that a window, which resets the peak RSS to the RSS at its
// start, does not count it. Two collections: the first moves sync.Pool
// contents (nats-server's message block buffers) to the victim cache,
// FreeOSMemory's frees them and returns the pages. What the runtime keeps
// for itself (span and GC metadata) stays: docs/benchmarks.md, peak RSS.
func releaseMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}

// idSuffix ends a tier's name in every task ID of a system but flyball's,
// so no two systems share an ID: an external stack's executor can still be
// calling flyball's last slots when the next system starts, with the
// Idempotency-Key task:ms its calls would share.
var idSuffix = map[string]string{SystemFloor: "f", SystemNATS: "n", SystemPipeline: "p"}

// taskIDs names a tier's tasks.
func (r *runner) taskIDs(tier Tier, system string, n int) []string {
	prefix := tier.Name
	if r.cfg.Stack == StackExternal {
		prefix = "lt" + r.tag + "-" + tier.Name
	}
	prefix += idSuffix[system]
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%07d", prefix, i)
	}
	return ids
}

// urlFor spreads tasks over the target's addresses.
func (r *runner) urlFor(i int, id string) string {
	urls := r.target.URLs()
	return urls[i%len(urls)] + "/t/" + id
}

// lead is the time between creating tasks and their first slot.
func (r *runner) lead(tasks int) time.Duration {
	if r.cfg.Lead > 0 {
		return r.cfg.Lead
	}
	return 2*time.Second + time.Duration(float64(tasks)/r.cfg.CreateRate*float64(time.Second))
}

// profilePath is where the CPU (or heap) profile of a tier's flyball
// window goes.
func (r *runner) profilePath(p string, tier Tier) string {
	if len(r.cfg.Tiers) == 1 {
		return p
	}
	return withPart(p, tier.Name)
}

func (r *runner) write() error {
	if r.cfg.Stdout != nil {
		if err := RenderMarkdown(r.cfg.Stdout, r.res); err != nil {
			return err
		}
	}
	if r.cfg.Out == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(r.cfg.Out), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r.res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(r.cfg.Out, append(b, '\n'), 0o644)
}

// Problems lists what makes a run useless as a measurement: failed tiers
// and systems, systems that observed no run at all, an empty ceiling, a
// scale load that did not load everything. It says nothing about timings.
func (res *Result) Problems() []string {
	var out []string
	if res.Ceiling == nil || res.Ceiling.Error != "" || res.Ceiling.MsgsPerSec <= 0 {
		msg := "ceiling: no throughput measured"
		if res.Ceiling != nil && res.Ceiling.Error != "" {
			msg += ": " + res.Ceiling.Error
		}
		out = append(out, msg)
	}
	for _, t := range res.Tiers {
		if t.Error != "" {
			out = append(out, t.Tier.Name+": "+t.Error)
		}
		for _, s := range t.Systems {
			switch {
			case s.Error != "":
				out = append(out, t.Tier.Name+"/"+s.System+": "+s.Error)
			case s.Stats.Expected == 0:
				out = append(out, t.Tier.Name+"/"+s.System+": no slot inside the measurement window")
			case s.Stats.Observed == 0 && s.WindowArrivals == 0:
				out = append(out, t.Tier.Name+"/"+s.System+": zero runs observed")
			}
		}
		if sc := t.Scale; sc != nil && t.Error == "" && sc.LoadSeconds <= 0 {
			out = append(out, t.Tier.Name+": schedules not loaded")
		}
	}
	return out
}
