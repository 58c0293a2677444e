package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/flyballhq/flyball/loadtest/procstat"
	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/stack"
	"github.com/flyballhq/flyball/streams"
)

// scale seeds the schedules of tier.Tasks tasks, then starts a timer on
// them and measures how long it takes to hold every one and how much heap
// it holds. No run is due during the measurement: the first slots are 30
// to 60 minutes away.
func (r *runner) scale(ctx context.Context, tier Tier) (*ScaleResult, error) {
	if r.cfg.Stack == StackExternal {
		return nil, errors.New("the scale tier needs a stack of its own: it reads the timer's Ready() and heap")
	}
	sc := &ScaleResult{Tasks: tier.Tasks, Seed: r.cfg.ScaleSeed}
	env, err := r.startNATS(ctx)
	if err != nil {
		return sc, err
	}
	defer env.close()

	ids := r.taskIDs(tier, SystemFlyball, tier.Tasks)
	begin := time.Now()
	if err := r.seed(ctx, env, tier, ids); err != nil {
		return sc, fmt.Errorf("seed: %w", err)
	}
	sc.SeedSeconds = time.Since(begin).Seconds()
	r.log.Info("scale: seeded", "tasks", len(ids), "seconds", sc.SeedSeconds)

	// A timer-only stack on its own connection, as in production.
	var before, loaded, stopped runtime.MemStats
	gcStats(&before)
	_ = procstat.ResetPeak(procstat.Self)
	stopProfile, err := startProfile(r.profilePath(r.cfg.CPUProfile, tier))
	if err != nil {
		return sc, err
	}
	// This process only: with StackProcess the nats-server child serving
	// the timer's reads is not charged (docs/benchmarks.md, Scale tier).
	cpu0, cerr := procstat.Take(procstat.Self)
	t0 := time.Now()
	st, err := r.startStack(ctx, env, "timer")
	if err != nil {
		stopProfile()
		return sc, err
	}
	err = r.loadTimer(ctx, st, sc, t0, len(ids))
	stopProfile()
	if err == nil {
		cpu1, terr := procstat.Take(procstat.Self)
		if msg := errText(cerr, terr); msg != "" {
			sc.Notes = append(sc.Notes, "CPU-s not measured: "+msg)
		}
		for _, d := range cpu1.Since(cpu0) {
			sc.CPUSeconds += d.Seconds()
		}
		if mem, err := procstat.ReadMemory(procstat.Self); err == nil {
			sc.PeakRSSBytes = mem.Peak
		}
		gcStats(&loaded)
		if err := writeHeapProfile(r.cfg.MemProfile); err != nil {
			sc.Notes = append(sc.Notes, err.Error())
		}
	}
	// Stop the timer; nothing references it afterwards (st is dead), so
	// the next GC frees what it held.
	st.stop()
	if err != nil {
		return sc, err
	}
	gcStats(&stopped)

	n := float64(len(ids))
	sc.HeapDeltaBytes = int64(loaded.HeapAlloc) - int64(before.HeapAlloc)
	sc.HeapDeltaPerTask = float64(sc.HeapDeltaBytes) / n
	sc.HeapReleasedBytes = int64(loaded.HeapAlloc) - int64(stopped.HeapAlloc)
	sc.HeapReleasedPerTask = float64(sc.HeapReleasedBytes) / n
	r.log.Info("scale: loaded", "tasks", len(ids), "ready_s", sc.ReadySeconds, "load_s", sc.LoadSeconds,
		"heap_per_task", int(sc.HeapReleasedPerTask), "delta_per_task", int(sc.HeapDeltaPerTask))

	if err := r.takeover(ctx, env, sc, len(ids)); err != nil {
		sc.Notes = append(sc.Notes, "takeover not measured: "+err.Error())
	} else {
		r.log.Info("scale: taken over", "tasks", len(ids), "crash_lease_s", sc.TakeoverLeaseSeconds, "crash_loaded_s", sc.TakeoverSeconds,
			"stop_lease_s", sc.TakeoverStopLeaseSeconds, "stop_loaded_s", sc.TakeoverStopSeconds)
	}
	return sc, nil
}

// takeoverLease is the compose stack's --timer-lease, which the takeover
// measurement uses.
const takeoverLease = 3 * time.Second

// takeover measures two timer failovers over n schedules. A leased timer
// loads them and a second one stands by. Then the first one's NATS
// connection is cut, as when its process or its host dies (it cannot
// release the lease): the standby takes the lease once the key has not
// moved for the lease's TTL, then loads the bucket as a timer does at
// start. Last, a third timer stands by and the second one stops cleanly,
// as in an upgrade: it releases the lease, and the third takes it at its
// next read.
func (r *runner) takeover(ctx context.Context, env *natsEnv, sc *ScaleResult, n int) error {
	leased := func(instance string) func(*stack.Config) {
		return func(c *stack.Config) { c.Instance, c.TimerLease = instance, takeoverLease }
	}
	holder, err := r.startStackWith(ctx, env, leased("bench-timer-a"), "timer")
	if err != nil {
		return err
	}
	defer holder.stop()
	if err := r.loadTimer(ctx, holder, &ScaleResult{}, time.Now(), n); err != nil {
		return fmt.Errorf("the first timer: %w", err)
	}
	second, err := r.startStackWith(ctx, env, leased("bench-timer-b"), "timer")
	if err != nil {
		return err
	}
	defer second.stop()
	// The holder is ready, so it holds the lease. A standby reads the key
	// as it starts, so it counts the TTL from about the cut.
	cut := time.Now()
	holder.nc.Close()
	if sc.TakeoverLeaseSeconds, sc.TakeoverSeconds, err = takenOver(ctx, second, cut, n); err != nil {
		return fmt.Errorf("after a crash: %w", err)
	}
	sc.TakeoverTTLSeconds = takeoverLease.Seconds()

	third, err := r.startStackWith(ctx, env, leased("bench-timer-c"), "timer")
	if err != nil {
		return err
	}
	defer third.stop()
	stop := time.Now()
	second.stop()
	if sc.TakeoverStopLeaseSeconds, sc.TakeoverStopSeconds, err = takenOver(ctx, third, stop, n); err != nil {
		return fmt.Errorf("after a stop: %w", err)
	}
	return nil
}

