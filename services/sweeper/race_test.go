package sweeper

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/streams"
)

// racedJS is the sweeper's JetStream with a racer: before a publish to
// subject, race runs, and an error it returns is the publish's. A test
// stores there what another publisher (the timer, another sweeper
// replica) stores between the sweeper's check and its publish, a window
// too small to hit by timing.
type racedJS struct {
	jetstream.JetStream
	subject string
	race    func(ctx context.Context, m *nats.Msg) error
}

func (r *racedJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if m.Subject == r.subject && r.race != nil {
		if err := r.race(ctx, m); err != nil {
			return nil, err
		}
	}
	return r.JetStream.PublishMsg(ctx, m, opts...)
}

// inProcess is the error a clustered stream answers a message whose
// Nats-Msg-Id it is storing for another publisher right now (nats-server
// JSStreamDuplicateMessageConflict). A single embedded server never
// answers it: only a clustered stream's proposal path does.
func inProcess() error {
	return &jetstream.APIError{Code: 409, ErrorCode: 10158, Description: "duplicate message id is in process"}
}

// storeTheSame stores m itself, unraced, then answers 10158: the same
// message, published by someone else, was being stored. It answers so
// once: jsutil.PublishNewEvent publishes again until the stream answers
// stored or duplicate, and the stream answers that try a duplicate, as a
// clustered stream does once the other publish is stored.
func storeTheSame(js jetstream.JetStream) func(context.Context, *nats.Msg) error {
	var answered atomic.Bool
	return func(ctx context.Context, m *nats.Msg) error {
		if answered.Swap(true) {
			return nil
		}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			return err
		}
		return inProcess()
	}
}

// startRaced starts a sweeper on js raced on subject, once its first
// sweep is done: the test calls what it checks itself.
func startRaced(t *testing.T, js jetstream.JetStream, subject string, logs *records) (*Service, *racedJS) {
	t.Helper()
	raced := &racedJS{JetStream: js, subject: subject}
	return startHourlyWith(t, svcconf.Common{JS: raced, Logger: slog.New(logs)}), raced
}

// putZombie stores task id with a schedule naming a slot ten minutes
// past due, never dispatched, and returns that slot.
func putZombie(t *testing.T, js jetstream.JetStream, id string, now time.Time) time.Time {
	t.Helper()
	tasks, schedules := taskBuckets(t, js)
	if _, err := tasks.Put(t.Context(), id, []byte(`{"id":"`+id+`","schedule":{"interval":"1h"}}`)); err != nil {
		t.Fatal(err)
	}
	due := now.Add(-10 * time.Minute).Truncate(time.Millisecond)
	st := gov.State{TaskID: id, NextRunAt: due, Source: gov.SourceBaselineInterval, LastScheduledAt: now.Add(-70 * time.Minute)}
	if _, err := schedules.Put(t.Context(), id, stateJSON(st)); err != nil {
		t.Fatal(err)
	}
	return due
}

const (
	renudged      = "zombie run re-nudged: due long ago, never dispatched or never finished"
	renudgeFailed = "zombie re-nudge failed; next sweep retries"
	renudgeDrop   = "zombie re-nudge dropped: the slot was dispatched within DISPATCH's duplicate window; the next sweep tries again"
)

