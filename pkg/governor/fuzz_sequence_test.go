package governor_test

import (
	"math"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/cron"
	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/pkg/governor"
)

// seqCrons cross DST transitions: New York's repeated 01:00-02:00 and
// missing 02:00-03:00, London's (at 01:00), Lord Howe's half hour
// (02:00-02:30 missing, 01:30-02:00 repeated), Berlin's, São Paulo's
// missing midnight (until 2019), and an every-20-seconds expression
// through a whole repeated hour.
var seqCrons = []struct{ expr, tz string }{
	{"30 1 * * *", "America/New_York"},
	{"*/15 * * * *", "America/New_York"},
	{"30 1 * * *", "Europe/London"},
	{"*/30 1-2 * * *", "Australia/Lord_Howe"},
	{"45 1 * * *", "Australia/Lord_Howe"},
	{"*/10 * * * *", "Australia/Lord_Howe"},
	{"@hourly", "Europe/Berlin"},
	{"0 30 2 * * *", "Europe/Berlin"},
	{"*/20 * * * * *", "America/New_York"},
	{"0 0 * * *", "America/Sao_Paulo"},
	{"0 9 * * MON-FRI", "Europe/London"},
	{"* 1 * * *", "Europe/London"},
}

// FuzzDecideSequence drives one task through a sequence of decisions, as
// the services do: each planned slot runs and its outcome is decided when
// the run ends; between runs come downtimes (the outcome applied late, the
// run started late after a restart or its start unknown), breaker
// transitions and spec updates. It checks what one decision cannot show:
//   - every decision plans exactly what the documented rules give (an
//     oracle written from docs/governor.md): the cadence in force (the
//     adaptive interval within its range, or the baseline, × failure
//     backoff) or the next cron occurrence after the last slot; after a
//     downtime of two or more missed slots, catchUp skip runs once now,
//     none waits for the next slot, all backfills at most catchUpMax one
//     by one (each after the success of the one before), and slots that
//     passed while the run ran, or after a late run under skip, are not
//     caught up; then bounds (a cron occurrence judged on the wall clock,
//     cronCalendar) and the 1 s floor;
//   - re-deciding (a breaker transition) moves nothing, a spec update only
//     restarts the adaptive interval;
//   - slots run strictly one after the other, never the same twice, and a
//     cron occurrence reads a later wall-clock time than any slot or
//     decision before it: no wall time runs twice across a fall-back hour;
//   - the adaptive interval stays in its documented range at every step
//     (checkAdaptiveStep), and a response that keeps changing takes it to
//     the floor, one that keeps repeating to the ceiling (a staleness task
//     that keeps succeeding to the baseline), within the number of runs
//     the smoothing implies.
//
// sched chooses an interval task (even) or a seqCrons entry (odd);
// interval sizes the baseline; feat switches on adaptive cadence, bounds
// and the catch-up policy; start and lead pick a DST transition (2018 to
// 2029) and how long before it the task is accepted; each byte of ops is
// one step.
func FuzzDecideSequence(f *testing.F) {
	const (
		adaptive  = 1
		staleness = 1 << 1
		smooth1   = 0xF << 5 // smoothing 1
		minSet    = 1 << 13
		maxSet    = 1 << 17
		wholeSec  = 1 << 20
		shortBase = 1 << 21
		skip      = 1 << 22
		none      = 2 << 22
		all       = 3 << 22
	)
	day := func(year, d int) int64 { return int64(year-2018) + 12*int64(d) }
	hour := int64(time.Hour / time.Millisecond)
	// Interval tasks: adaptive change (smoothing 1, the default, 1/15)
	// with on-time runs, changes, repeats, failures, skips, a breaker
	// transition and a spec update; staleness; bounds; downtimes under
	// each catch-up policy.
	runs := []byte{0, 8, 9, 0, 0, 0, 0, 3, 3, 1, 0, 0, 5, 6, 0, 0, 0, 7, 0}
	f.Add(uint8(0), int64(59), uint64(wholeSec|shortBase|adaptive|smooth1|1<<2), int64(0), int64(0), runs)
	f.Add(uint8(0), int64(59), uint64(wholeSec|shortBase|adaptive), int64(0), int64(0), runs)
	f.Add(uint8(0), int64(299), uint64(wholeSec|shortBase|adaptive|1<<5|minSet|maxSet|4<<18), int64(0), int64(0), runs)
	f.Add(uint8(0), int64(1_234_567_891), uint64(adaptive|staleness|1<<9|3<<10), int64(0), int64(0), append(runs, 3, 3, 3, 3, 4+8*6, 0))
	for _, policy := range []uint64{0, skip, none, all, all | 2<<24} {
		f.Add(uint8(0), int64(9), uint64(wholeSec|shortBase|policy), int64(0), int64(0), []byte{0, 4 + 8*7, 0, 0, 0, 4 + 8*(16+7), 0, 0, 0, 4 + 8*13, 0, 0, 0, 0})
	}
	// Cron tasks accepted before a transition, run on time across it,
	// and downtimes across it, under each catch-up policy.
	onTime := []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	for i, c := range []struct {
		year, day int
		lead      int64
	}{
		{2026, 300, 2 * hour}, // New York, 2026-11-01 (repeated 01:00-02:00)
		{2026, 300, 3 * hour},
		{2026, 290, 2 * hour},    // London, 2026-10-25
		{2026, 90, 2 * hour},     // Lord Howe, 2026-04-05 (repeated 01:30-02:00)
		{2026, 270, 3 * hour},    // Lord Howe, 2026-10-04 (02:00-02:30 missing)
		{2026, 270, hour},        // Lord Howe, every 10 minutes
		{2026, 290, 3 * hour},    // Berlin, 2026-10-25
		{2026, 60, 2 * hour},     // Berlin, 2026-03-29
		{2026, 300, 90 * 60_000}, // New York every 20 s through the repeated hour
		{2018, 300, 2 * hour},    // São Paulo, 2018-11-04 (no midnight)
		{2026, 80, 24 * hour},    // London, 2026-03-29
		{2026, 290, 15 * 60_000}, // London, every minute of a repeated 01:00
	} {
		sched := uint8(2*i + 1)
		f.Add(sched, int64(0), uint64(0), day(c.year, c.day), c.lead, onTime)
		for _, policy := range []uint64{skip, none, all} {
			f.Add(sched, int64(0), policy, day(c.year, c.day), c.lead, []byte{0, 4 + 8*5, 0, 0, 4 + 8*(16+3), 0, 5 + 8*16, 6 + 8*8, 0, 0})
		}
	}

	scheds := make([]*cron.Schedule, len(seqCrons))
	locs := make([]*time.Location, len(seqCrons))
	for i, c := range seqCrons {
		var err error
		if scheds[i], err = cron.Parse(c.expr); err != nil {
			f.Fatal(err)
		}
		if locs[i], err = time.LoadLocation(c.tz); err != nil {
			f.Fatal(err)
		}
	}
	newYork, err := time.LoadLocation("America/New_York")
	if err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, sched uint8, interval int64, feat uint64, start, lead int64, ops []byte) {
		if len(ops) > 256 {
			ops = ops[:256]
		}
		bits := func(i, n uint) int64 { return int64(feat >> i & (1<<n - 1)) }
		spec := &events.TaskSpec{ID: "t", Target: events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/"}}}
		var sch *cron.Schedule
		var loc *time.Location
		if sched%2 == 1 {
			i := int(sched/2) % len(seqCrons)
			spec.Schedule.Cron, spec.Schedule.Timezone = seqCrons[i].expr, seqCrons[i].tz
			sch, loc = scheds[i], locs[i]
		} else {
			switch {
			case feat&wholeSec != 0 && feat&shortBase != 0:
				spec.Schedule.Interval = events.Duration(time.Duration(1+mod(interval, 3600)) * time.Second)
			case feat&wholeSec != 0:
				spec.Schedule.Interval = events.Duration(time.Duration(1+mod(interval, 48*3600)) * time.Second)
			default:
				spec.Schedule.Interval = events.Duration(time.Second + time.Duration(mod(interval, int64(48*time.Hour))))
			}
			if feat&adaptive != 0 {
				spec.Adaptive = &events.Adaptive{
					Mode:          []string{events.AdaptiveChange, events.AdaptiveStaleness}[bits(1, 1)],
					UnchangedRuns: int(bits(2, 3)), Smoothing: float64(bits(5, 4)) / 15,
				}
				if feat&(1<<9) != 0 {
					spec.Adaptive.Target = events.Duration(spec.Schedule.Interval.D() * time.Duration(1+bits(10, 3)))
				}
			}
		}
		if base := spec.Schedule.Interval.D(); base > 0 {
			var lo, hi time.Duration
			if feat&minSet != 0 {
				lo = max(time.Second, base>>bits(14, 3))
			}
			if feat&maxSet != 0 {
				hi = min(max(time.Second, []time.Duration{base / 8, base / 2, base, 2 * base, 4 * base, 8 * base, 16 * base, 64 * base}[bits(18, 3)]), events.MaxInterval)
			}
			if lo != 0 && hi != 0 && hi < lo {
				lo, hi = hi, lo
			}
			if lo == 0 && hi != 0 && hi < max(base/4, time.Second) {
				hi = 0 // no documented adaptive range (hi < lo): left out, reported
			}
			if lo != 0 || hi != 0 {
				spec.Bounds = &events.Bounds{Min: events.Duration(lo), Max: events.Duration(hi)}
			}
		} else if feat&minSet != 0 {
			spec.Bounds = &events.Bounds{Min: events.Duration(time.Duration(1+bits(14, 3)) * 7 * time.Minute)}
		}
		spec.CatchUp = []string{"", events.CatchUpSkip, events.CatchUpNone, events.CatchUpAll}[bits(22, 2)]
		spec.CatchUpMax = int(bits(24, 4))
		if err := spec.Validate(); err != nil {
			t.Fatalf("generated an invalid spec: %v", err)
		}
		spec.Normalize()

		// Accepted some time before a DST transition of the cron's zone
		// (of New York for an interval task, which DST does not touch).
		zone := loc
		if zone == nil {
			zone = newYork
		}
		t0 := time.Date(2018+int(mod(start, 12)), 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, int(mod(start/12, 366)))
		tr := t0
		if _, end := t0.In(zone).ZoneBounds(); !end.IsZero() {
			tr = end
		}
		now := tr.Add(-time.Duration(mod(lead, 36*hour)) * time.Millisecond)
		sq := &sequence{t: t, spec: spec, sched: sch, loc: loc, now: now}
		sq.decide(governor.Input{Kind: governor.KindAccepted})
		if sch != nil {
			sq.expect("the first run", sch.Next(now, loc), "")
		} else {
			sq.expect("the first run", now, "")
		}
		for _, b := range ops {
			sq.step(b)
		}
		sq.converge()
	})
}

