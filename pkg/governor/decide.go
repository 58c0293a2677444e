package governor

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/flyballhq/flyball/pkg/cron"
	"github.com/flyballhq/flyball/pkg/events"
)

// Decision is the result of applying one input to a task.
type Decision struct {
	// NextRunAt is when the task runs next; zero means not scheduled.
	NextRunAt time.Time
	// Source names the rule that chose NextRunAt.
	Source Source
	// Trail lists, in order, the rules considered and what they did.
	Trail []string
	// State is the task's state after the input, with NextRunAt, Source and
	// Trail filled in. It is what the governor service stores.
	State State
	// Ignored is set when the input changed nothing, such as a redelivered
	// outcome that was already applied. State is then the input state.
	Ignored bool
}

// maxBackoffExponent caps failure backoff at interval × 2^5.
const maxBackoffExponent = 5

// Decide applies in to st and decides when the task runs next. It is pure:
// the same arguments always give the same Decision.
func Decide(now time.Time, spec *events.TaskSpec, st State, in Input) Decision {
	s := st
	s.Trail = nil
	switch in.Kind {
	case KindAccepted:
		s = State{TaskID: spec.ID}
	case KindUpdated:
		s.TaskID = spec.ID
	case KindOutcome:
		o := in.Outcome
		if o == nil || (o.DispatchID != "" && o.DispatchID == st.LastDispatchID) {
			return Decision{NextRunAt: st.NextRunAt, Source: st.Source, Trail: st.Trail, State: st, Ignored: true}
		}
		applyOutcome(&s, o)
	case KindPaused:
		s.Paused = true
		s.PausedUntil, s.PauseReason = time.Time{}, ""
		if in.Pause != nil {
			s.PausedUntil, s.PauseReason = in.Pause.Until.UTC(), in.Pause.Reason
		}
	case KindResumed:
		s.Paused, s.PausedUntil, s.PauseReason = false, time.Time{}, ""
	case KindHinted:
		if in.Hint != nil {
			applyHint(&s, now, in.Hint)
		}
	case KindDeleted:
		s.Deleted = true
		s.NextRunAt, s.Source = time.Time{}, SourceDeleted
		s.Trail = []string{"task deleted: nothing scheduled"}
		s.DecidedAt, s.Input = now, in.Kind
		return Decision{Source: s.Source, Trail: s.Trail, State: s}
	}
	s.Input = in.Kind
	s.DecidedAt = now
	p := planner{now: now, spec: spec, s: &s}
	p.plan()
	s.NextRunAt, s.Source, s.Trail = p.next, p.source, p.trail
	return Decision{NextRunAt: p.next, Source: p.source, Trail: p.trail, State: s}
}

func applyOutcome(s *State, o *Outcome) {
	s.LastDispatchID = o.DispatchID
	s.LastOutcome = o.Result
	if o.ScheduledAt.After(s.LastScheduledAt) {
		s.LastScheduledAt = o.ScheduledAt.UTC()
	}
	switch o.Result {
	case "succeeded":
		s.Runs++
		s.Failures = 0
		s.LastSuccessAt = o.FinishedAt.UTC()
	case "failed":
		s.Runs++
		if s.Failures < 1<<20 {
			s.Failures++
		}
		s.LastFailureAt = o.FinishedAt.UTC()
	}
	if h := s.OneShotHint; h != nil && !o.ScheduledAt.Before(h.At) {
		s.OneShotHint = nil
	}
}

func applyHint(s *State, now time.Time, h *Hint) {
	if h.Interval > 0 {
		ttl := h.TTL
		if ttl <= 0 {
			ttl = DefaultIntervalHintTTL
		}
		s.IntervalHint = &IntervalHint{Interval: h.Interval, ExpiresAt: now.Add(ttl).UTC(), Reason: h.Reason}
	}
	if !h.At.IsZero() {
		ttl := h.TTL
		if ttl <= 0 {
			ttl = DefaultOneShotHintTTL
		}
		s.OneShotHint = &OneShotHint{At: h.At.UTC(), ExpiresAt: now.Add(ttl).UTC(), Reason: h.Reason}
	}
}

type planner struct {
	now    time.Time
	spec   *events.TaskSpec
	s      *State
	next   time.Time
	source Source
	trail  []string
}

func (p *planner) note(format string, args ...any) {
	p.trail = append(p.trail, fmt.Sprintf(format, args...))
}

func (p *planner) choose(t time.Time, src Source, format string, args ...any) {
	p.next, p.source = t.UTC(), src
	p.note(string(src)+": "+format, args...)
}

func (p *planner) plan() {
	p.expireHints()
	if p.s.Paused {
		if p.s.PausedUntil.IsZero() {
			p.choose(time.Time{}, SourcePaused, "paused indefinitely")
			p.next = time.Time{}
			return
		}
		if p.s.PausedUntil.After(p.now) {
			p.choose(p.s.PausedUntil, SourcePaused, "paused until %s", fmtTime(p.s.PausedUntil))
			p.floor() // a pause end at or before the last slot must not repeat it
			return
		}
		p.note("pause ended at %s", fmtTime(p.s.PausedUntil))
		p.s.Paused, p.s.PausedUntil, p.s.PauseReason = false, time.Time{}, ""
	}
	p.baseline()
	p.oneShot()
	p.clamp()
	p.floor()
}

