package sweeper

import (
	"fmt"
	"testing"
	"time"

	gov "github.com/flyballhq/flyball/pkg/governor"
)

// scheduleJSON is a schedule as the governor stores it.
func scheduleJSON(id string, next time.Time) []byte {
	return stateJSON(gov.State{TaskID: id, NextRunAt: next, Source: gov.SourceBaselineInterval})
}

// stateJSON encodes st as the governor stores it.
func stateJSON(st gov.State) []byte {
	b, err := st.AppendJSON(nil)
	if err != nil {
		panic(err)
	}
	return b
}

func TestViewDecodesSchedulesAtTheSweep(t *testing.T) {
	v := newView()
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

	// The initial load decodes at once.
	v.putSchedule("a", scheduleJSON("a", t0))
	if got := v.schedules["a"].NextRunAt; !got.Equal(t0) || len(v.stale) != 0 {
		t.Fatalf("initial load: nextRunAt %v, %d stale", got, len(v.stale))
	}
	v.caughtUp = true

	// Later writes wait for the sweep; the last one wins.
	for i := 1; i <= 3; i++ {
		v.putSchedule("a", scheduleJSON("a", t0.Add(time.Duration(i)*time.Second)))
	}
	v.putSchedule("b", scheduleJSON("b", t0))
	if got := v.schedules["a"].NextRunAt; !got.Equal(t0) || len(v.stale) != 2 {
		t.Fatalf("before the sweep: nextRunAt %v, %d stale", got, len(v.stale))
	}
	v.decodeStale()
	if got := v.schedules["a"].NextRunAt; !got.Equal(t0.Add(3*time.Second)) || v.schedules["b"].TaskID != "b" || len(v.stale) != 0 {
		t.Fatalf("after the sweep: a.nextRunAt %v, b %+v, %d stale", got, v.schedules["b"], len(v.stale))
	}

	// A delete drops the decoded and the undecoded value.
	v.putSchedule("a", scheduleJSON("a", t0.Add(time.Hour)))
	v.deleteSchedule("a")
	v.decodeStale()
	if _, ok := v.schedules["a"]; ok {
		t.Fatalf("deleted schedule still in the view: %+v", v.schedules["a"])
	}

	// An unreadable value keeps the previous schedule.
	v.putSchedule("b", []byte(`{"taskId":`))
	v.decodeStale()
	if v.schedules["b"].TaskID != "b" {
		t.Fatalf("unreadable write replaced the schedule: %+v", v.schedules["b"])
	}
}

func TestViewDecodesAtTheCap(t *testing.T) {
	v := newView()
	v.caughtUp = true
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	for i := range maxStale {
		id := fmt.Sprintf("t%d", i)
		v.putSchedule(id, scheduleJSON(id, t0))
	}
	if len(v.stale) != 0 || len(v.schedules) != maxStale {
		t.Fatalf("at the cap: %d stale, %d decoded; want 0 and %d", len(v.stale), len(v.schedules), maxStale)
	}
}

// TestViewPrunesWhatAReplayNoLongerHolds: after a watch of
// flyball-schedules ends and is established again, schedules purged
// meanwhile leave the view, decoded or not, and the rest stay.
func TestViewPrunesWhatAReplayNoLongerHolds(t *testing.T) {
	v := newView()
	t0 := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	for _, id := range []string{"a", "b", "c"} {
		v.putSchedule(id, scheduleJSON(id, t0))
	}
	v.caughtUp = true
	v.putSchedule("b", scheduleJSON("b", t0.Add(time.Second))) // undecoded until the sweep
	v.putSchedule("d", scheduleJSON("d", t0))
	v.pruneSchedules(func(id string) bool { return id == "a" || id == "d" })
	v.decodeStale()
	if len(v.schedules) != 2 || v.schedules["a"].TaskID != "a" || v.schedules["d"].TaskID != "d" {
		t.Fatalf("after the prune the view holds %v, want a and d", v.schedules)
	}
}
