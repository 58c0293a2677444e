package bench

import (
	"time"

	"github.com/flyballhq/flyball/loadtest/stats"
	"github.com/flyballhq/flyball/services/embedded"
)

// Result is everything one benchmark run measured. It is written as JSON
// and rendered as markdown.
type Result struct {
	StartedAt  time.Time     `json:"startedAt"`
	FinishedAt time.Time     `json:"finishedAt"`
	Command    string        `json:"command,omitempty"`
	Conditions string        `json:"conditions,omitempty"`
	Machine    Machine       `json:"machine"`
	Settings   Settings      `json:"settings"`
	Ceiling    *Ceiling      `json:"ceiling,omitempty"`
	Tiers      []*TierResult `json:"tiers"`
	Targets    []Verdict     `json:"targets"`
}

// Machine describes where the benchmark ran.
type Machine struct {
	NProc          int     `json:"nproc"`
	CPUModel       string  `json:"cpuModel"`
	MemTotalBytes  int64   `json:"memTotalBytes"`
	Kernel         string  `json:"kernel,omitempty"`
	GoVersion      string  `json:"goVersion"`
	NATSServer     string  `json:"natsServer"`
	NATSGo         string  `json:"natsGo,omitempty"`
	LoadAvgAtStart float64 `json:"loadAvgAtStart"`
	LoadAvgAtEnd   float64 `json:"loadAvgAtEnd"`
}

// Settings are the knobs that shape the figures.
type Settings struct {
	Warmup      time.Duration `json:"warmup"`
	Duration    time.Duration `json:"duration"`
	Grace       time.Duration `json:"grace"`
	Stack       string        `json:"stack"`
	Target      string        `json:"target"`
	TargetHosts int           `json:"targetHosts"`
	Concurrency int           `json:"concurrency"`
	// TimerLead is the stack's timer lead; 0 is the default.
	TimerLead time.Duration `json:"timerLead,omitempty"`
	// AsyncPersist is Config.AsyncPersist.
	AsyncPersist bool `json:"asyncPersist,omitempty"`
	// NATSSync is Config.NATSSync as --nats-sync reads it; empty for
	// nats-server's default (and for a stack behind --nats-url).
	NATSSync string `json:"natsSync,omitempty"`
}

// syncSetting is Settings.NATSSync: empty for nats-server's default.
func syncSetting(s embedded.Sync) string {
	if s.IsZero() {
		return ""
	}
	return s.String()
}

// Ceiling is the raw JetStream async-publish throughput on the server the
// stack uses (a fresh embedded server with the same options, or the
// external one).
type Ceiling struct {
	Msgs       int     `json:"msgs"`
	Size       int     `json:"size"`
	Seconds    float64 `json:"seconds"`
	MsgsPerSec float64 `json:"msgsPerSec"`
	CPUSeconds float64 `json:"cpuSeconds"`
	// Uncharged, when set, says which process could not be read:
	// CPUSeconds is then not measured (zero).
	Uncharged string `json:"uncharged,omitempty"`
	Error     string `json:"error,omitempty"`
}

// TierResult is one tier.
type TierResult struct {
	Tier    Tier            `json:"tier"`
	Systems []*SystemResult `json:"systems,omitempty"`
	Scale   *ScaleResult    `json:"scale,omitempty"`
	Error   string          `json:"error,omitempty"`
}

// system returns the named system's result, or nil.
func (t *TierResult) system(name string) *SystemResult {
	for _, s := range t.Systems {
		if s.System == name && s.Error == "" {
			return s
		}
	}
	return nil
}

