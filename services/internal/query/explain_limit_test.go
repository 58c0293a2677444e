package query_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
)

// TestExplainHoldsAtMostMaxInputs: TASKS and DEADLETTER have no
// per-subject limit, so a task hinted every few seconds has hundreds of
// thousands of inputs, and explain held them all. Past its limit it keeps
// the creation the replay starts from and the newest inputs, and says
// which it left out.
func TestExplainHoldsAtMostMaxInputs(t *testing.T) {
	js, q := governorOnly(t)
	const id = "chatty"
	publishEvent(t, js, events.TaskSubject(events.VerbCreated, id), events.TypeTaskCreated, id, "c1", json.RawMessage(fmt.Sprintf(minuteSpec, id)))
	for i := range 4 {
		publishEvent(t, js, events.TaskSubject(events.VerbPaused, id), events.TypeTaskPaused, id, fmt.Sprint("p", i), events.TaskPause{ID: id, Reason: fmt.Sprint("pause ", i)})
		publishEvent(t, js, events.TaskSubject(events.VerbResumed, id), events.TypeTaskResumed, id, fmt.Sprint("r", i), events.TaskRef{ID: id})
	}
	publishEvent(t, js, events.TaskSubject(events.VerbPaused, id), events.TypeTaskPaused, id, "last", events.TaskPause{ID: id, Reason: "the last"})
	governorCaughtUp(t, js)
	explainMatchesStore(t, q, id) // all 10 inputs, under the default limit

	q.MaxExplainInputs = 3
	ex, err := q.Explain(context.Background(), id, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	tl := timelineText(ex)
	if len(ex.Timeline) != 3 || ex.Timeline[0].Input != "task.created" || ex.Timeline[1].Input != "task.resumed" ||
		ex.Timeline[2].Input != "task.paused" || ex.Stored == nil || ex.Timeline[2].Seq != ex.Stored.LastCommandSeq {
		t.Fatalf("with at most 3 inputs, want the creation and the newest two; timeline:\n%s", tl)
	}
	if !ex.Agrees {
		t.Errorf("the last pause decides the schedule alone, yet the replay disagrees:\n%s", tl)
	}
	if len(ex.Warnings) != 1 || !strings.Contains(ex.Warnings[0], "at most 3 inputs") || !strings.Contains(ex.Warnings[0], "the 7 stored from") ||
		!strings.Contains(ex.Warnings[0], "incomplete history") {
		t.Errorf("warnings %q; want one naming the limit and the 7 inputs left out", ex.Warnings)
	}

	// Deleted and created again: the replay starts from the new creation,
	// not from the first, whose schedule the delete ended.
	publishEvent(t, js, events.TaskSubject(events.VerbDeleted, id), events.TypeTaskDeleted, id, "d1", events.TaskRef{ID: id})
	governorCaughtUp(t, js)
	deleted := time.Now()
	publishEvent(t, js, events.TaskSubject(events.VerbCreated, id), events.TypeTaskCreated, id, "c2", json.RawMessage(fmt.Sprintf(minuteSpec, id)))
	for i := range 3 {
		publishEvent(t, js, events.TaskSubject(events.VerbPaused, id), events.TypeTaskPaused, id, fmt.Sprint("p2-", i), events.TaskPause{ID: id, Reason: "again"})
		publishEvent(t, js, events.TaskSubject(events.VerbResumed, id), events.TypeTaskResumed, id, fmt.Sprint("r2-", i), events.TaskRef{ID: id})
	}
	governorCaughtUp(t, js)
	ex, err = q.Explain(context.Background(), id, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if tl := timelineText(ex); len(ex.Timeline) != 3 || ex.Timeline[0].Input != "task.created" || !ex.Timeline[0].At.After(deleted) || !ex.Agrees {
		t.Fatalf("with at most 3 inputs of a task created again, want its new creation and the newest two, agreeing (agrees=%v); timeline:\n%s", ex.Agrees, tl)
	}
}
