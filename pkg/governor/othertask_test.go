package governor_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/pkg/governor"
)

// A task deleted and created again under the same ID: the old task's runs
// can still be in flight, and their outcomes and dead letters reach the
// governor after the new task's creation (RUNS and DEADLETTER are read
// apart from TASKS). Each run names the createdAt of the schedule it was
// dispatched from; only the new task's own runs count.
func TestDecideIgnoresRunsOfADeletedTaskOfTheSameID(t *testing.T) {
	spec := intervalSpec(time.Minute)
	oldCreated := t0.Add(-time.Hour)
	created := t0.Add(5 * time.Second) // re-created 5 s after the old run's slot
	now := created.Add(time.Second)
	fresh := governor.Decide(created, spec, governor.State{}, accepted).State
	if !fresh.CreatedAt.Equal(created) {
		t.Fatalf("CreatedAt = %v, want the acceptance's now %v", fresh.CreatedAt, created)
	}
	of := func(in governor.Input, createdAt time.Time) governor.Input {
		switch {
		case in.Outcome != nil:
			o := *in.Outcome
			o.TaskCreatedAt = createdAt
			in.Outcome = &o
		case in.DeadLetter != nil:
			dl := *in.DeadLetter
			dl.TaskCreatedAt = createdAt
			in.DeadLetter = &dl
		}
		return in
	}
	for name, in := range map[string]governor.Input{
		"final failure (the recheck hold)": of(finalFailure(t0, events.DeadLetterMaxAttempts), oldCreated),
		"dead letter":                      of(deadLetterInput("t:1", t0.Add(3*time.Second)), oldCreated),
		"failure":                          of(outcome("failed", t0), oldCreated),
		"success":                          of(outcome("succeeded", t0), oldCreated),
		"skip":                             of(outcome("skipped", t0), oldCreated),
		// A later time than the state's is not the state's task either
		// (the caller re-reads KV first: its copy may be the stale one).
		"a later task's run": of(outcome("failed", created.Add(time.Minute)), created.Add(time.Nanosecond)),
	} {
		d := governor.Decide(now, spec, fresh, in)
		if !d.Ignored || !d.NextRunAt.Equal(fresh.NextRunAt) || d.State.DeadLetter != nil || d.State.Failures != 0 || d.State.Runs != 0 {
			t.Errorf("%s: ignored %v, next %v (want %v), dead letter %+v, failures %d, runs %d",
				name, d.Ignored, d.NextRunAt, fresh.NextRunAt, d.State.DeadLetter, d.State.Failures, d.State.Runs)
		}
	}

	// The same inputs from the task's own schedule, or naming none (flyball
	// before 2026-11-27, a schedule written by hand), are applied.
	for name, createdAt := range map[string]time.Time{"own": created, "own, another zone": created.In(time.FixedZone("x", 3600)), "none": {}} {
		d := governor.Decide(now.Add(2*time.Minute), spec, fresh, of(finalFailure(created, events.DeadLetterMaxAttempts), createdAt))
		if d.Ignored || d.Source != governor.SourceDeadLetterRecheck || d.State.DeadLetter == nil {
			t.Errorf("%s: final failure ignored %v, source %s, dead letter %+v: want the recheck hold", name, d.Ignored, d.Source, d.State.DeadLetter)
		}
		d = governor.Decide(now.Add(2*time.Minute), spec, fresh, of(deadLetterInput(events.DispatchID("t", created), now.Add(time.Minute)), createdAt))
		if d.Ignored || d.Source != governor.SourceDeadLetterRecheck {
			t.Errorf("%s: dead letter ignored %v, source %s: want the recheck hold", name, d.Ignored, d.Source)
		}
	}
	// A state with no createdAt (written by hand) applies every run.
	bare := fresh
	bare.CreatedAt = time.Time{}
	if d := governor.Decide(now.Add(2*time.Minute), spec, bare, of(outcome("failed", created), oldCreated)); d.Ignored || d.State.Failures != 1 {
		t.Errorf("state without createdAt: ignored %v, failures %d; want the failure applied", d.Ignored, d.State.Failures)
	}
}

func TestOtherTask(t *testing.T) {
	st := governor.State{CreatedAt: t0}
	for _, c := range []struct {
		created time.Time
		st      governor.State
		want    bool
	}{
		{t0, st, false},
		{t0.In(time.FixedZone("x", -7200)), st, false},
		{time.Time{}, st, false},
		{t0, governor.State{}, false},
		{t0.Add(time.Nanosecond), st, true},
		{t0.Add(-time.Hour), st, true},
	} {
		if got := governor.OtherTask(c.created, c.st); got != c.want {
			t.Errorf("OtherTask(%v, createdAt %v) = %v, want %v", c.created, c.st.CreatedAt, got, c.want)
		}
		// The rule the other services ask directly is symmetric.
		if got := governor.OtherCreatedAt(c.st.CreatedAt, c.created); got != c.want {
			t.Errorf("OtherCreatedAt(%v, %v) = %v, want %v", c.st.CreatedAt, c.created, got, c.want)
		}
	}
}

// TestStoredSpecAddsCreatedAtToTheSpec: a flyball-tasks value is the spec's
// JSON with the task's createdAt beside its fields, so a reader that knows
// only events.TaskSpec (an older executor, the API) reads the spec as
// before, and a value written before createdAt was stored reads as zero.
// The createdAt a creation stores is the one Decide gives its schedule.
func TestStoredSpecAddsCreatedAtToTheSpec(t *testing.T) {
	spec := intervalSpec(time.Minute)
	created := governor.CreatedAt(t0.In(time.FixedZone("x", 3600)))
	if st := governor.Decide(t0, spec, governor.State{}, accepted).State; !st.CreatedAt.Equal(created) || st.CreatedAt.Location() != time.UTC {
		t.Fatalf("Decide stores createdAt %v, CreatedAt gives %v", st.CreatedAt, created)
	}
	body, err := json.Marshal(governor.StoredSpec{TaskSpec: spec, CreatedAt: created})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	want := string(plain[:len(plain)-1]) + `,"createdAt":"` + created.Format(time.RFC3339Nano) + `"}`
	if string(body) != want {
		t.Fatalf("stored spec\n%s\nwant\n%s", body, want)
	}
	var asSpec events.TaskSpec
	if err := json.Unmarshal(body, &asSpec); err != nil || !reflect.DeepEqual(&asSpec, spec) {
		t.Fatalf("read as a TaskSpec: %+v (err %v), want %+v", asSpec, err, spec)
	}
	var old governor.StoredSpec
	if err := json.Unmarshal(plain, &old); err != nil || !old.CreatedAt.IsZero() || !reflect.DeepEqual(old.TaskSpec, spec) {
		t.Fatalf("a value without createdAt read as %+v (err %v)", old, err)
	}
}
