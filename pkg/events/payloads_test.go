package events_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
)

// TestIsDispatchID: IsDispatchID accepts exactly DispatchID(id, t), and
// checks it without allocating (the executor checks every dispatch).
func TestIsDispatchID(t *testing.T) { //nolint:paralleltest // AllocsPerRun refuses a parallel test
	slot := time.Date(2026, 3, 3, 10, 15, 0, 0, time.UTC)
	if got := events.DispatchID("t1", slot); !events.IsDispatchID(got, "t1", slot) {
		t.Fatalf("IsDispatchID(%q, t1, slot) = false", got)
	}
	for _, did := range []string{
		"", "t1", "t1:", "t2:1772532900000", "t1:1772532900001", "t1:+1772532900000",
		"t1:01772532900000", "t1:1772532900000 ", "t11772532900000", "t1_1772532900000", "t1:1772532900000:1",
	} {
		if events.IsDispatchID(did, "t1", slot) {
			t.Errorf("IsDispatchID(%q, t1, %s) = true", did, slot)
		}
	}
	did := events.DispatchID("t1", slot)
	if n := testing.AllocsPerRun(100, func() { events.IsDispatchID(did, "t1", slot) }); n != 0 {
		t.Errorf("IsDispatchID allocates %v times per call", n)
	}
}

// TestDispatchRunNamesTheRun: the run event built from a dispatch carries
// every field that names the run, so an outcome is matched to its slot
// and to its task (taskCreatedAt) wherever it is built.
func TestDispatchRunNamesTheRun(t *testing.T) {
	at := time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC)
	d := events.Dispatch{DispatchID: events.DispatchID("t", at), TaskID: "t", ScheduledAt: at, FiredAt: at.Add(-time.Second), Source: "s", Reason: "zombie", TaskCreatedAt: at.Add(-time.Hour)}
	want := events.Run{DispatchID: d.DispatchID, TaskID: "t", ScheduledAt: at, TaskCreatedAt: d.TaskCreatedAt}
	if got := d.Run(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Dispatch.Run() = %+v, want %+v", got, want)
	}
}