// takenOver waits until the timer of st holds the lease, then every one
// of n schedules, and returns the seconds from since to each.
func takenOver(ctx context.Context, st *inprocStack, since time.Time, n int) (lease, loaded float64, err error) {
	m := st.st.Metrics()
	if err := poll(ctx, time.Minute, 2*time.Millisecond, func() bool {
		return gaugeValue(m.TimerDispatching) == 1
	}); err != nil {
		return 0, 0, fmt.Errorf("the standby did not take the lease: %w", err)
	}
	lease = time.Since(since).Seconds()
	if err := poll(ctx, 5*time.Minute, 2*time.Millisecond, func() bool {
		return int(gaugeValue(m.DispatchPending)) >= n
	}); err != nil {
		return 0, 0, fmt.Errorf("the standby holds %d of %d schedules: %w", int(gaugeValue(m.DispatchPending)), n, err)
	}
	return lease, time.Since(since).Seconds(), nil
}

// loadTimer waits until the timer is ready and holds n schedules.
func (r *runner) loadTimer(ctx context.Context, st *inprocStack, sc *ScaleResult, t0 time.Time, n int) error {
	ready := time.NewTimer(5 * time.Minute)
	defer ready.Stop()
	select {
	case <-st.st.Timer.Ready():
	case <-ready.C:
		return errors.New("timer not ready after 5 minutes")
	case <-ctx.Done():
		return ctx.Err()
	}
	sc.ReadySeconds = time.Since(t0).Seconds()
	pending := st.st.Metrics().DispatchPending
	err := poll(ctx, 5*time.Minute, 2*time.Millisecond, func() bool {
		return int(gaugeValue(pending)) >= n
	})
	if err != nil {
		return fmt.Errorf("timer holds %d of %d schedules: %w", int(gaugeValue(pending)), n, err)
	}
	sc.LoadSeconds = time.Since(t0).Seconds()
	return nil
}

// seed writes the tasks. SeedKV stores spec and schedule directly, the
// schedule computed by governor.Decide for a task.created, as the governor
// stores it; SeedGovernor goes through task.created and a running governor.
func (r *runner) seed(ctx context.Context, env *natsEnv, tier Tier, ids []string) error {
	now := time.Now().UTC()
	startAt := func(i int) time.Time {
		spread := 30 * time.Minute * time.Duration(i) / time.Duration(len(ids))
		return now.Add(30*time.Minute + spread).Truncate(time.Millisecond)
	}
	if r.cfg.ScaleSeed == SeedGovernor {
		st, err := r.startStack(ctx, env, "governor")
		if err != nil {
			return err
		}
		defer st.stop()
		_, err = r.createTasks(ctx, env, ids, func(i int, id string) events.TaskSpec {
			return r.taskSpec(i, id, tier.Interval, startAt(i))
		}, now.Add(30*time.Minute))
		return err
	}
	// Bind the buckets (and create them) the way the stack would.
	ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := streams.Ensure(ectx, env.js, streams.WithAsyncPersist(r.cfg.AsyncPersist)); err != nil {
		return err
	}
	for i, id := range ids {
		spec := r.taskSpec(i, id, tier.Interval, startAt(i))
		if err := spec.Validate(); err != nil {
			return err
		}
		spec.Normalize()
		dec := gov.Decide(now, &spec, gov.State{}, gov.Input{Kind: gov.KindAccepted})
		specJSON, err := json.Marshal(gov.StoredSpec{TaskSpec: &spec, CreatedAt: dec.State.CreatedAt})
		if err != nil {
			return err
		}
		dec.State.LastCommandID = "bench-" + r.tag + "-seed-" + id
		stateJSON, err := json.Marshal(dec.State)
		if err != nil {
			return err
		}
		if _, err := env.js.PublishAsync("$KV."+streams.BucketTasks+"."+id, specJSON, stall); err != nil {
			return err
		}
		if _, err := env.js.PublishAsync("$KV."+streams.BucketSchedules+"."+id, stateJSON, stall); err != nil {
			return err
		}
	}
	return env.waitPublished(ctx)
}

// gcStats forces two collections (the second sweeps what finalizers freed)
// and reads the memory statistics.
func gcStats(m *runtime.MemStats) {
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(m)
}

func gaugeValue(g prometheus.Gauge) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		return 0
	}
	return m.GetGauge().GetValue()
}

func writeHeapProfile(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	return nil
}
