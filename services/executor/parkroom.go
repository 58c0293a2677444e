package executor

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// parkPoll is how often an executor that parks a dispatch for an open
// breaker reads the DISPATCH consumer's ack pending (watchParkRoom).
const parkPoll = time.Second

// setParkRoom derives the room parked dispatches may take from the
// DISPATCH consumer's max_ack_pending, read at Start: half of it for
// them, the other half for everything else delivered and unacked (the
// dispatches held for their slot, up to a second's worth, and the calls
// and run events in flight). The executor sheds what it parks once the
// consumer's ack pending is half way from there to the limit.
func (s *Service) setParkRoom(maxAckPending int) {
	if maxAckPending <= 0 {
		return // no limit: no room to leave
	}
	s.maxAckPending = maxAckPending
	s.parkCap = maxAckPending / 2
	s.shedAt = maxAckPending - (maxAckPending-s.parkCap)/2
	s.cfg.Metrics.DispatchDeferredLimit.Set(float64(s.parkCap))
}

// parkRefused says why h, kept for wait, is not parked: it waits for an
// open breaker's retryAt longer than half an AckWait, and this executor
// parks parkCap dispatches already, or the consumer had half its
// max_ack_pending delivered and unacked when watchParkRoom last read it
// (the executors share it). "" if h is kept: a wait for a probe ends with
// the probe's call, and a short one soon (the slot the governor plans at
// retryAt arrives a moment before it). The caller holds heldMu.
func (s *Service) parkRefused(h *held, wait time.Duration) string {
	if s.maxAckPending == 0 || !h.parked || h.retryAt.IsZero() || wait <= s.cfg.AckWait/2 {
		return ""
	}
	if s.nParked >= s.parkCap {
		return fmt.Sprintf("this executor keeps as many dispatches for their breakers as it may (%d, half of DISPATCH's max_ack_pending %d)", s.parkCap, s.maxAckPending)
	}
	if n := s.ackPending.Load(); n >= int64(s.parkCap) {
		return s.consumerFull(n)
	}
	return ""
}

// consumerFull is why a dispatch is not kept when the consumer has n
// delivered and unacked.
func (s *Service) consumerFull(n int64) string {
	return fmt.Sprintf("DISPATCH's executor consumer has %d of its max_ack_pending %d delivered and unacked", n, s.maxAckPending)
}

// skipParked reports h, which its open breaker defers, as run.skipped and
// acks it, instead of keeping it: full says why there is no room. The
// governor plans the task's next slot from the skip, no earlier than
// retryAt when the breaker is the task's own (its breaker hold).
func (s *Service) skipParked(ctx context.Context, h *held, full string) {
	s.parkWarns.Log(time.Now(), slog.LevelWarn, "no room in DISPATCH's max_ack_pending to keep a dispatch until its breaker's retryAt: reporting it skipped",
		"task", h.d.TaskID, "breaker", h.key, "retryAt", h.retryAt, "why", full)
	s.skip(ctx, h.m, h.d, skipBreaker, fmt.Sprintf("breaker open until %s (key %s): not kept waiting, as %s",
		h.retryAt.UTC().Format(time.RFC3339Nano), h.key, full))
}

// watchParkRoom reads the consumer's ack pending every parkPoll while
// this executor parks a dispatch: parkRefused parks no more while it is
// at parkCap or more, and at shedAt or more the executor reports as
// skipped those it parks for open breakers, down to parkCap (shedParked).
// Each executor keeps at most parkCap on its own, but several of them
// could, between them, fill the consumer, which would then deliver
// nothing, and no new arrival would be refused.
func (s *Service) watchParkRoom(ctx context.Context, cons jetstream.Consumer) {
	t := time.NewTicker(s.parkPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.heldMu.Lock()
		parked := s.nParked
		s.heldMu.Unlock()
		if parked == 0 {
			s.ackPending.Store(0)
			continue
		}
		info, err := cons.Info(ctx)
		if err != nil {
			continue // read again at the next tick; parkCap holds meanwhile
		}
		n := int64(info.NumAckPending)
		s.ackPending.Store(n)
		s.shedFor(ctx, n)
	}
}

// shedFor sheds what this executor parks (shedParked) when the consumer
// has n delivered and unacked, n at shedAt or more. n counts what every
// executor parks: each sheds its share of the n − parkCap to shed, in
// proportion to what it parks (rounded up), so that executors that read
// n at the same moment, before any of their skips is acked, shed it once
// between them and keep about parkCap, not each the whole of it.
func (s *Service) shedFor(ctx context.Context, n int64) {
	if n >= int64(s.shedAt) {
		s.shedParked(ctx, n, s.consumerFull(n))
	}
}

// shedParked reports this executor's share (shedFor) of the dispatches
// parked for an open breaker past parkCap, when the consumer has n (> 0)
// delivered and unacked, as skipped (skipParked), the longest waits
// first: those parkRefused would refuse now. One whose timer has fired
// is on its way to a caller already, and one a change of its breaker or
// its spec woke is about to be (wakeDeferred, wakeTask).
func (s *Service) shedParked(ctx context.Context, n int64, full string) {
	s.heldMu.Lock()
	if s.stopped() {
		s.heldMu.Unlock()
		return // releaseHeld hands them back
	}
	share := int(((n-int64(s.parkCap))*int64(s.nParked) + n - 1) / n)
	var shed []*held
	for h := range s.held {
		if h.parked && !h.woken && !h.retryAt.IsZero() && time.Until(h.until) > s.cfg.AckWait/2 {
			shed = append(shed, h)
		}
	}
	slices.SortFunc(shed, func(a, b *held) int { return b.until.Compare(a.until) })
	taken := shed[:0]
	for _, h := range shed {
		if len(taken) >= share {
			break
		}
		if h.t.Stop() {
			delete(s.held, h)
			s.unheld(h)
			taken = append(taken, h)
		}
	}
	s.heldChanged()
	s.heldMu.Unlock()
	for _, h := range taken {
		s.skipParked(ctx, h, full) // kept alive until its settle, as from a caller
		s.firing.Done()
	}
}