func (p *planner) expireHints() {
	if h := p.s.IntervalHint; h != nil && !h.ExpiresAt.After(p.now) {
		p.note("interval hint %s expired at %s: cleared", h.Interval, fmtTime(h.ExpiresAt))
		p.s.IntervalHint = nil
	}
	if h := p.s.OneShotHint; h != nil && !h.ExpiresAt.After(p.now) {
		p.note("one-shot hint for %s expired at %s: cleared", fmtTime(h.At), fmtTime(h.ExpiresAt))
		p.s.OneShotHint = nil
	}
}

// baseline picks the candidate from the spec's interval or cron, an interval
// hint, failure backoff and the first-run rule.
func (p *planner) baseline() {
	anchor := p.s.LastScheduledAt
	if anchor.IsZero() {
		if p.spec.StartAt != nil {
			p.choose(*p.spec.StartAt, SourceStartAt, "first run at startAt %s", fmtTime(*p.spec.StartAt))
			return
		}
	}
	if p.spec.Schedule.Cron != "" {
		p.cronBaseline(anchor)
		return
	}
	step, src := p.spec.Schedule.Interval.D(), SourceBaselineInterval
	if h := p.s.IntervalHint; h != nil {
		step, src = h.Interval, SourceHintInterval
	}
	if step <= 0 {
		// Only a hand-edited spec or state gets here; dividing by it below
		// would panic.
		p.choose(time.Time{}, src, "interval %s is not positive: nothing scheduled", step)
		return
	}
	if anchor.IsZero() {
		p.choose(p.now, src, "first run of a %s interval task runs at once", step)
		return
	}
	if f := p.s.Failures; f > 0 {
		exp := min(f, maxBackoffExponent)
		// Saturate: interval hints are not bounded, and a wrapped (zero or
		// negative) step would panic or schedule in the past.
		if step > math.MaxInt64>>exp {
			step = math.MaxInt64
		} else {
			step <<= exp
		}
		src = SourceBackoff
		p.note("%d consecutive failures: interval ×%d = %s", f, 1<<exp, step)
	}
	next := anchor.Add(step)
	if !next.After(p.now) {
		// Keep the cadence: the first grid slot strictly after now. The
		// multiple of step is at most now-anchor, so it cannot overflow
		// (Sub saturates for anchors ~292 years back; floor then applies).
		next = anchor.Add(p.now.Sub(anchor) / step * step).Add(step)
		p.note("slot %s already passed: skipped to the next slot on the grid", fmtTime(anchor.Add(step)))
	}
	p.choose(next, src, "%s after the slot of %s", step, fmtTime(anchor))
}

func (p *planner) cronBaseline(anchor time.Time) {
	sched, loc, err := cronSchedule(p.spec.Schedule.Cron, p.spec.Schedule.Timezone)
	if err != nil {
		// Validation refuses such specs; a stored one means a bug or a
		// hand-edited KV entry. Keep the task visible rather than spinning.
		p.choose(time.Time{}, SourceBaselineCron, "cannot evaluate cron %q: %v", p.spec.Schedule.Cron, err)
		return
	}
	from := p.now
	if anchor.After(from) {
		from = anchor
	}
	next := sched.Next(from, loc)
	if next.IsZero() {
		p.choose(time.Time{}, SourceBaselineCron, "cron %q has no occurrence within 5 years", p.spec.Schedule.Cron)
		return
	}
	p.choose(next, SourceBaselineCron, "next occurrence of %q in %s", p.spec.Schedule.Cron, loc)
}

func (p *planner) oneShot() {
	h := p.s.OneShotHint
	if h == nil {
		return
	}
	at := h.At
	if at.Before(p.now) {
		at = p.now
	}
	if p.next.IsZero() || at.Before(p.next) {
		p.choose(at, SourceHintOneShot, "one-shot hint for %s is earlier", fmtTime(h.At))
	}
}

func (p *planner) clamp() {
	b := p.spec.Bounds
	ref := p.s.LastScheduledAt
	if b == nil || ref.IsZero() || p.next.IsZero() {
		return
	}
	gap := p.next.Sub(ref)
	if b.Min != 0 && gap < b.Min.D() {
		p.choose(ref.Add(b.Min.D()), SourceClampedMin, "gap %s raised to bounds.min %s", gap, b.Min)
	} else if b.Max != 0 && gap > b.Max.D() {
		p.choose(ref.Add(b.Max.D()), SourceClampedMax, "gap %s lowered to bounds.max %s", gap, b.Max)
	}
}

// floor guarantees a decision is never in the past and never repeats the
// slot that just ran.
func (p *planner) floor() {
	if p.next.IsZero() {
		return
	}
	if p.next.Before(p.now) {
		p.note("candidate %s is in the past: floored to now", fmtTime(p.next))
		p.next = p.now.UTC()
	}
	if last := p.s.LastScheduledAt; !last.IsZero() && !p.next.After(last) {
		p.next = last.Add(time.Millisecond)
		p.note("candidate repeats the last slot: moved 1ms later")
	}
}

var cronCache sync.Map // expr -> *cron.Schedule

func cronSchedule(expr, tz string) (*cron.Schedule, *time.Location, error) {
	loc := time.UTC
	if tz != "" {
		l, err := events.LoadLocation(tz)
		if err != nil {
			return nil, nil, err
		}
		loc = l
	}
	if v, ok := cronCache.Load(expr); ok {
		return v.(*cron.Schedule), loc, nil
	}
	s, err := cron.Parse(expr)
	if err != nil {
		return nil, nil, err
	}
	cronCache.Store(expr, s)
	return s, loc, nil
}

func fmtTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }
