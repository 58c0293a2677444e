package governor

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
)

// Pause hints. Every run rewrites its task's schedule, so a view of
// flyball-schedules receives one delivery per run; the executor needs only
// the rare paused task. The governor therefore keeps a key in
// flyball-pauses for every task whose schedule is paused, and the executor
// watches that small bucket instead.
//
// A hint is never trusted alone: the executor reads the schedule of a
// hinted task before it skips a run. So the two ways a hint can be wrong
// are both safe:
//   - a stale hint (a crash between writing an unpaused schedule and
//     deleting the hint) costs a schedule read per run of that task until
//     a later decision for the task deletes it;
//   - a missing hint lets a dispatch that was already in flight when the
//     pause arrived run, which a pause arriving a moment later could do
//     anyway. The hint is written before the paused schedule, so it is
//     missing only while the pause command is being redelivered.

// pauseHint is the value of a flyball-pauses key, for operators (`nats kv
// ls flyball-pauses` lists the paused tasks). Its presence is what counts.
type pauseHint struct {
	TaskID      string    `json:"taskId"`
	PausedUntil time.Time `json:"pausedUntil,omitzero"`
	Reason      string    `json:"reason,omitempty"`
}

// samePause reports whether a and b are paused alike (until and reason).
func samePause(a, b gov.State) bool {
	return a.Paused == b.Paused && a.PausedUntil.Equal(b.PausedUntil) && a.PauseReason == b.PauseReason
}

// hintPause writes next's pause hint when next is paused and the hint may
// be missing or out of date, and returns the revision it wrote (0 if it
// wrote none). Call it before writing next.
func (s *Service) hintPause(ctx context.Context, id string, prev, next gov.State) (uint64, error) {
	if !next.Paused {
		return 0, nil
	}
	if r := s.pauseHints.Lookup(id); samePause(prev, next) && r.Known && r.Found {
		return 0, nil
	}
	body, err := json.Marshal(pauseHint{TaskID: id, PausedUntil: next.PausedUntil, Reason: next.PauseReason})
	if err != nil {
		return 0, permanent("", fmt.Errorf("encode pause hint %s: %w", id, err), true)
	}
	rev, err := s.pauses.Put(ctx, id, body)
	if err != nil {
		return 0, permanent("", fmt.Errorf("write pause hint %s: %w", id, err), false)
	}
	s.pauseHints.Put(id, rev, body)
	return rev, nil
}

// unhintPause deletes the pause hint of a task that next leaves unpaused,
// when there may be one: the previous state was paused, or the view holds
// a hint (a stale one, or one this replica has not seen deleted). Call it
// after writing next. While the view is loading, only a task leaving a
// pause is unhinted, so a restart does not write a delete for every task.
func (s *Service) unhintPause(ctx context.Context, id string, prev, next gov.State) error {
	if next.Paused {
		return nil
	}
	if r := s.pauseHints.Lookup(id); !prev.Paused && !r.Found {
		return nil
	}
	return s.deletePauseHint(ctx, id)
}

func (s *Service) deletePauseHint(ctx context.Context, id string) error {
	if err := s.pauses.Delete(ctx, id); err != nil && !jsutil.IsKeyMissing(err) {
		return fmt.Errorf("delete pause hint %s: %w", id, err)
	}
	s.pauseHints.Delete(id, 0)
	return nil
}
