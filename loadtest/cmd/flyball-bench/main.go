// Command flyball-bench measures flyball's dispatch precision, throughput
// and cost against the JetStream ceiling, a plain-timer floor and
// nats-server's own message scheduler, all in one run.
//
//	flyball-bench                        # every tier but smoke (make bench)
//	flyball-bench --smoke --check        # the CI-safe variant (make bench-smoke)
//	flyball-bench --tiers w1a,w1c --duration 20s --cpuprofile /tmp/cpu.pprof
//	flyball-bench --stack process --tiers w1c  # flyball dev in a child process
//	flyball-bench --nats-url nats://127.0.0.1:4222 --stack-pid 1234
//
// It prints a markdown report on stdout and writes the full result as JSON
// (by default to loadtest/results/<timestamp>.json).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/flyballhq/flyball/loadtest/bench"
	"github.com/flyballhq/flyball/loadtest/target"
	"github.com/flyballhq/flyball/services/embedded"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "flyball-bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "target":
			return runTarget(ctx, args[1:])
		case "nats-server":
			return bench.ServeNATS(ctx, args[1:])
		}
	}
	o, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	cfg, out, markdown, check := o.cfg, o.out, o.markdown, o.check
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cfg.Executable = exe
	if cfg.Stack == bench.StackProcess && cfg.FlyballBin == "" && cfg.NATSURL == "" {
		bin, cleanup, err := buildFlyball(ctx, cfg.Logger)
		if err != nil {
			return err
		}
		defer cleanup()
		cfg.FlyballBin = bin
	}
	cfg.Out = resultPath(out)
	switch {
	case markdown == "-":
		markdown = ""
	case markdown == "" && cfg.Out != "":
		markdown = strings.TrimSuffix(cfg.Out, filepath.Ext(cfg.Out)) + ".md"
	}
	cfg.Command = "flyball-bench " + strings.Join(args, " ")
	cfg.Stdout = os.Stdout

	res, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if markdown != "" {
		f, err := os.Create(markdown)
		if err != nil {
			return err
		}
		if err := bench.RenderMarkdown(f, res); err != nil {
			_ = f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	if cfg.Out != "" {
		fmt.Fprintln(os.Stderr, "result written to", cfg.Out, markdown)
	}
	if check {
		if probs := res.Problems(); len(probs) > 0 {
			return fmt.Errorf("the instrument is broken:\n  %s", strings.Join(probs, "\n  "))
		}
		fmt.Fprintln(os.Stderr, "check: every tier and system measured something")
	}
	return nil
}

func runTarget(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("flyball-bench target", flag.ContinueOnError)
	hosts := fs.Int("hosts", 1, "loopback addresses to listen on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return target.Main(ctx, *hosts, os.Stdin, os.Stdout)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// resultPath resolves --out: "-" means none; empty means
// results/<timestamp>.json inside the loadtest module, wherever we run from.
func resultPath(out string) string {
	switch out {
	case "-":
		return ""
	case "":
	default:
		return out
	}
	dir := "results"
	if st, err := os.Stat(filepath.Join("loadtest", "go.mod")); err == nil && !st.IsDir() {
		dir = filepath.Join("loadtest", "results")
	}
	return filepath.Join(dir, time.Now().UTC().Format("20060102T150405Z")+".json")
}

// buildFlyball builds the flyball binary from the workspace this command
// runs in, for --stack process without --flyball-bin.
func buildFlyball(ctx context.Context, log *slog.Logger) (string, func(), error) {
	dir, err := os.MkdirTemp("", "flyball-bench-bin-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	bin := filepath.Join(dir, "flyball")
	log.Info("building flyball for --stack process", "pkg", flyballPkg)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, flyballPkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("--stack process: go build %s: %w (build it with make build and pass --flyball-bin): %s",
			flyballPkg, err, strings.Join(strings.Fields(string(out)), " "))
	}
	return bin, cleanup, nil
}

// flyballPkg is the flyball command's package.
const flyballPkg = "github.com/flyballhq/flyball/services/cmd/flyball"

// options is flyball-bench's command line: the run's configuration and the
// flags main interprets itself.
type options struct {
	cfg                                                       bench.Config
	tiers, systems, stackPIDs, out, markdown, level, natsSync string
	check                                                     bool
}

// parseFlags reads the command line (flag.ErrHelp for -h).
func parseFlags(args []string) (*options, error) {
	smoke := false
	for _, a := range args {
		if a == "--smoke" || a == "-smoke" || a == "--smoke=true" || a == "-smoke=true" {
			smoke = true
		}
	}
	cfg := bench.DefaultConfig()
	if smoke {
		cfg = bench.SmokeConfig()
	}
	o := &options{cfg: cfg}
	fs := flag.NewFlagSet("flyball-bench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: flyball-bench [flags]\n       flyball-bench target [--hosts N]\n       flyball-bench nats-server --listen host:port --store dir\n\nTiers: %s (default: %s)\n\nFlags:\n",
			strings.Join(bench.TierNames(), ", "), strings.Join(bench.DefaultTiers(), ","))
		fs.PrintDefaults()
	}
	fs.Bool("smoke", false, "the CI-safe variant: a 20-task tier for 5s on every system, a 10k-message ceiling, a 10k-task scale load")
	fs.BoolVar(&o.check, "check", false, "exit non-zero if the instrument broke (a failed tier, zero runs observed, no ceiling); timings are not checked")
	fs.StringVar(&o.tiers, "tiers", strings.Join(cfg.Tiers, ","), "comma-separated tiers to run, or \"all\" (every tier but smoke)")
	fs.StringVar(&o.systems, "systems", "", "comma-separated systems to drive in each run tier (default: "+strings.Join(bench.AllSystems, ",")+"; with --nats-url, without "+bench.SystemPipeline+")")
	fs.DurationVar(&o.cfg.Duration, "duration", cfg.Duration, "measurement window, rounded to whole intervals (at least one)")
	fs.DurationVar(&o.cfg.Warmup, "warmup", cfg.Warmup, "warm-up after the first slot, rounded up to whole intervals (at least one)")
	fs.DurationVar(&o.cfg.Grace, "grace", cfg.Grace, "how long to wait for late arrivals after the window")
	fs.DurationVar(&o.cfg.Lead, "lead", cfg.Lead, "time from creating tasks to their first slot (0: 2s + tasks/create-rate)")
	fs.Float64Var(&o.cfg.CreateRate, "create-rate", cfg.CreateRate, "governor acceptance rate (tasks/s) assumed when --lead is 0")
	fs.StringVar(&o.cfg.Stack, "stack", cfg.Stack, "where flyball runs: inproc (every service and its nats-server in this process) or process (`flyball dev` in a child process, and the baseline's nats-server in another)")
	fs.BoolVar(&o.cfg.AsyncPersist, "async-persist", false, "create DISPATCH and RUNS (and the ceiling's and the baseline's streams) with nats-server's async persist mode, as flyball dev --async-persist does (not with --nats-url)")
	fs.StringVar(&o.natsSync, "nats-sync", embedded.RecommendedSync.String(), "when the servers the benchmark starts fsync JetStream writes: always, or an interval, as flyball dev --nats-sync, whose default this is (not with --nats-url)")
	fs.StringVar(&o.cfg.FlyballBin, "flyball-bin", "", "with --stack process: the flyball binary to run as `flyball dev` (default: go build it from this workspace)")
	fs.StringVar(&o.cfg.NATSURL, "nats-url", "", "use the flyball stack behind this NATS URL instead of starting one")
	fs.StringVar(&o.stackPIDs, "stack-pid", "", "with --nats-url (required there): comma-separated PIDs (nats-server, flyball) whose CPU and RSS count as the stack's")
	fs.IntVar(&o.cfg.Concurrency, "concurrency", cfg.Concurrency, "executor concurrency, and concurrent calls of the floor and the nats-server baseline")
	fs.DurationVar(&o.cfg.TimerLead, "timer-lead", cfg.TimerLead, "stack inproc or process: the longest the timer publishes a dispatch before its slot (0: flyball's default, negative: at the slot)")
	fs.StringVar(&o.cfg.Target, "target", cfg.Target, "where the HTTP target runs: process (a child, so its CPU is not charged) or inproc")
	fs.IntVar(&o.cfg.TargetHosts, "target-hosts", cfg.TargetHosts, "loopback addresses the target listens on (tasks are spread over them)")
	fs.IntVar(&o.cfg.RawMsgs, "raw-msgs", cfg.RawMsgs, "messages published to measure the raw JetStream ceiling")
	fs.IntVar(&o.cfg.RawSize, "raw-size", cfg.RawSize, "payload bytes of each ceiling message")
	fs.IntVar(&o.cfg.ScaleTasks, "scale-tasks", cfg.ScaleTasks, "override the scale tier's task count (0: 1,000,000)")
	fs.StringVar(&o.cfg.ScaleSeed, "scale-seed", cfg.ScaleSeed, "how the scale tier creates schedules: kv (direct, as the governor would store them) or governor")
	fs.IntVar(&o.cfg.PeakTasks, "peak-tasks", cfg.PeakTasks, "override the peak tier's task count (0: raw msg/s ÷ 3)")
	fs.StringVar(&o.cfg.CPUProfile, "cpuprofile", "", "write a CPU profile of each flyball measurement window and of the scale load (tier name added with several tiers)")
	fs.StringVar(&o.cfg.AllocProfile, "allocprofile", "", "write heap profiles at the start (name.start.ext) and end of each flyball measurement window; diff them with go tool pprof -base")
	fs.StringVar(&o.cfg.MemProfile, "memprofile", "", "write a heap profile once the scale tier's timer has loaded every schedule")
	fs.StringVar(&o.out, "out", "", "JSON result file (default loadtest/results/<timestamp>.json; \"-\" for none)")
	fs.StringVar(&o.markdown, "markdown", "", "also write the markdown report to this file (default: next to the JSON, .md; \"-\" for none)")
	fs.StringVar(&o.cfg.Conditions, "conditions", "", "free text describing the machine's state, recorded in the report")
	fs.StringVar(&o.level, "log-level", "info", "progress log level on stderr: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	o.cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	if o.tiers == "all" {
		o.cfg.Tiers = bench.DefaultTiers()
	} else {
		o.cfg.Tiers = splitList(o.tiers)
	}
	o.cfg.Systems = splitList(o.systems)
	// With --nats-url the stack's server has its own setting: only a
	// --nats-sync given on the command line is refused there (validate).
	natsSyncGiven := false
	fs.Visit(func(f *flag.Flag) { natsSyncGiven = natsSyncGiven || f.Name == "nats-sync" })
	if natsSyncGiven || o.cfg.NATSURL == "" {
		s, err := embedded.ParseSync(o.natsSync)
		if err != nil {
			return nil, fmt.Errorf("--nats-sync: %w", err)
		}
		o.cfg.NATSSync = s
	}
	for _, p := range splitList(o.stackPIDs) {
		pid, err := strconv.Atoi(p)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("--stack-pid: bad PID %q", p)
		}
		o.cfg.StackPIDs = append(o.cfg.StackPIDs, pid)
	}
	return o, nil
}
