package bench

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/flyballhq/flyball/loadtest/procstat"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/embedded"
)

// Systems the benchmark can drive.
const (
	// SystemFlyball is flyball itself.
	SystemFlyball = "flyball"
	// SystemFloor is one plain Go timer per task: the instrument's floor.
	SystemFloor = "floor"
	// SystemNATS is nats-server's own message scheduler (Nats-Schedule
	// "@every") with a JetStream consumer doing the GET.
	SystemNATS = "nats-scheduler"
	// SystemPipeline is flyball's message flow (its streams, consumers,
	// bucket, message sizes and acks) with none of its logic: what the
	// design's messages cost per run.
	SystemPipeline = "pipeline"
)

// AllSystems lists the systems in the order a tier runs them.
var AllSystems = []string{SystemFlyball, SystemFloor, SystemNATS, SystemPipeline}

// Stack modes: where flyball runs.
const (
	// StackInProcess runs an embedded nats-server and every service in the
	// benchmark process (a fresh server and store for every run).
	StackInProcess = "inproc"
	// StackProcess runs `flyball dev` (Config.FlyballBin) in a child
	// process for each flyball run, and a bare nats-server in a child
	// process (Config.Executable nats-server) for the ceiling and the
	// nats-server baseline: each system's stack in a process of its own,
	// the load generator outside it.
	StackProcess = "process"
	// StackExternal uses the flyball stack behind Config.NATSURL as is.
	StackExternal = "external"
)

// Target modes: where the HTTP target runs.
const (
	// TargetProcess serves the target from a child process, so its CPU is
	// not charged to the scheduler under test.
	TargetProcess = "process"
	// TargetInProcess serves the target from the benchmark process.
	TargetInProcess = "inproc"
)

// Seed modes for the Scale tier.
const (
	// SeedKV writes every task's spec and schedule straight into the KV
	// buckets, computing the schedule with pkg/governor.Decide exactly as
	// the governor would. It takes seconds for a million tasks.
	SeedKV = "kv"
	// SeedGovernor publishes task.created events and waits for the
	// governor to accept each one.
	SeedGovernor = "governor"
)