// sequence is FuzzDecideSequence's task: its spec, state and clock, the
// slots that ran and the latest wall-clock reading seen.
type sequence struct {
	t     *testing.T
	spec  *events.TaskSpec
	sched *cron.Schedule
	loc   *time.Location
	now   time.Time
	st    governor.State
	d     governor.Decision
	// ran is the slot of every run whose outcome was applied, in order.
	ran []time.Time
	// wall is the latest wall-clock reading (cron zone, naive seconds) of
	// a slot that ran or a decision's time.
	wall int64
	fp   int // fingerprints handed out
	log  []string
}

func (q *sequence) fatalf(format string, args ...any) {
	q.t.Helper()
	msg := "steps:\n"
	for _, l := range q.log {
		msg += "  " + l + "\n"
	}
	q.t.Fatalf("%s\n"+format+"\ntrail:\n%s", append([]any{msg}, append(args, fmtTrail(q.d.Trail))...)...)
}

// decide applies in at q.now and checks what holds after any input.
func (q *sequence) decide(in governor.Input) {
	q.t.Helper()
	st := q.st
	d := governor.Decide(q.now, q.spec, st, in)
	q.d = d
	what := string(in.Kind)
	if o := in.Outcome; o != nil {
		what += " " + o.Result + " " + fmtT(o.ScheduledAt) + " fp " + o.Fingerprint
		if !o.StartedAt.IsZero() {
			what += " started " + fmtT(o.StartedAt)
		}
	}
	q.log = append(q.log, fmtT(q.now)+" "+what+" → "+fmtT(d.NextRunAt)+" "+string(d.Source))
	if d.Ignored {
		q.fatalf("a %s input was ignored", in.Kind)
	}
	checkAdaptiveStep(q.t, q.spec, q.now, st, d.State, in)
	if iv := d.State.AdaptiveInterval; iv != 0 {
		if lo, hi := adaptiveRange(q.spec); iv < lo || iv > hi {
			q.fatalf("adaptive interval %s outside [%s, %s]", iv, lo, hi)
		}
	}
	if d.NextRunAt.IsZero() || d.NextRunAt.Before(q.now) {
		q.fatalf("next run %s at %s", fmtT(d.NextRunAt), fmtT(q.now))
	}
	// Every input here comes between runs (a breaker transition or a
	// spec update with the slot still ahead) or is the outcome of the
	// planned slot: none plans past a slot in flight, so no running slot
	// is remembered.
	if !d.State.RunningSlot.IsZero() {
		q.fatalf("running slot %s remembered after a %s input", fmtT(d.State.RunningSlot), in.Kind)
	}
	if n := len(q.ran); n > 0 && d.NextRunAt.Before(q.ran[n-1].Add(governor.MinGap)) {
		q.fatalf("next run %s less than %s after the slot %s that ran", fmtT(d.NextRunAt), governor.MinGap, fmtT(q.ran[n-1]))
	}
	if q.sched != nil {
		q.wall = max(q.wall, wallOf(q.now, q.loc))
		if d.Source == governor.SourceBaselineCron && wallOf(d.NextRunAt, q.loc) <= q.wall {
			q.fatalf("cron slot %s reads %s on the wall clock, a time it read already (latest %s): a wall time twice",
				fmtT(d.NextRunAt), d.NextRunAt.In(q.loc).Format(time.DateTime), time.Unix(q.wall, 0).UTC().Format(time.DateTime))
		}
	}
	q.st = d.State
}

