package governor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	governor "github.com/flyballhq/flyball/pkg/governor"
)

// keyed is in decided with a spec whose breaker key is key (the caller's
// Input.BreakerKey: services/executor.BreakerKey).
func keyed(in governor.Input, key string) governor.Input {
	in.BreakerKey = key
	return in
}

// opened is a breaker.open of key until retryAt.
func opened(key string, retryAt time.Time) governor.Input {
	in := breakerInput("open", retryAt)
	in.Breaker.Key = key
	return in
}

// TestDecideAnUpdateThatMovesTheBreakerLiftsItsHold: a 1m task's breaker
// opened until 11:00; at 10:02 an update switched it to breaker.scope
// host. The executor keys its calls host_<host> since and calls at
// once, but the hold stayed until the old retryAt (no transition of the
// task's own breaker came: the breaker service deletes its record at the
// switch), and every run waited for 11:00 (source breaker-open). The
// decision now lifts a hold whose breaker key is not the task's under
// the spec it decides with; the same key keeps it, and so does a hold of
// a state written before the key was stored.
func TestDecideAnUpdateThatMovesTheBreakerLiftsItsHold(t *testing.T) {
	task := intervalSpec(time.Minute)
	retryAt := t0.Add(time.Hour)
	held := governor.Decide(t0.Add(time.Second), task, ran(t0), keyed(opened("t", retryAt), "t"))
	if held.NextRunAt != retryAt || held.Source != governor.SourceBreakerOpen || held.State.BreakerKey != "t" {
		t.Fatalf("after breaker.open: %s (%s), breakerKey %q; want %s (breaker-open) by breaker \"t\"", held.NextRunAt, held.Source, held.State.BreakerKey, retryAt)
	}
	host := intervalSpec(time.Minute)
	host.Breaker.Scope = "host"
	now := t0.Add(2 * time.Minute)

	d := governor.Decide(now, host, held.State, keyed(updated, "host_example_com"))
	if d.Source == governor.SourceBreakerOpen || !d.NextRunAt.Before(retryAt) || !d.State.BreakerOpenUntil.IsZero() || d.State.BreakerKey != "" {
		t.Fatalf("after the switch to scope host: %s (%s), breakerOpenUntil %s, breakerKey %q; want the hold lifted\n%s",
			d.NextRunAt, d.Source, d.State.BreakerOpenUntil, d.State.BreakerKey, strings.Join(d.Trail, "\n"))
	}
	if tr := strings.Join(d.Trail, "\n"); !strings.Contains(tr, `breaker "t" open until 2026-03-02T11:00:00.000Z is no longer the task's (its breaker is "host_example_com" since an update)`) {
		t.Errorf("trail does not say why the hold went:\n%s", tr)
	}
	// A late breaker.open of the breaker the task left holds nothing.
	late := governor.Decide(now.Add(time.Second), host, d.State, keyed(opened("t", retryAt), "host_example_com"))
	if !late.Ignored {
		t.Errorf("a late breaker.open of the breaker the task left was applied: %s (%s)", late.NextRunAt, late.Source)
	}
	// Its new breaker holds it.
	if h := governor.Decide(now.Add(time.Second), host, d.State, keyed(opened("host_example_com", retryAt), "host_example_com")); h.NextRunAt != retryAt || h.State.BreakerKey != "host_example_com" {
		t.Errorf("breaker.open of its new breaker: %s (%s), breakerKey %q; want %s", h.NextRunAt, h.Source, h.State.BreakerKey, retryAt)
	}

	for _, c := range []struct {
		name string
		st   governor.State
		in   governor.Input
	}{
		{"an update keeping the key", held.State, keyed(updated, "t")},
		{"a caller that does not know the key", held.State, updated},
		{"a hold stored without its key", stateWith(held.State, func(s *governor.State) { s.BreakerKey = "" }), keyed(updated, "host_example_com")},
	} {
		if d := governor.Decide(now, host, c.st, c.in); d.NextRunAt != retryAt || d.Source != governor.SourceBreakerOpen || !d.State.BreakerOpenUntil.Equal(retryAt) {
			t.Errorf("%s: %s (%s), breakerOpenUntil %s; want the hold kept until %s", c.name, d.NextRunAt, d.Source, d.State.BreakerOpenUntil, retryAt)
		}
	}
}

// TestDecideAHostBreakerHoldsItsTasks: a host breaker's transitions name
// the task whose call moved it; a task of that host is held and released
// by them as before, and one moved to another host is released.
func TestDecideAHostBreakerHoldsItsTasks(t *testing.T) {
	spec := intervalSpec(time.Minute)
	spec.Breaker.Scope = "host"
	retryAt := t0.Add(30 * time.Minute)
	held := governor.Decide(t0.Add(time.Second), spec, ran(t0), keyed(opened("host_a_example", retryAt), "host_a_example"))
	if held.NextRunAt != retryAt || held.Source != governor.SourceBreakerOpen {
		t.Fatalf("after host_a_example opened: %s (%s), want %s (breaker-open)", held.NextRunAt, held.Source, retryAt)
	}
	closed := breakerInput(string(events.BreakerClosed), time.Time{})
	closed.Breaker.Key = "host_a_example"
	if d := governor.Decide(t0.Add(time.Minute), spec, held.State, keyed(closed, "host_a_example")); d.Source == governor.SourceBreakerOpen || !d.State.BreakerOpenUntil.IsZero() {
		t.Errorf("after host_a_example closed: %s (%s), want the hold lifted", d.NextRunAt, d.Source)
	}
	if d := governor.Decide(t0.Add(time.Minute), spec, held.State, keyed(updated, "host_b_example")); d.Source == governor.SourceBreakerOpen || !d.State.BreakerOpenUntil.IsZero() {
		t.Errorf("after an update to host b.example: %s (%s), want the hold lifted", d.NextRunAt, d.Source)
	}
}
