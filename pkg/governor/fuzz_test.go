package governor_test

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/pkg/governor"
)

// fuzzCrons all have occurrences within cron's 5-year horizon; some cross
// DST gaps and overlaps, or zones with half-hour shifts.
var fuzzCrons = []struct{ expr, tz string }{
	{"0 0 9 * * *", "Europe/Berlin"},
	{"*/15 * * * *", ""},
	{"@hourly", "America/New_York"},
	{"30 2 * * *", "Europe/Berlin"},
	{"0 0 1 */3 *", "UTC"},
	{"0 0 13 * FRI", "Australia/Lord_Howe"},
	{"*/7 * * * * *", "Asia/Kathmandu"},
}

var fuzzEpoch = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)

// mod is the non-negative remainder of x by n, 0 < n <= math.MaxInt64/2.
func mod(x, n int64) int64 { return (x%n + n) % n }

// signed maps x into [-n, n].
func signed(x, n int64) int64 { return mod(x, 2*n+1) - n }

// FuzzDecide checks the invariants of Decide over random tasks, states and
// inputs:
//   - NextRunAt is zero only for an indefinitely paused or deleted task;
//   - otherwise it is never before now and always after the last slot;
//   - with bounds, unless paused or floored to now, the gap from the last
//     slot is within [min, max];
//   - Decide is deterministic, does not mutate its input, and its Decision
//     mirrors the State it returns;
//   - nothing panics or overflows, whatever the failure count or durations.
func FuzzDecide(f *testing.F) {
	hour := int64(time.Hour / time.Millisecond)
	f.Add(int64(1_772_445_600_000), int64(60), 0, uint8(0), int64(0), uint8(0), int64(0), int64(0), int64(0), uint8(0), int64(0), int64(0), int64(0), uint8(0), uint8(0))
	f.Add(int64(1_772_445_600_000), int64(60), 3, uint8(1), int64(5000), uint8(0), int64(0), int64(0), int64(0), uint8(0), int64(0), int64(0), int64(0), uint8(3), uint8(1))
	f.Add(int64(1_772_445_600_000), int64(86399), 1<<20, uint8(2), int64(1<<40), uint8(1), int64(1<<62), int64(0), int64(hour), uint8(0), int64(0), int64(30), int64(600), uint8(1), uint8(0))
	f.Add(int64(1_772_445_600_000), int64(0), math.MaxInt, uint8(4), int64(math.MaxInt64), uint8(31), int64(math.MaxInt64), int64(-hour), int64(0), uint8(2), int64(hour), int64(1), int64(2), uint8(7), uint8(4))
	f.Add(int64(-1), int64(-1), -1, uint8(3), int64(hour), uint8(2), int64(1), int64(hour), int64(-1), uint8(2), int64(-hour), int64(-1), int64(-1), uint8(5), uint8(6))
	f.Add(int64(4_000_000_000_000), int64(7), 5, uint8(3), int64(10_000), uint8(6), int64(1000), int64(1), int64(1), uint8(3), int64(5000), int64(3), int64(3), uint8(5), uint8(46))
	f.Add(int64(1_000_000_000_000), int64(1), 2, uint8(1), int64(1), uint8(20), int64(0), int64(-5), int64(0), uint8(1), int64(0), int64(60), int64(0), uint8(2), uint8(70))

	f.Fuzz(func(t *testing.T, nowMs, intervalSec int64, failures int, lastMode uint8, lastOff int64,
		hintMode uint8, hintIv, hintAt, hintTTL int64, pauseMode uint8, pauseOff int64,
		minSec, maxSec int64, kind, sched uint8,
	) {
		// now: 1970 to 2200, millisecond precision.
		now := fuzzEpoch.Add(time.Duration(mod(nowMs, 230*365*24*hour)) * time.Millisecond)
		ms := func(x int64) time.Duration { return time.Duration(x) * time.Millisecond }

		spec := &events.TaskSpec{ID: "t", Target: events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/"}}}
		switch m := sched % 8; {
		case m < 4:
			spec.Schedule.Interval = events.Duration(time.Second + time.Duration(mod(intervalSec, 86400))*time.Second)
		case m == 4:
			spec.Schedule.Interval = events.Duration(events.MaxInterval)
		case m == 5:
			spec.Schedule.Interval = events.Duration(time.Second + time.Duration(mod(intervalSec, int64(events.MaxInterval-time.Second))))
		default:
			c := fuzzCrons[int(sched/8)%len(fuzzCrons)]
			spec.Schedule.Cron, spec.Schedule.Timezone = c.expr, c.tz
		}
		if sched&0x40 != 0 {
			at := now.Add(ms(signed(hintAt, 48*hour)))
			spec.StartAt = &at
		}
		var lo, hi time.Duration
		if minSec%3 != 0 {
			lo = time.Second + time.Duration(mod(minSec, 48*3600))*time.Second
		}
		if maxSec%3 != 0 {
			hi = time.Second + time.Duration(mod(maxSec, 48*3600))*time.Second
		}
		if lo != 0 && hi != 0 && hi < lo {
			lo, hi = hi, lo
		}
		if lo != 0 || hi != 0 {
			spec.Bounds = &events.Bounds{Min: events.Duration(lo), Max: events.Duration(hi)}
		}
		if err := spec.Validate(); err != nil {
			t.Fatalf("generated an invalid spec: %v", err)
		}
		spec.Normalize()

		st := governor.State{TaskID: "t", Failures: failures & math.MaxInt, LastDispatchID: "t:dup", Runs: uint64(mod(lastOff, 1000))}
		switch lastMode % 5 {
		case 1: // recent
			st.LastScheduledAt = now.Add(-ms(mod(lastOff, 48*hour)))
		case 2: // up to ~400 days back
			st.LastScheduledAt = now.Add(-ms(mod(lastOff, 400*24*hour)))
		case 3: // slightly in the future: clock skew between services
			st.LastScheduledAt = now.Add(ms(mod(lastOff, hour)))
		case 4: // centuries back: durations saturate
			st.LastScheduledAt = time.Date(2, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(mod(lastOff, 1800*365*24*3600)) * time.Second)
		}
		hintInterval := max(time.Duration(hintIv&math.MaxInt64), 1) // 1ns to the largest duration
		if hintMode&1 != 0 {
			st.IntervalHint = &governor.IntervalHint{Interval: hintInterval, ExpiresAt: now.Add(ms(signed(hintTTL, 2*hour)))}
		}
		if hintMode&2 != 0 {
			st.OneShotHint = &governor.OneShotHint{At: now.Add(ms(signed(hintAt, 48*hour))), ExpiresAt: now.Add(ms(signed(hintTTL, 2*hour)))}
		}
		switch pauseMode % 4 {
		case 1:
			st.Paused = true
		case 2:
			st.Paused, st.PausedUntil = true, now.Add(ms(signed(pauseOff, 48*hour)))
		}
		st.NextRunAt = now.Add(ms(signed(pauseOff, hour)))

		var in governor.Input
		switch kind % 9 {
		case 0:
			in.Kind = governor.KindAccepted
		case 1:
			in.Kind = governor.KindUpdated
		case 2, 3, 4:
			slot := now.Add(ms(signed(pauseOff, 2*hour)))
			id := events.DispatchID("t", slot)
			if (kind/9)%4 == 0 {
				id = st.LastDispatchID // a redelivery
			}
			in = governor.Input{Kind: governor.KindOutcome, Outcome: &governor.Outcome{
				DispatchID: id, ScheduledAt: slot, Result: []string{"succeeded", "failed", "skipped"}[kind%9-2], FinishedAt: now,
			}}
		case 5:
			in = governor.Input{Kind: governor.KindPaused, Pause: &governor.Pause{}}
			if pauseMode&4 != 0 {
				in.Pause.Until = now.Add(ms(signed(pauseOff, 48*hour)))
			}
		case 6:
			in.Kind = governor.KindResumed
		case 7:
			h := governor.Hint{TTL: ms(signed(hintTTL, 168*hour))}
			if hintMode&8 != 0 || hintMode&16 == 0 {
				h.Interval = hintInterval
			}
			if hintMode&16 != 0 {
				h.At = now.Add(ms(signed(hintAt, 48*hour)))
			}
			in = governor.Input{Kind: governor.KindHinted, Hint: &h}
		case 8:
			in.Kind = governor.KindDeleted
		}

		before := cloneState(st)
		d := governor.Decide(now, spec, st, in)
		if !reflect.DeepEqual(st, before) {
			t.Fatalf("Decide mutated its input state")
		}
		if again := governor.Decide(now, spec, st, in); !reflect.DeepEqual(d, again) {
			t.Fatalf("Decide is not deterministic:\n%+v\n%+v", d, again)
		}
		if d.Ignored {
			if in.Kind != governor.KindOutcome || !reflect.DeepEqual(d.State, st) {
				t.Fatalf("ignored %s input, or changed the state while ignoring it", in.Kind)
			}
			return
		}
		s := d.State
		if !s.NextRunAt.Equal(d.NextRunAt) || s.Source != d.Source || !reflect.DeepEqual(s.Trail, d.Trail) {
			t.Fatalf("State does not mirror the Decision: %+v", d)
		}
		explain := func() string {
			return "\nnow:   " + fmtT(now) + "\nlast:  " + fmtT(s.LastScheduledAt) + "\nnext:  " + fmtT(d.NextRunAt) +
				"\nsource: " + string(d.Source) + "\ntrail:\n" + fmtTrail(d.Trail)
		}
		if d.NextRunAt.IsZero() {
			if !(s.Paused && s.PausedUntil.IsZero()) && d.Source != governor.SourceDeleted {
				t.Fatalf("nothing scheduled for a task neither paused indefinitely nor deleted%s", explain())
			}
			return
		}
		if d.NextRunAt.Before(now) {
			t.Fatalf("NextRunAt before now%s", explain())
		}
		last := s.LastScheduledAt
		if !last.IsZero() && !d.NextRunAt.After(last) {
			t.Fatalf("NextRunAt does not come after the last slot%s", explain())
		}
		if spec.Bounds != nil && !s.Paused && !last.IsZero() && !d.NextRunAt.Equal(now) {
			gap := d.NextRunAt.Sub(last)
			if (lo != 0 && gap < lo) || (hi != 0 && gap > hi) {
				t.Fatalf("gap %s outside bounds [%s, %s]%s", gap, lo, hi, explain())
			}
		}
	})
}

func fmtTrail(trail []string) string {
	var s string
	for _, l := range trail {
		s += "  " + l + "\n"
	}
	return s
}