// expect checks the decision against the oracle's slot want (and source,
// if not empty).
func (q *sequence) expect(what string, want time.Time, src governor.Source) {
	q.t.Helper()
	if !q.d.NextRunAt.Equal(want) || (src != "" && q.d.Source != src) {
		q.fatalf("%s: next run %s (%s), want %s %s", what, fmtT(q.d.NextRunAt), q.d.Source, fmtT(want), src)
	}
}

// step runs one op: the low 3 bits choose it, the rest is its argument.
func (q *sequence) step(b byte) {
	q.t.Helper()
	op, arg := b&7, int64(b>>3)
	next := q.st.NextRunAt
	switch op {
	case 0, 1, 2, 3, 7: // the planned slot runs on time
		result := "succeeded"
		switch op {
		case 3:
			result = "failed"
		case 7:
			result = "skipped"
		}
		started := next.Add(time.Duration(arg&3) * 10 * time.Millisecond)
		q.run(next, started, started.Add(time.Duration(arg>>2)*100*time.Millisecond), result, q.fingerprint(arg&3))
	case 4: // down for up to 7.5 slots: the slot's outcome comes late
		gap := q.spec.Schedule.Interval.D() // the cadence's step
		if q.st.GridStep > 0 {
			gap = q.st.GridStep
		}
		if q.sched != nil {
			gap = q.sched.Next(next, q.loc).Sub(next)
		}
		end := next.Add(time.Second + time.Duration(arg&15)*(gap/2))
		started := end.Add(-200 * time.Millisecond) // fired late after a restart
		if arg&16 == 0 {
			started = time.Time{} // its span unknown, as after a downtime
		}
		q.run(next, started, end, "succeeded", q.fingerprint(3))
	case 5, 6: // a breaker transition, or a spec update, between runs
		ahead := next.Sub(q.now) - governor.InFlightWindow
		if ahead <= time.Millisecond {
			return // the slot is in flight: FuzzDecide covers that
		}
		q.now = q.now.Add((ahead - time.Millisecond) * time.Duration(arg) / 32)
		before := q.st
		what := "a breaker transition"
		if op == 5 {
			q.decide(governor.Input{Kind: governor.KindBreaker, Breaker: &governor.BreakerSignal{State: "closed"}})
		} else {
			what = "a spec update"
			q.decide(governor.Input{Kind: governor.KindUpdated})
		}
		want := q.now // a backlog goes on: its next run now
		cal := false
		if q.st.CatchUpPending == 0 || q.st.Failures > 0 {
			want, _, cal = q.cadence(q.st.LastScheduledAt, time.Time{}, q.now, false)
		}
		q.expect(what, q.bound(q.st.LastScheduledAt, want, cal), "")
		// Re-deciding moves nothing (a spec update restarts the adaptive
		// interval, which may), a slot bounds.min raised included: its
		// cadence slot may have passed, but the raised one is ahead.
		if op == 5 || q.sched != nil || q.spec.Adaptive == nil {
			q.expect(what+" moves nothing", before.NextRunAt, before.Source)
		}
	}
}