// Config configures a benchmark run. The zero value is not usable: start
// from DefaultConfig.
type Config struct {
	// Tiers to run, by name (see Tiers). Defaults to every tier.
	Tiers []string
	// Systems to drive in each run tier. Defaults to AllSystems (without
	// the pipeline on an external stack).
	Systems []string
	// Warmup is the time after the first slot before the measurement
	// window opens, rounded up to whole intervals (at least one). Defaults
	// to 10s.
	Warmup time.Duration
	// Duration is the measurement window, rounded to whole intervals (at
	// least one). Defaults to 60s.
	Duration time.Duration
	// Grace is how long arrivals for slots inside the window are awaited
	// after it closes. Defaults to 3s.
	Grace time.Duration
	// Lead is the time between starting to create tasks and their first
	// slot. Zero picks 2s + tasks/CreateRate.
	Lead time.Duration
	// CreateRate is the governor acceptance rate (tasks/s) assumed when
	// Lead is zero. Defaults to 1000.
	CreateRate float64
	// Stack says where flyball runs: StackInProcess (default),
	// StackProcess, or StackExternal (set by NATSURL).
	Stack string
	// FlyballBin is the flyball binary StackProcess runs as `flyball dev`.
	FlyballBin string
	// NATSURL points at an existing flyball stack (StackExternal).
	NATSURL string
	// StackPIDs are processes whose CPU and memory are charged to flyball
	// (and to the nats-server baseline) with StackExternal: the nats-server
	// and flyball processes of the stack behind NATSURL. Required there,
	// and each must be readable (/proc/<pid>/stat).
	StackPIDs []int
	// AsyncPersist creates flyball's DISPATCH and RUNS streams
	// (streams.AsyncPersistStreams) with nats-server's async persist mode
	// (streams.WithAsyncPersist), for flyball and the pipeline alike, and
	// the ceiling's and the nats-server baseline's streams too, so that
	// every system writes the same way. Not with StackExternal: the
	// stack's own streams decide there.
	AsyncPersist bool
	// NATSSync is when the servers the benchmark starts fsync JetStream
	// writes (embedded.Sync; the zero value is nats-server's default),
	// passed to `flyball dev --nats-sync` with StackProcess. Every system
	// and the ceiling run on such a server, so they write the same way.
	// Not with StackExternal.
	NATSSync embedded.Sync
	// TimerLead is the in-process stack's timer lead (stack.Config.TimerLead):
	// 0 for the default, negative for none.
	TimerLead time.Duration
	// Concurrency is the executor's Concurrency and the number of calls
	// the floor and the nats-server baseline make at once. Defaults to 256.
	Concurrency int
	// Target says where the HTTP target runs: TargetProcess (default) or
	// TargetInProcess.
	Target string
	// TargetHosts is how many loopback addresses the target listens on;
	// tasks are spread over them round-robin. Defaults to 1.
	TargetHosts int
	// Executable is the binary spawned for TargetProcess with the argument
	// "target", and for StackProcess with "nats-server" (ServeNATS).
	// Required for both.
	Executable string
	// RawMsgs is how many messages the ceiling publishes. Defaults to
	// 500,000.
	RawMsgs int
	// RawSize is the payload size of each ceiling message. Defaults to 128.
	RawSize int
	// ScaleTasks overrides the Scale tier's task count.
	ScaleTasks int
	// ScaleSeed is SeedKV (default) or SeedGovernor.
	ScaleSeed string
	// PeakTasks overrides the Peak tier's task count, which is otherwise
	// raw publish msg/s ÷ 3 (the offered load that reaches the hard limit).
	PeakTasks int
	// CPUProfile, if set, receives a CPU profile of the stack over each
	// flyball measurement window (with StackInProcess, of this process; with
	// StackProcess, of the flyball dev child through its /debug/pprof/) and
	// over the scale tier's load (this process). With several tiers the tier
	// name is added before the extension. The pipeline system's windows
	// are profiled too (this process), with ".pipeline" added likewise.
	CPUProfile string
	// MemProfile, if set, receives a heap profile taken after the Scale
	// tier's timer has loaded every schedule.
	MemProfile string
	// AllocProfile, if set, receives two heap profiles of the stack (as
	// for CPUProfile) around each flyball measurement window: <AllocProfile> at its end
	// and the same name with ".start" before the extension at its start.
	// Their difference (go tool pprof -sample_index=alloc_space -base
	// START END) is what the window allocated, by call site. The tier name
	// is added with several tiers, as for CPUProfile; the pipeline's get
	// ".pipeline" too.
	AllocProfile string
	// Out is the JSON result file. Empty writes none.
	Out string
	// Command is the command line recorded in the result.
	Command string
	// Conditions describes the machine's state for the report (for
	// example "quiet" or "other builds running").
	Conditions string
	// Logger receives progress. Defaults to a discarding logger.
	Logger *slog.Logger
	// StackLogger receives the services' own logs. Defaults to warnings
	// and errors on Logger's handler.
	StackLogger *slog.Logger
	// Stdout receives the markdown report. Nil prints nothing.
	Stdout io.Writer
}

// DefaultConfig returns the defaults used by `make bench`.
func DefaultConfig() Config {
	return Config{
		Warmup:      10 * time.Second,
		Duration:    60 * time.Second,
		Grace:       3 * time.Second,
		CreateRate:  1000,
		Stack:       StackInProcess,
		Concurrency: 256,
		Target:      TargetProcess,
		TargetHosts: 1,
		RawMsgs:     500_000,
		RawSize:     128,
		ScaleSeed:   SeedKV,
	}
}

// SmokeConfig is the CI-safe variant: a 20-task tier for a few seconds on
// every system, a small ceiling and a 10,000-task scale load. It asserts
// nothing about timings.
func SmokeConfig() Config {
	c := DefaultConfig()
	c.Tiers = []string{TierSmoke, TierScale}
	c.Warmup = time.Second
	c.Duration = 5 * time.Second
	c.Grace = time.Second
	c.Lead = 1500 * time.Millisecond
	c.Concurrency = 32
	c.RawMsgs = 10_000
	c.ScaleTasks = 10_000
	return c
}

