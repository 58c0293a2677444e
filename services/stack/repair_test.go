package stack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/stack"
	"github.com/flyballhq/flyball/streams"
)

// TestSweeperRepairsLostScheduleWrites covers the two schedule repairs of
// the sweeper, under the compose users (a permission missing from
// accounts.conf fails it). A schedule write is lost with a restore (each
// stream is snapshotted at its own instant) or a key removed or rewritten
// by hand; each is written here by the admin user.
//
//   - A lost decision: the governor applied a slot's final event (a run
//     outcome on RUNS, or a dead letter on DEADLETTER) and acked it, and
//     its schedule write is undone. The zombie check used to take the
//     stored outcome for a governor that is behind, and the task never ran
//     again. Now the slot is dispatched again, the executor reports it
//     skipped without calling the target, and the governor plans the next
//     slot.
//   - A task with no schedule was never dispatched and no sweep looked at
//     it. Now its task.created is published again once it has had none for
//     ZombieAfter, once, and not again while the governor has not taken it.
func TestSweeperRepairsLostScheduleWrites(t *testing.T) {
	t.Parallel()
	srv := natstest.StartCompose(t)
	target := newScripted(t, 200)
	var governor, sweeper *stack.Stack
	srv.Each(t, []string{"governor"}, func(name string, js jetstream.JetStream) { governor = startRepairStack(t, name, js) })
	ctx := t.Context()
	schedules, err := srv.JS.KeyValue(ctx, streams.BucketSchedules)
	if err != nil {
		t.Fatal(err)
	}
	readState := func(id string) (gov.State, uint64, bool) {
		e, err := schedules.Get(ctx, id)
		if err != nil {
			return gov.State{}, 0, false
		}
		var st gov.State
		return st, e.Revision(), json.Unmarshal(e.Value(), &st) == nil
	}

	// Lost decisions. The governor applies the final event of a slot 10
	// minutes ago, a run.succeeded on RUNS for "lost" and a dead letter on
	// DEADLETTER for "lostdl", and acks it; then its schedule write is
	// undone.
	slot := time.Now().UTC().Add(-10 * time.Minute).Truncate(time.Millisecond)
	spec := events.TaskSpec{ID: "lost", Target: events.Target{HTTP: &events.HTTPTarget{URL: target.srv.URL}}, Schedule: events.Schedule{Interval: events.Duration(time.Hour)}}
	lost := []struct {
		id, stream string
		publish    func(id string, d events.Dispatch) error
	}{
		{"lost", streams.StreamRuns, func(id string, d events.Dispatch) error {
			r := d.Run()
			r.Attempt, r.StartedAt, r.FinishedAt, r.Final = 1, slot, slot.Add(time.Second), true
			return jsutil.PublishEvent(ctx, srv.JS, events.RunSubject(events.OutcomeSucceeded, id), d.DispatchID+"/1",
				events.TypeRunSucceeded, "flyball/executor/test", id, r, r.FinishedAt)
		}},
		{"lostdl", streams.StreamDeadLetter, func(id string, d events.Dispatch) error {
			// Earlier slots' dead letters first, so that the slot's (the
			// fifth on DEADLETTER) stays above RUNS's ack floor (at most
			// 2 until it is repaired): an outcome checked against the
			// wrong stream's floor is not taken for applied.
			var all []events.Dispatch
			for h := 4; h > 0; h-- {
				at := slot.Add(-time.Duration(h) * time.Hour)
				all = append(all, events.Dispatch{DispatchID: events.DispatchID(id, at), TaskID: id, ScheduledAt: at})
			}
			for _, d := range append(all, d) {
				dl := events.DeadLetter{TaskID: id, Reason: events.DeadLetterMaxDeliveries, Dispatch: d, Errors: []events.AttemptError{}, DeadLetteredAt: d.ScheduledAt.Add(time.Minute)}
				if err := jsutil.PublishEvent(ctx, srv.JS, events.DeadLetterSubject(id), "deadletter:"+d.DispatchID,
					events.TypeDeadLettered, "flyball/deadletter/test", id, dl, dl.DeadLetteredAt); err != nil {
					return err
				}
			}
			return nil
		}},
	}
	var skipped []func() []events.Run
	for _, c := range lost {
		spec.ID = c.id
		before := gov.State{
			TaskID: c.id, NextRunAt: slot, Source: gov.SourceBaselineInterval,
			LastScheduledAt: slot.Add(-time.Hour), LastSuccessAt: slot.Add(-time.Hour),
		}
		natstest.PutJSON(t, srv.JS, streams.BucketTasks, c.id, spec)
		natstest.PutJSON(t, srv.JS, streams.BucketSchedules, c.id, before)
		_, put, _ := readState(c.id)
		if err := c.publish(c.id, events.Dispatch{DispatchID: events.DispatchID(c.id, slot), TaskID: c.id, ScheduledAt: slot}); err != nil {
			t.Fatal(err)
		}
		st, err := srv.JS.Stream(ctx, c.stream)
		if err != nil {
			t.Fatal(err)
		}
		natstest.Eventually(t, 10*time.Second, "the governor applies and acks "+c.id+"'s final event", func() bool {
			_, rev, ok := readState(c.id)
			con, err := st.Consumer(ctx, streams.ConsumerGovernor)
			if !ok || rev <= put || err != nil {
				return false
			}
			info := con.CachedInfo() // every event delivered and acked
			return info.NumPending == 0 && info.NumAckPending == 0 && info.AckFloor.Stream >= 1
		})
		natstest.PutJSON(t, srv.JS, streams.BucketSchedules, c.id, before) // the decision is lost
		skipped = append(skipped, record(t, srv.NC, events.RunSubject(events.OutcomeSkipped, c.id), func(m *nats.Msg) (events.Run, bool) {
			e, err := events.Decode(m.Header, m.Data)
			var s events.Run
			return s, err == nil && events.DecodeRun(e, &s) == nil
		}))
	}
	srv.Each(t, []string{"executor", "sweeper"}, func(name string, js jetstream.JetStream) {
		if st := startRepairStack(t, name, js); name == "sweeper" {
			sweeper = st
		}
	})
	for i, c := range lost {
		natstest.Eventually(t, 10*time.Second, c.id+"'s slot reported skipped as already run", func() bool {
			for _, s := range skipped[i]() {
				if s.DispatchID == events.DispatchID(c.id, slot) && strings.HasPrefix(s.Reason, "already ran") {
					return true
				}
			}
			return false
		})
		natstest.Eventually(t, 10*time.Second, "the governor plans "+c.id+"'s next slot", func() bool {
			st, _, ok := readState(c.id)
			return ok && st.NextRunAt.After(slot)
		})
	}
	// The sweeper counts a repair once its dispatch is stored, so the
	// executor and the governor can answer before the count is made.
	m := sweeper.Metrics()
	lostWrite := m.SchedulesRepaired.WithLabelValues("lost-write")
	natstest.Eventually(t, 10*time.Second, "both lost writes counted", func() bool { return testutil.ToFloat64(lostWrite) >= 2 })
	if got := testutil.ToFloat64(lostWrite); got != 2 {
		t.Errorf("flyball_schedules_repaired_total{reason=lost-write} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.ZombiesRenudged); got != 0 {
		t.Errorf("flyball_zombies_renudged_total = %v, want 0: the slots ran, it was their schedules that were lost", got)
	}
	if calls := target.Calls(); len(calls) != 0 {
		t.Fatalf("the target was called %d times for slots that had run", len(calls))
	}

	// A task whose schedule is gone: created through the governor, then
	// its schedule deleted.
	accepted := record(t, srv.NC, events.TaskSubject(events.VerbAccepted, "unsched"), func(m *nats.Msg) (events.TaskAccepted, bool) {
		e, err := events.Decode(m.Header, m.Data)
		var a events.TaskAccepted
		return a, err == nil && events.DecodeData(e, &a) == nil
	})
	spec.ID = "unsched"
	if err := jsutil.PublishEvent(ctx, srv.JS, events.TaskSubject(events.VerbCreated, "unsched"), "create-unsched",
		events.TypeTaskCreated, "test", "unsched", spec, time.Now()); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "unsched scheduled", func() bool { _, _, ok := readState("unsched"); return ok })
	if err := schedules.Delete(ctx, "unsched"); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "the sweeper's task.created answered", func() bool {
		for _, a := range accepted() {
			if strings.HasPrefix(a.CommandID, "sweeper:unscheduled:unsched:") {
				return true
			}
		}
		return false
	})
	natstest.Eventually(t, 10*time.Second, "unsched scheduled again", func() bool {
		st, _, ok := readState("unsched")
		return ok && !st.NextRunAt.IsZero()
	})
	// Counted after the publish returns: the governor may have answered first.
	missing := m.SchedulesRepaired.WithLabelValues("missing")
	natstest.Eventually(t, 10*time.Second, "the missing schedule counted", func() bool { return testutil.ToFloat64(missing) >= 1 })
	if got := testutil.ToFloat64(missing); got != 1 {
		t.Errorf("flyball_schedules_repaired_total{reason=missing} = %v, want 1", got)
	}

	// With the governor stopped, a spec with no schedule gets one
	// task.created, which waits on TASKS: no sweep publishes another.
	governor.Stop()
	natstest.PutJSON(t, srv.JS, streams.BucketTasks, "waiting", events.TaskSpec{ID: "waiting", Target: spec.Target, Schedule: spec.Schedule})
	natstest.Eventually(t, 10*time.Second, "the sweeper publishes waiting's task.created", func() bool {
		return testutil.ToFloat64(missing) == 2
	})
	// ZombieAfter is 300ms and sweeps come every 50ms: 30 sweeps give the
	// sweeper five chances to publish again.
	for range 30 {
		<-sweeper.Sweeper.Swept()
	}
	if got := testutil.ToFloat64(missing); got != 2 {
		t.Fatalf("flyball_schedules_repaired_total{reason=missing} = %v after 30 more sweeps, want 2: the sweeper published a task.created again while its first waited for the governor", got)
	}
	tasks, err := srv.JS.Stream(ctx, streams.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	last, err := tasks.GetLastMsgForSubject(ctx, events.TaskSubject(events.VerbCreated, "waiting"))
	if err != nil || !strings.HasPrefix(last.Header.Get(jetstream.MsgIDHeader), "sweeper:unscheduled:waiting:") {
		t.Fatalf("waiting's last task.created: %v %v, want the sweeper's", last, err)
	}
}