// fingerprint is the response of a run: kind 0 and 3 repeat the last one
// recorded (or give a first), 1 changes it, 2 has none.
func (q *sequence) fingerprint(kind int64) string {
	switch {
	case kind == 2:
		return ""
	case kind == 1 || q.st.LastFingerprint == "":
		q.fp++
		return "r" + string(rune('a'+q.fp%26)) + time.Duration(q.fp).String()
	}
	return q.st.LastFingerprint
}

// run applies the outcome of slot, started at started (zero: unknown)
// and finished at end, and checks the decision against the oracle.
func (q *sequence) run(slot, started, end time.Time, result, fp string) {
	q.t.Helper()
	if n := len(q.ran); n > 0 && !slot.After(q.ran[n-1]) {
		q.fatalf("slot %s runs after %s", fmtT(slot), fmtT(q.ran[n-1]))
	}
	if q.sched != nil {
		q.wall = max(q.wall, wallOf(slot, q.loc))
	}
	q.ran = append(q.ran, slot)
	q.now = end
	before := q.st
	o := &governor.Outcome{
		DispatchID: events.DispatchID("t", slot), ScheduledAt: slot, Result: result,
		StartedAt: started, FinishedAt: end, Fingerprint: fp, TaskCreatedAt: before.CreatedAt,
	}
	if result == "skipped" {
		o.StartedAt, o.Fingerprint = time.Time{}, ""
		started = time.Time{}
	}
	q.decide(governor.Input{Kind: governor.KindOutcome, Outcome: o})
	s := q.st

	failures := 0
	switch result {
	case "failed":
		failures = before.Failures + 1
	case "skipped":
		failures = before.Failures
	}
	if s.Failures != failures {
		q.fatalf("failures %d after a %s run, want %d", s.Failures, result, failures)
	}
	pending := 0
	if q.spec.CatchUp == events.CatchUpAll {
		pending = before.CatchUpPending
		if result == "succeeded" && pending > 0 {
			pending--
		}
	}
	if pending > 0 && failures == 0 {
		// The backlog goes on: the next backfill run now, 1 s after
		// this one started.
		want := q.now
		if !started.IsZero() && started.Add(time.Second).After(want) {
			want = started.Add(time.Second)
		}
		q.expect("the next backfill run", q.bound(slot, want, false), "")
		if s.CatchUpPending != pending {
			q.fatalf("%d backfill runs pending, want %d", s.CatchUpPending, pending)
		}
		return
	}
	want, caught, cal := q.cadence(slot, started, q.now, true)
	if caught > 0 {
		pending = caught
	}
	if s.CatchUpPending != pending {
		q.fatalf("%d backfill runs pending, want %d", s.CatchUpPending, pending)
	}
	q.expect("after the run of "+fmtT(slot), q.bound(slot, want, cal), "")
}

