package query_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/streams"
)

// TestExplainWarnsOfAnUnreadableStoredSpec: while a task's stored spec
// does not decode (written by hand, or by another version), the governor
// terminates its run outcomes unapplied, and explain, which takes the
// specs from TASKS, replays them: it reported a bare mismatch, with
// nothing to say why.
func TestExplainWarnsOfAnUnreadableStoredSpec(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js, q := governorOnly(t)
	const id = "garbled"
	publishEvent(t, js, events.TaskSubject(events.VerbCreated, id), events.TypeTaskCreated, id, "c1", json.RawMessage(fmt.Sprintf(minuteSpec, id)))
	governorCaughtUp(t, js)
	putKV(t, js, streams.BucketTasks, id, `{"id":`)
	now := time.Now().UTC()
	publishEvent(t, js, events.RunSubject(events.OutcomeSucceeded, id), events.TypeRunSucceeded, id, "run-1",
		events.Run{DispatchID: "d1", TaskID: id, ScheduledAt: now, FinishedAt: now.Add(time.Second)})
	governorCaughtUp(t, js)

	ex, err := q.Explain(ctx, id, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, w := range ex.Warnings {
		found = found || strings.Contains(w, "flyball-tasks")
	}
	if !found {
		t.Errorf("agrees=%v, warnings %q: want one saying the stored spec is unreadable; timeline:\n%s", ex.Agrees, ex.Warnings, timelineText(ex))
	}
}
