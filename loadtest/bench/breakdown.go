package bench

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net/http"
	"runtime/metrics"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/flyballhq/flyball/loadtest/stats"
	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/streams"
)

// Breakdown splits flyball's lateness and cost by stage. It is diagnostic:
// no target is judged on it.
type Breakdown struct {
	// DispatchP50 and DispatchP99 bound the timer's publish lateness
	// (flyball_dispatch_lateness_seconds over the window; the value is the
	// upper bound of the histogram bucket holding the quantile). Not with
	// an external stack.
	DispatchP50 time.Duration `json:"dispatchP50,omitempty"`
	DispatchP99 time.Duration `json:"dispatchP99,omitempty"`
	// StartLateness is startedAt - scheduledAt of the run.succeeded events
	// of window slots: when the executor began the call.
	StartLateness stats.Summary `json:"startLateness"`
	// RunEventBytes is the mean size of a run.succeeded message.
	RunEventBytes float64 `json:"runEventBytes"`
	// StoredPerRun is messages stored during the window per call the
	// target received in it, by stream (KV buckets appear as KV_<bucket>).
	StoredPerRun map[string]float64 `json:"storedPerRun"`
	// StoredTotalPerRun sums StoredPerRun.
	StoredTotalPerRun float64 `json:"storedTotalPerRun"`
	// Counters are flyball's own counters over the window (not with an
	// external stack): dispatches and runs by result, retries, zombie
	// re-nudges.
	Counters map[string]float64 `json:"counters,omitempty"`
	// Work per run, counted rather than timed, so that two builds compare
	// on a noisy machine where CPU seconds move ±10% between runs
	// (not with an external stack; per call the target received in the
	// window):
	//   - ServerInPerRun and ServerOutPerRun: messages the embedded server
	//     received (publishes, acks, requests) and sent (deliveries,
	//     replies, publish acks); in-process stack only;
	//   - AllocsPerRun and AllocBytesPerRun: heap allocations of the
	//     stack's process (every service and the server; in process, the
	//     idle load generator too);
	//   - GCPerKRuns: garbage collections per 1,000 runs.
	ServerInPerRun   float64 `json:"serverInPerRun,omitempty"`
	ServerOutPerRun  float64 `json:"serverOutPerRun,omitempty"`
	AllocsPerRun     float64 `json:"allocsPerRun,omitempty"`
	AllocBytesPerRun float64 `json:"allocBytesPerRun,omitempty"`
	GCPerKRuns       float64 `json:"gcPerKRuns,omitempty"`
}

// countersOfInterest are the flyball metrics Breakdown.Counters reports.
var countersOfInterest = []string{
	"flyball_dispatch_total", "flyball_runs_total", "flyball_retries_total", "flyball_zombies_renudged_total",
}

// readCounters flattens the counters of interest to "name{k=v}" → value.
func readCounters(mfs []*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, mf := range mfs {
		if !slices.Contains(countersOfInterest, mf.GetName()) {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			out[key] = m.GetCounter().GetValue()
		}
	}
	return out
}

// scrape is a Gatherer that reads a flyball process's /metrics
// (StackProcess).
func scrape(url string) prometheus.Gatherer {
	client := &http.Client{Timeout: 5 * time.Second}
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		resp, err := client.Get(url)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		byName, err := parser.TextToMetricFamilies(resp.Body)
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", url, err)
		}
		out := make([]*dto.MetricFamily, 0, len(byName))
		for _, name := range slices.Sorted(maps.Keys(byName)) {
			out = append(out, byName[name])
		}
		return out, nil
	})
}

// streamSeqs reads every stream's last sequence.
func streamSeqs(ctx context.Context, js jetstream.JetStream) (map[string]uint64, error) {
	out := map[string]uint64{}
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		out[info.Config.Name] = info.State.LastSeq
	}
	return out, l.Err()
}

// dispatchLateness is the timer's publish lateness histogram.
const dispatchLateness = "flyball_dispatch_lateness_seconds"

// histogramSnapshot reads the cumulative bucket counts of the histogram
// named name (its first series).
func histogramSnapshot(mfs []*dto.MetricFamily, name string) (bounds []float64, counts []uint64) {
	m := firstMetric(mfs, name)
	if m == nil || m.GetHistogram() == nil {
		return nil, nil
	}
	for _, b := range m.GetHistogram().GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
		counts = append(counts, b.GetCumulativeCount())
	}
	bounds = append(bounds, math.Inf(1))
	counts = append(counts, m.GetHistogram().GetSampleCount())
	return bounds, counts
}

// firstMetric is the first series of the family named name, or nil.
func firstMetric(mfs []*dto.MetricFamily, name string) *dto.Metric {
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0]
		}
	}
	return nil
}

