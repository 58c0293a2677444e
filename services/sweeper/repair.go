package sweeper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/kvcache"
	"github.com/flyballhq/flyball/services/internal/slotdone"
	"github.com/flyballhq/flyball/streams"
)

// Two schedule repairs. The governor acks an input only after its
// schedule write is stored, so a decision is lost only when the stored
// write goes: a restore from backup (each stream is snapshotted at its
// own instant, flyball-tasks after flyball-schedules), a key removed or
// rewritten by hand, or a schedules bucket in nats-server's async persist
// mode that a crash made forget its last milliseconds (flyball keeps the
// bucket in the default mode: docs/benchmark-findings.md, finding 39).
//
//   - Lost write: the governor applied a slot's outcome and acked it, but
//     its decision was forgotten, so the schedule still names the slot.
//     The zombie check saw the slot's outcome and took the governor for
//     behind, for ever. It now compares the outcome's stream sequence with
//     the ack floor of the governor's consumer: at or below it, the
//     governor has applied it, and the sweeper dispatches the slot again.
//     The executor finds the slot's outcome stored and reports run.skipped
//     (ranAlready) instead of calling the target, and the governor plans
//     the next slot from that.
//   - Missing schedule: a spec with no schedule (a task created while a
//     backup was taken, then restored; a schedule deleted by hand) is
//     never dispatched, nor one whose schedule does not decode (written
//     by hand or by another version, a bad restore) or decodes but
//     names no decision (gov.Undecided: JSON null, {}), which the timer
//     skips. Once one has had none (or an unreadable one) for
//     ZombieAfter, the sweeper publishes task.created with the stored
//     spec; the governor finishes the creation, as for a redelivered
//     task.created, over an unreadable value at its revision. Both hold it to
//     the rules of a stored spec (TaskSpec.ValidateStored), as the
//     executor does: a spec stored before a newer rule for new specs is
//     repaired, and one that breaks a rule of stored specs is not
//     published (it would not run), but logged.

// ackFloors holds, for one sweep, the ack floors of the governor's
// consumers: every message at or below a floor's stream sequence has been
// acked. A check reads the floors it uses (need) before it reads the
// schedule it judges, never after: the governor acks an input once its
// schedule write is stored, so a floor read after the schedule could
// cover an outcome whose decision the read predates, and a slot the
// governor just moved past looked like a lost write. A floor older than
// the schedule read only makes the governor look behind (the next sweep
// looks again).
type ackFloors struct {
	read map[string]uint64 // stream name → floor
}

func newAckFloors() *ackFloors { return &ackFloors{read: map[string]uint64{}} }

// need reads the floors of the governor's consumers of sts that this
// sweep has not read yet.
func (f *ackFloors) need(ctx context.Context, sts ...jetstream.Stream) error {
	for _, st := range sts {
		name := st.CachedInfo().Config.Name
		if _, ok := f.read[name]; ok {
			continue
		}
		c, err := st.Consumer(ctx, streams.ConsumerGovernor)
		if err != nil {
			return fmt.Errorf("read the governor's consumer of %s: %w", name, err)
		}
		f.read[name] = c.CachedInfo().AckFloor.Stream
	}
	return nil
}

// acked reports whether the governor's consumer of st had acked the
// message at seq when need read its floor.
func (f *ackFloors) acked(st jetstream.Stream, seq uint64) (bool, error) {
	name := st.CachedInfo().Config.Name
	floor, ok := f.read[name]
	if !ok {
		return false, fmt.Errorf("the ack floor of the governor's consumer of %s was not read before the check", name)
	}
	return seq <= floor, nil
}

// current re-reads a zombie's schedule before the sweeper acts on it,
// puts it in the view, and returns it with whether it is still a zombie.
// The view can lag the bucket: while a watch is being established again
// (a reconnect, a leader change) it answers from its last state, and a
// scan is a sweep old. A lagging view names a slot the schedule has moved
// past, whose outcome the governor has acked, which the lost-write repair
// would take for a lost decision.
// The caller reads the ack floors it uses before (ackFloors).
func (s *Service) current(ctx context.Context, st schedule, now time.Time) (schedule, bool) {
	ent, err := s.schedules.Get(ctx, st.TaskID)
	if err != nil {
		if !jsutil.IsKeyMissing(err) {
			s.cfg.Logger.Warn("zombie check failed", "task", st.TaskID, "err", err)
		}
		return st, false // gone: a deleted task, or a schedule the missing-schedule repair restores
	}
	v := s.view
	v.mu.Lock()
	if _, newer := v.stale[st.TaskID]; !newer {
		// Unreadable, it leaves the view: the missing-schedule repair
		// rebuilds it.
		v.decode(st.TaskID, ent.Value())
	}
	v.mu.Unlock()
	stored, ok := decodeSchedule(ent.Value())
	if !ok {
		return st, false
	}
	return stored, s.zombie(stored, now)
}

// governorApplied reports whether the governor had acked the stored
// outcome o of a slot its schedule still names when floors were read,
// before the schedule: then the decision it wrote was lost, and waiting
// for it is waiting for ever.
func (s *Service) governorApplied(floors *ackFloors, o slotdone.Outcome) (bool, error) {
	st := s.runs
	if o.DeadLetter {
		st = s.dead
	}
	return floors.acked(st, o.Seq)
}

