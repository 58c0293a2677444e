package governor

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
)

// TestStoredTimesAreUTC: docs/events.md says flyball stores and emits
// UTC, but a startAt of 2026-04-01T00:00:00+02:00 was stored in
// flyball-tasks (and served back) with its +02:00, and a pause's until
// and a hint's at kept theirs in flyball-schedules and flyball-pauses.
// They are stored in UTC now.
func TestStoredTimesAreUTC(t *testing.T) {
	s, js := startGovernor(t)
	spec := minuteSpec("utc")
	plus2 := time.FixedZone("", 2*3600)
	start := time.Date(2026, 4, 1, 0, 0, 0, 0, plus2)
	spec.StartAt = &start
	command(t, js, events.VerbCreated, events.TypeTaskCreated, "utc", "create-utc", *spec)
	ent, err := s.tasks.Get(t.Context(), "utc")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(ent.Value()); !strings.Contains(got, `"startAt":"2026-03-31T22:00:00Z"`) {
		t.Fatalf("flyball-tasks holds %s, want startAt 2026-03-31T22:00:00Z", got)
	}
	until := time.Now().Add(48 * time.Hour).In(plus2).Truncate(time.Second)
	command(t, js, events.VerbPaused, events.TypeTaskPaused, "utc", "pause-utc", events.TaskPause{Until: &until})
	if h := hint(t, s, "utc"); h == nil || h.PausedUntil.Location() != time.UTC {
		t.Fatalf("flyball-pauses holds %+v, want pausedUntil in UTC", h)
	}
	command(t, js, events.VerbResumed, events.TypeTaskResumed, "utc", "resume-utc", events.TaskRef{})
	at := time.Now().Add(time.Hour).In(plus2).Truncate(time.Second)
	command(t, js, events.VerbHinted, events.TypeTaskHinted, "utc", "hint-utc", events.TaskHint{At: &at, TTL: events.Duration(2 * time.Hour)})
	sched, err := s.schedules.Get(t.Context(), "utc")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(sched.Value()); strings.Contains(got, "+02:00") {
		t.Fatalf("flyball-schedules holds %s, want every time in UTC", got)
	}
}

// TestAConditionalUpdateFindsItsOwnWriteWithAnOffset: a spec stored by a
// flyball that kept startAt's offset (+02:00) is the same spec as the one
// this flyball stores in UTC. A conditional update tried again after its
// spec write, that write made before the upgrade, finds it its own and
// applies (not a 412 because the bytes differ).
func TestAConditionalUpdateFindsItsOwnWriteWithAnOffset(t *testing.T) {
	s, js := startGovernor(t)
	command(t, js, events.VerbCreated, events.TypeTaskCreated, "off", "create-off", *minuteSpec("off"))
	ent, err := s.tasks.Get(t.Context(), "off")
	if err != nil {
		t.Fatal(err)
	}
	st, _, _, err := s.readState(t.Context(), "off")
	if err != nil {
		t.Fatal(err)
	}
	update := minuteSpec("off")
	start := time.Date(2026, 4, 1, 0, 0, 0, 0, time.FixedZone("", 2*3600))
	update.StartAt = &start
	old, err := json.Marshal(gov.StoredSpec{TaskSpec: update, CreatedAt: st.CreatedAt})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(old), "+02:00") {
		t.Fatalf("the old write %s has no offset", old)
	}
	written, err := s.tasks.Put(t.Context(), "off", old)
	if err != nil {
		t.Fatal(err)
	}
	command(t, js, events.VerbUpdated, events.TypeTaskUpdated, "off", "update-off", updateIf(t, update, ent.Revision()))
	st, _, _, err = s.readState(t.Context(), "off")
	if err != nil || st.LastCommandID != "update-off" {
		t.Fatalf("the update whose spec was stored with +02:00 before: state %+v, %v; want it applied (update-off)", st, err)
	}
	// The same spec: not written again, its revision kept.
	if st.SpecRevision != written {
		t.Fatalf("the update whose spec was stored with +02:00 before: decided at specRevision %d, want the stored %d", st.SpecRevision, written)
	}
	if now, err := s.tasks.Get(t.Context(), "off"); err != nil || now.Revision() != written {
		t.Fatalf("the update whose spec was stored with +02:00 before: spec read %v; want it kept at revision %d", err, written)
	}
}
