package governor

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
)

// TestASignalDecidesWithTheSpecOfTheStateItReads: a signal (an outcome, a
// breaker transition, a dead letter) reads its task's spec from the view,
// then the schedule. A task.updated applied in between (by this replica's
// TASKS worker, or by another replica, which a compare-and-set conflict
// reveals) left the signal holding the old spec: it decided the updated
// schedule with it and stored that, so an accepted change of a 24h task
// to 1m took effect only after the day the old spec planned. The signal
// now takes the spec again once it has the state it decides.
func TestASignalDecidesWithTheSpecOfTheStateItReads(t *testing.T) {
	s, js := startGovernor(t)
	ctx := t.Context()
	spec := func(id string, every time.Duration) events.TaskSpec {
		return events.TaskSpec{ID: id, Schedule: events.Schedule{Interval: events.Duration(every)}, Target: events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/"}}}
	}
	for _, c := range []struct {
		id       string
		conflict bool // the signal's cached state predates the update
	}{{"same-replica", false}, {"after-a-conflict", true}} {
		command(t, js, events.VerbCreated, events.TypeTaskCreated, c.id, "create-"+c.id, spec(c.id, 24*time.Hour))
		old, oldRev, err := s.specs.Get(ctx, c.id)
		if err != nil {
			t.Fatal(err)
		}
		before, beforeRev, _ := s.states.get(c.id)
		command(t, js, events.VerbUpdated, events.TypeTaskUpdated, c.id, "update-"+c.id, spec(c.id, time.Minute))
		if c.conflict {
			s.states.put(c.id, before, beforeRev)
		}
		now := time.Now().UTC()
		slot := before.NextRunAt
		step := Step{TaskID: c.id, At: now, SpecRevision: oldRev, Input: gov.Input{Kind: gov.KindOutcome, Outcome: &gov.Outcome{
			DispatchID: events.DispatchID(c.id, slot), ScheduledAt: slot, Result: "succeeded", FinishedAt: now, TaskCreatedAt: before.CreatedAt,
		}}}
		dec, err := s.decide(ctx, old, step)
		if err != nil {
			t.Fatalf("%s: %v", c.id, err)
		}
		if ahead := dec.NextRunAt.Sub(now); ahead > time.Hour {
			t.Errorf("%s: the signal decided the updated 1m task with its old 24h spec: next run %s ahead (%s)", c.id, ahead.Round(time.Second), dec.Source)
		}
	}
	// A signal whose view holds the spec the state was decided with reads
	// no spec from KV, whether the state is cached or read there: the
	// outcome path costs what it did.
	const id = "after-a-conflict"
	cur, curRev, err := s.specs.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	counted := &getCounter{KeyValue: s.tasks}
	s.tasks = counted
	for _, cached := range []bool{true, false} {
		if !cached {
			s.states.drop(id)
		}
		st, _, _ := s.states.get(id)
		now := time.Now().UTC()
		step := Step{TaskID: id, At: now, SpecRevision: curRev, Input: gov.Input{Kind: gov.KindOutcome, Outcome: &gov.Outcome{
			DispatchID: events.DispatchID(id, now), ScheduledAt: now, Result: "succeeded", FinishedAt: now, TaskCreatedAt: st.CreatedAt,
		}}}
		if _, err := s.decide(ctx, cur, step); err != nil {
			t.Fatal(err)
		}
	}
	if n := counted.gets.Load(); n != 0 {
		t.Errorf("signals with a current view read the spec from KV %d times, want 0", n)
	}
}

// getCounter counts the Gets of a KV bucket.
type getCounter struct {
	jetstream.KeyValue
	gets atomic.Int64
}

func (g *getCounter) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	g.gets.Add(1)
	return g.KeyValue.Get(ctx, key)
}
