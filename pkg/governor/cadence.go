package governor

import (
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
)

// cadenceStep is the interval of an interval task before backoff and
// jitter: the baseline, replaced by the adaptive interval, stretched by the
// activity multiplier, or replaced by an interval hint (which wins over
// both).
func (p *planner) cadenceStep() (time.Duration, Source) {
	if h := p.s.IntervalHint; h != nil {
		if p.spec.Adaptive != nil || p.spec.Activity != nil {
			p.tr.str("interval hint ").dur(h.Interval).str(" replaces the adaptive cadence").end()
		}
		return h.Interval, SourceHintInterval
	}
	return p.specStep()
}

// specStep is the task's own interval, without an interval hint: the
// baseline, replaced by the adaptive interval and stretched by the
// activity multiplier.
func (p *planner) specStep() (time.Duration, Source) {
	base := p.spec.Schedule.Interval.D()
	step, src := base, SourceBaselineInterval
	if base <= 0 {
		return step, src
	}
	if a := p.spec.Adaptive; a != nil && p.s.AdaptiveInterval > 0 {
		lo, hi := AdaptiveRange(p.spec)
		step = clampDur(p.s.AdaptiveInterval, lo, hi)
		switch {
		case step < base:
			src = SourceAdaptiveTighten
		case step > base:
			src = SourceAdaptiveRelax
		}
		if step != base {
			p.tr.linef("adaptive (%s): interval %s instead of the baseline %s (range %s to %s)",
				modeName(a), step, base, lo, hi)
		}
	}
	if act := p.spec.Activity; act != nil {
		if mult, asrc, idle := p.activity(act); asrc != "" {
			stretched := scale(step, mult).Truncate(time.Millisecond)
			p.tr.linef("activity: no activity for %s (since %s): %s, interval ×%g = %s",
				idle.Truncate(time.Second), stamp(p.lastActivity()), asrc, mult, stretched)
			if capped := max(step, events.MaxInterval); stretched > capped {
				// A multiplier of up to 1000 on an interval of up to a
				// year saturated near 292 years: a slot after 2262,
				// which the timer cannot queue. The stretch stops at
				// MaxInterval (the baseline and AdaptiveRange are
				// within it; a longer step, from a spec written by
				// hand, is left as it is).
				p.tr.str("activity: stretched interval capped at ").dur(capped).end()
				stretched = capped
			}
			step, src = stretched, asrc
		}
	}
	return step, src
}

// lastActivity is the last activity signal, or the creation time.
func (p *planner) lastActivity() time.Time {
	if !p.s.LastActivityAt.IsZero() {
		return p.s.LastActivityAt
	}
	return p.s.CreatedAt
}

// activity returns the multiplier of the current activity mode, with its
// source ("" while active).
func (p *planner) activity(act *events.Activity) (float64, Source, time.Duration) {
	ref := p.lastActivity()
	if ref.IsZero() {
		return 1, "", 0
	}
	idle := p.now.Sub(ref)
	idleAfter, dormantAfter := act.IdleAfter.D(), act.DormantAfter.D()
	if idleAfter <= 0 {
		idleAfter = time.Hour
	}
	if dormantAfter <= 0 {
		dormantAfter = max(24*time.Hour, idleAfter)
	}
	idleMult, dormantMult := act.IdleMultiplier, act.DormantMultiplier
	if idleMult == 0 {
		idleMult = 2
	}
	if dormantMult == 0 {
		dormantMult = 6
	}
	// Dormant applies its multiplier whatever it is, 1 included: a
	// dormantMultiplier of 1 means "dormant runs at the baseline", not
	// "fall back to the idle multiplier".
	switch {
	case idle >= dormantAfter:
		return dormantMult, SourceActivityDormant, idle
	case idle >= idleAfter && idleMult > 1:
		return idleMult, SourceActivityIdle, idle
	}
	return 1, "", idle
}

