package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/flyballhq/flyball/loadtest/procstat"
	"github.com/flyballhq/flyball/loadtest/stats"
)

// window places the measurement window on a tier's grid. Slot 0 (the first
// run, cold connections and all) and at least Warmup worth of slots are
// warm-up; then come max(1, round(Duration/interval)) measured slots. The
// window is offset by half an interval so each measured slot, and the work
// it causes, sits in the middle of its share of the window.
func (r *runner) window(first time.Time, interval time.Duration) stats.Window {
	iv := int64(interval)
	warm := max(1, (int64(r.cfg.Warmup)+iv-1)/iv)
	n := max(1, (int64(r.cfg.Duration)+iv/2)/iv)
	from := first.UnixNano() + warm*iv - iv/2
	return stats.Window{From: from, To: from + n*iv}
}

// uniformGrid anchors every task at first.
func uniformGrid(ids []string, first time.Time, interval time.Duration) stats.Grid {
	g := stats.Grid{Interval: interval, Anchors: make(map[string]int64, len(ids))}
	for _, id := range ids {
		g.Anchors[id] = first.UnixNano()
	}
	return g
}

// measurement is one system's measured phase.
type measurement struct {
	sys  *SystemResult
	grid stats.Grid
	// pids are processes charged besides this one (the stack's).
	pids []int
	// notSelf charges pids only: the system runs wholly in them (flyball
	// with StackProcess) and this process only generates load.
	notSelf bool
	// profile is a CPU profile file for the window, or "".
	profile string
	// heap, if set, receives heap profiles at the window's end and (with
	// ".start" before the extension) at its start.
	heap string
	// prof takes the profiles; nil profiles this process.
	prof profiler
	// onOpen, if set, runs just before the window's first CPU sample and
	// onClose just after its last.
	onOpen, onClose func(context.Context)
}

// measure waits for the window, samples CPU and memory at its edges,
// collects the arrivals after the grace period and analyzes them.
//
// The window's CPU is sampled first, at w.From; the warm-up drain comes
// after it and forgets only the calls that arrived before w.From (the
// target answers with a count, so nothing is encoded or decoded), so the
// calls counted and the CPU charged cover the same span.
func (r *runner) measure(ctx context.Context, m measurement) error {
	w := m.sys.Window
	charged := append([]int{procstat.Self}, m.pids...)
	if m.notSelf {
		charged = slices.Clone(m.pids)
	}
	sampled := charged
	if tp := r.target.PID(); tp != 0 {
		sampled = append(sampled, tp)
	}
	prof := m.prof
	if prof == nil {
		prof = selfProfiler{}
	}
	if err := waitUntil(ctx, time.Unix(0, w.From)); err != nil {
		return err
	}
	var resetErrs []error
	for _, p := range charged {
		resetErrs = append(resetErrs, procstat.ResetPeak(p))
	}
	if m.onOpen != nil {
		m.onOpen(ctx)
	}
	if err := prof.writeHeap(startName(m.heap)); err != nil {
		return err
	}
	// The first CPU sample after the probe's reads and the heap profile,
	// which are not the system's work; only the drain must follow it, and
	// the calls it keeps (arrived since w.From) are counted either way.
	before, berr := procstat.Take(sampled...)
	// Warm-up arrivals belong to slots before the window; calls that
	// arrived since w.From stay with the target for the window's count.
	warm, err := r.target.DrainBefore(ctx, w.From)
	if err != nil {
		return err
	}
	m.sys.WarmupArrivals = warm
	stopProfile, err := prof.startCPU(m.profile, time.Until(time.Unix(0, w.To)))
	if err != nil {
		return err
	}
	werr := waitUntil(ctx, time.Unix(0, w.To))
	after, aerr := procstat.Take(sampled...)
	perr := stopProfile()
	if werr != nil {
		return werr
	}
	if perr != nil {
		return perr
	}
	if m.onClose != nil {
		m.onClose(ctx)
	}
	if err := prof.writeHeap(m.heap); err != nil {
		return err
	}
	used := after.Since(before)
	// A process that cannot be read is not charged: the system's CPU and
	// peak RSS are then not measured, rather than what the others used.
	var unread []error
	for _, p := range charged {
		d, ok := used[p]
		if !ok {
			unread = append(unread, berr, aerr)
		}
		mem, err := procstat.ReadMemory(p)
		if err != nil {
			unread = append(unread, err)
		}
		m.sys.CPUSeconds += d.Seconds()
		m.sys.PeakRSSBytes += mem.Peak
	}
	if len(unread) > 0 {
		m.sys.Uncharged = errText(unread...)
		m.sys.CPUSeconds, m.sys.PeakRSSBytes = 0, 0
	} else if msg := errText(resetErrs...); msg != "" {
		m.sys.Notes = append(m.sys.Notes, "peak RSS counts from the process's start, not the window's: "+msg)
	}
	if tp := r.target.PID(); tp != 0 {
		if d, ok := used[tp]; ok {
			m.sys.TargetCPUSeconds = d.Seconds()
		} else {
			m.sys.Notes = append(m.sys.Notes, "the target's CPU was not measured: "+errText(berr, aerr))
		}
	}
	if err := waitUntil(ctx, time.Unix(0, w.To).Add(r.cfg.Grace)); err != nil {
		return err
	}
	arrivals, err := r.target.Drain(ctx)
	if err != nil {
		return err
	}
	m.sys.Stats = stats.Analyze(arrivals, m.grid, w)
	m.sys.WindowArrivals = windowCalls(arrivals, m.grid, w)
	m.sys.RunsPerSec = float64(m.sys.WindowArrivals) / w.Duration().Seconds()
	if m.sys.WindowArrivals > 0 && m.sys.Uncharged == "" {
		m.sys.CPUPer1kRuns = m.sys.CPUSeconds / float64(m.sys.WindowArrivals) * 1000
	}
	return nil
}

// windowCalls counts the calls for the system's tasks (g's) that arrived
// in w. Throughput and cost count the calls made while the CPU was
// counted, whatever slot they were for: under overload they serve old
// slots. Calls for another system's tasks (flyball's last on an external
// stack) are not this system's runs.
func windowCalls(arrivals []stats.Arrival, g stats.Grid, w stats.Window) int {
	n := 0
	for _, a := range arrivals {
		if _, ok := g.Anchors[a.Task]; ok && a.At >= w.From && a.At < w.To {
			n++
		}
	}
	return n
}

// errText is the distinct lines of errs' messages, joined with "; " (nil
// errors are skipped; errors.Join puts each error on a line of its own).
func errText(errs ...error) string {
	var lines []string
	for _, err := range errs {
		if err == nil {
			continue
		}
		for l := range strings.Lines(err.Error()) {
			if l = strings.TrimSpace(l); l != "" && !slices.Contains(lines, l) {
				lines = append(lines, l)
			}
		}
	}
	return strings.Join(lines, "; ")
}

// startName is path with ".start" before its extension ("" stays "").
func startName(path string) string { return withPart(path, "start") }

// withPart puts "."+part before path's extension; "" stays "".
func withPart(path, part string) string {
	if path == "" {
		return ""
	}
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "." + part + ext
}

// startProfile starts a CPU profile into path; "" does nothing.
func startProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}
