package governor_test

import (
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/cron"
	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/pkg/governor"
)

// fuzzCrons all fire (TaskSpec.Validate refuses one that never does);
// some cross DST gaps and overlaps, or zones with half-hour shifts, and
// the leap day is 8 years apart across 2100.
var fuzzCrons = []struct{ expr, tz string }{
	{"0 0 9 * * *", "Europe/Berlin"},
	{"*/15 * * * *", ""},
	{"@hourly", "America/New_York"},
	{"30 2 * * *", "Europe/Berlin"},
	{"0 0 1 */3 *", "UTC"},
	{"0 0 13 * FRI", "Australia/Lord_Howe"},
	{"*/7 * * * * *", "Asia/Kathmandu"},
	{"0 0 29 2 *", "UTC"},
}

var fuzzEpoch = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)

// mod is the non-negative remainder of x by n, 0 < n <= math.MaxInt64/2.
func mod(x, n int64) int64 { return (x%n + n) % n }

// signed maps x into [-n, n].
func signed(x, n int64) int64 { return mod(x, 2*n+1) - n }

// fuzzZones are quiet-hours zones with DST, half-hour DST (Lord Howe) or an
// odd offset (Kathmandu).
var fuzzZones = []string{"UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu"}

// FuzzDecide checks the invariants of Decide over random tasks, states and
// inputs:
//   - NextRunAt is zero only for an indefinitely paused or deleted task;
//   - a breaker transition or a spec update keeps a slot still in flight
//     (due, its outcome not in yet), whatever else holds;
//   - otherwise it is never before now, and at least MinGap after the last
//     slot (so never the same slot twice); the last slot is the last
//     completed one, or the slot in flight (due, its outcome not in yet),
//     which runs before whatever this decision plans;
//   - with bounds, unless paused (the run after a timed pause in flight
//     counts as after its end) or floored to now, the gap from the last
//     slot is within [min, max] (clamps beat every rule but pause, the
//     breaker's retryAt and the dead-letter recheck included);
//   - a slot in flight still ahead of now (perhaps not published yet)
//     that serves a request (a one-shot, requeue or recheck at or before
//     it, the next backfill run, the run a timed pause leads to) is kept
//     by any input but a pause, a delete or a dead-letter hold; a re-plan
//     while a slot in flight is due (running) never plans again a run that
//     slot serves (the next backfill run waits for its success);
//   - quiet hours (in UTC): a run they place is in the window or at its
//     end, and, without jitter, a run in the window is at least the quiet
//     interval after the last run unless the window ended in between or a
//     rule above quiet hours placed it;
//   - the source is paused only while the task is paused (the run a
//     timed pause led to, kept by a hint after its end, carries the
//     source a resume gives it);
//   - while the run planned before is still ahead, no slot counts as
//     missed: nothing is caught up;
//   - catchUp "none" plans no catch-up run (but a backlog the state held,
//     or a run planned before and kept); "all" leaves at most catchUpMax
//     (100 if unset) runs pending;
//   - a jittered cron slot the cron rule plans is no later than the next
//     occurrence plus jitter of the gap after it, and is the next
//     occurrence's only once the last occurrence at or before now ran or
//     its slot (the same draw) passed (checkCronJitter);
//   - a cron run on the calendar (baseline-cron, or an occurrence the
//     budget or quiet hours placed) keeps the budget and the bounds as
//     the cron calendar judges it (cronCalendar: between occurrences on
//     the wall clock, exhaustion less the delay jitter may draw); one the
//     breaker or bounds.min delayed, by the latest occurrence before it;
//     every other run as follows:
//   - with a budget, a run not placed by a requeue or bounds.max (a
//     dead-letter recheck included) is at least the budget's spacing
//     (24h/maxRunsPerDay) after the last slot, and after the last run's
//     start when that run started more than half the spacing after its
//     slot (a late run); so consecutive calls start at least half the
//     spacing apart. Once the budget is used up, it is not before the
//     hour that frees a run (nudging included);
//   - with a budget, a run started within half the spacing of its slot
//     (on time, a retry or executor lag included) keeps its cadence: the
//     decision is the one made without the start, when the start and the
//     slot fall in the same UTC hour (the ledger counts the run in the
//     hour it started), and unless catch-up chose a run with or without
//     the start of the outcome applied: that start also tells a slow run
//     from a downtime (slots that passed while the run ran were not
//     missed), so a long run on time is not caught up, and the same
//     outcome without its start is (caughtUp);
//   - the adaptive interval: none after an acceptance or a spec update;
//     only a run's outcome of an adaptive interval task moves it, into
//     the documented range (bounds.min or a quarter of the baseline, at
//     least 1s, to bounds.max or four times the baseline), in whole
//     milliseconds but for the target a step stops on, and toward the end
//     the outcome asks for (checkAdaptiveStep); adaptive-tighten and
//     adaptive-relax name an interval in force shorter or longer than the
//     baseline. FuzzDecideSequence follows it over many outcomes;
//   - a cron slot without jitter that the cron rule plans is the first
//     occurrence after the later of the last slot and now (checkCronSlot;
//     FuzzNextDST holds cron.Next to the DST rule): after the last slot,
//     never a repeated wall time a second time, and no occurrence dropped
//     but the missed ones the catch-up policy drops;
//   - the source is a documented one, and the trail is not empty;
//   - Decide is deterministic, does not mutate its input, and its Decision
//     mirrors the State it returns;
//   - nothing panics or overflows, whatever the failure count, durations,
//     multipliers or ledger contents.
//
// feat switches on spec features and state (adaptive cadence, activity
// modes, quiet hours, budget, jitter, catch-up, breaker, dead-letter,
// requeue, backlog); extra sizes them.
func FuzzDecide(f *testing.F) {
	hour := int64(time.Hour / time.Millisecond)
	f.Add(int64(1_772_445_600_000), int64(60), 0, uint8(0), int64(0), uint8(0), int64(0), int64(0), int64(0), uint8(0), int64(0), int64(0), int64(0), uint8(0), uint8(0), uint64(0), int64(0))
	f.Add(int64(1_772_445_600_000), int64(60), 3, uint8(1), int64(5000), uint8(0), int64(0), int64(0), int64(0), uint8(0), int64(0), int64(0), int64(0), uint8(3), uint8(1), uint64(0), int64(0))
	f.Add(int64(1_772_445_600_000), int64(86399), 1<<20, uint8(2), int64(1<<40), uint8(1), int64(1<<62), int64(0), int64(hour), uint8(0), int64(0), int64(30), int64(600), uint8(1), uint8(0), uint64(0), int64(0))
	f.Add(int64(1_772_445_600_000), int64(0), math.MaxInt, uint8(4), int64(math.MaxInt64), uint8(31), int64(math.MaxInt64), int64(-hour), int64(0), uint8(2), int64(hour), int64(1), int64(2), uint8(7), uint8(4), uint64(0), int64(0))
	f.Add(int64(-1), int64(-1), -1, uint8(3), int64(hour), uint8(2), int64(1), int64(hour), int64(-1), uint8(2), int64(-hour), int64(-1), int64(-1), uint8(5), uint8(6), uint64(0), int64(0))
	f.Add(int64(4_000_000_000_000), int64(7), 5, uint8(3), int64(10_000), uint8(6), int64(1000), int64(1), int64(1), uint8(3), int64(5000), int64(3), int64(3), uint8(5), uint8(46), uint64(0), int64(0))
	f.Add(int64(1_000_000_000_000), int64(1), 2, uint8(1), int64(1), uint8(20), int64(0), int64(-5), int64(0), uint8(1), int64(0), int64(60), int64(0), uint8(2), uint8(70), uint64(0), int64(0))
	// Every feature on, with breaker, dead-letter and requeue inputs.
	f.Add(int64(1_774_747_800_000), int64(30), 0, uint8(1), int64(60_000), uint8(3), int64(5000), int64(60_000), int64(hour), uint8(0), int64(0), int64(30), int64(600), uint8(9), uint8(1), uint64(math.MaxUint64), int64(1234567))
	f.Add(int64(1_774_747_800_000), int64(300), 1, uint8(2), int64(3*hour), uint8(0), int64(0), int64(0), int64(0), uint8(0), int64(0), int64(0), int64(0), uint8(10), uint8(6), uint64(0x5555_5555_5555_5555), int64(-99))
	f.Add(int64(1_761_350_400_000), int64(60), 0, uint8(1), int64(1000), uint8(0), int64(0), int64(0), int64(0), uint8(0), int64(0), int64(0), int64(0), uint8(11), uint8(2), uint64(0xAAAA_AAAA_AAAA_AAAA), int64(7*hour))
	// A re-plan while the slot in flight is the run a request asked for:
	// a one-shot's, a requeue's, a recheck, a backfill run, the run a
	// timed pause leads to; and the budget's pacing in quiet hours.
	f.Add(int64(1_772_445_900_500), int64(3599), 0, uint8(1), int64(300_500), uint8(2), int64(600_000_000_000), int64(21_945_599_563), int64(8_700_000), uint8(0), int64(3_599_500), int64(0), int64(0), uint8(7), uint8(0), uint64(0), int64(0))
	f.Add(int64(1_772_445_600_500), int64(3599), 0, uint8(1), int64(3_600_500), uint8(0), int64(600_000_000_000), int64(4), int64(0), uint8(0), int64(3_599_500), int64(0), int64(0), uint8(7), uint8(0), uint64(1<<60), int64(500))
	f.Add(int64(1_772_447_400_500), int64(59), 1, uint8(1), int64(1_800_500), uint8(0), int64(600_000_000_000), int64(23_400_000), int64(0), uint8(0), int64(3_599_500), int64(0), int64(0), uint8(7), uint8(0), uint64(1<<59), int64(1_800_500))
	f.Add(int64(1_772_445_930_500), int64(59), 0, uint8(1), int64(330_500), uint8(0), int64(60_000_000_000), int64(21), int64(0), uint8(0), int64(3_599_500), int64(0), int64(0), uint8(7), uint8(0), uint64(3<<47|1<<61), int64(3))
	f.Add(int64(1_772_445_599_000), int64(86399), 0, uint8(1), int64(86_399_000), uint8(0), int64(0), int64(14), int64(0), uint8(2), int64(1_244_160_176_401_000), int64(0), int64(0), uint8(21), uint8(0), uint64(1<<42), int64(0))
	f.Add(int64(1_768_520_430_000), int64(59), 0, uint8(1), int64(30_000), uint8(0), int64(0), int64(0), int64(0), uint8(0), int64(0), int64(0), int64(0), uint8(1), uint8(0), uint64(1<<24|7<<32|1<<42), int64(3_542_447))

	// A breaker transition during a run that a hint planned past (the
	// running slot 1 s back, the next run 10m ahead): a requeue at or
	// before the running slot is not planned again, nor (catchUp all) the
	// next backfill run before its success.
	f.Add(int64(1_772_445_600_000), int64(3599), 0, uint8(1), int64(hour), uint8(4), int64(0), int64(1000^4_200_000), int64(0), uint8(0), int64(4_200_000), int64(0), int64(0), uint8(9), uint8(0), uint64(1<<60), int64(2000))
	f.Add(int64(1_772_445_600_000), int64(59), 0, uint8(1), int64(hour), uint8(4), int64(0), int64(1000^4_200_000), int64(0), uint8(0), int64(4_200_000), int64(0), int64(0), uint8(1), uint8(0), uint64(1<<61|3<<47), int64(2001))

	// A run on time but started after its slot: a retry's 5 s, executor
	// lag's 1.5 s (a 1h interval and @hourly, each with 24 runs a day).
	f.Add(int64(1_772_445_607_000), int64(3599), 0, uint8(1), int64(3_607_000), uint8(0), int64(5000), int64(0), int64(0), uint8(0), int64(7_193_000), int64(0), int64(0), uint8(218), uint8(0), uint64(1<<42), int64(23))
	f.Add(int64(1_772_445_603_500), int64(0), 0, uint8(1), int64(3_603_500), uint8(0), int64(1500), int64(0), int64(0), uint8(0), int64(7_196_500), int64(0), int64(0), uint8(218), uint8(22), uint64(1<<42), int64(23))

	// Adaptive cadence at its ends: a 1m task (mode change, unchangedRuns
	// 1, smoothing 1) with an adaptive interval of 3h stored, its last
	// fingerprint "a" seen twice: "a" again relaxes it to the ceiling,
	// 4m (kind 74), "b" tightens it to the floor, 15s (kind 122).
	for _, kind := range []uint8{74, 122} {
		f.Add(int64(1_772_445_600_000), int64(59), 0, uint8(1), int64(60_000), uint8(0), int64(0), int64(0), int64(0), uint8(0), int64(7_199_500), int64(0), int64(0), kind, uint8(0), uint64(1|1<<2|0xF<<6|1<<54|1<<56), int64(time.Hour))
	}
	// Cron across DST (sched 22: @hourly in New York, 30: 30 2 * * * in
	// Berlin), a run's outcome (kind 26) of the slot pauseOff sets:
	// 01:00 EDT (05:00Z) on 2026-11-01, applied 5 s later and in the
	// second pass of the repeated hour (06:30Z): next 02:00 EST (07:00Z),
	// not 01:00 EST; 02:30 CEST (00:30Z) on 2026-10-25 applied at 02:35
	// CET: next 2026-10-26 01:30Z; 2026-03-28 02:30 CET: next 03:00 CEST
	// on 2026-03-29 (01:00Z), the end of the gap.
	f.Add(int64(1_793_509_205_000), int64(0), 0, uint8(1), int64(hour), uint8(0), int64(0), int64(0), int64(0), uint8(0), int64(7_195_000), int64(0), int64(0), uint8(26), uint8(22), uint64(0), int64(0))
	f.Add(int64(1_793_514_600_000), int64(0), 0, uint8(1), int64(hour), uint8(0), int64(0), int64(0), int64(0), uint8(0), int64(1_800_000), int64(0), int64(0), uint8(26), uint8(22), uint64(0), int64(0))
	f.Add(int64(1_792_892_100_000), int64(0), 0, uint8(1), int64(hour), uint8(0), int64(0), int64(0), int64(0), uint8(0), int64(3_300_000), int64(0), int64(0), uint8(26), uint8(30), uint64(0), int64(0))
	f.Add(int64(1_774_661_403_000), int64(0), 0, uint8(1), int64(hour), uint8(0), int64(0), int64(0), int64(0), uint8(0), int64(7_197_000), int64(0), int64(0), uint8(26), uint8(30), uint64(0), int64(0))
	// Catch-up across New York's fall-back hour: last slot 00:00 EDT
	// (04:00Z), a resume at 08:30Z with no run planned by a rule (source
	// ""): 01:00 EDT, 02:00 EST and 03:00 EST passed, three, not four.
	// skip runs once now, none waits for 04:00 EST (09:00Z), all
	// backfills three.
	for _, policy := range []uint64{0, 2 << 47, 3 << 47} {
		f.Add(int64(1_793_521_800_000), int64(0), 0, uint8(1), int64(9*hour/2), uint8(0), int64(0), int64(9*hour/2)^int64(len(governor.AllSources())), int64(0), uint8(0), int64(0), int64(0), int64(0), uint8(6), uint8(22), policy, int64(0))
	}

	f.Fuzz(func(t *testing.T, nowMs, intervalSec int64, failures int, lastMode uint8, lastOff int64,
		hintMode uint8, hintIv, hintAt, hintTTL int64, pauseMode uint8, pauseOff int64,
		minSec, maxSec int64, kind, sched uint8, feat uint64, extra int64,
	) {
		// now: 1970 to 2200, millisecond precision.
		now := fuzzEpoch.Add(time.Duration(mod(nowMs, 230*365*24*hour)) * time.Millisecond)
		ms := func(x int64) time.Duration { return time.Duration(x) * time.Millisecond }
		bit := func(i uint) bool { return feat>>i&1 != 0 }
		bits := func(i, n uint) int64 { return int64(feat >> i & (1<<n - 1)) }

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
		if bit(0) {
			spec.Adaptive = &events.Adaptive{
				Mode:          []string{events.AdaptiveChange, events.AdaptiveStaleness}[bits(1, 1)],
				UnchangedRuns: int(bits(2, 4)), Smoothing: float64(bits(6, 4)) / 15, Target: events.Duration(ms(mod(extra, 48*hour))),
			}
		}
		if bit(10) {
			idle := ms(mod(extra, 4*hour))
			spec.Activity = &events.Activity{
				IdleAfter: events.Duration(idle), DormantAfter: events.Duration(idle * time.Duration(1+bits(11, 3))),
				IdleMultiplier: float64(bits(14, 6)), DormantMultiplier: float64(bits(14, 10) % 1001),
			}
			if spec.Activity.IdleMultiplier < 1 {
				spec.Activity.IdleMultiplier = 0
			}
			if spec.Activity.DormantMultiplier < 1 {
				spec.Activity.DormantMultiplier = 0
			}
		}
		if bit(24) {
			clock := func(i uint) string {
				return time.Date(2000, 1, 1, int(bits(i, 5)%24), int(bits(i+5, 2)*15), 0, 0, time.UTC).Format("15:04")
			}
			spec.QuietHours = &events.QuietHours{
				Start: clock(25), End: clock(32), Timezone: fuzzZones[bits(39, 3)%int64(len(fuzzZones))],
				Interval: events.Duration(time.Second + ms(mod(extra, 6*hour))),
			}
		}
		if bit(42) {
			spec.Budget = &events.Budget{MaxRunsPerDay: 1 + int(mod(extra, 86400))}
		}
		if bit(43) {
			spec.Jitter = float64(bits(44, 3)) / 14
		}
		spec.CatchUp = []string{"", events.CatchUpSkip, events.CatchUpNone, events.CatchUpAll}[bits(47, 2)]
		spec.CatchUpMax = int(bits(49, 4))
		if bit(53) {
			spec.DeadLetter = &events.DeadLetterPolicy{RecheckAfter: events.Duration(time.Second + ms(mod(extra, 2*hour)))}
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
		if lastMode/5%2 == 1 { // runs overlapped: earlier dispatches applied
			st.RecentDispatchIDs = []string{"t:recent", "t:older"}
		}
		if lastMode/10%2 == 1 && !st.LastScheduledAt.IsZero() { // the last run started late (or on time), before now
			if st.LastStartedAt = st.LastScheduledAt.Add(ms(mod(hintIv, 26*hour))); st.LastStartedAt.After(now) {
				st.LastStartedAt = now
			}
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
		if hintMode&4 != 0 { // a running slot remembered: due, or (clocks apart) a little ahead
			st.RunningSlot = now.Add(-ms(mod(hintAt^pauseOff, 2*hour))).Add(time.Duration(hintMode>>5) * 700 * time.Millisecond)
		}
		// The rule that planned it, or none (a state older than sources).
		sources := append(governor.AllSources(), "")
		st.Source = sources[mod(hintAt^lastOff, int64(len(sources)))]
		// Feature state, each possibly hostile (huge, negative, stale).
		if bit(54) {
			st.AdaptiveInterval = time.Duration(extra) * time.Duration(1+bits(55, 20))
			st.UnchangedRuns = int(bits(55, 10))
			st.LastFingerprint = []string{"", "a", "b"}[bits(56, 2)%3]
		}
		if bit(57) {
			st.LastActivityAt = now.Add(-ms(mod(extra, 72*hour)))
			st.CreatedAt = st.LastActivityAt.Add(-ms(mod(lastOff, 72*hour)))
		}
		// A breaker key: none (unknown, a state or caller before it was
		// passed), the task's own, or a host's.
		breakerKeys := []string{"", "t", "host_example_com"}
		if bit(58) {
			st.BreakerOpenUntil = now.Add(ms(signed(extra, 2*hour)))
			st.BreakerKey = breakerKeys[mod(hintTTL, 3)]
		}
		if bit(59) {
			at := now.Add(-ms(mod(extra, 2*hour)))
			st.DeadLetter = &governor.DeadLetterHold{DispatchID: "t:dead", Reason: "permanent", At: at, RecheckAt: at.Add(ms(mod(hintAt, 2*hour)))}
		}
		if bit(60) {
			st.RequeuedAt = now.Add(-ms(mod(extra, hour)))
		}
		if bit(61) {
			st.CatchUpPending = int(mod(extra, 200))
		}
		if bit(62) {
			h := now.Unix()/3600 - mod(extra, 30)
			st.Budget = governor.RunLedger{Hour: h}
			for i := range st.Budget.Counts {
				st.Budget.Counts[i] = uint32(feat >> (i % 60))
			}
		}
		if bit(63) {
			st.LastSuccessAt = now.Add(-ms(mod(extra, 10*hour)))
		}

		var in governor.Input
		switch kind % 12 {
		case 0:
			in.Kind = governor.KindAccepted
		case 1:
			in.Kind = governor.KindUpdated
		case 2, 3, 4:
			slot := now.Add(ms(signed(pauseOff, 2*hour)))
			id := events.DispatchID("t", slot)
			switch (kind / 12) % 4 {
			case 0:
				id = st.LastDispatchID // a redelivery
			case 1:
				if len(st.RecentDispatchIDs) > 0 {
					id = st.RecentDispatchIDs[0] // a redelivery after later outcomes
				}
			}
			in = governor.Input{Kind: governor.KindOutcome, Outcome: &governor.Outcome{
				DispatchID: id, ScheduledAt: slot, Result: []string{"succeeded", "failed", "skipped"}[kind%12-2], FinishedAt: now,
				Fingerprint: []string{"", "a", "b", "c"}[(kind/48)%4],
			}}
			if in.Outcome.Result == "skipped" { // why, from the fingerprint's bits (a skip has none)
				in.Outcome.Skip = []governor.Skip{governor.SkipNotRun, governor.SkipPaused, governor.SkipRan, governor.SkipNotRun}[(kind/48)%4]
			}
			if in.Outcome.Result == "failed" && pauseMode&32 != 0 { // final: a dead letter follows
				in.Outcome.DeadLetterReason = events.DeadLetterMaxAttempts
			}
			if kind >= 192 { // a known start: late, on time or (another clock) after now
				in.Outcome.StartedAt = slot.Add(ms(mod(hintIv, 2*hour)))
			}
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
		case 9:
			sig := &governor.BreakerSignal{State: []string{"open", "closed", "half-open", "?"}[(kind/12)%4]}
			if pauseMode&8 != 0 {
				sig.RetryAt = now.Add(ms(signed(pauseOff, 2*hour)))
			}
			sig.Key = breakerKeys[mod(hintIv, 3)]
			in = governor.Input{Kind: governor.KindBreaker, Breaker: sig}
		case 10:
			in = governor.Input{Kind: governor.KindDeadLettered, DeadLetter: &governor.DeadLetterSignal{
				DispatchID: []string{"t:dead", "t:new"}[(kind/12)%2], Reason: "max-attempts", At: now.Add(-ms(mod(pauseOff, hour))),
			}}
		case 11:
			in.Kind = governor.KindRequeued
		}
		// The run's task: unknown, this one, or one deleted since (or a
		// later one, when this state is a stale copy).
		created := []time.Time{{}, st.CreatedAt, st.CreatedAt.Add(-ms(mod(extra, hour)) - time.Nanosecond), st.CreatedAt.Add(time.Millisecond)}[(pauseMode>>6)%4]
		switch {
		case in.Outcome != nil:
			in.Outcome.TaskCreatedAt = created
		case in.DeadLetter != nil:
			in.DeadLetter.TaskCreatedAt = created
		}

		in.BreakerKey = breakerKeys[mod(lastOff, 3)] // the task's key under spec, as its caller derives it
		before := cloneState(st)
		d := governor.Decide(now, spec, st, in)
		if !reflect.DeepEqual(st, before) {
			t.Fatalf("Decide mutated its input state")
		}
		if again := governor.Decide(now, spec, st, in); !reflect.DeepEqual(d, again) {
			t.Fatalf("Decide is not deterministic:\n%+v\n%+v", d, again)
		}
		if (in.Outcome != nil && governor.OtherTask(in.Outcome.TaskCreatedAt, st)) || (in.DeadLetter != nil && governor.OtherTask(in.DeadLetter.TaskCreatedAt, st)) {
			if !d.Ignored {
				t.Fatalf("applied a %s of another task of the same ID (created %s, this one %s)", in.Kind, fmtT(created), fmtT(st.CreatedAt))
			}
		}
		if governor.OtherBreaker(in) && !d.Ignored {
			t.Fatalf("applied a transition of breaker %q to a task whose breaker is %q", in.Breaker.Key, in.BreakerKey)
		}
		if s := d.State; !d.Ignored && in.Kind != governor.KindDeleted && (s.BreakerOpenUntil.IsZero() && s.BreakerKey != "" ||
			s.BreakerKey != "" && in.BreakerKey != "" && s.BreakerKey != in.BreakerKey) {
			t.Fatalf("breaker hold until %s by %q after a %s decision with breaker key %q: want none, or one by that key", fmtT(s.BreakerOpenUntil), s.BreakerKey, in.Kind, in.BreakerKey)
		}
		if o := in.Outcome; o != nil && governor.Applied(o.DispatchID, st) && !d.Ignored {
			t.Fatalf("applied outcome %s again (last %s, recent %q)", o.DispatchID, st.LastDispatchID, st.RecentDispatchIDs)
		}
		if d.Ignored {
			switch in.Kind {
			case governor.KindOutcome, governor.KindDeadLettered, governor.KindBreaker:
			default:
				t.Fatalf("ignored a %s input", in.Kind)
			}
			if !reflect.DeepEqual(d.State, st) {
				t.Fatalf("changed the state while ignoring a %s input", in.Kind)
			}
			return
		}
		// The readers take a state that names no decision for an
		// unreadable one, and rebuild it: none that Decide writes may be.
		if d.State.Undecided() {
			t.Fatalf("a %s decision wrote a state that names no decision (State.Undecided): next %s, source %q, paused %v",
				in.Kind, fmtT(d.NextRunAt), d.Source, d.State.Paused)
		}
		s := d.State
		checkAdaptiveStep(t, spec, now, st, s, in)
		// The state remembers the slot in flight a decision planned past
		// while it is due, and keeps the one it remembers while it counts.
		if want := runningAfter(now, st, d, in); !s.RunningSlot.Equal(want) {
			t.Fatalf("RunningSlot %s after a %s input, want %s (stored %s, planned %s, next %s)\n%s",
				fmtT(s.RunningSlot), in.Kind, fmtT(want), fmtT(st.RunningSlot), fmtT(st.NextRunAt), fmtT(d.NextRunAt), fmtTrail(d.Trail))
		}
		// An on-time run (started within half the budget's spacing of its
		// slot) keeps its cadence: its start changes nothing but the hour
		// the ledger counts it in, and, for the outcome that carries it,
		// which slots were missed (catch-up; see caughtUp).
		if b := spec.Budget; b != nil && !runStarted(st, in, now).After(s.LastScheduledAt.Add(budgetSpacing(b.MaxRunsPerDay)/2)) && sameHourAsSlot(in, now) {
			st0, in0 := cloneState(st), in
			st0.LastStartedAt = time.Time{}
			if o := in.Outcome; o != nil {
				o0 := *o
				o0.StartedAt = time.Time{}
				in0.Outcome = &o0
			}
			d0 := governor.Decide(now, spec, st0, in0)
			ownStart := in.Outcome != nil && !in.Outcome.StartedAt.IsZero()
			if (!ownStart || (!caughtUp(d) && !caughtUp(d0))) && (!d.NextRunAt.Equal(d0.NextRunAt) || d.Source != d0.Source) {
				t.Fatalf("run started on time (at %s, slot %s): next run %s (%s), %s (%s) without its start\ntrail:\n%s",
					fmtT(runStarted(st, in, now)), fmtT(s.LastScheduledAt), fmtT(d.NextRunAt), d.Source, fmtT(d0.NextRunAt), d0.Source, fmtTrail(d.Trail))
			}
		}
		if len(s.RecentDispatchIDs) > governor.MaxRecentDispatchIDs {
			t.Fatalf("%d recent dispatches kept, over %d", len(s.RecentDispatchIDs), governor.MaxRecentDispatchIDs)
		}
		if o := in.Outcome; o != nil && o.DispatchID != "" && !governor.Decide(now, spec, s, in).Ignored {
			t.Fatalf("outcome %s, delivered again at once, applied again", o.DispatchID)
		}
		if !s.NextRunAt.Equal(d.NextRunAt) || s.Source != d.Source || !reflect.DeepEqual(s.Trail, d.Trail) {
			t.Fatalf("State does not mirror the Decision: %+v", d)
		}
		// Expired hints are removed (a slot in flight kept included; a
		// delete plans nothing and leaves them) and
		// reported; a hint input replaces the hint of its kind first, and
		// a run at or after a one-shot's time consumes it.
		if h := s.IntervalHint; h != nil && !h.ExpiresAt.After(now) && in.Kind != governor.KindDeleted {
			t.Fatalf("expired interval hint (%s) kept\nin %s %+v\nnow %s trail %q", fmtT(h.ExpiresAt), in.Kind, in.Hint, fmtT(now), d.Trail)
		}
		if h := s.OneShotHint; h != nil && !h.ExpiresAt.After(now) && in.Kind != governor.KindDeleted {
			t.Fatalf("expired one-shot hint (%s) kept", fmtT(h.ExpiresAt))
		}
		if in.Kind != governor.KindDeleted && in.Kind != governor.KindAccepted { // both start afresh
			var newIv, newAt bool
			if h := in.Hint; in.Kind == governor.KindHinted && h != nil {
				newIv, newAt = h.Interval > 0, !h.At.IsZero()
			}
			// A run at or after a one-shot's time consumes it, as does the
			// skip of a slot that ran already; any other skip keeps it.
			o := in.Outcome
			consumed := in.Kind == governor.KindOutcome && o != nil && st.OneShotHint != nil && !o.ScheduledAt.Before(st.OneShotHint.At) &&
				(o.Result != "skipped" || o.Skip == governor.SkipRan)
			expired := (st.IntervalHint != nil && !newIv && !st.IntervalHint.ExpiresAt.After(now)) ||
				(st.OneShotHint != nil && !newAt && !st.OneShotHint.ExpiresAt.After(now) && !consumed)
			if expired != d.ClearedHints {
				t.Fatalf("ClearedHints = %v with an expired hint in the state: %v\nin %s %+v\nst %+v %+v\nnow %s trail %q", d.ClearedHints, expired, in.Kind, in.Outcome, st.IntervalHint, st.OneShotHint, fmtT(now), d.Trail)
			}
		}
		if inFlight(now, st, in) {
			if !d.NextRunAt.Equal(st.NextRunAt) || d.Source != st.Source || !strings.Contains(strings.Join(d.Trail, "\n"), "in flight") {
				t.Fatalf("a %s input moved the slot in flight, %s (%s), to %s (%s)", in.Kind, fmtT(st.NextRunAt), st.Source, fmtT(d.NextRunAt), d.Source)
			}
			return // the rest holds for the decision that planned it
		}
		// A slot planned while a run ran (by a run-now hint, a requeue, an
		// interval hint) is kept, due or ahead, by that run's outcome and
		// by any input during the run (the state remembers the running
		// slot, and the planned one is after it) but one that stops the
		// task (a pause, a delete, a dead-letter hold): its dispatch waits
		// for the running one's to leave DISPATCH, and planned after, it
		// was replaced in the timer before it was published. A one-shot
		// whose time came while it waited is consumed: it runs after it.
		if planned := plannedInFlight(now, st, d.State, in); !planned.IsZero() && queuedBehind(now, st, d.State, in, planned) {
			if !d.NextRunAt.Equal(st.NextRunAt) || d.Source != st.Source || !strings.Contains(strings.Join(d.Trail, "\n"), "was planned while the run of") {
				t.Fatalf("a %s input moved the slot planned during a run, %s (%s), to %s (%s)\n%s", in.Kind, fmtT(st.NextRunAt), st.Source, fmtT(d.NextRunAt), d.Source, fmtTrail(d.Trail))
			}
			if h := d.State.OneShotHint; h != nil && h.At.After(planned) && !h.At.After(now) {
				t.Fatalf("one-shot for %s left for a run after the slot %s that waits and runs after it\n%s", fmtT(h.At), fmtT(planned), fmtTrail(d.Trail))
			}
			return
		}
		// A slot in flight still ahead (perhaps not published yet) that
		// serves a request is kept, unless the input stops the task:
		// planned after, the unpublished slot was dropped with the request.
		if flying := plannedInFlight(now, st, d.State, in); flying.After(now) && in.Kind != governor.KindDeadLettered && in.Kind != governor.KindPaused && servesAhead(flying, d.State, in.Kind) {
			if !d.NextRunAt.Equal(st.NextRunAt) || d.Source != st.Source || !strings.Contains(strings.Join(d.Trail, "\n"), "in flight") {
				t.Fatalf("a %s input moved the slot in flight %s (%s), still ahead and serving a request, to %s (%s)\n%s", in.Kind, fmtT(st.NextRunAt), st.Source, fmtT(d.NextRunAt), d.Source, fmtTrail(d.Trail))
			}
			return
		}
		if !slices.Contains(governor.AllSources(), d.Source) || len(d.Trail) == 0 {
			t.Fatalf("source %q, trail %q", d.Source, d.Trail)
		}
		if in.Kind == governor.KindAccepted && !s.CreatedAt.Equal(now) {
			t.Fatalf("CreatedAt %s on accept", fmtT(s.CreatedAt))
		}
		explain := func() string {
			return "\nnow:   " + fmtT(now) + "\nlast:  " + fmtT(s.LastScheduledAt) + "\nnext:  " + fmtT(d.NextRunAt) +
				"\nsource: " + string(d.Source) + "\ntrail:\n" + fmtTrail(d.Trail)
		}
		// Nudging keeps the planned run; the run after a timed pause that
		// has ended keeps its time with the label a resume gives it.
		relabelled := in.Kind == governor.KindHinted && st.Source == governor.SourcePaused && st.Paused && !s.Paused
		kept := d.NextRunAt.Equal(st.NextRunAt) && (d.Source == st.Source || relabelled)
		// adaptive-tighten and adaptive-relax name an adaptive interval,
		// as the cadence takes it (within its range), shorter or longer
		// than the baseline.
		if (d.Source == governor.SourceAdaptiveTighten || d.Source == governor.SourceAdaptiveRelax) && !kept {
			base := spec.Schedule.Interval.D()
			lo, hi := adaptiveRange(spec)
			if spec.Adaptive == nil || spec.Schedule.Cron != "" || s.AdaptiveInterval <= 0 {
				t.Fatalf("source %s without an adaptive interval (%s)%s", d.Source, s.AdaptiveInterval, explain())
			}
			if iv := min(max(s.AdaptiveInterval, lo), max(hi, lo)); (d.Source == governor.SourceAdaptiveTighten) != (iv < base) || iv == base {
				t.Fatalf("source %s for the adaptive interval %s (in force %s), baseline %s%s", d.Source, s.AdaptiveInterval, iv, base, explain())
			}
		}
		// "paused" labels a run only while the task is paused: the run a
		// pause leads to, kept (by nudging) after the pause ended, carries
		// the label a resume gives it, or a later input takes it for the
		// run of a pause still in force (not a slot in flight).
		if d.Source == governor.SourcePaused && !s.Paused {
			t.Fatalf("source paused, but the task is not paused%s", explain())
		}
		if st.NextRunAt.After(now) && st.CatchUpPending == 0 && (s.CatchUpPending > 0 || (d.Source == governor.SourceCatchUp && !kept)) {
			t.Fatalf("caught up slots that were never due (the run planned was at %s), pending %d%s", fmtT(st.NextRunAt), s.CatchUpPending, explain())
		}
		if d.NextRunAt.IsZero() {
			if (!s.Paused || !s.PausedUntil.IsZero()) && d.Source != governor.SourceDeleted {
				t.Fatalf("nothing scheduled for a task neither paused indefinitely nor deleted%s", explain())
			}
			return
		}
		// A timed pause plans the run a resume at its end would: at or
		// after the end.
		if d.Source == governor.SourcePaused && s.Paused && d.NextRunAt.Before(s.PausedUntil) {
			t.Fatalf("paused until %s, but the run after it is planned earlier%s", fmtT(s.PausedUntil), explain())
		}
		if d.NextRunAt.Location() != time.UTC {
			t.Fatalf("NextRunAt in %s", d.NextRunAt.Location())
		}
		if d.NextRunAt.Before(now) {
			t.Fatalf("NextRunAt before now%s", explain())
		}
		// The gaps are measured from the last completed slot, or from the
		// slot in flight (planned or remembered running), which runs before
		// this decision's.
		last := s.LastScheduledAt
		flying := slotInFlight(now, st, s, in)
		if !flying.IsZero() && (last.IsZero() || flying.After(last)) {
			last = flying
		}
		if !last.IsZero() && d.NextRunAt.Before(last.Add(governor.MinGap)) {
			t.Fatalf("NextRunAt less than %s after the last slot or the slot in flight%s", governor.MinGap, explain())
		}
		// An interval hint plans no slot at or after its TTL (nudging may
		// keep a slot an earlier hint planned, and the MinGap floor may
		// move a slot just before the TTL past it).
		if d.Source == governor.SourceHintInterval && !kept && !d.NextRunAt.Equal(last.Add(governor.MinGap)) {
			if h := s.IntervalHint; h == nil || !d.NextRunAt.Before(h.ExpiresAt) {
				t.Fatalf("interval hint %+v planned a slot at or after its TTL%s", h, explain())
			}
		}
		// The slot in flight serves the requests at or before it (a
		// one-shot's time, a requeue, a recheck time) and a backlog waits
		// for its success: no rule plans them again behind it once it is
		// due (running; one still ahead that serves a request is kept,
		// above, unless the input stops the task, which re-plans). A slot
		// an earlier decision planned and nudging keeps is not planned
		// again: only a hostile state holds one that a running slot it
		// remembers serves (no decision plans a request such a slot
		// serves, nor a catch-up run while one is in flight).
		if !flying.IsZero() && !flying.After(now) && !kept {
			served := func(at time.Time) bool { return !flying.Before(at) }
			switch d.Source {
			case governor.SourceHintOneShot:
				if h := s.OneShotHint; h == nil || served(h.At) {
					t.Fatalf("one-shot %+v planned again behind the slot in flight %s%s", h, fmtT(flying), explain())
				}
			case governor.SourceRequeue:
				if served(s.RequeuedAt) {
					t.Fatalf("requeue of %s run again behind the slot in flight %s%s", fmtT(s.RequeuedAt), fmtT(flying), explain())
				}
			case governor.SourceDeadLetterRecheck:
				if dl := s.DeadLetter; dl == nil || served(dl.RecheckAt) {
					t.Fatalf("recheck %+v run again behind the slot in flight %s%s", dl, fmtT(flying), explain())
				}
			case governor.SourceCatchUp:
				t.Fatalf("catch-up run planned behind the slot in flight %s%s", fmtT(flying), explain())
			case governor.SourcePaused: // the slot in flight is the run the pause leads to (a new pause stops it)
				if in.Kind == governor.KindPaused || st.Source != governor.SourcePaused || !flying.Equal(st.NextRunAt) {
					break
				}
				t.Fatalf("the run after the pause planned again behind the slot in flight %s%s", fmtT(flying), explain())
			}
		}
		// Catch-up: "none" never plans a catch-up run (but a backlog the
		// state already held, or a run planned before and kept), and "all"
		// backfills at most catchUpMax (100 if unset) runs.
		if spec.CatchUp == events.CatchUpNone && d.Source == governor.SourceCatchUp && !kept && st.CatchUpPending == 0 {
			t.Fatalf("catchUp none planned a catch-up run%s", explain())
		}
		if limit := spec.CatchUpMax; spec.CatchUp == events.CatchUpAll && s.CatchUpPending > st.CatchUpPending {
			if limit <= 0 {
				limit = events.DefaultCatchUpMax
			}
			if s.CatchUpPending > limit {
				t.Fatalf("catchUp all, at most %d: %d runs pending%s", limit, s.CatchUpPending, explain())
			}
		}
		// Cron with jitter: an occurrence's slot is delayed by less than
		// jitter of the gap to the one after it, so the cron rule plans no
		// later than the next occurrence's latest slot; and it plans the
		// next occurrence only once the last one at or before now has
		// passed: its slot, drawn as the next one's (the same run count),
		// is not ahead (it is, if the last run came before it).
		if spec.Schedule.Cron != "" && spec.Jitter > 0 && d.Source == governor.SourceBaselineCron && !kept {
			checkCronJitter(t, spec, now, last, d.NextRunAt, explain)
		}
		// Cron without jitter: the slot the cron rule plans is the first
		// occurrence after the last slot and after now, by the DST rule
		// (FuzzNextDST holds cron.Next to it): strictly after the last
		// slot, no wall time a second time across a fall-back hour, and
		// no occurrence dropped but those the catch-up policy drops (the
		// missed ones before now). Only the MinGap floor moves it, after
		// a last slot off the whole second.
		if spec.Schedule.Cron != "" && spec.Jitter == 0 && d.Source == governor.SourceBaselineCron && !kept && !d.NextRunAt.Equal(last.Add(governor.MinGap)) {
			checkCronSlot(t, spec, now, last, d.NextRunAt, explain)
		}
		// A pause outranks the clamps, the budget and quiet hours: the
		// run after a timed pause is planned as a resume at its end plans
		// it, but never before the end. Once the pause has ended, the run
		// it led to, in flight and due, counts as the last slot (above).
		if last.IsZero() || s.Paused {
			return
		}
		gap := d.NextRunAt.Sub(last)
		// A run on the cron calendar (the cron rule's slot, or an
		// occurrence quiet hours or the budget moved it to) is judged by
		// its occurrence; a run the breaker or bounds.min delayed, by the
		// latest occurrence before it (cronCalendar).
		var cal *cronCalendar
		if spec.Schedule.Cron != "" {
			sched, loc := cronOf(t, spec)
			cal = &cronCalendar{sched: sched, loc: loc, jitter: spec.Jitter}
		}
		onCal := cal != nil && (d.Source == governor.SourceBaselineCron ||
			((d.Source == governor.SourceQuietHours || d.Source == governor.SourceBudget) && cal.isOccurrence(d.NextRunAt)))
		delayed := cal != nil && (d.Source == governor.SourceBreakerOpen || d.Source == governor.SourceClampedMin)
		if spec.Bounds != nil && !d.NextRunAt.Equal(now) {
			short, long := lo != 0 && gap < lo, hi != 0 && gap > hi
			if onCal && short && cal.admitsMinAt(last, d.NextRunAt, lo) {
				short = false
			}
			if onCal && long && cal.admitsMax(last, d.NextRunAt, hi) {
				long = false
			}
			if short || long {
				t.Fatalf("gap %s outside bounds [%s, %s]%s", gap, lo, hi, explain())
			}
		}
		// Quiet hours (checked in UTC, where the wall clock is exact): a
		// run they place is in the window or at its end (an interval task;
		// a cron task skips to an occurrence), and, without jitter (which
		// may shorten the quiet interval), a run in the window is at least
		// the quiet interval after the last run, unless the window ended
		// in between, a rule that outranks quiet hours placed it (clamps,
		// requeue, recheck, the breaker's retryAt) or it was floored to
		// now.
		if q := spec.QuietHours; q != nil && q.Timezone == "UTC" && q.Start != q.End && (!kept || in.Kind == governor.KindHinted) && !d.NextRunAt.Equal(now) {
			w := utcWindow(q.Start, q.End)
			in, end := w.at(d.NextRunAt)
			if d.Source == governor.SourceQuietHours && spec.Schedule.Cron == "" && !in && !w.isEdge(d.NextRunAt) {
				t.Fatalf("quiet hours %s-%s placed a run outside the window%s", q.Start, q.End, explain())
			}
			switch d.Source {
			case governor.SourceRequeue, governor.SourceDeadLetterRecheck, governor.SourceClampedMax, governor.SourceClampedMin, governor.SourceBreakerOpen:
			default:
				if _, lend := w.at(last); in && lend.Equal(end) && spec.Jitter == 0 && gap < q.Interval.D() {
					t.Fatalf("run %s after the last one in quiet hours %s-%s every %s%s", gap, q.Start, q.End, q.Interval.D(), explain())
				}
			}
		}
		// A requeue (the operator's) outranks the budget (then the clamps
		// may move it), and bounds.max does too. Every other run, a
		// dead-letter recheck included, keeps the budget's pacing and,
		// its exhaustion rule: nudging keeps the run planned before only
		// when the budget allows it.
		// Pacing measures from the last slot, or from the last run's start
		// when it started more than half the spacing after its slot (a
		// late run), so consecutive calls start at least half the spacing
		// apart; the ledger counts the run in the hour it started.
		outranked := !s.RequeuedAt.IsZero() || d.Source == governor.SourceRequeue || d.Source == governor.SourceClampedMax
		if b := spec.Budget; b != nil && !outranked {
			spacing := budgetSpacing(b.MaxRunsPerDay)
			started := runStarted(st, in, now)
			free := budgetFree(s.Budget, now, int64(b.MaxRunsPerDay))
			if onCal || delayed {
				// Paced from the late start, or from the last slot.
				from := last
				if started.After(s.LastScheduledAt.Add(spacing/2)) && started.After(last) {
					from = started
				}
				o := d.NextRunAt
				if delayed {
					if x := cal.latest(d.NextRunAt); !x.IsZero() {
						o = x
					}
				}
				if d.NextRunAt.Sub(from) < spacing && !cal.admitsMinAt(from, o, spacing) {
					t.Fatalf("occurrence %s under the budget's %s after the occurrence of %s%s", fmtT(cal.occurrence(o)), spacing, fmtT(from), explain())
				}
				if d.NextRunAt.Before(free) && !cal.frees(o, free) {
					t.Fatalf("budget of %d used up: occurrence %s before %s%s", b.MaxRunsPerDay, fmtT(cal.occurrence(o)), fmtT(free), explain())
				}
			} else {
				checkBudget(t, d.NextRunAt, gap, started, s.LastScheduledAt, spacing, free, b.MaxRunsPerDay, explain)
			}
		}
	})
}

// checkBudget is the fuzz oracle of the budget for a run next off the cron
// calendar, gap after the last slot: at least the spacing after it, and
// after the last run's start when that was late (more than half the
// spacing after its slot, lastSlot), at least half the spacing after any
// start, and not before free once the budget is used up.
func checkBudget(t *testing.T, next time.Time, gap time.Duration, started, lastSlot time.Time, spacing time.Duration, free time.Time, limit int, explain func() string) {
	t.Helper()
	if gap < spacing {
		t.Fatalf("gap %s under the budget's %s%s", gap, spacing, explain())
	}
	if started.After(lastSlot.Add(spacing/2)) && next.Sub(started) < spacing {
		t.Fatalf("%s after the late run started at %s, under the budget's %s%s", next.Sub(started), fmtT(started), spacing, explain())
	}
	if next.Sub(started) < spacing/2 {
		t.Fatalf("%s after the run started at %s, under half the budget's %s%s", next.Sub(started), fmtT(started), spacing, explain())
	}
	if next.Before(free) {
		t.Fatalf("budget of %d used up: next run before %s%s", limit, fmtT(free), explain())
	}
}

// checkCronSlot is the fuzz oracle of an unjittered cron slot that the
// cron rule planned at next, the last slot (completed or in flight) being
// last: the first occurrence after both last and now.
func checkCronSlot(t *testing.T, spec *events.TaskSpec, now, last, next time.Time, explain func() string) {
	t.Helper()
	sched, loc := cronOf(t, spec)
	from := now
	if last.After(now) {
		from = last
	}
	if want := sched.Next(from, loc); !next.Equal(want) {
		t.Fatalf("cron slot %s (wall %s), want the next occurrence after %s: %s (wall %s)%s",
			fmtT(next), next.In(loc).Format(time.DateTime), fmtT(from), fmtT(want), want.In(loc).Format(time.DateTime), explain())
	}
}

// adaptiveRange is the documented range of the adaptive interval
// (docs/governor.md, Adaptive cadence): bounds.min, or a quarter of the
// baseline but at least 1 s, to bounds.max, or four times the baseline.
// With bounds.max under a quarter of the baseline and no bounds.min, the
// documented range is empty: hi < lo.
func adaptiveRange(spec *events.TaskSpec) (lo, hi time.Duration) {
	base := spec.Schedule.Interval.D()
	lo = max(base/4, time.Second)
	hi = time.Duration(math.MaxInt64)
	if base <= math.MaxInt64/4 {
		hi = 4 * base
	}
	if b := spec.Bounds; b != nil && b.Min > 0 {
		lo = b.Min.D()
	}
	if b := spec.Bounds; b != nil && b.Max > 0 {
		hi = b.Max.D()
	}
	return lo, hi
}

// checkAdaptiveStep checks what one applied input does to the adaptive
// interval s.AdaptiveInterval (docs/governor.md, Adaptive cadence): an
// acceptance starts without one and a spec update removes it (it restarts
// from the new baseline); any other input but a run's outcome leaves it
// (re-deciding never moves it); an outcome moves it only for an adaptive
// interval task, into the documented range, in whole milliseconds, and
// toward its end that the outcome asks for: a failure or a changed
// response toward the lower end (mode change), an unchanged one toward
// the upper end, and in mode staleness toward a target between the
// lower end and the baseline.
func checkAdaptiveStep(t *testing.T, spec *events.TaskSpec, now time.Time, st, s governor.State, in governor.Input) {
	t.Helper()
	got := s.AdaptiveInterval
	switch {
	case in.Kind == governor.KindAccepted || in.Kind == governor.KindUpdated:
		if got != 0 {
			t.Fatalf("a %s input left the adaptive interval %s, want none (the baseline)", in.Kind, got)
		}
		return
	case got == st.AdaptiveInterval:
		return
	case in.Kind != governor.KindOutcome:
		t.Fatalf("a %s input moved the adaptive interval from %s to %s: only a run's outcome moves it", in.Kind, st.AdaptiveInterval, got)
	}
	a, base := spec.Adaptive, spec.Schedule.Interval.D()
	if a == nil || spec.Schedule.Cron != "" || base <= 0 {
		t.Fatalf("adaptive interval moved from %s to %s on a task without adaptive cadence", st.AdaptiveInterval, got)
	}
	lo, hi := adaptiveRange(spec)
	if hi < lo {
		return // bounds.max under the floor: no documented range (reported, not checked)
	}
	if got < lo || got > hi {
		t.Fatalf("adaptive interval %s (from %s) outside its range [%s, %s]", got, st.AdaptiveInterval, lo, hi)
	}
	// Whole milliseconds, but for the target itself: a step stops on it,
	// and a range end or staleness target need not be whole (a baseline
	// of 1.000000016s; a staleness target is a fraction of the range).
	// docs/governor.md says whole milliseconds without the exception.
	target := staleTarget(spec, s, now, lo, hi)
	if got%time.Millisecond != 0 && got != lo && got != hi && (a.Mode != events.AdaptiveStaleness || got != target) {
		t.Fatalf("adaptive interval %s (from %s, range [%s, %s]) not in whole milliseconds", got, st.AdaptiveInterval, lo, hi)
	}
	cur := st.AdaptiveInterval
	if cur <= 0 {
		cur = base
	}
	cur = min(max(cur, lo), hi)
	o := in.Outcome
	switch {
	case a.Mode == events.AdaptiveStaleness:
		if got < min(cur, target) || got > max(cur, target) {
			t.Fatalf("staleness moved the adaptive interval from %s (in force) to %s, not toward its target %s", cur, got, target)
		}
	case o.Result == "failed" || (o.Fingerprint != "" && st.LastFingerprint != "" && o.Fingerprint != st.LastFingerprint):
		if got > cur {
			t.Fatalf("a %s run (fingerprint %q after %q) relaxed the adaptive interval from %s (in force) to %s", o.Result, o.Fingerprint, st.LastFingerprint, cur, got)
		}
	default:
		if got < cur {
			t.Fatalf("an unchanged response (fingerprint %q after %q) tightened the adaptive interval from %s (in force) to %s", o.Fingerprint, st.LastFingerprint, cur, got)
		}
	}
}

// staleTarget is the staleness mode's target after an outcome that
// left the state s (docs/governor.md, Adaptive cadence): baseline −
// (baseline − floor) × staleness, the staleness 0 while the last success
// (or the creation) is at most one baseline old and rising linearly to 1
// at adaptive.target (three baselines if unset), within [lo, hi].
func staleTarget(spec *events.TaskSpec, s governor.State, now time.Time, lo, hi time.Duration) time.Duration {
	base := spec.Schedule.Interval.D()
	goal := spec.Adaptive.Target.D()
	if goal <= 0 {
		goal = time.Duration(math.MaxInt64)
		if base <= math.MaxInt64/3 {
			goal = 3 * base
		}
	}
	ref := s.LastSuccessAt
	if ref.IsZero() {
		ref = s.CreatedAt
	}
	age := now.Sub(ref)
	var frac float64
	switch {
	case age <= base:
	case goal <= base || age >= goal:
		frac = 1
	default:
		frac = float64(age-base) / float64(goal-base)
	}
	return min(max(base-time.Duration(float64(base-lo)*frac), lo), hi)
}

// checkCronJitter is the fuzz oracle of a jittered cron slot that the
// cron rule planned at next, the last slot (completed or in flight) being
// last: next is no later than the first occurrence after now (after last,
// if that is ahead) plus jitter
// of the gap to the one after it; and when next is that occurrence's
// slot, the last occurrence at or before now, after last, has passed:
// its slot, delayed by the same fraction of its own gap, is not ahead.
func checkCronJitter(t *testing.T, spec *events.TaskSpec, now, last, next time.Time, explain func() string) {
	t.Helper()
	sched, loc := cronOf(t, spec)
	n1 := sched.Next(now, loc)
	if last.After(now) {
		n1 = sched.Next(last, loc) // a last slot ahead (clock skew): after it
	}
	n2 := sched.Next(n1, loc)
	if n1.IsZero() || n2.IsZero() {
		return
	}
	gap := n2.Sub(n1)
	latest := n1.Add(time.Duration(float64(gap) * spec.Jitter))
	if next.After(latest) {
		t.Fatalf("cron slot after %s, the next occurrence %s plus jitter %g of %s%s", fmtT(latest), fmtT(n1), spec.Jitter, gap, explain())
	}
	if next.Before(n1) || last.IsZero() {
		return
	}
	// The last occurrence at or before now, after last, found apart from
	// the planner's bisection (beforeLast): by walking forward through the
	// occurrences from last, or, when last is further back, from 64 gaps
	// before now (the fuzz crons' gaps differ by a factor of 16 at most).
	// A zero Next (no occurrence within cron's horizon) ends the walk, as
	// beforeLast counts it after now. None found: it ran (or is in
	// flight), or the window missed it; no check.
	from := last
	back := time.Duration(math.MaxInt64)
	if gap < back/64 {
		back = 64 * gap
	}
	if w := now.Add(-back); w.After(from) {
		from = w
	}
	var prev time.Time
	for o, steps := sched.Next(from, loc), 0; !o.IsZero() && !o.After(now); o, steps = sched.Next(o, loc), steps+1 {
		if steps == 10_000 {
			return // too far to walk
		}
		prev = o
	}
	if prev.IsZero() {
		return
	}
	f := float64(next.Sub(n1)) / float64(gap)
	slack := time.Duration(float64(time.Millisecond)*float64(n1.Sub(prev))/float64(gap)) + 2*time.Millisecond
	if slot := prev.Add(time.Duration(float64(n1.Sub(prev)) * f)); slot.After(now.Add(slack)) {
		t.Fatalf("occurrence %s dropped for %s, though its jittered slot %s (%.1f%% of its gap) is still ahead%s",
			fmtT(prev), fmtT(n1), fmtT(slot), 100*f, explain())
	}
}

// runStarted is the fuzz oracle of the start the budget paces from: the
// latest start in st, or that of the run whose outcome in applies (made
// a call: succeeded or failed), at most now and not before its slot (its
// slot when the start is unknown).
func runStarted(st governor.State, in governor.Input, now time.Time) time.Time {
	started := st.LastStartedAt
	if o := in.Outcome; o != nil && (o.Result == "succeeded" || o.Result == "failed") {
		at := o.ScheduledAt
		if !o.StartedAt.IsZero() {
			at = o.StartedAt
			if at.After(now) {
				at = now
			}
			if at.Before(o.ScheduledAt) {
				at = o.ScheduledAt
			}
		}
		if at.After(started) {
			started = at
		}
	}
	return started
}

// caughtUp reports whether catch-up chose a run in d (a skip run, the
// first of a backlog, or the next backfill run), whatever rule moved it
// afterwards. The start of the run whose outcome applies decides catch-up
// as well as the budget: the slots that passed while it ran (from its
// start to its end) were not missed, under skip a run after which fewer
// than two slots passed was the run skip asks for, and a catch-up run
// starts at least MinGap after it. Without the start, the run's span is
// unknown and the slots since its slot count as missed, as after a
// downtime (docs/governor.md, Catch-up after downtime): a 2h run of a
// */15 cron task, started at its slot, is followed by the next
// occurrence, and the same outcome without its start by a catch-up run
// now. The on-time invariant leaves such decisions out.
func caughtUp(d governor.Decision) bool {
	for _, l := range d.Trail {
		if strings.HasPrefix(l, string(governor.SourceCatchUp)+": ") && (strings.Contains(l, "run once now") || strings.Contains(l, "backfilling")) {
			return true
		}
	}
	return false
}

// budgetSpacing is the budget's spacing, 24h/runsPerDay rounded up to
// the nanosecond.
func budgetSpacing(runsPerDay int) time.Duration {
	n := time.Duration(runsPerDay)
	return (24*time.Hour + n - 1) / n
}

// sameHourAsSlot reports whether the run whose outcome in applies, if it
// made a call, started (at most now, not before its slot) in its slot's
// UTC hour: the ledger then counts it in the same hour whether or not its
// start is known.
func sameHourAsSlot(in governor.Input, now time.Time) bool {
	o := in.Outcome
	if o == nil || o.StartedAt.IsZero() || (o.Result != "succeeded" && o.Result != "failed") {
		return true
	}
	hour := func(t time.Time) int64 { return t.Truncate(time.Hour).Unix() / 3600 }
	start := o.StartedAt
	if start.After(now) {
		start = now
	}
	if start.Before(o.ScheduledAt) {
		start = o.ScheduledAt
	}
	return hour(start) == hour(o.ScheduledAt)
}

// budgetFree is the fuzz oracle of the budget's exhaustion rule: when the
// runs the ledger counts in now's UTC hour and the 23 before it reach
// limit, the first hour at which the hours counted from it back 23 hours
// (up to now's) fall below limit; else the zero time.
func budgetFree(l governor.RunLedger, now time.Time, limit int64) time.Time {
	used := func(from, to int64) int64 {
		var n int64
		for x := max(from, l.Hour-23); x <= min(to, l.Hour); x++ {
			n += int64(l.Counts[mod(x, 24)])
		}
		return n
	}
	h := now.Unix() / 3600 // now is after 1970
	if used(h-23, h) < limit {
		return time.Time{}
	}
	f := h + 24
	for x := h + 1; x < h+24; x++ {
		if used(x-23, h) < limit {
			f = x
			break
		}
	}
	return time.Unix(f*3600, 0).UTC()
}

// inFlight is the fuzz oracle of the in-flight rule: a breaker transition
// or a spec update arriving while a slot planned by a schedule rule (the
// run a timed pause leads to included) is due (or within InFlightWindow)
// and its outcome is not in yet.
func inFlight(now time.Time, st governor.State, in governor.Input) bool {
	return (in.Kind == governor.KindBreaker || in.Kind == governor.KindUpdated) && !rawPlanned(now, st, st, in).IsZero()
}

// slotInFlight is the fuzz oracle's slot in flight: the later of the
// planned one (plannedInFlight) and the running one the state remembers
// (runningInFlight).
func slotInFlight(now time.Time, st, s governor.State, in governor.Input) time.Time {
	planned, running := plannedInFlight(now, st, s, in), runningInFlight(now, st, s, in)
	if planned.IsZero() || running.After(planned) {
		return running
	}
	return planned
}

// runningInFlight is the fuzz oracle's running slot: the slot in flight
// a decision planned past (st.RunningSlot), while it is due (or within
// InFlightWindow) and after the last completed slot (s is the state
// after the input), for any input but an acceptance or a delete (a pause
// and a resume keep it: the run goes on).
func runningInFlight(now time.Time, st, s governor.State, in governor.Input) time.Time {
	r := st.RunningSlot
	switch {
	case in.Kind == governor.KindAccepted, in.Kind == governor.KindDeleted, st.Deleted, r.IsZero():
		return time.Time{}
	}
	if !r.After(s.LastScheduledAt) || r.After(now.Add(governor.InFlightWindow)) {
		return time.Time{}
	}
	return r
}

// runningAfter is the fuzz oracle of State.RunningSlot after decision d:
// the planned slot in flight when it is due and d planned past it, else
// the running slot while it counts.
func runningAfter(now time.Time, st governor.State, d governor.Decision, in governor.Input) time.Time {
	if planned := plannedInFlight(now, st, d.State, in); !planned.IsZero() && !planned.After(now) && !d.NextRunAt.Equal(planned) {
		return planned
	}
	return runningInFlight(now, st, d.State, in)
}

// plannedInFlight is the fuzz oracle's planned slot in flight: the slot
// rawPlanned names, but for one that waits behind a running one and that
// the input replaces (queuedBehind): it has not run.
func plannedInFlight(now time.Time, st, s governor.State, in governor.Input) time.Time {
	planned := rawPlanned(now, st, s, in)
	if !inFlight(now, st, in) && waitsBehind(now, st, s, in, planned) && !queuedBehind(now, st, s, in, planned) {
		return time.Time{}
	}
	return planned
}

// rawPlanned is the slot planned before the input by a schedule rule, due
// (or within InFlightWindow) and after the last completed slot (s is the
// state after the input), for any input but an acceptance or a delete,
// and a slot the task was not paused at (the executor skips those). The
// run a timed pause leads to is one too; a resume that ends the pause
// counts it only once due.
func rawPlanned(now time.Time, st, s governor.State, in governor.Input) time.Time {
	switch {
	case in.Kind == governor.KindAccepted, in.Kind == governor.KindDeleted,
		st.Source == "", st.Source == governor.SourceDeleted, st.Deleted, st.NextRunAt.IsZero(),
		st.PausedAt(st.NextRunAt), st.Source == governor.SourcePaused && !st.Paused,
		in.Kind == governor.KindResumed && st.Paused && st.NextRunAt.After(now):
		return time.Time{}
	}
	if !st.NextRunAt.After(s.LastScheduledAt) || st.NextRunAt.After(now.Add(governor.InFlightWindow)) {
		return time.Time{}
	}
	return st.NextRunAt
}

// waitsBehind is the fuzz oracle of a slot planned during a run that
// waits behind it: planned, the slot in flight before the input, when the
// input is an outcome, or when the state remembers a running slot before
// it (runningInFlight).
func waitsBehind(now time.Time, st, s governor.State, in governor.Input, planned time.Time) bool {
	if planned.IsZero() {
		return false
	}
	if in.Kind == governor.KindOutcome {
		return true
	}
	running := runningInFlight(now, st, s, in)
	return !running.IsZero() && planned.After(running)
}

// queuedBehind is the fuzz oracle of a slot that waits behind a run
// (waitsBehind) and that the input keeps: any input but one that stops
// the task (a pause, a dead-letter input, or a dead-letter hold in s, the
// state after it, whose recheck is after the slot, unless the slot is at
// or after a requeue st held that the input's outcome does not serve: a
// run at or after it, or the skip of a slot at or after it that ran
// already; the operator's requeue outranks the hold).
func queuedBehind(now time.Time, st, s governor.State, in governor.Input, planned time.Time) bool {
	if !waitsBehind(now, st, s, in, planned) || in.Kind == governor.KindPaused || in.Kind == governor.KindDeadLettered {
		return false
	}
	r := st.RequeuedAt
	if o := in.Outcome; o != nil && !o.ScheduledAt.Before(r) && (o.Result != "skipped" || o.Skip == governor.SkipRan) {
		r = time.Time{}
	}
	return s.DeadLetter == nil || !s.DeadLetter.RecheckAt.After(planned) || (!r.IsZero() && !planned.Before(r))
}

// servesAhead reports whether the slot in flight, flying, is the run a
// request in s (the state after the input) asked for: the run a timed
// pause leads to, a one-shot hint or a requeue at or before it, a
// dead-letter recheck not run yet at or before it, or the next backfill
// run; or any slot ahead, for a hint or a requeue input, which applies
// from its outcome. A dead-letter hold whose recheck is later holds the
// task instead.
func servesAhead(flying time.Time, s governor.State, kind governor.Kind) bool {
	served := func(at time.Time) bool { return !at.IsZero() && !flying.Before(at) }
	dl := s.DeadLetter
	switch {
	case dl != nil && dl.RecheckAt.After(flying):
		return false
	case s.Paused:
		return true
	case s.OneShotHint != nil && served(s.OneShotHint.At):
		return true
	case served(s.RequeuedAt):
		return true
	case dl != nil && dl.RecheckAt.After(s.LastScheduledAt):
		return true
	}
	return s.CatchUpPending > 0 && s.Failures == 0 || kind == governor.KindHinted || kind == governor.KindRequeued
}

func fmtTrail(trail []string) string {
	var s string
	for _, l := range trail {
		s += "  " + l + "\n"
	}
	return s
}

// quietUTC is a quiet-hours oracle for windows in UTC, where the wall
// clock has no DST: [start, end) seconds of the day, wrapping midnight
// when start > end.
type quietUTC struct{ start, end int64 }

func utcWindow(start, end string) quietUTC {
	sec := func(c string) int64 {
		t, err := time.Parse("15:04", c)
		if err != nil {
			panic(err)
		}
		return int64(t.Hour()*3600 + t.Minute()*60)
	}
	return quietUTC{sec(start), sec(end)}
}

// at reports whether t is in the window, and the first end of a window
// after t (that of the window t is in, if it is).
func (w quietUTC) at(t time.Time) (bool, time.Time) {
	t = t.UTC()
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	sod := t.Sub(day)
	end := day.Add(time.Duration(w.end) * time.Second)
	if !end.After(t) {
		end = end.AddDate(0, 0, 1)
	}
	s, e := time.Duration(w.start)*time.Second, time.Duration(w.end)*time.Second
	if w.start < w.end {
		return sod >= s && sod < e, end
	}
	return sod >= s || sod < e, end
}

// isEdge reports whether t is the end of a window.
func (w quietUTC) isEdge(t time.Time) bool {
	t = t.UTC()
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	return t.Sub(day) == time.Duration(w.end)*time.Second
}

// cronOf parses spec's cron schedule and loads its time zone.
func cronOf(t *testing.T, spec *events.TaskSpec) (*cron.Schedule, *time.Location) {
	t.Helper()
	sched, err := cron.Parse(spec.Schedule.Cron)
	if err != nil {
		t.Fatal(err)
	}
	loc, err := time.LoadLocation(spec.Schedule.Timezone)
	if err != nil {
		t.Fatal(err)
	}
	return sched, loc
}

// cronCalendar is the fuzz oracle of a cron task's calendar, as the budget
// and the bounds judge a run on it (docs/governor.md, "Budget and bounds
// on the cron calendar"): by occurrences before jitter, allowing the hour
// the clocks moved in between.
type cronCalendar struct {
	sched  *cron.Schedule
	loc    *time.Location
	jitter float64
}

func (c *cronCalendar) isOccurrence(t time.Time) bool {
	return c.sched.Next(t.Add(-time.Nanosecond), c.loc).Equal(t)
}

// latest is the latest occurrence at or before t (zero if none within
// about 20 years): found by looking back twice as far each time, then
// walking forward.
func (c *cronCalendar) latest(t time.Time) time.Time {
	for back := time.Second; back < 20*8784*time.Hour; back *= 2 {
		o := c.sched.Next(t.Add(-back), c.loc)
		if o.IsZero() || o.After(t) {
			continue
		}
		for {
			n := c.sched.Next(o, c.loc)
			if n.IsZero() || n.After(t) {
				return o
			}
			o = n
		}
	}
	return time.Time{}
}

// latestDelay is the most jitter delays the occurrence o: jitter × the
// gap to the occurrence after it.
func (c *cronCalendar) latestDelay(o time.Time) time.Duration {
	n := c.sched.Next(o, c.loc)
	if n.IsZero() {
		return 0
	}
	return time.Duration(float64(n.Sub(o)) * c.jitter)
}

// occurrence is the occurrence of the slot t: the latest one at or before
// it when t is at most its latestDelay after it, else t.
func (c *cronCalendar) occurrence(t time.Time) time.Time {
	if o := c.latest(t); !o.IsZero() && t.Sub(o) <= c.latestDelay(o) {
		return o
	}
	return t
}

// wallAt is the wall-clock time of t in the zone, read as UTC; at the
// instant the clocks sprang forward, the wall times the change skipped
// that the expression names, and its own if it names it too, read as the
// latest of them (first: the slot measured from) or the earliest.
func (c *cronCalendar) wallAt(t time.Time, first bool) time.Time {
	l := t.In(c.loc)
	wall := time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
	_, before := t.Add(-time.Nanosecond).In(c.loc).Zone()
	_, after := l.Zone()
	shift := time.Duration(after-before) * time.Second
	if shift <= 0 {
		return wall
	}
	utc := cronCalendar{sched: c.sched, loc: time.UTC}
	var named []time.Time // the wall times t stands for
	for w := utc.latest(wall); !w.IsZero() && wall.Sub(w) <= shift; w = utc.latest(w.Add(-time.Second)) {
		named = append(named, w)
	}
	if len(named) == 0 {
		return wall
	}
	if first {
		return named[0]
	}
	return named[len(named)-1]
}

// wallGap is the gap from the occurrence of ref to that of t on the wall
// clock.
func (c *cronCalendar) wallGap(ref, t time.Time) time.Duration {
	return c.wallAt(c.occurrence(t), false).Sub(c.wallAt(c.occurrence(ref), true))
}

// admitsMinAt reports whether a lower bound lo (bounds.min, the budget's
// spacing) admits the run t after ref: their occurrences are at least lo
// apart on the wall clock.
func (c *cronCalendar) admitsMinAt(ref, t time.Time, lo time.Duration) bool {
	return c.wallGap(ref, t) >= lo
}

// admitsMax reports whether bounds.max hi admits the run t after ref:
// their occurrences are at most hi apart on the wall clock, and t is at
// most jitter × hi after its occurrence (hi plus the hour the clocks fall
// back before the occurrence after it).
func (c *cronCalendar) admitsMax(ref, t time.Time, hi time.Duration) bool {
	o := c.occurrence(t)
	span := hi
	if n := c.sched.Next(o, c.loc); !n.IsZero() {
		span += max(n.Sub(o)-c.wallAt(n, false).Sub(c.wallAt(o, true)), 0)
	}
	return c.wallGap(ref, t) <= hi && t.Sub(o) <= time.Duration(float64(span)*c.jitter)
}

// frees reports whether the budget's exhaustion rule admits the run t
// before free: on the wall clock, the latest slot jitter may draw for its
// occurrence (at most jitter × 24h after it), or for the occurrence
// before it when that is at most a day earlier on the wall clock, is at
// least a day after free − 24h.
func (c *cronCalendar) frees(t, free time.Time) bool {
	o := c.occurrence(t)
	delay := min(c.latestDelay(o), time.Duration(float64(24*time.Hour)*c.jitter))
	if prev := c.latest(o.Add(-time.Second)); !prev.IsZero() && c.wallAt(o, false).Sub(c.wallAt(prev, true)) <= 24*time.Hour {
		delay = max(delay, c.wallAt(prev.Add(c.latestDelay(prev)), true).Sub(c.wallAt(prev, true)))
	}
	return !c.wallAt(o, false).Add(delay).Before(c.wallAt(free.Add(-24*time.Hour), true).Add(24 * time.Hour))
}