// cadence is the oracle of the slot after last, decided at now: the
// next slot of the cadence in force (the interval grid from last, or the
// next cron occurrence) or, after a downtime, the catch-up policy's
// choice. outcome is set when the decision applies the outcome of the
// run of last, started when it started (zero: unknown); other inputs
// catch nothing up, the run planned before being still ahead. caught is
// the backlog catchUp all sets.
func (q *sequence) cadence(last, started, now time.Time, outcome bool) (want time.Time, caught int, cal bool) {
	q.t.Helper()
	s, spec := q.st, q.spec
	if last.IsZero() { // no run yet: the first one
		if q.sched != nil {
			return q.sched.Next(now, q.loc), 0, true
		}
		return now, 0, false
	}
	var missed int64 // slots in (last, now]
	var between func(from, to time.Time) int64
	var after func() time.Time // the next slot after now
	if q.sched != nil {
		first := q.sched.Next(last, q.loc)
		if first.After(now) || q.heldByMin(last, first, now) {
			return first, 0, true
		}
		if second := q.sched.Next(first, q.loc); second.After(now) {
			return second, 0, true
		}
		between = func(from, to time.Time) int64 {
			n := int64(0)
			for x := q.sched.Next(from, q.loc); !x.After(to); x = q.sched.Next(x, q.loc) {
				if n++; n > 1<<16 {
					q.fatalf("more than %d occurrences from %s to %s", n, fmtT(from), fmtT(to))
				}
			}
			return n
		}
		after = func() time.Time { return q.sched.Next(now, q.loc) }
	} else {
		step := spec.Schedule.Interval.D()
		if spec.Adaptive != nil && s.AdaptiveInterval > 0 {
			lo, hi := adaptiveRange(spec)
			step = min(max(s.AdaptiveInterval, lo), hi)
		}
		full := step << min(s.Failures, 5)
		if q.heldByMin(last, last.Add(full), now) {
			return last.Add(full), 0, false
		}
		k := int64(now.Sub(last) / full)
		if k < 2 {
			return last.Add(time.Duration(k+1) * full), 0, false
		}
		between = func(from, to time.Time) int64 { return int64(to.Sub(last)/full) - int64(from.Sub(last)/full) }
		after = func() time.Time { return last.Add(time.Duration(k+1) * full) }
	}
	missed = between(last, now)
	late := false // a late run under skip: the run skip asks for
	if !started.IsZero() {
		missed -= between(started, now) // passed while it ran: not missed
		late = spec.CatchUp == "" || spec.CatchUp == events.CatchUpSkip
	}
	if missed < 2 || s.Failures > 0 || late || spec.CatchUp == events.CatchUpNone || !outcome {
		return after(), 0, q.sched != nil
	}
	want = now
	if !started.IsZero() && started.Add(time.Second).After(now) {
		want = started.Add(time.Second)
	}
	if spec.CatchUp != events.CatchUpAll {
		return want, 0, false
	}
	limit := spec.CatchUpMax
	if limit <= 0 {
		limit = events.DefaultCatchUpMax
	}
	return want, int(min(missed, int64(limit))), false
}

