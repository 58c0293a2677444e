package stack_test

import (
	"context"
	"encoding/json"
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
//   - A lost decision: the governor applied a slot's outcome and acked it,
//     and its schedule write is undone. The zombie check used to take the
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
	started := map[string]*stack.Stack{}
	srv.Each(t, []string{"governor", "executor", "sweeper"}, func(name string, js jetstream.JetStream) {
		if name == "executor" || name == "sweeper" {
			// Started once the lost write is in place (below).
			started[name] = nil
			return
		}
		started[name] = startRepairStack(t, name, js)
	})
	ctx := t.Context()
	schedules, err := srv.JS.KeyValue(ctx, streams.BucketSchedules)
	if err != nil {
		t.Fatal(err)
	}
	readState := func(id string) (gov.State, bool) {
		e, err := schedules.Get(ctx, id)
		if err != nil {
			return gov.State{}, false
		}
		var st gov.State
		return st, json.Unmarshal(e.Value(), &st) == nil
	}

	// The lost decision. The governor applies the outcome of a slot 10
	// minutes ago and acks it.
	slot := time.Now().UTC().Add(-10 * time.Minute).Truncate(time.Millisecond)
	spec := events.TaskSpec{ID: "lost", Target: events.Target{HTTP: &events.HTTPTarget{URL: target.srv.URL}}, Schedule: events.Schedule{Interval: events.Duration(time.Hour)}}
	before := gov.State{
		TaskID: "lost", NextRunAt: slot, Source: gov.SourceBaselineInterval,
		LastScheduledAt: slot.Add(-time.Hour), LastSuccessAt: slot.Add(-time.Hour),
	}
	putJSON(t, srv.JS, streams.BucketTasks, "lost", spec)
	putJSON(t, srv.JS, streams.BucketSchedules, "lost", before)
	r := events.Run{
		DispatchID: events.DispatchID("lost", slot), TaskID: "lost", ScheduledAt: slot, Attempt: 1,
		StartedAt: slot, FinishedAt: slot.Add(time.Second), Final: true,
	}
	if err := jsutil.PublishEvent(ctx, srv.JS, events.RunSubject(events.OutcomeSucceeded, "lost"), r.DispatchID+"/1",
		events.TypeRunSucceeded, "flyball/executor/test", "lost", r, r.FinishedAt); err != nil {
		t.Fatal(err)
	}
	runs, err := srv.JS.Stream(ctx, streams.StreamRuns)
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "the governor applies and acks the slot's outcome", func() bool {
		st, ok := readState("lost")
		c, err := runs.Consumer(ctx, streams.ConsumerGovernor)
		return ok && st.NextRunAt.After(slot) && err == nil && c.CachedInfo().AckFloor.Stream >= 1
	})
	// Its decision is lost: the schedule names the slot again.
	putJSON(t, srv.JS, streams.BucketSchedules, "lost", before)

	skipped := record(t, srv.NC, events.RunSubject(events.OutcomeSkipped, "lost"), func(m *nats.Msg) (events.Run, bool) {
		e, err := events.Decode(m.Header, m.Data)
		var s events.Run
		return s, err == nil && events.DecodeRun(e, &s) == nil
	})
	srv.Each(t, []string{"executor", "sweeper"}, func(name string, js jetstream.JetStream) {
		started[name] = startRepairStack(t, name, js)
	})
	sweeper := started["sweeper"]
	natstest.Eventually(t, 10*time.Second, "the slot reported skipped as already run", func() bool {
		for _, s := range skipped() {
			if s.DispatchID == r.DispatchID && strings.HasPrefix(s.Reason, "already ran") {
				return true
			}
		}
		return false
	})
	natstest.Eventually(t, 10*time.Second, "the governor plans the next slot", func() bool {
		st, ok := readState("lost")
		return ok && st.NextRunAt.After(slot)
	})
	m := sweeper.Metrics()
	if got := testutil.ToFloat64(m.SchedulesRepaired.WithLabelValues("lost-write")); got != 1 {
		t.Errorf("flyball_schedules_repaired_total{reason=lost-write} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.ZombiesRenudged); got != 0 {
		t.Errorf("flyball_zombies_renudged_total = %v, want 0: the slot ran, it was its schedule that was lost", got)
	}
	if calls := target.Calls(); len(calls) != 0 {
		t.Fatalf("the target was called %d times for a slot that had run", len(calls))
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
	natstest.Eventually(t, 10*time.Second, "unsched scheduled", func() bool { _, ok := readState("unsched"); return ok })
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
		st, ok := readState("unsched")
		return ok && !st.NextRunAt.IsZero()
	})
	missing := m.SchedulesRepaired.WithLabelValues("missing")
	if got := testutil.ToFloat64(missing); got != 1 {
		t.Errorf("flyball_schedules_repaired_total{reason=missing} = %v, want 1", got)
	}

	// With the governor stopped, a spec with no schedule gets one
	// task.created, which waits on TASKS: no sweep publishes another.
	started["governor"].Stop()
	putJSON(t, srv.JS, streams.BucketTasks, "waiting", events.TaskSpec{ID: "waiting", Target: spec.Target, Schedule: spec.Schedule})
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
