package sweeper

import (
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/streams"
)

// TestUnscheduledWaitsZombieAfterBySweeperClock: a spec is repaired only
// once sweeps have seen it without a schedule for longer than ZombieAfter
// (a creation writes its spec a moment before its schedule, and a crashed
// governor's task.created is redelivered within its 30s AckWait). A spec
// whose schedule appears leaves the count, and one that loses it again
// starts over.
func TestUnscheduledWaitsZombieAfterBySweeperClock(t *testing.T) {
	s := &Service{cfg: Config{ZombieAfter: time.Minute}}
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	steps := []struct {
		at      time.Duration
		missing []string
		want    []string
	}{
		{0, []string{"a", "b"}, nil},
		{30 * time.Second, []string{"a", "b"}, nil},
		{time.Minute, []string{"a", "b"}, nil}, // not longer than ZombieAfter yet
		{61 * time.Second, []string{"a"}, []string{"a"}},
		{62 * time.Second, []string{"a", "b"}, []string{"a"}}, // b starts over
		{2 * time.Minute, []string{"b"}, nil},
		{2*time.Minute + 3*time.Second, []string{"b"}, []string{"b"}},
	}
	for _, st := range steps {
		got := s.unscheduledFor(st.missing, t0.Add(st.at))
		slices.Sort(got)
		if !slices.Equal(got, st.want) {
			t.Fatalf("at +%v with %v missing: due %v, want %v", st.at, st.missing, got, st.want)
		}
	}
}