// heldByMin reports whether first, the cadence's first slot after last,
// is still the next run at now although it has passed: bounds.min raises
// it to a time still ahead (a cron occurrence bounds.min admits on the
// wall clock, cronCalendar, is not raised).
func (q *sequence) heldByMin(last, first, now time.Time) bool {
	b := q.spec.Bounds
	if q.sched != nil && b != nil && q.calendar().admitsMinAt(last, first, b.Min.D()) {
		return false
	}
	return b != nil && b.Min > 0 && first.Before(last.Add(b.Min.D())) && last.Add(b.Min.D()).After(now)
}

// bound applies bounds to a slot after last (from the second run on),
// then the floors: not before now, and at least MinGap after last. A cron
// occurrence (cal) is judged by its gap after last on the wall clock
// (cronCalendar).
func (q *sequence) bound(last, t time.Time, cal bool) time.Time {
	if last.IsZero() {
		return maxTime(t, q.now).UTC()
	}
	if b := q.spec.Bounds; b != nil {
		gap := t.Sub(last)
		switch {
		case b.Min > 0 && gap < b.Min.D() && (!cal || !q.calendar().admitsMinAt(last, t, b.Min.D())):
			t = last.Add(b.Min.D())
		case b.Max > 0 && gap > b.Max.D() && (!cal || !q.calendar().admitsMax(last, t, b.Max.D())):
			t = last.Add(b.Max.D())
		}
	}
	if t.Before(q.now) {
		t = q.now
	}
	if t.Before(last.Add(governor.MinGap)) {
		t = last.Add(governor.MinGap)
	}
	return t.UTC()
}