// startRepairStack starts one service under its compose user, with a
// sweeper that repairs after 300ms and sweeps every 50ms.
func startRepairStack(t *testing.T, name string, js jetstream.JetStream) *stack.Stack {
	t.Helper()
	st, err := stack.Start(context.Background(), stack.Config{
		JS: js, Services: []string{name}, Instance: name + "1", Guard: executor.Guard{AllowLoopback: true},
		HeartbeatInterval: 100 * time.Millisecond, OfflineAfter: 10 * time.Second,
		SweepInterval: 50 * time.Millisecond, ZombieAfter: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("start %s as its compose user: %v", name, err)
	}
	t.Cleanup(st.Stop)
	return st
}

// TestMissingScheduleRepairDoesNotBringBackADeletedTask: a task has a
// spec and no schedule (a restore, a key removed by hand). Its owner
// deletes it while the governor is behind on TASKS (down, or working a
// backlog). The sweeper still finds the spec, and publishes task.created
// with it (sweeper:unscheduled:…), behind the task.deleted on TASKS. The
// governor applies the delete, then refuses the repair: it finishes a
// creation, it never makes one. Before, it created the task anew, and the
// deleted task ran again.
func TestMissingScheduleRepairDoesNotBringBackADeletedTask(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	const id = "ghost"
	spec := events.TaskSpec{ID: id, Target: events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/"}}, Schedule: events.Schedule{Interval: events.Duration(time.Hour)}}
	natstest.PutJSON(t, srv.JS, streams.BucketTasks, id, spec) // a spec without its schedule

	// The owner deletes it; no governor has read TASKS yet.
	if err := jsutil.PublishEvent(ctx, srv.JS, events.TaskSubject(events.VerbDeleted, id), "delete-ghost",
		events.TypeTaskDeleted, "test", id, events.TaskRef{ID: id}, time.Now()); err != nil {
		t.Fatal(err)
	}

	m := metrics.New()
	rejected := make(chan *nats.Msg, 4)
	natstest.ChanSubscribe(t, srv.NC, events.TaskSubject(events.VerbRejected, id), rejected)
	sw, err := stack.Start(context.Background(), stack.Config{
		JS: srv.JS, Services: []string{"sweeper"}, Instance: "sw1", Metrics: m,
		HeartbeatInterval: 100 * time.Millisecond, OfflineAfter: 10 * time.Second,
		SweepInterval: 50 * time.Millisecond, ZombieAfter: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "the sweeper repairs the missing schedule", func() bool {
		return testutil.ToFloat64(m.SchedulesRepaired.WithLabelValues("missing")) >= 1
	})
	sw.Stop()

	gv, err := stack.Start(context.Background(), stack.Config{JS: srv.JS, Services: []string{"governor"}, Instance: "g1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gv.Stop)
	tasksStream, err := srv.JS.Stream(ctx, streams.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	last, err := tasksStream.GetLastMsgForSubject(ctx, events.TaskSubject(events.VerbCreated, id))
	if err != nil {
		t.Fatal(err)
	}
	natstest.AwaitAcked(t, srv.JS, streams.StreamTasks, streams.ConsumerGovernor, last.Sequence)
	if keyExists(srv.JS, streams.BucketTasks, id) || keyExists(srv.JS, streams.BucketSchedules, id) {
		t.Fatalf("task %s was deleted by its owner, but after the governor caught up it has a spec (%v) and a schedule (%v): the sweeper's task.created (%s) re-created it",
			id, keyExists(srv.JS, streams.BucketTasks, id), keyExists(srv.JS, streams.BucketSchedules, id), last.Header.Get("Nats-Msg-Id"))
	}
	select {
	case m := <-rejected:
		var rej events.TaskRejected
		ev, err := events.Decode(m.Header, m.Data)
		if err != nil || ev.DataAs(&rej) != nil || !strings.Contains(fmt.Sprint(rej.Reasons), "a repair does not create a task") {
			t.Fatalf("task.rejected %s: want the repair refused with its reason", m.Data)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the repair's task.created was not answered with task.rejected")
	}
}

// TestMissingScheduleRepairOfASpecStoredBeforeANewerRule: a task stored
// before a rule for new specs (here a connection-level header, Upgrade:
// h2c, and deadLetter.recheckAfter past 366 days) still runs: the
// executor checks a stored spec with the stored-spec rules
// (TaskSpec.ValidateStored). Its schedule lost (a restore, a key deleted
// by hand), the sweeper's repair, a task.created with the stored spec,
// was checked with the new-task rules and rejected, every 5 minutes for
// good, each time counted as a repair: the task never ran again. The
// repair of the spec stored is now checked with the stored-spec rules,
// and the task is scheduled.
func TestMissingScheduleRepairOfASpecStoredBeforeANewerRule(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	const id = "legacy"
	spec := events.TaskSpec{
		ID:         id,
		Target:     events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/", Headers: map[string]string{"Upgrade": "h2c"}}},
		Schedule:   events.Schedule{Interval: events.Duration(time.Hour)},
		DeadLetter: &events.DeadLetterPolicy{RecheckAfter: events.Duration(9000 * time.Hour)},
	}
	if spec.Validate() == nil || spec.ValidateStored() != nil {
		t.Fatalf("the spec must break only rules for new specs: Validate %v, ValidateStored %v", spec.Validate(), spec.ValidateStored())
	}
	natstest.PutJSON(t, srv.JS, streams.BucketTasks, id, spec) // stored before the rules; its schedule lost
	rejected := record(t, srv.NC, events.TaskSubject(events.VerbRejected, id), func(m *nats.Msg) (events.TaskRejected, bool) {
		e, err := events.Decode(m.Header, m.Data)
		var r events.TaskRejected
		return r, err == nil && events.DecodeData(e, &r) == nil
	})
	m := metrics.New()
	st, err := stack.Start(context.Background(), stack.Config{
		JS: srv.JS, Services: []string{"governor", "sweeper"}, Instance: "gs1", Metrics: m,
		HeartbeatInterval: 100 * time.Millisecond, OfflineAfter: 10 * time.Second,
		SweepInterval: 50 * time.Millisecond, ZombieAfter: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	schedules, err := srv.JS.KeyValue(ctx, streams.BucketSchedules)
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "the sweeper's repair schedules "+id, func() bool {
		if r := rejected(); len(r) > 0 {
			t.Fatalf("the sweeper's repair %s of a spec stored before a newer rule was rejected: %+v", r[0].CommandID, r[0].Reasons)
		}
		e, err := schedules.Get(ctx, id)
		var s gov.State
		return err == nil && json.Unmarshal(e.Value(), &s) == nil && !s.NextRunAt.IsZero()
	})
	if got := testutil.ToFloat64(m.SchedulesRepaired.WithLabelValues("missing")); got != 1 {
		t.Errorf("flyball_schedules_repaired_total{reason=missing} = %v, want 1", got)
	}
}

// TestSweeperRepairsAnUnreadableSchedule: a task's schedule in
// flyball-schedules does not decode (written by hand, by another
// version, a bad restore). The timer skips it until it is rewritten, so
// the task never ran again. The sweeper published its task.created every
// ZombieAfter, counted as a missing schedule, and the governor acked each
// without applying it: it took the unreadable value for a schedule
// written since. A sweeper that had a readable copy in its view before
// kept it, and did nothing at all. Now the sweeper takes an unreadable
// schedule for one to repair (reason unreadable), the governor rebuilds
// it as for a missing one, and the task runs again. A value that decodes
// but names no decision (gov.Undecided: JSON null, {}, a taskId alone)
// is one too: every reader took it for a schedule with no next run, the
// timer skipped the task, the sweeper repaired nothing, and the task
// never ran again.
func TestSweeperRepairsAnUnreadableSchedule(t *testing.T) {
	t.Parallel()
	type tc struct {
		name string
		// seenFirst starts the sweeper before the schedule goes bad, and
		// waits until its view holds the readable value.
		seenFirst bool
		value     string // the schedule's value, written by hand
	}
	var cases []tc
	for _, value := range []string{"not json", "null", "{}", `{"taskId":"garbled"}`} {
		cases = append(cases,
			tc{"unreadable when the sweeper starts: " + value, false, value},
			tc{"readable in the sweeper's view first: " + value, true, value})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := natstest.StartWithStreams(t)
			ctx := t.Context()
			target := newScripted(t, 200)
			for _, name := range []string{"governor", "timer", "executor"} {
				startRepairStack(t, name, srv.JS)
			}
			var sweeper *stack.Stack
			if c.seenFirst {
				sweeper = startRepairStack(t, "sweeper", srv.JS)
			}
			schedules, err := srv.JS.KeyValue(ctx, streams.BucketSchedules)
			if err != nil {
				t.Fatal(err)
			}
			const id = "garbled"
			readState := func() (gov.State, uint64, bool) {
				e, err := schedules.Get(ctx, id)
				if err != nil {
					return gov.State{}, 0, false
				}
				var st gov.State
				return st, e.Revision(), json.Unmarshal(e.Value(), &st) == nil
			}
			spec := events.TaskSpec{ID: id, Target: events.Target{HTTP: &events.HTTPTarget{URL: target.srv.URL}}, Schedule: events.Schedule{Interval: events.Duration(time.Hour)}}
			if err := jsutil.PublishEvent(ctx, srv.JS, events.TaskSubject(events.VerbCreated, id), "create-"+id,
				events.TypeTaskCreated, "test", id, spec, time.Now()); err != nil {
				t.Fatal(err)
			}
			target.awaitCall(t, "the task's first run")
			natstest.Eventually(t, 10*time.Second, "the governor applies the first run's outcome", func() bool {
				st, _, ok := readState()
				return ok && !st.LastSuccessAt.IsZero()
			})
			if c.seenFirst {
				natstest.Eventually(t, 10*time.Second, "the sweeper's view holds the readable schedule", func() bool {
					_, ok := sweeper.Sweeper.Scores()[id]
					return ok
				})
			}
			garbled, err := schedules.PutString(ctx, id, c.value)
			if err != nil {
				t.Fatal(err)
			}
			if !c.seenFirst {
				sweeper = startRepairStack(t, "sweeper", srv.JS)
			}
			natstest.Eventually(t, 10*time.Second, "the unreadable schedule rebuilt with a next run", func() bool {
				st, rev, ok := readState()
				return ok && rev > garbled && st.TaskID == id && !st.NextRunAt.IsZero() && !st.CreatedAt.IsZero()
			})
			target.awaitCall(t, "the task runs again once its schedule is rebuilt")
			m := sweeper.Metrics()
			unreadable := m.SchedulesRepaired.WithLabelValues("unreadable")
			natstest.Eventually(t, 10*time.Second, "the repair counted", func() bool { return testutil.ToFloat64(unreadable) >= 1 })
			// ZombieAfter is 300ms and sweeps come every 50ms: 30 sweeps
			// give the sweeper five chances to repair it again.
			for range 30 {
				<-sweeper.Sweeper.Swept()
			}
			if got := testutil.ToFloat64(unreadable); got != 1 {
				t.Errorf(`flyball_schedules_repaired_total{reason="unreadable"} = %v, want 1`, got)
			}
			if got := testutil.ToFloat64(m.SchedulesRepaired.WithLabelValues("missing")); got != 0 {
				t.Errorf(`flyball_schedules_repaired_total{reason="missing"} = %v, want 0: the schedule was there, unreadable`, got)
			}
		})
	}
}