// TestZombieCheckReadsTheStoredSchedule: the view can lag the bucket (a
// watch being established again answers from its last state). A zombie
// check on the view's schedule re-dispatched a slot that the stored
// schedule had already moved past (and the lost-write repair would take
// its acked outcome for a lost decision); the check now reads the
// schedule first, and corrects the view instead.
func TestZombieCheckReadsTheStoredSchedule(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	now := time.Now().UTC()
	tasks, schedules := taskBuckets(t, srv.JS)
	if _, err := tasks.Put(ctx, "moved", []byte(`{"id":"moved","schedule":{"interval":"1h"}}`)); err != nil {
		t.Fatal(err)
	}
	stored := gov.State{TaskID: "moved", NextRunAt: now.Add(time.Hour), Source: gov.SourceBaselineInterval, LastScheduledAt: now.Add(-time.Minute)}
	if _, err := schedules.Put(ctx, "moved", stateJSON(stored)); err != nil {
		t.Fatal(err)
	}
	s := startHourly(t, srv.JS)

	old := stored
	old.NextRunAt, old.LastScheduledAt = now.Add(-10*time.Minute), now.Add(-70*time.Minute)
	s.view.mu.Lock()
	s.view.schedules["moved"] = schedule{TaskID: "moved", NextRunAt: old.NextRunAt, Source: old.Source, LastScheduledAt: old.LastScheduledAt}
	s.view.mu.Unlock()
	s.sweepTasks(ctx, now)

	dispatch, err := srv.JS.Stream(ctx, streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := dispatch.GetLastMsgForSubject(ctx, events.DispatchSubject("moved")); err == nil {
		t.Fatalf("a slot only the view named was dispatched: %s", m.Data)
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatal(err)
	}
	s.view.mu.Lock()
	got := s.view.schedules["moved"].NextRunAt
	s.view.mu.Unlock()
	if !got.Equal(stored.NextRunAt) {
		t.Fatalf("the view names %v after the check, want the stored %v", got, stored.NextRunAt)
	}
}

// startHourly starts a sweeper that sweeps every hour and returns after
// its first sweep, at start: a test then calls what it checks itself,
// with no sweep running alongside.
func startHourly(t *testing.T, js jetstream.JetStream) *Service {
	t.Helper()
	return startHourlyWith(t, svcconf.Common{JS: js})
}

// startHourlyWith is startHourly with the service's JetStream and logger
// of c.
func startHourlyWith(t *testing.T, c svcconf.Common) *Service {
	t.Helper()
	s, err := New(Config{Common: c, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	<-s.Swept()
	return s
}

// taskBuckets binds flyball-tasks and flyball-schedules, which the tests
// write as the governor would.
func taskBuckets(t *testing.T, js jetstream.JetStream) (tasks, schedules jetstream.KeyValue) {
	t.Helper()
	return bucket(t, js, streams.BucketTasks), bucket(t, js, streams.BucketSchedules)
}

// bucket binds the KV bucket name.
func bucket(t *testing.T, js jetstream.JetStream, name string) jetstream.KeyValue {
	t.Helper()
	kv, err := js.KeyValue(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// TestAZombieReNudgedByTwoReplicasCountsOnce: two sweeper replicas that
// both find a zombie, each before the other's re-dispatch shows in
// DISPATCH (here: the first one's taken out again before the second
// looks), publish the same dispatch ID. DISPATCH stores it once, and the
// second, told it was a duplicate, must not count a second re-nudge:
// flyball_zombies_renudged_total, summed over the replicas, said two.
func TestAZombieReNudgedByTwoReplicasCountsOnce(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	now := time.Now().UTC()
	tasks, schedules := taskBuckets(t, srv.JS)
	if _, err := tasks.Put(ctx, "stuck", []byte(`{"id":"stuck","schedule":{"interval":"1h"}}`)); err != nil {
		t.Fatal(err)
	}
	st := gov.State{TaskID: "stuck", NextRunAt: now.Add(-10 * time.Minute), Source: gov.SourceBaselineInterval, LastScheduledAt: now.Add(-70 * time.Minute)}
	if _, err := schedules.Put(ctx, "stuck", stateJSON(st)); err != nil {
		t.Fatal(err)
	}
	a, b := startHourly(t, srv.JS), startHourly(t, srv.JS)
	dispatch, err := srv.JS.Stream(ctx, streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	// The replicas started with a sweep each; the zombie is re-nudged by
	// whichever came first. Take its dispatch out, as if the second had
	// checked DISPATCH before it was stored.
	natstest.Eventually(t, 10*time.Second, "the first re-nudge", func() bool {
		return testutil.ToFloat64(a.cfg.Metrics.ZombiesRenudged)+testutil.ToFloat64(b.cfg.Metrics.ZombiesRenudged) == 1
	})
	m, err := dispatch.GetLastMsgForSubject(ctx, events.DispatchSubject("stuck"))
	if err != nil {
		t.Fatal(err)
	}
	if err := dispatch.DeleteMsg(ctx, m.Sequence); err != nil {
		t.Fatal(err)
	}
	a.sweepTasks(ctx, now)
	b.sweepTasks(ctx, now)
	if n := testutil.ToFloat64(a.cfg.Metrics.ZombiesRenudged) + testutil.ToFloat64(b.cfg.Metrics.ZombiesRenudged); n != 1 {
		t.Fatalf("flyball_zombies_renudged_total over both replicas = %v for one re-dispatch stored, want 1", n)
	}
}

// TestAMissingScheduleRepairedByTwoReplicasCountsOnce: two sweeper
// replicas that both find a task's schedule missing publish the same
// task.created (one Nats-Msg-Id per spec revision); TASKS stores it once,
// and the repair is counted once, by the replica whose publish was
// stored.
func TestAMissingScheduleRepairedByTwoReplicasCountsOnce(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	now := time.Now().UTC()
	tasks, _ := taskBuckets(t, srv.JS)
	if _, err := tasks.Put(ctx, "lost", []byte(`{"id":"lost","target":{"http":{"url":"https://example.com/"}},"schedule":{"interval":"1h"}}`)); err != nil {
		t.Fatal(err)
	}
	a, b := startHourly(t, srv.JS), startHourly(t, srv.JS)
	a.reschedule(ctx, newAckFloors(), "lost", now)
	// Take the first repair's task.created out, as if the second replica
	// had checked TASKS before it was stored; its Nats-Msg-Id stays in the
	// duplicate window.
	cmds, err := srv.JS.Stream(ctx, streams.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	m, err := cmds.GetLastMsgForSubject(ctx, events.TaskSubject(events.VerbCreated, "lost"))
	if err != nil {
		t.Fatalf("no repair published by the first replica: %v", err)
	}
	if err := cmds.DeleteMsg(ctx, m.Sequence); err != nil {
		t.Fatal(err)
	}
	b.reschedule(ctx, newAckFloors(), "lost", now)
	missing := func(s *Service) float64 {
		return testutil.ToFloat64(s.cfg.Metrics.SchedulesRepaired.WithLabelValues(repairMissing))
	}
	if n := missing(a) + missing(b); n != 1 {
		t.Fatalf(`flyball_schedules_repaired_total{reason="missing"} over both replicas = %v for one task.created stored, want 1`, n)
	}
}

// TestMissingScheduleOfASpecNoRuleAcceptsIsNotRepaired: a task with no
// schedule whose stored spec breaks a rule even of a spec already stored
// (TaskSpec.ValidateStored: written by hand, say) would not run if it
// were scheduled, and the governor rejects its repair. The sweeper
// published it anyway, every 5 minutes for good, and counted each as a
// repair in flyball_schedules_repaired_total{reason="missing"}, with
// nothing in its log to say why the task stayed unscheduled. It now
// publishes nothing, counts nothing, and logs the rules the spec breaks.
func TestMissingScheduleOfASpecNoRuleAcceptsIsNotRepaired(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	tasks, _ := taskBuckets(t, srv.JS)
	const raw = `{"id":"broken","target":{"http":{"url":"https://example.com/"}},"schedule":{"interval":"200ms"}}`
	var spec events.TaskSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil || spec.ValidateStored() == nil {
		t.Fatalf("the spec must break a rule of stored specs: %v", err)
	}
	if _, err := tasks.Put(ctx, "broken", []byte(raw)); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	s := startHourlyWith(t, svcconf.Common{JS: srv.JS, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	s.reschedule(ctx, newAckFloors(), "broken", time.Now())
	cmds, err := srv.JS.Stream(ctx, streams.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := cmds.GetLastMsgForSubject(ctx, events.TaskSubject(events.VerbCreated, "broken")); err == nil {
		t.Errorf("a repair the governor rejects was published: %s %s", m.Header.Get(jetstream.MsgIDHeader), m.Data)
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(s.cfg.Metrics.SchedulesRepaired.WithLabelValues(repairMissing)); n != 0 {
		t.Errorf(`flyball_schedules_repaired_total{reason="missing"} = %v for a spec no rule accepts, want 0`, n)
	}
	if got := linesWith(logs.String(), "task has no schedule and its stored spec breaks a rule", "task=broken", "schedule.interval"); len(got) != 1 {
		t.Errorf("want one line saying why broken is not repaired; the sweeper wrote:\n%s", logs.String())
	}
}