// TestAZombieDispatchedBeforeItsReNudgeIsNotCounted: the timer dispatches
// a zombie's task after the sweeper found no dispatch pending and before
// its re-nudge; DISPATCH refuses the re-nudge (error 10077, one pending
// dispatch per task). Nothing was re-nudged: the executor has the task's
// dispatch, as when the check finds it. The sweeper counted it in
// flyball_zombies_renudged_total and logged it re-nudged.
func TestAZombieDispatchedBeforeItsReNudgeIsNotCounted(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	logs := &records{}
	s, raced := startRaced(t, srv.JS, events.DispatchSubject("late"), logs)
	now := time.Now().UTC()
	due := putZombie(t, srv.JS, "late", now)

	// The timer's dispatch of the task's next slot: the governor moved the
	// schedule on after the sweeper read it.
	next := due.Add(time.Hour)
	timers := events.Dispatch{DispatchID: events.DispatchID("late", next), TaskID: "late", ScheduledAt: next, FiredAt: now, Source: string(gov.SourceBaselineInterval)}
	raced.race = func(ctx context.Context, _ *nats.Msg) error {
		raced.race = nil
		_, err := jsutil.PublishNewEvent(ctx, srv.JS, events.DispatchSubject("late"), timers.DispatchID, events.TypeRunDue, "timer", "late", timers, now)
		return err
	}
	s.renudge(ctx, newAckFloors(), schedule{TaskID: "late"}, now)

	dispatch, err := srv.JS.Stream(ctx, streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	m, err := dispatch.GetLastMsgForSubject(ctx, events.DispatchSubject("late"))
	if err != nil {
		t.Fatal(err)
	}
	if id := m.Header.Get(jetstream.MsgIDHeader); id != timers.DispatchID {
		t.Fatalf("DISPATCH holds %q, want the timer's %q (did the race run?)", id, timers.DispatchID)
	}
	if n := testutil.ToFloat64(s.cfg.Metrics.ZombiesRenudged); n != 0 {
		t.Fatalf("flyball_zombies_renudged_total = %v for a re-nudge DISPATCH refused (a dispatch pending), want 0", n)
	}
	if n := testutil.ToFloat64(s.cfg.Metrics.SchedulesRepaired.WithLabelValues(repairLostWrite)); n != 0 {
		t.Fatalf(`flyball_schedules_repaired_total{reason="lost-write"} = %v, want 0`, n)
	}
	for _, msg := range []string{renudged, renudgeFailed, renudgeDrop} {
		if got := logs.named(msg); len(got) != 0 {
			t.Fatalf("logged %+v for a re-nudge refused because a dispatch is pending, want no %q", got, msg)
		}
	}
}

// TestAZombieReNudgeStoredMeanwhileBySomeoneElseIsADuplicate: a zombie's
// re-nudge DISPATCH answers with error 10158, the same dispatch ID being
// stored right now by another sweeper replica or the timer. The slot is
// dispatched, once, by them: it is the duplicate path (logged at Info,
// not counted), not a failure logged at Warn.
func TestAZombieReNudgeStoredMeanwhileBySomeoneElseIsADuplicate(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	logs := &records{}
	s, raced := startRaced(t, srv.JS, events.DispatchSubject("late"), logs)
	now := time.Now().UTC()
	due := putZombie(t, srv.JS, "late", now)
	raced.race = storeTheSame(srv.JS)
	s.renudge(ctx, newAckFloors(), schedule{TaskID: "late"}, now)

	if n := testutil.ToFloat64(s.cfg.Metrics.ZombiesRenudged); n != 0 {
		t.Fatalf("flyball_zombies_renudged_total = %v for a re-nudge stored by someone else, want 0", n)
	}
	if got := logs.named(renudgeFailed); len(got) != 0 {
		t.Fatalf("logged %+v for a re-nudge stored by someone else, want no %q", got, renudgeFailed)
	}
	if got := logs.named(renudgeDrop); len(got) != 1 || got[0].level != slog.LevelInfo || got[0].attrs["task"] != "late" || got[0].attrs["due"] != due.Format(time.RFC3339Nano) {
		t.Fatalf("logged %+v, want one Info %q naming task late, due %s", got, renudgeDrop, due.Format(time.RFC3339Nano))
	}
}

// TestAMissingScheduleRepairStoredMeanwhileBySomeoneElseIsADuplicate: the
// missing-schedule repair's task.created answered with error 10158
// (another replica storing the same repair right now) was logged at Warn
// as not repaired; it is the other replica's repair, counted there.
func TestAMissingScheduleRepairStoredMeanwhileBySomeoneElseIsADuplicate(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	logs := &records{}
	s, raced := startRaced(t, srv.JS, events.TaskSubject(events.VerbCreated, "lost"), logs)
	tasks, _ := taskBuckets(t, srv.JS)
	if _, err := tasks.Put(ctx, "lost", []byte(`{"id":"lost","target":{"http":{"url":"https://example.com/"}},"schedule":{"interval":"1h"}}`)); err != nil {
		t.Fatal(err)
	}
	raced.race = storeTheSame(srv.JS)
	s.unscheduled = map[string]time.Time{"lost": time.Now().Add(-time.Hour)}
	s.reschedule(ctx, newAckFloors(), "lost", time.Now().UTC())

	if got := logs.named("missing schedule not repaired; next sweep retries"); len(got) != 0 {
		t.Fatalf("logged %+v for a repair another replica is storing, want none", got)
	}
	if n := testutil.ToFloat64(s.cfg.Metrics.SchedulesRepaired.WithLabelValues(repairMissing)); n != 0 {
		t.Fatalf(`flyball_schedules_repaired_total{reason="missing"} = %v for a repair stored by someone else, want 0`, n)
	}
	if _, ok := s.unscheduled["lost"]; ok {
		t.Fatal("the repair stored by someone else is not taken as published: the task is still timed as unscheduled")
	}
}

// TestAnOfflineAnnouncementBeingStoredIsAnnounced: runtime.offline
// answered with error 10158 (an earlier try, still being replicated) is
// stored: it was logged at Warn as not published and kept for the next
// sweep.
func TestAnOfflineAnnouncementBeingStoredIsAnnounced(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	logs := &records{}
	subject := events.RuntimeSubject(events.RuntimeOffline, "executor", "gone")
	s, raced := startRaced(t, srv.JS, subject, logs)
	raced.race = storeTheSame(srv.JS)
	hb := events.Heartbeat{Kind: "executor", Name: "gone", Status: events.RuntimeOffline, LastBeat: time.Now().UTC().Add(-time.Minute)}
	s.unannounced["executor.gone"] = offlineMark{lastBeat: hb.LastBeat, at: time.Now().UTC()}
	s.announceOffline(ctx, "executor.gone", hb, time.Now().UTC())

	if got := logs.named("runtime.offline not published; next sweep retries"); len(got) != 0 {
		t.Fatalf("logged %+v for an announcement being stored, want none", got)
	}
	if _, ok := s.unannounced["executor.gone"]; ok {
		t.Fatal("an announcement being stored is kept for the next sweep to publish again")
	}
}

// movingSchedules is flyball-schedules as the sweeper reads it, with
// moved run once right after the first Get returns: the governor writing
// its decision and acking the outcome between the zombie check's re-read
// of the schedule and what follows it.
type movingSchedules struct {
	jetstream.KeyValue
	moved func(ctx context.Context)
}

func (k *movingSchedules) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	e, err := k.KeyValue.Get(ctx, key)
	if k.moved != nil {
		k.moved(ctx)
		k.moved = nil
	}
	return e, err
}

