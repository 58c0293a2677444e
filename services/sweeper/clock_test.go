package sweeper

import (
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/streams"
)

// stepWall returns t with its wall-clock reading moved by d and its
// monotonic reading kept: time.Now right after NTP steps the host's clock
// by d. t.Add(d) moves both readings (time passing), so a clock of
// time.Now().Add(offset) cannot inject a step: Go measures t.Sub(u) on the
// monotonic readings when both have one. The time package has no way to
// move one reading alone; this writes the monotonic reading of t (field
// ext, after wall) into t.Add(d). checkStepWall guards the layout.
func stepWall(t time.Time, d time.Duration) time.Time {
	type rep struct {
		wall uint64
		ext  int64
		loc  *time.Location
	}
	w := t.Add(d)
	(*rep)(unsafe.Pointer(&w)).ext = (*rep)(unsafe.Pointer(&t)).ext
	return w
}

func checkStepWall(t *testing.T) {
	t.Helper()
	now := time.Now()
	w := stepWall(now, -10*time.Minute)
	if w.Sub(now) != 0 || w.Round(0).Sub(now.Round(0)) != -10*time.Minute {
		t.Fatalf("stepWall does not fit this Go's time.Time: elapsed %v, wall %v", w.Sub(now), w.Round(0).Sub(now.Round(0)))
	}
}

// steppedClock is the clock of a host whose wall clock NTP steps: elapsed
// is time passing (both readings move), step the wall clock's step (the
// monotonic reading does not move).
type steppedClock struct{ elapsed, step atomic.Int64 }

func (c *steppedClock) Now() time.Time {
	return stepWall(time.Now().Add(time.Duration(c.elapsed.Load())), time.Duration(c.step.Load()))
}

// TestOfflineMarksFollowElapsedTimeNotAWallClockStep: the sweeper marks an
// instance offline once it has seen no new revision of its entry for
// OfflineAfter, by its own clock; it measured that on wall-clock readings
// (Now().UTC() drops the monotonic one). A step back by X held a dead
// instance's mark for X more; a step forward by more than 30 s marked
// live instances offline (a false FlyballInstanceOffline). It is measured
// on the monotonic clock now.
func TestOfflineMarksFollowElapsedTimeNotAWallClockStep(t *testing.T) {
	checkStepWall(t)
	for _, c := range []struct {
		name          string
		elapsed, step time.Duration
		want          string
	}{
		{"dead instance, clock stepped back", 2 * time.Minute, -10 * time.Minute, "offline"},
		{"live instance, clock stepped forward", 20 * time.Second, 5 * time.Minute, "online"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := natstest.StartWithStreams(t)
			ctx := t.Context()
			runtime, err := srv.JS.KeyValue(ctx, streams.BucketRuntime)
			if err != nil {
				t.Fatal(err)
			}
			putOnline(t, runtime, "executor.one", time.Now())
			clock := &steppedClock{}
			s := startHourlyWith(t, svcconf.Common{JS: srv.JS, Now: clock.Now}) // its first sweep sees the entry's revision
			clock.elapsed.Store(int64(c.elapsed))
			clock.step.Store(int64(c.step))
			if err := s.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
			ent, err := runtime.Get(ctx, "executor.one")
			if err != nil {
				t.Fatal(err)
			}
			if !jsonHas(ent.Value(), `"status":"`+c.want+`"`) {
				t.Fatalf("instance silent for %v of elapsed time after a %v wall-clock step: %s, want status %s", c.elapsed, c.step, ent.Value(), c.want)
			}
		})
	}
}

// TestMissingScheduleRepairFollowsElapsedTimeNotAWallClockStep: a task
// with no schedule is repaired once sweeps have seen it so for
// ZombieAfter, by the sweeper's clock; a wall-clock step back delayed the
// repair by the step. It is measured on the monotonic clock now.
func TestMissingScheduleRepairFollowsElapsedTimeNotAWallClockStep(t *testing.T) {
	checkStepWall(t)
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	tasks, _ := taskBuckets(t, srv.JS)
	if _, err := tasks.Put(ctx, "lost", []byte(`{"id":"lost","target":{"http":{"url":"https://example.com/"}},"schedule":{"interval":"1h"}}`)); err != nil {
		t.Fatal(err)
	}
	clock := &steppedClock{}
	s := startHourlyWith(t, svcconf.Common{JS: srv.JS, Now: clock.Now}) // its first sweep finds the task unscheduled
	clock.elapsed.Store(int64(DefaultZombieAfter + time.Minute))
	clock.step.Store(int64(-10 * time.Minute))
	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(s.cfg.Metrics.SchedulesRepaired.WithLabelValues(repairMissing)); n != 1 {
		t.Fatalf(`a task unscheduled for %v of elapsed time after a 10m wall-clock step back: flyball_schedules_repaired_total{reason="missing"} = %v, want 1`, DefaultZombieAfter+time.Minute, n)
	}
}