// histogramQuantile is the upper bound of the bucket holding quantile q of
// the observations between two snapshots.
func histogramQuantile(bounds []float64, before, after []uint64, q float64) time.Duration {
	if len(after) == 0 || len(before) != len(after) {
		return 0
	}
	total := after[len(after)-1] - before[len(before)-1]
	if total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(total)))
	for i := range after {
		if after[i]-before[i] >= rank {
			if math.IsInf(bounds[i], 1) {
				return -1
			}
			return time.Duration(bounds[i] * float64(time.Second))
		}
	}
	return 0
}

// runStarts reads the run.succeeded events of window slots from RUNS and
// summarizes when the executor started each call.
func runStarts(ctx context.Context, js jetstream.JetStream, w stats.Window, interval time.Duration) (stats.Summary, float64, error) {
	from := time.Unix(0, w.From).Add(-interval)
	cons, err := js.OrderedConsumer(ctx, streams.StreamRuns, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.RunSubject(events.OutcomeSucceeded, "*")},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &from,
	})
	if err != nil {
		return stats.Summary{}, 0, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return stats.Summary{}, 0, err
	}
	pending := info.NumPending
	var (
		late  []time.Duration
		bytes int
		n     int
	)
	for pending > 0 {
		batch, err := cons.Fetch(int(min(pending, 1000)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return stats.Summary{}, 0, err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			pending--
			bytes += len(m.Data()) + headerSize(m)
			n++
			e, err := events.Decode(m.Headers(), m.Data())
			if err != nil {
				continue
			}
			var run events.Run
			if events.DecodeData(e, &run) != nil || run.StartedAt.IsZero() {
				continue
			}
			if s := run.ScheduledAt.UnixNano(); s >= w.From && s < w.To {
				late = append(late, run.StartedAt.Sub(run.ScheduledAt))
			}
		}
		if err := batch.Error(); err != nil {
			return stats.Summary{}, 0, err
		}
		if got == 0 {
			break
		}
	}
	mean := 0.0
	if n > 0 {
		mean = float64(bytes) / float64(n)
	}
	return stats.Summarize(late), mean, nil
}

