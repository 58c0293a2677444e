package query_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/governor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/query"
	"github.com/flyballhq/flyball/streams"
)

// TestExplainFollowsTheOrderTheStoredScheduleRecords: the governor reads
// each stream on its own, so it may apply a command before a run outcome
// stored a moment earlier (its RUNS consumer behind, or retrying). The
// schedule it stores is then decided by the outcome, and records the
// command's sequence (lastCommandSeq). explain, replaying by stored time,
// listed the resume before the outcome: a timeline the governor had not
// taken, and one that can end elsewhere than the stored schedule.
func TestExplainFollowsTheOrderTheStoredScheduleRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := natstest.StartWithStreams(t)
	_, js := srv.Connect(t)
	const id = "crossed"
	now := time.Now().UTC().Truncate(time.Millisecond)
	// No governor: the test stores what it would have, had it applied the
	// resume before the outcome.
	publishEvent(t, js, events.TaskSubject(events.VerbCreated, id), events.TypeTaskCreated, id, "c1", json.RawMessage(fmt.Sprintf(minuteSpec, id)))
	publishEvent(t, js, events.TaskSubject(events.VerbPaused, id), events.TypeTaskPaused, id, "p1", events.TaskPause{ID: id})
	// the run in flight when the pause came, and the resume sent as it ended
	publishEvent(t, js, events.RunSubject(events.OutcomeSucceeded, id), events.TypeRunSucceeded, id, "run-1",
		events.Run{DispatchID: "d1", TaskID: id, ScheduledAt: now.Add(time.Minute), FinishedAt: now.Add(time.Minute)})
	publishEvent(t, js, events.TaskSubject(events.VerbResumed, id), events.TypeTaskResumed, id, "r1", events.TaskRef{ID: id})

	var steps []governor.Step
	for _, s := range []string{streams.StreamTasks, streams.StreamRuns} {
		if err := query.Scan(ctx, js, query.ScanOptions{Stream: s}, func(m query.Message) error {
			step, err := governor.Translate(m.Subject, m.Header, m.Data, m.Time)
			step.Seq = m.Seq
			steps = append(steps, step)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	// create, pause, resume (TASKS), then the outcome (RUNS), stored before the resume
	entries := governor.ReplayAnswers(steps, func(int) governor.Answer { return governor.Answer{Accepted: true, Known: true} })
	last := entries[len(entries)-1]
	if last.Step.Input.Kind != gov.KindOutcome {
		t.Fatalf("the governor's order ends with %s, want the outcome", last.Step.Input.Kind)
	}
	putKV(t, js, streams.BucketTasks, id, fmt.Sprintf(minuteSpec, id))
	state, err := json.Marshal(last.Decision.State)
	if err != nil {
		t.Fatal(err)
	}
	putKV(t, js, streams.BucketSchedules, id, string(state))

	q, err := query.NewReader(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := q.Explain(ctx, id, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if !ex.Agrees || ex.Pending != 0 {
		t.Fatalf("explain: agrees=%v, %d pending, warnings %q; timeline:\n%s", ex.Agrees, ex.Pending, ex.Warnings, timelineText(ex))
	}
	var order []string
	for _, s := range ex.Timeline {
		order = append(order, fmt.Sprint(s.Stream, " ", s.Seq))
	}
	if want := []string{"TASKS 1", "TASKS 2", "TASKS 3", "RUNS 1"}; !slices.Equal(order, want) {
		t.Errorf("timeline %v, want the governor's order %v", order, want)
	}
	if len(ex.Warnings) != 1 || !strings.Contains(ex.Warnings[0], "decided by RUNS 1") || !strings.Contains(ex.Warnings[0], "applied TASKS 3") {
		t.Errorf("warnings %q, want one naming the input applied out of stored order (RUNS 1)", ex.Warnings)
	}
}

// putKV stores value under key in bucket, as the governor would.
func putKV(t *testing.T, js jetstream.JetStream, bucket, key, value string) {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), key, []byte(value)); err != nil {
		t.Fatal(err)
	}
}
