package governor

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

func startGovernor(t *testing.T) (*Service, jetstream.JetStream) {
	t.Helper()
	srv := natstest.StartWithStreams(t)
	s, err := New(Config{JS: srv.JS})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	<-s.specs.Ready()
	return s, srv.JS
}

// succeeded publishes a run.succeeded for task id and waits until the
// governor has acked it.
func succeeded(t *testing.T, js jetstream.JetStream, id string, slot time.Time) {
	t.Helper()
	run := events.Run{DispatchID: events.DispatchID(id, slot), TaskID: id, ScheduledAt: slot, Attempt: 1, FinishedAt: time.Now().UTC(), Status: 200}
	body, err := events.Marshal(events.OutcomeSucceeded.Type(), "test", id, run, time.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(t.Context(), events.RunSubject(events.OutcomeSucceeded, id), body)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(t.Context(), streams.StreamRuns, streams.ConsumerGovernor)
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "governor acks the outcome", func() bool {
		info, err := cons.Info(context.Background())
		return err == nil && info.AckFloor.Stream >= ack.Sequence
	})
}

// TestStaleSpecViewDoesNotResurrectADeletedTask: the spec view can lag a
// deletion; an outcome arriving in that moment must not write a fresh
// schedule (the timer would dispatch a deleted task forever).
func TestStaleSpecViewDoesNotResurrectADeletedTask(t *testing.T) {
	s, js := startGovernor(t)
	spec := events.TaskSpec{ID: "gone", Schedule: events.Schedule{Interval: events.Duration(time.Minute)}, Target: events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/"}}}
	spec.Normalize()
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	// The view believes the task exists; the bucket has neither spec nor schedule.
	s.specs.Put("gone", 1<<40, raw)
	succeeded(t, js, "gone", time.Now().UTC().Truncate(time.Second))
	if _, err := s.schedules.Get(t.Context(), "gone"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("schedule of a deleted task: err = %v, want ErrKeyNotFound", err)
	}
}

// TestDecisionsUseTheRememberedRevision: after the first decision the
// governor writes at the revision it remembers; a write by someone else
// in between costs one conflict and a re-read, never a lost update.
func TestDecisionsUseTheRememberedRevision(t *testing.T) {
	s, js := startGovernor(t)
	spec := events.TaskSpec{ID: "t", Schedule: events.Schedule{Interval: events.Duration(time.Minute)}, Target: events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/"}}}
	spec.Normalize()
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.tasks.Put(t.Context(), "t", raw); err != nil {
		t.Fatal(err)
	}
	slot := time.Now().UTC().Truncate(time.Second)
	st := gov.State{TaskID: "t", NextRunAt: slot, Source: gov.SourceBaselineInterval}
	body, _ := json.Marshal(st)
	if _, err := s.schedules.Create(t.Context(), "t", body); err != nil {
		t.Fatal(err)
	}
	succeeded(t, js, "t", slot)
	_, rev1, ok := s.states.get("t")
	if !ok {
		t.Fatal("the decision's state was not remembered")
	}
	// Someone else rewrites the schedule: the remembered revision is stale.
	ent, err := s.schedules.Get(t.Context(), "t")
	if err != nil || ent.Revision() != rev1 {
		t.Fatalf("stored revision %v, remembered %d (err %v)", ent, rev1, err)
	}
	var cur gov.State
	if err := json.Unmarshal(ent.Value(), &cur); err != nil {
		t.Fatal(err)
	}
	next := cur.NextRunAt
	if _, err := s.schedules.Put(t.Context(), "t", ent.Value()); err != nil {
		t.Fatal(err)
	}
	succeeded(t, js, "t", next)
	ent, err = s.schedules.Get(t.Context(), "t")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(ent.Value(), &cur); err != nil {
		t.Fatal(err)
	}
	if cur.LastScheduledAt.Before(next) || !cur.NextRunAt.After(next) {
		t.Fatalf("the second outcome was lost after a conflict: %+v", cur)
	}
	if _, rev, _ := s.states.get("t"); rev != ent.Revision() {
		t.Fatalf("remembered revision %d, stored %d", rev, ent.Revision())
	}
}