func headerSize(m jetstream.Msg) int {
	n := 0
	for k, vs := range m.Headers() {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// breakdownProbe samples what Breakdown needs at the window's edges.
type breakdownProbe struct {
	js jetstream.JetStream
	// gatherer is the stack's metrics: its registry in process, its
	// /metrics with StackProcess, nil with an external stack.
	gatherer prometheus.Gatherer
	// srv is the embedded server (in-process stack only).
	srv *server.Server
	// noRunEvents skips reading RUNS for the call starts: the pipeline's
	// run events are padding, not CloudEvents.
	noRunEvents bool

	at0, at1 probeSample
}

// probeSample is what the probe reads at one edge of the window.
type probeSample struct {
	seqs     map[string]uint64
	counters map[string]float64
	bounds   []float64
	counts   []uint64
	// work is counted when hasWork; its server counts only in process.
	work    workCount
	hasWork bool
}

// workCount is what Breakdown counts rather than times.
type workCount struct {
	in, out                uint64 // server messages
	allocs, bytes, gcCount uint64
}

// workMetrics are the runtime/metrics samples behind workCount.
var workMetrics = []string{"/gc/heap/allocs:objects", "/gc/heap/allocs:bytes", "/gc/cycles/total:gc-cycles"}

func takeWork(srv *server.Server) workCount {
	samples := make([]metrics.Sample, len(workMetrics))
	for i, name := range workMetrics {
		samples[i].Name = name
	}
	metrics.Read(samples)
	w := workCount{allocs: samples[0].Value.Uint64(), bytes: samples[1].Value.Uint64(), gcCount: samples[2].Value.Uint64()}
	if v, err := srv.Varz(nil); err == nil {
		w.in, w.out = uint64(v.InMsgs), uint64(v.OutMsgs)
	}
	return w
}

// processWork reads the allocation and GC counts of a flyball process
// from the runtime/metrics series its Go collector exports (the same
// counts takeWork reads in process; go_memstats_mallocs_total would add
// tiny objects). The server's message counts are not among them.
func processWork(mfs []*dto.MetricFamily) (workCount, bool) {
	allocs := firstMetric(mfs, "go_gc_heap_allocs_objects_total")
	bytes := firstMetric(mfs, "go_gc_heap_allocs_bytes_total")
	gc := firstMetric(mfs, "go_gc_cycles_total_gc_cycles_total")
	if allocs == nil || bytes == nil || gc == nil {
		return workCount{}, false
	}
	return workCount{
		allocs:  uint64(allocs.GetCounter().GetValue()),
		bytes:   uint64(bytes.GetCounter().GetValue()),
		gcCount: uint64(gc.GetCounter().GetValue()),
	}, true
}

// sample reads every source the probe has.
func (p *breakdownProbe) sample(ctx context.Context) probeSample {
	var s probeSample
	s.seqs, _ = streamSeqs(ctx, p.js)
	if p.gatherer != nil {
		if mfs, err := p.gatherer.Gather(); err == nil {
			s.counters = readCounters(mfs)
			s.bounds, s.counts = histogramSnapshot(mfs, dispatchLateness)
			if p.srv == nil {
				s.work, s.hasWork = processWork(mfs)
			}
		}
	}
	if p.srv != nil {
		s.work, s.hasWork = takeWork(p.srv), true
	}
	return s
}

// open samples at the window's start.
func (p *breakdownProbe) open(ctx context.Context) { p.at0 = p.sample(ctx) }

// close samples at the window's end.
func (p *breakdownProbe) close(ctx context.Context) { p.at1 = p.sample(ctx) }

// finish computes the breakdown once the window's runs are counted.
func (p *breakdownProbe) finish(ctx context.Context, sr *SystemResult) *Breakdown {
	b := &Breakdown{}
	a0, a1 := &p.at0, &p.at1
	if slices.Equal(a0.bounds, a1.bounds) {
		b.DispatchP50 = histogramQuantile(a1.bounds, a0.counts, a1.counts, 0.50)
		b.DispatchP99 = histogramQuantile(a1.bounds, a0.counts, a1.counts, 0.99)
	}
	if completed := sr.WindowArrivals; completed > 0 && a0.seqs != nil && a1.seqs != nil {
		b.StoredPerRun = map[string]float64{}
		for name, seq := range a1.seqs {
			if prev := a0.seqs[name]; seq > prev {
				per := float64(seq-prev) / float64(completed)
				b.StoredPerRun[name] = math.Round(per*1000) / 1000
				b.StoredTotalPerRun += per
			}
		}
		b.StoredTotalPerRun = math.Round(b.StoredTotalPerRun*1000) / 1000
	}
	if completed := float64(sr.WindowArrivals); completed > 0 && a0.hasWork && a1.hasWork {
		per := func(a, b uint64, scale float64) float64 {
			return math.Round(float64(b-a)/completed*scale*100) / 100
		}
		b.ServerInPerRun = per(a0.work.in, a1.work.in, 1)
		b.ServerOutPerRun = per(a0.work.out, a1.work.out, 1)
		b.AllocsPerRun = per(a0.work.allocs, a1.work.allocs, 1)
		b.AllocBytesPerRun = per(a0.work.bytes, a1.work.bytes, 1)
		b.GCPerKRuns = per(a0.work.gcCount, a1.work.gcCount, 1000)
	}
	if a1.counters != nil {
		b.Counters = map[string]float64{}
		for k, v := range a1.counters {
			if d := v - a0.counters[k]; d != 0 {
				b.Counters[k] = d
			}
		}
	}
	if p.noRunEvents {
		return b
	}
	late, size, err := runStarts(ctx, p.js, sr.Window, sr.Interval)
	if err != nil {
		sr.Notes = append(sr.Notes, "breakdown: reading RUNS: "+err.Error())
	}
	b.StartLateness, b.RunEventBytes = late, math.Round(size)
	return b
}

// String is a one-line summary for the markdown notes.
func (b *Breakdown) String() string {
	var s string
	if b.StartLateness.Count > 0 {
		s = fmt.Sprintf("executor call start p50 %s p99 %s after the slot; ", fmtDur(b.StartLateness.P50), fmtDur(b.StartLateness.P99))
	}
	if b.DispatchP99 != 0 {
		s += fmt.Sprintf("timer publish ≤ %s (p50) / ≤ %s (p99); ", fmtBound(b.DispatchP50), fmtBound(b.DispatchP99))
	}
	s += fmt.Sprintf("%.2f messages stored per run", b.StoredTotalPerRun)
	if len(b.StoredPerRun) > 0 {
		names := slices.Sorted(maps.Keys(b.StoredPerRun))
		parts := make([]string, len(names))
		for i, n := range names {
			parts[i] = fmt.Sprintf("%s %.2f", n, b.StoredPerRun[n])
		}
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	if b.ServerOutPerRun > 0 {
		s += fmt.Sprintf("; server messages in %.2f, out %.2f per run", b.ServerInPerRun, b.ServerOutPerRun)
	}
	if b.AllocsPerRun > 0 {
		s += fmt.Sprintf("; %.0f allocations (%.0f B), %.2f GCs per 1,000 runs", b.AllocsPerRun, b.AllocBytesPerRun, b.GCPerKRuns)
	}
	if b.RunEventBytes > 0 {
		s += fmt.Sprintf("; run.succeeded is %.0f B", b.RunEventBytes)
	}
	if len(b.Counters) > 0 {
		names := slices.Sorted(maps.Keys(b.Counters))
		parts := make([]string, len(names))
		for i, n := range names {
			parts[i] = fmt.Sprintf("%s %.0f", strings.TrimPrefix(n, "flyball_"), b.Counters[n])
		}
		s += "; counters: " + strings.Join(parts, ", ")
	}
	return s
}

func fmtBound(d time.Duration) string {
	if d < 0 {
		return "+Inf"
	}
	return fmtDur(d)
}