// unscheduledFor tracks the specs with no schedule in the view, by the
// sweeper's clock, and returns those that have had none for ZombieAfter.
// now keeps its monotonic reading (sweepTasks), so a wall-clock step
// neither delays nor hastens a repair. Only the sweep goroutine calls it.
func (s *Service) unscheduledFor(missing []string, now time.Time) []string {
	seen := make(map[string]time.Time, len(missing))
	var due []string
	for _, id := range missing {
		first, ok := s.unscheduled[id]
		if !ok {
			first = now
		}
		seen[id] = first
		if now.Sub(first) > s.cfg.ZombieAfter {
			due = append(due, id)
		}
	}
	s.unscheduled = seen
	return due
}

// reschedule publishes task.created with the stored spec of a task that
// has had no schedule, or an unreadable one, for ZombieAfter, unless KV
// now holds a readable schedule of it (the view was behind), its spec is
// gone, or the sweeper's previous task.created of it is still waiting for
// the governor.
func (s *Service) reschedule(ctx context.Context, floors *ackFloors, id string, now time.Time) {
	ent, err := s.tasks.Get(ctx, id)
	if err != nil {
		if !jsutil.IsKeyMissing(err) {
			s.cfg.Logger.Warn("missing-schedule check failed", "task", id, "err", err)
		}
		return
	}
	// TASKS's floor before the schedule (ackFloors): a repair the governor
	// takes and schedules after the read must not look taken.
	if err := floors.need(ctx, s.commands); err != nil {
		s.cfg.Logger.Warn("missing-schedule check failed", "task", id, "err", err)
		return
	}
	reason := repairMissing
	if sched, err := s.schedules.Get(ctx, id); err == nil {
		if _, ok := decodeSchedule(sched.Value()); ok {
			return
		}
		// Unreadable, or naming no decision: the governor takes it for a
		// missing schedule, and the repair replaces it.
		reason = repairUnreadable
	} else if !jsutil.IsKeyMissing(err) {
		s.cfg.Logger.Warn("missing-schedule check failed", "task", id, "err", err)
		return
	}
	if pending, err := s.reschedulePending(ctx, floors, id); err != nil {
		s.cfg.Logger.Warn("missing-schedule check failed", "task", id, "err", err)
		return
	} else if pending {
		return
	}
	spec, err := kvcache.DecodeSpec(id, ent.Value())
	if err != nil {
		s.cfg.Logger.Warn("task has no schedule and its spec is unreadable: publish task.updated to replace it, or task.deleted", "task", id, "err", err)
		return
	}
	// The governor checks the repair with the rules of a stored spec, as
	// the executor checks one before it runs it: a spec that breaks one
	// would not run if it were scheduled, and its repair is rejected.
	// Published, it was rejected every ZombieAfter for good, each time
	// counted as a repair, and only the governor's log said why.
	err = spec.ValidateStored()
	if err == nil && spec.ID != id {
		err = fmt.Errorf("id: must equal the task's key in flyball-tasks, %q, got %q", id, spec.ID)
	}
	if err != nil {
		delete(s.unscheduled, id) // said again after ZombieAfter, not at every sweep
		s.cfg.Logger.Warn("task has no schedule and its stored spec breaks a rule, so it is not repaired: publish task.updated with a valid spec, or task.deleted", "task", id, "err", err)
		return
	}
	msgID := fmt.Sprintf("%s%s:%d", events.RepairCreatePrefix, id, ent.Revision())
	stored, err := jsutil.PublishNewEvent(ctx, s.cfg.JS, events.TaskSubject(events.VerbCreated, id), msgID,
		events.TypeTaskCreated, s.source, id, spec, now)
	if err != nil {
		s.cfg.Logger.Warn("missing schedule not repaired; next sweep retries", "task", id, "err", err)
		return
	}
	delete(s.unscheduled, id) // the governor gets ZombieAfter before the next one
	if !stored {
		// Another sweeper replica published this repair (same spec
		// revision) within TASKS's duplicate window: counted there.
		return
	}
	s.cfg.Metrics.SchedulesRepaired.WithLabelValues(reason).Inc()
	if reason == repairUnreadable {
		s.cfg.Logger.Warn("task's schedule is unreadable: re-published its task.created for the governor to rebuild it", "task", id, "command", msgID)
		return
	}
	s.cfg.Logger.Warn("task had no schedule: re-published its task.created for the governor to schedule it", "task", id, "command", msgID)
}

// reschedulePending reports whether the last task.created of id on TASKS
// is the sweeper's and the governor had not acked it when floors were
// read (before the schedule: reschedule).
func (s *Service) reschedulePending(ctx context.Context, floors *ackFloors, id string) (bool, error) {
	raw, err := s.commands.GetLastMsgForSubject(ctx, events.TaskSubject(events.VerbCreated, id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !strings.HasPrefix(raw.Header.Get(jetstream.MsgIDHeader), events.RepairCreatePrefix) {
		return false, nil
	}
	acked, err := floors.acked(s.commands, raw.Sequence)
	return !acked, err
}

// Labels of flyball_schedules_repaired_total.
const (
	repairLostWrite  = "lost-write"
	repairMissing    = "missing"
	repairUnreadable = "unreadable"
)
