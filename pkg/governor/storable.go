package governor

import (
	"time"

	"github.com/flyballhq/flyball/pkg/events"
)

// Every state Decide returns must be storable: the service writes it with
// State.AppendJSON, which fails (like json.Marshal) for a time outside
// years 0-9999. The decoders refuse such times in events (see
// events.TimeInRange), but an Input built by other code, or a valid RFC
// 3339 time like "9999-12-31T23:30:00-01:00" (10000-01-01T00:30:00Z)
// decoded without them, must not make a decision that cannot be written:
// the service would retry it forever. Out-of-range times are clamped.

// earliest is the first instant AppendJSON writes. It is not the zero
// time, which means "unset" (an indefinite pause, no one-shot).
var earliest = time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)

// storable clamps t into [earliest, events.MaxTime], leaving the zero time
// alone.
func storable(t time.Time) time.Time {
	switch {
	case t.IsZero():
		return t
	case t.Before(earliest):
		return earliest
	case t.After(events.MaxTime):
		return events.MaxTime
	}
	return t
}

// inRange reports whether t needs no clamping.
func inRange(t time.Time) bool { return storable(t).Equal(t) }

// storableInput returns in with its times clamped, copying what it
// changes (never the caller's values).
func storableInput(in Input) Input {
	if p := in.Pause; p != nil && !inRange(p.Until) {
		c := *p
		c.Until = storable(c.Until)
		in.Pause = &c
	}
	if h := in.Hint; h != nil && !inRange(h.At) {
		c := *h
		c.At = storable(c.At)
		in.Hint = &c
	}
	if b := in.Breaker; b != nil && !inRange(b.RetryAt) {
		c := *b
		c.RetryAt = storable(c.RetryAt)
		in.Breaker = &c
	}
	if d := in.DeadLetter; d != nil && !inRange(d.At) {
		c := *d
		c.At = storable(c.At)
		in.DeadLetter = &c
	}
	if o := in.Outcome; o != nil && (!inRange(o.ScheduledAt) || !inRange(o.FinishedAt)) {
		c := *o
		c.ScheduledAt, c.FinishedAt = storable(c.ScheduledAt), storable(c.FinishedAt)
		in.Outcome = &c
	}
	return in
}

// keepStorable clamps every time of a decided state: a clamped input can
// still be carried past the range (a dead-letter recheck after an entry
// dated at the end of it, a startAt in a spec stored long ago).
func (s *State) keepStorable() {
	for _, t := range []*time.Time{
		&s.NextRunAt, &s.DecidedAt, &s.CreatedAt, &s.LastScheduledAt, &s.RunningSlot, &s.LastSuccessAt, &s.LastFailureAt,
		&s.PausedUntil, &s.LastActivityAt, &s.BreakerOpenUntil, &s.RequeuedAt,
	} {
		*t = storable(*t)
	}
	if h := s.IntervalHint; h != nil && !inRange(h.ExpiresAt) {
		c := *h
		c.ExpiresAt = storable(c.ExpiresAt)
		s.IntervalHint = &c
	}
	if h := s.OneShotHint; h != nil && (!inRange(h.At) || !inRange(h.ExpiresAt)) {
		c := *h
		c.At, c.ExpiresAt = storable(c.At), storable(c.ExpiresAt)
		s.OneShotHint = &c
	}
	if d := s.DeadLetter; d != nil && (!inRange(d.At) || !inRange(d.RecheckAt)) {
		c := *d
		c.At, c.RecheckAt = storable(c.At), storable(c.RecheckAt)
		s.DeadLetter = &c
	}
}