// stretch applies failure backoff (2^exp) and jitter to an interval.
func (p *planner) stretch(step time.Duration, exp int, note bool) time.Duration {
	if exp > 0 {
		// Saturate: interval hints are not bounded, and a wrapped (zero or
		// negative) step would panic or schedule in the past.
		if step > math.MaxInt64>>exp {
			step = math.MaxInt64
		} else {
			step <<= exp
		}
		if note {
			p.tr.num(int64(p.s.Failures)).str(" consecutive failures: interval ×").num(1 << exp).str(" = ").dur(step).end()
		}
	}
	if j := p.spec.Jitter; j > 0 {
		u := jitterUnit(p.spec.ID, p.s.Runs)
		f := float64(j * float64(2*u-1))
		step = addSat(step, scale(step, f).Truncate(time.Millisecond))
		if note {
			p.tr.linef("jitter %+.1f%% (run %d): interval %s", 100*f, p.s.Runs, step)
		}
	}
	return step
}

// FingerprintMargin is added to a spec update's time (FingerprintFrom)
// before a run's start is compared with it: the executor reads the spec
// through a view that follows flyball-tasks a little behind, on its own
// clock. A run started within it of the update counts for nothing, which
// costs change detection one run at most.
const FingerprintMargin = time.Second

// observe feeds one run's outcome to change detection and the adaptive
// cadence. Only outcomes update the EMA: re-deciding (a hint, a breaker
// signal) never moves it.
func (p *planner) observe(o *Outcome) {
	s := &p.s
	a := p.spec.Adaptive
	changed, known, oldSpec := false, false, false
	if o.Result == "succeeded" && o.Fingerprint != "" && (a != nil || p.spec.Activity != nil) {
		// The start as the executor reported it (reportedStart), not
		// runStart's: the question is which spec the executor read, on
		// its own clock (FingerprintMargin covers its view's lag).
		// runStart raises a start to its slot, which would count a run
		// reported as started before the update as made under the new
		// spec; and it lowers a start to now, which the budget needs
		// (it stores the start) and which here would drop the
		// fingerprint of a run reported as started after the update
		// when this replica's clock is behind the executor's. The two
		// differ only when clocks disagree or a start is forged.
		started := reportedStart(o)
		oldSpec = !s.FingerprintFrom.IsZero() && started.Before(s.FingerprintFrom.Add(FingerprintMargin))
		if oldSpec {
			p.tr.str("response fingerprint not used: the run started before the spec update of ").at(s.FingerprintFrom).end()
		} else {
			s.FingerprintFrom = time.Time{}
			known = s.LastFingerprint != ""
			changed = known && o.Fingerprint != s.LastFingerprint
			s.LastFingerprint = o.Fingerprint
			if changed {
				s.LastActivityAt = p.now.UTC()
			}
		}
	}
	base := p.spec.Schedule.Interval.D()
	if a == nil || base <= 0 {
		return
	}
	lo, hi := AdaptiveRange(p.spec)
	cur := s.AdaptiveInterval
	if cur <= 0 {
		cur = base
	}
	cur = clampDur(cur, lo, hi)
	var target time.Duration
	var why string
	if a.Mode == events.AdaptiveStaleness {
		goal := a.Target.D()
		if goal <= 0 {
			goal = satMul(base, 3)
		}
		ref := s.LastSuccessAt
		if ref.IsZero() {
			ref = s.CreatedAt
		}
		if ref.IsZero() {
			return
		}
		age := p.now.Sub(ref)
		frac := staleFraction(age, base, goal)
		target = clampDur(base-scale(base-lo, frac), lo, hi)
		why = "last success " + age.Truncate(time.Second).String() + " ago, target " + goal.String()
	} else {
		n := a.UnchangedRuns
		if n <= 0 {
			n = events.DefaultUnchangedRuns
		}
		switch {
		case o.Result == "failed":
			target, why = lo, "run failed"
			s.UnchangedRuns = 0
		case o.Fingerprint == "":
			p.tr.str("adaptive (change): no fingerprint: cadence held").end()
			return
		case oldSpec:
			p.tr.str("adaptive (change): a run under the old spec: cadence held").end()
			return
		case !known:
			p.tr.str("adaptive (change): first fingerprint recorded").end()
			return
		case changed:
			target, why = lo, "response changed"
			s.UnchangedRuns = 0
		default:
			if s.UnchangedRuns < maxFailures {
				s.UnchangedRuns++
			}
			if s.UnchangedRuns < n {
				p.tr.linef("adaptive (change): response unchanged (%d of %d runs): cadence held", s.UnchangedRuns, n)
				return
			}
			target, why = hi, "response unchanged "+strconv.Itoa(s.UnchangedRuns)+" runs in a row"
		}
	}
	alpha := a.Smoothing
	if !(alpha > 0 && alpha <= 1) {
		alpha = events.DefaultSmoothing
	}
	next := ema(cur, target, alpha)
	s.AdaptiveInterval = next
	p.tr.linef("adaptive (%s): %s: interval %s → %s (toward %s, smoothing %g)", modeName(a), why, cur, next, target, alpha)
}

func modeName(a *events.Adaptive) string {
	if a.Mode == "" {
		return events.AdaptiveChange
	}
	return a.Mode
}

// AdaptiveRange is the interval range adaptive cadence moves in:
// bounds.min (or a quarter of the baseline, at least 1s) to bounds.max (or
// four times the baseline), at most events.MaxInterval. lo, less the
// jitter, is also the tightest gap the task's own cadence (a Source whose
// Cadence is true) can take.
//
// The cap holds for a spec stored before validation refused bounds past
// MaxInterval (ValidateStored still loads it): a 1h task with bounds.max
// 2190000h relaxed to a slot in 2276, which the timer cannot queue, and
// never ran again.
func AdaptiveRange(spec *events.TaskSpec) (lo, hi time.Duration) {
	base := spec.Schedule.Interval.D()
	lo, hi = max(base/4, events.MinInterval), satMul(base, 4)
	if b := spec.Bounds; b != nil {
		if b.Min > 0 {
			lo = boundsMin(b)
		}
		if b.Max > 0 {
			hi = boundsMax(b)
		}
	}
	lo, hi = min(lo, events.MaxInterval), min(hi, events.MaxInterval)
	return lo, max(hi, lo)
}

// boundsMin and boundsMax are a spec's bounds.min and bounds.max, capped
// at events.MaxInterval (8784h). A new spec is refused past it, but one
// stored before the cap loads as it is: uncapped, bounds.min raised a
// slot, and bounds.max let the adaptive cadence relax, past 2262, where
// the timer queues nothing, and the task never ran again.
func boundsMin(b *events.Bounds) time.Duration { return min(b.Min.D(), events.MaxInterval) }

func boundsMax(b *events.Bounds) time.Duration { return min(b.Max.D(), events.MaxInterval) }

// AdaptiveRestarts reports whether an update from old to spec changes
// what the adaptive cadence and change detection rest on, so that they
// restart (State.AdaptiveInterval, LastFingerprint, UnchangedRuns):
//
//   - the call, whose response is fingerprinted: the target but its
//     timeout (HTTP method, URL, headers, body, maxResponseBytes,
//     expectStatus; NATS subject and payload; one kind for the other);
//   - schedule.interval, the baseline (a switch to or from cron changes
//     it);
//   - bounds, the range of the adaptive interval;
//   - adaptive, any of its settings, or its presence;
//   - whether fingerprints are kept at all (adaptive or activity set).
//
// Nothing else does: the same spec applied again, or one that changes
// job, labels, jitter, retry, breaker, budget, quiet hours, catch-up,
// the timeouts or activity's thresholds and multipliers (applied at each
// decision from LastActivityAt, nothing stored depends on them).
func AdaptiveRestarts(old, spec *events.TaskSpec) bool {
	keeps := func(s *events.TaskSpec) bool { return s.Adaptive != nil || s.Activity != nil }
	return !sameCall(&old.Target, &spec.Target) ||
		old.Schedule.Interval != spec.Schedule.Interval ||
		!equalPtr(old.Bounds, spec.Bounds) ||
		!equalPtr(old.Adaptive, spec.Adaptive) ||
		keeps(old) != keeps(spec)
}

