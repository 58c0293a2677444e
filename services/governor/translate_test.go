package governor

import (
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
)

// TestTranslateRun: an outcome becomes a KindOutcome input with the run's
// fields, and the timeline summary `flyball explain` prints.
func TestTranslateRun(t *testing.T) {
	slot := time.Date(2026, 11, 23, 10, 0, 1, 500_000_000, time.FixedZone("x", 3600))
	run := events.Run{
		DispatchID: events.DispatchID("t1", slot), TaskID: "t1", ScheduledAt: slot, Attempt: 2,
		FinishedAt: slot.Add(time.Second), Fingerprint: "f",
	}
	body, err := events.Marshal(events.OutcomeSucceeded.Type(), "test", "t1", run, slot, "ev")
	if err != nil {
		t.Fatal(err)
	}
	at := slot.Add(2 * time.Second)
	step, err := Translate(events.RunSubject(events.OutcomeSucceeded, "t1"), nil, body, at)
	if err != nil {
		t.Fatal(err)
	}
	want := gov.Outcome{DispatchID: run.DispatchID, ScheduledAt: slot, Result: "succeeded", FinishedAt: run.FinishedAt, Fingerprint: "f"}
	if step.Input.Kind != gov.KindOutcome || step.Input.Outcome == nil || !step.Input.Outcome.ScheduledAt.Equal(want.ScheduledAt) ||
		step.Input.Outcome.DispatchID != want.DispatchID || step.Input.Outcome.Result != want.Result || step.Input.Outcome.Fingerprint != "f" {
		t.Fatalf("input %+v, outcome %+v; want %+v", step.Input, step.Input.Outcome, want)
	}
	if s := "run succeeded (slot 2026-11-23T09:00:01.5Z, attempt 2)"; step.Summary != s {
		t.Fatalf("summary %q, want %q", step.Summary, s)
	}
	if step.TaskID != "t1" || !step.At.Equal(at) {
		t.Fatalf("task %q at %v", step.TaskID, step.At)
	}
}
