package sweeper

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
)

// recreatingTasks is flyball-tasks as the sweeper reads it, with the task
// created again (spec, then schedule, as the governor writes them) right
// after the sweeper found its spec missing: the moment between its check
// and its delete.
type recreatingTasks struct {
	jetstream.KeyValue
	recreate func(id string)
}

func (k *recreatingTasks) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	e, err := k.KeyValue.Get(ctx, key)
	if jsutil.IsKeyMissing(err) && k.recreate != nil {
		k.recreate(key)
		k.recreate = nil
	}
	return e, err
}

// TestOrphanPurgeSparesATaskCreatedAgain: the sweeper deletes the
// schedule of a task whose spec is gone. A task created again under the
// same ID between the sweeper's spec check and its purge (now a delete)
// lost its new schedule: with a spec and no schedule it was never
// dispatched, the sweeper had no schedule to find a zombie in, and
// nothing recorded it. The delete only removes the revision the sweeper
// judged.
func TestOrphanPurgeSparesATaskCreatedAgain(t *testing.T) {
	ctx := t.Context()
	s := unstartedSweeper(t)
	now := time.Now().UTC()
	// The deleted task's schedule, left behind.
	if _, err := s.schedules.Put(ctx, "again", stateJSON(gov.State{TaskID: "again", NextRunAt: now.Add(time.Hour), Source: gov.SourceBaselineInterval})); err != nil {
		t.Fatal(err)
	}
	tasks := s.tasks
	s.tasks = &recreatingTasks{KeyValue: tasks, recreate: func(id string) {
		spec, _ := json.Marshal(events.TaskSpec{ID: id, Schedule: events.Schedule{Interval: events.Duration(time.Minute)}})
		if _, err := tasks.Put(ctx, id, spec); err != nil {
			t.Error(err)
		}
		if _, err := s.schedules.Put(ctx, id, stateJSON(gov.State{TaskID: id, NextRunAt: now, Source: gov.SourceBaselineInterval, CreatedAt: now})); err != nil {
			t.Error(err)
		}
	}}
	s.removeOrphans(ctx, s.schedules, []string{"again"}, nil)
	e, err := s.schedules.Get(ctx, "again")
	if err != nil {
		t.Fatalf("the schedule of the task created again was removed (%v): it never runs", err)
	}
	var st gov.State
	if err := json.Unmarshal(e.Value(), &st); err != nil || !st.NextRunAt.Equal(now) {
		t.Fatalf("schedule after the sweep = %s (%v), want the new task's", e.Value(), err)
	}
}