// TestAnOutcomeAppliedDuringTheZombieCheckIsNoLostWrite: a zombie whose
// slot's outcome is on RUNS, not yet applied (the governor behind). The
// governor wrote its next schedule and acked the outcome after the
// sweeper re-read the schedule and before it read the governor's ack
// floor: the sweeper took the acked outcome of a slot its (stale) read
// still named for a lost write, published a lost-write dispatch (which
// then held up the next slot's dispatch, error 10077) and counted and
// logged a repair. The floors are read before the schedule now: an older
// floor only says the governor is behind.
func TestAnOutcomeAppliedDuringTheZombieCheckIsNoLostWrite(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	s := startHourly(t, srv.JS)
	now := time.Now().UTC()
	due := putZombie(t, srv.JS, "moving", now)
	d := events.Dispatch{DispatchID: events.DispatchID("moving", due), TaskID: "moving", ScheduledAt: due}
	r := d.Run()
	r.Attempt, r.StartedAt, r.FinishedAt, r.Final = 1, due, due.Add(time.Second), true
	if err := jsutil.PublishEvent(ctx, srv.JS, events.RunSubject(events.OutcomeSucceeded, "moving"), d.DispatchID+"/1",
		events.TypeRunSucceeded, "flyball/executor/test", "moving", r, r.FinishedAt); err != nil {
		t.Fatal(err)
	}
	_, schedules := taskBuckets(t, srv.JS)
	var applied bool
	s.schedules = &movingSchedules{KeyValue: s.schedules, moved: func(ctx context.Context) {
		next := gov.State{TaskID: "moving", NextRunAt: due.Add(time.Hour), Source: gov.SourceBaselineInterval, LastScheduledAt: due, LastSuccessAt: due}
		if _, err := schedules.Put(ctx, "moving", stateJSON(next)); err != nil {
			t.Error(err)
			return
		}
		c, err := srv.JS.Consumer(ctx, streams.StreamRuns, streams.ConsumerGovernor)
		if err != nil {
			t.Error(err)
			return
		}
		batch, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Error(err)
			return
		}
		for m := range batch.Messages() {
			if err := m.DoubleAck(ctx); err != nil {
				t.Error(err)
				return
			}
			applied = true
		}
	}}
	s.renudge(ctx, newAckFloors(), schedule{TaskID: "moving"}, now)

	if !applied {
		t.Fatal("the governor's consumer did not ack the outcome (did the race run?)")
	}
	if n := testutil.ToFloat64(s.cfg.Metrics.SchedulesRepaired.WithLabelValues(repairLostWrite)); n != 0 {
		t.Fatalf(`flyball_schedules_repaired_total{reason="lost-write"} = %v for an outcome the governor applied during the check, want 0`, n)
	}
	dispatch, err := srv.JS.Stream(ctx, streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := dispatch.GetLastMsgForSubject(ctx, events.DispatchSubject("moving")); err == nil {
		t.Fatalf("dispatched %s for an outcome the governor applied during the check", m.Data)
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatal(err)
	}
}