// sameCall reports whether two targets make the same call, timeouts
// aside: their responses are fingerprinted alike.
func sameCall(a, b *events.Target) bool {
	switch {
	case a.HTTP != nil && b.HTTP != nil:
		x, y := a.HTTP, b.HTTP
		return x.Method == y.Method && x.URL == y.URL && maps.Equal(x.Headers, y.Headers) && x.Body == y.Body &&
			x.MaxResponseBytes == y.MaxResponseBytes && slices.Equal(x.ExpectStatus, y.ExpectStatus)
	case a.NATS != nil && b.NATS != nil:
		return a.NATS.Subject == b.NATS.Subject && a.NATS.Payload == b.NATS.Payload
	}
	return a.HTTP == nil && b.HTTP == nil && a.NATS == nil && b.NATS == nil
}

// equalPtr reports whether a and b are both nil, or point to equal values.
func equalPtr[T comparable](a, b *T) bool {
	return a == b || a != nil && b != nil && *a == *b
}

// staleFraction is 0 while age is within one baseline interval, rising
// linearly to 1 when age reaches the staleness target.
func staleFraction(age, base, goal time.Duration) float64 {
	switch {
	case age <= base:
		return 0
	case goal <= base || age >= goal:
		return 1
	}
	return float64(age-base) / float64(goal-base)
}

// ema moves cur toward target by the fraction alpha, in whole
// milliseconds, never past target. The step saturates: with a huge
// bounds.max, float64(target-cur) rounds up to 2^63, which converted back
// to a Duration wraps negative and (clamped to cur) held the cadence.
//
// A step that rounds to nothing moves to the next whole millisecond
// toward target instead, so the interval reaches target: rounded back to
// cur, it stalled short of it (15.001s for a floor of 15s at the default
// smoothing, 3m59.999s for a ceiling of 4m at a smoothing of 0.3). So does
// a step that rounds behind cur, which happens when cur is off the whole
// millisecond (a staleness target, or a baseline such as 1.000000059s
// that cur starts from): kept between cur and target, it did not move
// either (59.9991s toward a baseline of 1m, for good).
func ema(cur, target time.Duration, alpha float64) time.Duration {
	next := addSat(cur, scale(subSat(target, cur), alpha))
	next = next.Round(time.Millisecond)
	switch {
	case target > cur && next <= cur:
		next = addSat(cur.Truncate(time.Millisecond), time.Millisecond)
	case target < cur && next >= cur:
		if next = cur.Truncate(time.Millisecond); next == cur {
			next = subSat(cur, time.Millisecond)
		}
	}
	lo, hi := min(cur, target), max(cur, target)
	return clampDur(next, lo, hi)
}

// jitterUnit is a number in [0, 1) drawn from the task ID and the run
// number: FNV-1a, then the splitmix64 finalizer.
func jitterUnit(id string, run uint64) float64 {
	h := uint64(14695981039346656037)
	for i := range len(id) {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	h ^= run
	h *= 1099511628211
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return float64(h>>11) * 0x1p-53
}

// scale multiplies d by f, saturating. The explicit float64 conversion
// keeps the product from being fused with other operations, so every
// platform rounds alike.
func scale(d time.Duration, f float64) time.Duration {
	x := float64(float64(d) * f)
	switch {
	case x != x:
		return 0
	case x >= 0x1p63:
		return math.MaxInt64
	case x <= -0x1p63:
		return math.MinInt64
	}
	return time.Duration(x)
}

func satMul(d time.Duration, n int64) time.Duration {
	if d > 0 && d > math.MaxInt64/time.Duration(n) {
		return math.MaxInt64
	}
	return d * time.Duration(n)
}

func addSat(a, b time.Duration) time.Duration {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

// subSat is a - b, saturating.
func subSat(a, b time.Duration) time.Duration {
	if b == math.MinInt64 {
		return addSat(addSat(a, math.MaxInt64), 1)
	}
	return addSat(a, -b)
}

func clampDur(d, lo, hi time.Duration) time.Duration {
	return min(max(d, lo), hi)
}