// calendar is the cron calendar oracle of the sequence's cron task (no
// jitter).
func (q *sequence) calendar() *cronCalendar {
	return &cronCalendar{sched: q.sched, loc: q.loc}
}

// converge runs an adaptive interval task's slots on time with a response
// that changes every time, then with one that repeats (a staleness task:
// successes), and checks that the adaptive interval reaches the end of
// its range it moves toward within the runs the smoothing implies.
func (q *sequence) converge() {
	q.t.Helper()
	a := q.spec.Adaptive
	if a == nil || q.sched != nil {
		return
	}
	lo, hi := adaptiveRange(q.spec)
	alpha := a.Smoothing
	if alpha <= 0 {
		alpha = events.DefaultSmoothing
	}
	// The distance to the target shrinks by 1 − alpha a step, give or
	// take the half millisecond it is rounded to, then by at least 1 ms a
	// step: k steps take it within 0.5ms/alpha, 1/alpha + 1 more to it.
	steps := 4 + int(math.Ceil(1/alpha))
	if alpha < 1 {
		steps += int(math.Ceil(math.Log(max(2*alpha*float64(hi-lo)/float64(time.Millisecond), 2)) / -math.Log(1-alpha)))
	}
	end := func(what string, want time.Duration, fp int64) {
		q.t.Helper()
		for range steps {
			next := q.st.NextRunAt
			q.run(next, next.Add(10*time.Millisecond), next.Add(20*time.Millisecond), "succeeded", q.fingerprint(fp))
		}
		if got := q.st.AdaptiveInterval; got != want {
			q.fatalf("adaptive interval %s after %d runs %s, want %s (range [%s, %s], smoothing %g)", got, steps, what, want, lo, hi, alpha)
		}
	}
	if a.Mode == events.AdaptiveStaleness {
		end("that succeeded", min(max(q.spec.Schedule.Interval.D(), lo), hi), 2)
		return
	}
	n := a.UnchangedRuns
	if n <= 0 {
		n = events.DefaultUnchangedRuns
	}
	if q.st.LastFingerprint == "" { // a first fingerprint only records
		next := q.st.NextRunAt
		q.run(next, next.Add(10*time.Millisecond), next.Add(20*time.Millisecond), "succeeded", q.fingerprint(1))
	}
	end("whose response changed", lo, 1)
	steps += n + 1
	end("whose response repeated", hi, 0)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// wallOf is the wall-clock reading of t in loc, as naive Unix seconds.
func wallOf(t time.Time, loc *time.Location) int64 {
	_, off := t.In(loc).Zone()
	return t.Unix() + int64(off)
}
