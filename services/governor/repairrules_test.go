package governor

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// legacySpec is a normalized hourly task that breaks two rules for new
// specs only (a connection-level header, and deadLetter.recheckAfter
// past 366 days): a task stored before them still runs
// (TaskSpec.ValidateStored), and task.created or task.updated carrying it
// is refused.
func legacySpec(t *testing.T, id string) events.TaskSpec {
	t.Helper()
	spec := hourly(id)
	spec.Target.HTTP.Headers = map[string]string{"Upgrade": "h2c"}
	spec.DeadLetter = &events.DeadLetterPolicy{RecheckAfter: events.Duration(9000 * time.Hour)}
	spec.Normalize()
	if spec.Validate() == nil || spec.ValidateStored() != nil {
		t.Fatalf("legacySpec must break only rules for new specs: Validate %v, ValidateStored %v", spec.Validate(), spec.ValidateStored())
	}
	return spec
}

// TestRepairOfAStoredSpecIsHeldToTheStoredSpecRules: the sweeper's repair
// of a task with no schedule (a task.created whose command ID starts
// sweeper:unscheduled:) re-creates the spec stored. Checked with the
// rules for new specs, a spec stored before a newer one was refused, and
// the task never ran again. The stored-spec rules apply to it now, but
// only to the spec stored: the command ID is anyone's to choose, and
// under it a spec that is not the one stored, an update, or a creation
// with no spec stored are held to the rules for new specs as before.
func TestRepairOfAStoredSpecIsHeldToTheStoredSpecRules(t *testing.T) {
	s, js := startGovernor(t)
	ctx := t.Context()
	repairID := func(id string) string { return events.RepairCreatePrefix + id + ":1" }
	wantHeaderRejected := func(id, what string) {
		t.Helper()
		reasons := lastRejection(t, js, id)
		if len(reasons) == 0 || reasons[0].Field != "target.http.headers.Upgrade" {
			t.Fatalf("%s rejected with %+v, want the rule for new specs on target.http.headers.Upgrade", what, reasons)
		}
	}
	noSchedule := func(id, what string) {
		t.Helper()
		if _, err := s.schedules.Get(ctx, id); !jsutil.IsKeyMissing(err) {
			t.Fatalf("%s: schedule of %s: err %v, want none", what, id, err)
		}
	}

	// The spec stored is the one the repair carries: accepted, scheduled.
	const legacy = "legacy"
	natstest.PutJSON(t, js, streams.BucketTasks, legacy, legacySpec(t, legacy))
	command(t, js, events.VerbCreated, events.TypeTaskCreated, legacy, "by-hand", legacySpec(t, legacy))
	wantHeaderRejected(legacy, "a task.created of the stored spec with an ordinary command ID")
	noSchedule(legacy, "after the ordinary task.created")
	command(t, js, events.VerbCreated, events.TypeTaskCreated, legacy, repairID(legacy), legacySpec(t, legacy))
	if _, commands := answers(t, js, legacy); len(commands) != 1 || commands[0] != repairID(legacy) {
		t.Fatalf("task.accepted answers %v, want the repair's: %+v", commands, lastRejection(t, js, legacy))
	}
	if st := storedState(t, s, legacy); st.NextRunAt.IsZero() {
		t.Fatalf("after the repair, schedule %+v: want the task scheduled", st)
	}

	// A spec stored under the rules for new specs; a repair command ID
	// carrying another spec that breaks them is refused, and the stored
	// spec kept.
	const current = "current"
	command(t, js, events.VerbCreated, events.TypeTaskCreated, current, "create-current", hourly(current))
	if err := s.schedules.Delete(ctx, current); err != nil {
		t.Fatal(err)
	}
	s.states.drop(current)
	command(t, js, events.VerbCreated, events.TypeTaskCreated, current, repairID(current), legacySpec(t, current))
	wantHeaderRejected(current, "a repair carrying a spec other than the one stored")
	noSchedule(current, "after a repair carrying another spec")
	ent, err := s.tasks.Get(ctx, current)
	if err != nil {
		t.Fatal(err)
	}
	var stored events.TaskSpec
	if err := json.Unmarshal(ent.Value(), &stored); err != nil || len(stored.Target.HTTP.Headers) != 0 {
		t.Fatalf("stored spec %s (%v), want the one created kept", ent.Value(), err)
	}

	// An update under a repair command ID is held to the rules for new
	// specs, even with the spec stored.
	command(t, js, events.VerbUpdated, events.TypeTaskUpdated, legacy, repairID(legacy)+"-update", legacySpec(t, legacy))
	wantHeaderRejected(legacy, "a task.updated under a repair command ID")

	// With no spec stored, a repair creates nothing.
	const none = "none"
	command(t, js, events.VerbCreated, events.TypeTaskCreated, none, repairID(none), legacySpec(t, none))
	if reasons := lastRejection(t, js, none); len(reasons) == 0 {
		t.Fatal("a repair of a task with no spec stored was not rejected")
	}
	if _, err := s.tasks.Get(ctx, none); !jsutil.IsKeyMissing(err) {
		t.Fatalf("a repair of a task with no spec stored stored one: err %v", err)
	}
	noSchedule(none, "a repair with no spec stored")
}