// SystemResult is one system on one tier.
type SystemResult struct {
	System   string        `json:"system"`
	Tasks    int           `json:"tasks"`
	Interval time.Duration `json:"interval"`
	// Window is the measurement window of slot times.
	Window stats.Window `json:"window"`
	// SetupSeconds is the time to create the tasks (for flyball: until the
	// governor had accepted every one).
	SetupSeconds float64 `json:"setupSeconds"`
	// AcceptRate is tasks accepted per second by the governor.
	AcceptRate float64 `json:"acceptRate,omitempty"`
	// OffStart counts tasks whose first slot is not the requested one
	// (created too late for their startAt).
	OffStart int          `json:"offStart,omitempty"`
	Stats    stats.Report `json:"stats"`
	// WarmupArrivals counts the calls that arrived before the window
	// (discarded).
	WarmupArrivals int `json:"warmupArrivals"`
	// WindowArrivals counts the calls for the system's tasks that the
	// target received during the window, for any slot.
	WindowArrivals int `json:"windowArrivals"`
	// RunsPerSec is WindowArrivals per second of window: completed runs/s.
	RunsPerSec float64 `json:"runsPerSec"`
	// CPUSeconds is the CPU used during the window by the processes
	// charged: this process plus every stack process (StackPIDs, or the
	// child of StackProcess), or with StackProcess flyball's child alone;
	// not the target's.
	CPUSeconds float64 `json:"cpuSeconds"`
	// CPUPer1kRuns is CPUSeconds per 1,000 WindowArrivals.
	CPUPer1kRuns float64 `json:"cpuPer1kRuns"`
	// TargetCPUSeconds is the target's CPU during the window (a child
	// process; zero for an in-process target, whose CPU is then inside
	// CPUSeconds when this process is charged).
	TargetCPUSeconds float64 `json:"targetCpuSeconds"`
	// PeakRSSBytes is the largest RSS during the window, summed over the
	// processes charged.
	PeakRSSBytes int64 `json:"peakRssBytes"`
	// Uncharged, when set, says which process to charge could not be
	// read: CPUSeconds, CPUPer1kRuns and PeakRSSBytes are then not
	// measured (zero), and the CPU verdict says so.
	Uncharged string `json:"uncharged,omitempty"`
	// CeilingRatio is RunsPerSec ÷ raw publish msg/s.
	CeilingRatio float64 `json:"ceilingRatio,omitempty"`
	// Breakdown splits flyball's lateness and cost by stage.
	Breakdown *Breakdown `json:"breakdown,omitempty"`
	// Pipeline counts the pipeline system's stages.
	Pipeline *PipelineCounts `json:"pipeline,omitempty"`
	Notes    []string        `json:"notes,omitempty"`
	Error    string          `json:"error,omitempty"`
}

// ScaleResult is the Scale tier: how long the timer takes to load every
// schedule and how much heap it holds for them.
type ScaleResult struct {
	Tasks       int     `json:"tasks"`
	Seed        string  `json:"seed"`
	SeedSeconds float64 `json:"seedSeconds"`
	// ReadySeconds is from starting the timer to Ready() (the end of the
	// initial KV snapshot).
	ReadySeconds float64 `json:"readySeconds"`
	// LoadSeconds is from starting the timer until flyball_dispatch_pending
	// equals Tasks.
	LoadSeconds float64 `json:"loadSeconds"`
	// HeapDeltaBytes is HeapAlloc after loading minus before (GC forced
	// both times). It includes whatever the in-process nats-server still
	// caches for the watch, so it is an upper bound.
	HeapDeltaBytes   int64   `json:"heapDeltaBytes"`
	HeapDeltaPerTask float64 `json:"heapDeltaPerTask"`
	// HeapReleasedBytes is HeapAlloc after loading minus after stopping the
	// timer (GC forced): the heap the timer itself held.
	HeapReleasedBytes   int64   `json:"heapReleasedBytes"`
	HeapReleasedPerTask float64 `json:"heapReleasedPerTask"`
	PeakRSSBytes        int64   `json:"peakRssBytes"`
	CPUSeconds          float64 `json:"cpuSeconds"`
	// Failovers at this scale, between timers under a lease of
	// TakeoverTTLSeconds (the compose stack's --timer-lease). First a
	// crash: the holder's NATS connection cut once it holds every
	// schedule. TakeoverLeaseSeconds runs from the cut until the standby
	// holds the lease, TakeoverSeconds until it also holds every schedule
	// again. Then a clean stop of the new holder, which releases the
	// lease: TakeoverStopLeaseSeconds and TakeoverStopSeconds, from the
	// stop. Zero when not measured (a note says why).
	TakeoverTTLSeconds       float64  `json:"takeoverTtlSeconds,omitempty"`
	TakeoverLeaseSeconds     float64  `json:"takeoverLeaseSeconds,omitempty"`
	TakeoverSeconds          float64  `json:"takeoverSeconds,omitempty"`
	TakeoverStopLeaseSeconds float64  `json:"takeoverStopLeaseSeconds,omitempty"`
	TakeoverStopSeconds      float64  `json:"takeoverStopSeconds,omitempty"`
	Notes                    []string `json:"notes,omitempty"`
}

// Verdict is one of the targets, met or not.
type Verdict struct {
	Target   string `json:"target"`
	Tier     string `json:"tier,omitempty"`
	Met      bool   `json:"met"`
	Measured string `json:"measured"`
	Reason   string `json:"reason,omitempty"`
}