func (c *Config) validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(c.Tiers) == 0 {
		c.Tiers = DefaultTiers()
	}
	for _, t := range c.Tiers {
		if _, ok := lookupTier(t); !ok {
			add("tiers: unknown tier %q (want %s)", t, strings.Join(TierNames(), ", "))
		}
	}
	if c.Warmup < 0 {
		add("warmup: must be >= 0, got %s", c.Warmup)
	}
	if c.Duration <= 0 {
		add("duration: must be > 0, got %s", c.Duration)
	}
	if c.Grace < 0 {
		add("grace: must be >= 0, got %s", c.Grace)
	}
	if c.Lead < 0 {
		add("lead: must be >= 0, got %s", c.Lead)
	}
	if c.CreateRate <= 0 {
		c.CreateRate = 1000
	}
	if c.NATSURL != "" {
		c.Stack = StackExternal
	}
	if len(c.Systems) == 0 {
		c.Systems = AllSystems
		if c.Stack == StackExternal {
			c.Systems = slices.DeleteFunc(slices.Clone(AllSystems), func(s string) bool { return s == SystemPipeline })
		}
	}
	for _, s := range c.Systems {
		if !slices.Contains(AllSystems, s) {
			add("systems: unknown system %q (want %s)", s, strings.Join(AllSystems, ", "))
		}
		if s == SystemPipeline && c.Stack == StackExternal {
			add("systems: %s needs a server of its own (it creates flyball's streams): not with --nats-url", SystemPipeline)
		}
	}
	switch c.Stack {
	case StackInProcess:
	case StackProcess:
		if c.FlyballBin == "" {
			add("flyball-bin: stack %q needs the flyball binary to run as `flyball dev`", StackProcess)
		}
		if c.Executable == "" {
			add("stack: %q needs Config.Executable (it serves the baseline's nats-server)", StackProcess)
		}
	case StackExternal:
		if c.AsyncPersist {
			add("async-persist: the stack behind --nats-url has its streams already (ensure them with flyball serve --async-persist)")
		}
		if !c.NATSSync.IsZero() {
			add("nats-sync: the server behind --nats-url has its own sync_interval")
		}
		if c.NATSURL == "" {
			add("stack: %q needs a NATS URL", StackExternal)
		}
		// Without the stack's processes the CPU and peak RSS charged
		// would be the load generator's alone, and the CPU target judged
		// on them.
		if len(c.StackPIDs) == 0 {
			add("stack-pid: --nats-url needs the PIDs of the stack's processes (nats-server, flyball), whose CPU and RSS are the stack's")
		}
		for _, p := range c.StackPIDs {
			if _, err := procstat.CPUTotal(p); err != nil {
				add("stack-pid: %d cannot be read: %w", p, err)
			}
		}
	default:
		add("stack: want %s, %s or %s, got %q", StackInProcess, StackProcess, StackExternal, c.Stack)
	}
	if len(c.StackPIDs) > 0 && c.Stack != StackExternal {
		add("stack-pid: applies to a stack behind --nats-url only")
	}
	if c.TimerLead > gov.MaxLead {
		add("timer-lead: must be at most %s, got %s", gov.MaxLead, c.TimerLead)
	}
	if c.TimerLead != 0 && c.Stack == StackExternal {
		add("timer-lead: applies to the in-process stack only; set --timer-lead on the stack behind --nats-url")
	}
	if c.Concurrency < 1 || c.Concurrency > 100_000 {
		add("concurrency: must be in [1, 100000], got %d", c.Concurrency)
	}
	switch c.Target {
	case TargetInProcess:
	case TargetProcess:
		if c.Executable == "" {
			add("target: %q needs Config.Executable", TargetProcess)
		}
	default:
		add("target: want %s or %s, got %q", TargetProcess, TargetInProcess, c.Target)
	}
	if c.TargetHosts < 1 || c.TargetHosts > 250 {
		add("target-hosts: must be in [1, 250], got %d", c.TargetHosts)
	}
	if c.RawMsgs < 1000 {
		add("raw-msgs: must be >= 1000, got %d", c.RawMsgs)
	}
	if c.RawSize < 1 || c.RawSize > 1<<20 {
		add("raw-size: must be in [1, 1MiB], got %d", c.RawSize)
	}
	if c.ScaleTasks < 0 || c.PeakTasks < 0 {
		add("scale-tasks and peak-tasks must be >= 0")
	}
	switch c.ScaleSeed {
	case SeedKV, SeedGovernor:
	default:
		add("scale-seed: want %s or %s, got %q", SeedKV, SeedGovernor, c.ScaleSeed)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.StackLogger == nil {
		c.StackLogger = slog.New(levelHandler{slog.LevelWarn, c.Logger.Handler()})
	}
	return errors.Join(errs...)
}
