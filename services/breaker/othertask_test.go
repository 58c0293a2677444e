package breaker_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
)

// TestOutcomesOfADeletedTaskDoNotCountForItsNamesake: task t1 deleted and
// created again. The old task's failures, arriving after the re-creation,
// counted for the new task: an old failure could open the new task's
// breaker and defer its calls until retryAt. The breaker now compares
// the run's taskCreatedAt with its record's, or with the schedule's when
// there is no record.
func TestOutcomesOfADeletedTaskDoNotCountForItsNamesake(t *testing.T) {
	h := prepare(t)
	created := func(at time.Time) {
		t.Helper()
		h.putSchedule("t1", at)
	}
	failures := func(want int, wantCreated time.Time, why string) {
		t.Helper()
		b, _, ok := h.record("t1")
		if want == 0 {
			if ok {
				t.Fatalf("%s: a record was written: %+v", why, b)
			}
			return
		}
		var r struct {
			TaskCreatedAt time.Time `json:"taskCreatedAt"`
		}
		if ent, err := h.breakers.Get(t.Context(), "t1"); err == nil {
			_ = json.Unmarshal(ent.Value(), &r)
		}
		if !ok || b.Failures != want || !r.TaskCreatedAt.Equal(wantCreated) {
			t.Fatalf("%s: record %+v taskCreatedAt %v (present %v), want %d failures of the task created at %v", why, b, r.TaskCreatedAt, ok, want, wantCreated)
		}
	}
	old := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	cur := old.Add(10 * time.Second)
	h.start()

	// No schedule yet (the governor writes it before the first dispatch):
	// the failure is not the current task's.
	h.created = old
	h.outcome(events.OutcomeFailed, "t1")
	failures(0, time.Time{}, "a failure with no schedule for its task")

	created(cur)
	h.outcome(events.OutcomeFailed, "t1")
	failures(0, time.Time{}, "the old task's failure, no record")
	h.created = cur
	h.outcome(events.OutcomeFailed, "t1")
	failures(1, cur, "the task's own failure")
	h.created = old
	h.outcome(events.OutcomeFailed, "t1")
	failures(1, cur, "the old task's failure after the new task's")

	// A newer task's first outcome starts from a closed breaker.
	newer := cur.Add(time.Minute)
	created(newer)
	h.created = newer
	h.outcome(events.OutcomeFailed, "t1")
	failures(1, newer, "a newer task's first failure over an older task's record")

	// An outcome naming no task (an executor before 2026-11-27) counts.
	h.created = time.Time{}
	h.outcome(events.OutcomeFailed, "t1")
	failures(2, newer, "a failure naming no task")

	// Host-scoped breakers count every task's outcomes.
	host := events.HostKeyPrefix + events.SanitizeToken("example.com")
	h.created = old
	h.outcome(events.OutcomeFailed, host)
	if b, _, ok := h.record(host); !ok || b.Failures != 1 {
		t.Fatalf("an old task's failure on a host-scoped breaker: %+v (present %v), want 1 failure counted", b, ok)
	}
}
