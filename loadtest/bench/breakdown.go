package bench

import (
	"context"
	"fmt"
	"maps"
	"math"
	"runtime/metrics"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/flyballhq/flyball/loadtest/stats"
	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/streams"
)

// Breakdown splits flyball's lateness and cost by stage. It is diagnostic:
// no target is judged on it.
type Breakdown struct {
	// DispatchP50 and DispatchP99 bound the timer's publish lateness
	// (flyball_dispatch_lateness_seconds over the window; the value is the
	// upper bound of the histogram bucket holding the quantile). In-process
	// stack only.
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
	// Counters are flyball's own counters over the window (in-process
	// stack only): dispatches and runs by result, retries, zombie re-nudges.
	Counters map[string]float64 `json:"counters,omitempty"`
	// Work per run, counted rather than timed, so that two builds compare
	// on a noisy machine where CPU seconds move ±10% between runs
	// (in-process stack only; per call the target received in the window):
	//   - ServerInPerRun and ServerOutPerRun: messages the embedded server
	//     received (publishes, acks, requests) and sent (deliveries,
	//     replies, publish acks);
	//   - AllocsPerRun and AllocBytesPerRun: heap allocations of this
	//     process (every service, the server, the idle load generator);
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
func readCounters(g prometheus.Gatherer) map[string]float64 {
	out := map[string]float64{}
	mfs, err := g.Gather()
	if err != nil {
		return out
	}
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

// streamSeqs reads every stream's last sequence.
func streamSeqs(ctx context.Context, js jetstream.JetStream) (map[string]uint64, error) {
	out := map[string]uint64{}
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		out[info.Config.Name] = info.State.LastSeq
	}
	return out, l.Err()
}

// histogramSnapshot reads a histogram's cumulative bucket counts.
func histogramSnapshot(h prometheus.Histogram) (bounds []float64, counts []uint64) {
	var m dto.Metric
	if err := h.Write(&m); err != nil {
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
	js        jetstream.JetStream
	histogram prometheus.Histogram // nil with an external stack
	gatherer  prometheus.Gatherer  // nil with an external stack

	srv *server.Server // nil with an external stack

	seqs0, seqs1     map[string]uint64
	ctr0, ctr1       map[string]float64
	bounds           []float64
	counts0, counts1 []uint64
	work0, work1     workCount
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

// open samples at the window's start.
func (p *breakdownProbe) open(ctx context.Context) {
	p.seqs0, _ = streamSeqs(ctx, p.js)
	if p.histogram != nil {
		p.bounds, p.counts0 = histogramSnapshot(p.histogram)
	}
	if p.gatherer != nil {
		p.ctr0 = readCounters(p.gatherer)
	}
	if p.srv != nil {
		p.work0 = takeWork(p.srv)
	}
}

// close samples at the window's end.
func (p *breakdownProbe) close(ctx context.Context) {
	p.seqs1, _ = streamSeqs(ctx, p.js)
	if p.histogram != nil {
		_, p.counts1 = histogramSnapshot(p.histogram)
	}
	if p.gatherer != nil {
		p.ctr1 = readCounters(p.gatherer)
	}
	if p.srv != nil {
		p.work1 = takeWork(p.srv)
	}
}

// finish computes the breakdown once the window's runs are counted.
func (p *breakdownProbe) finish(ctx context.Context, sr *SystemResult) *Breakdown {
	b := &Breakdown{}
	if p.histogram != nil {
		b.DispatchP50 = histogramQuantile(p.bounds, p.counts0, p.counts1, 0.50)
		b.DispatchP99 = histogramQuantile(p.bounds, p.counts0, p.counts1, 0.99)
	}
	if completed := sr.WindowArrivals; completed > 0 && p.seqs0 != nil && p.seqs1 != nil {
		b.StoredPerRun = map[string]float64{}
		for name, seq := range p.seqs1 {
			if prev := p.seqs0[name]; seq > prev {
				per := float64(seq-prev) / float64(completed)
				b.StoredPerRun[name] = math.Round(per*1000) / 1000
				b.StoredTotalPerRun += per
			}
		}
		b.StoredTotalPerRun = math.Round(b.StoredTotalPerRun*1000) / 1000
	}
	if completed := float64(sr.WindowArrivals); completed > 0 && p.srv != nil {
		per := func(a, b uint64, scale float64) float64 {
			return math.Round(float64(b-a)/completed*scale*100) / 100
		}
		b.ServerInPerRun = per(p.work0.in, p.work1.in, 1)
		b.ServerOutPerRun = per(p.work0.out, p.work1.out, 1)
		b.AllocsPerRun = per(p.work0.allocs, p.work1.allocs, 1)
		b.AllocBytesPerRun = per(p.work0.bytes, p.work1.bytes, 1)
		b.GCPerKRuns = per(p.work0.gcCount, p.work1.gcCount, 1000)
	}
	if p.ctr1 != nil {
		b.Counters = map[string]float64{}
		for k, v := range p.ctr1 {
			if d := v - p.ctr0[k]; d != 0 {
				b.Counters[k] = d
			}
		}
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
	s := fmt.Sprintf("executor call start p50 %s p99 %s after the slot", fmtDur(b.StartLateness.P50), fmtDur(b.StartLateness.P99))
	if b.DispatchP99 != 0 {
		s += fmt.Sprintf("; timer publish ≤ %s (p50) / ≤ %s (p99)", fmtBound(b.DispatchP50), fmtBound(b.DispatchP99))
	}
	s += fmt.Sprintf("; %.2f messages stored per run", b.StoredTotalPerRun)
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
