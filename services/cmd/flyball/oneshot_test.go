package main

import (
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
)

// TestOneShotOverruled: a one-shot's answer gets a note only when its run
// does not come at its time, and the note says what to do where there is
// something to do.
func TestOneShotOverruled(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	in := func(d time.Duration) *time.Time { x := at.Add(d); return &x }
	for _, c := range []struct {
		name string
		acc  *events.TaskAccepted
		want []string // empty: no note
	}{
		{"runs at its time", &events.TaskAccepted{NextRunAt: in(0), Source: "hint-oneshot"}, nil},
		{"an earlier baseline slot comes first", &events.TaskAccepted{NextRunAt: in(-time.Minute), Source: "baseline-interval"}, nil},
		{"kept slot in flight, a moment later", &events.TaskAccepted{NextRunAt: in(500 * time.Millisecond), Source: "baseline-interval"}, nil},
		{
			"dead-lettered", &events.TaskAccepted{NextRunAt: in(30 * time.Minute), Source: "deadletter-recheck", Trail: []string{"deadletter-recheck: recheck at 10:30"}},
			[]string{"note: the one-shot does not run at its time: deadletter-recheck: recheck at 10:30", "'flyball dlq retry --all --task web' runs it now"},
		},
		{"paused indefinitely", &events.TaskAccepted{Source: "paused"}, []string{"does not run at its time", "'flyball task resume web' runs it"}},
		{
			"breaker open", &events.TaskAccepted{NextRunAt: in(time.Minute), Source: "breaker-open", Trail: []string{"breaker-open: open until 10:01"}},
			[]string{"does not run at its time: breaker-open: open until 10:01"},
		},
	} {
		got := oneShotOverruled("web", at, c.acc)
		if len(c.want) == 0 && got != "" {
			t.Errorf("%s: note %q, want none", c.name, got)
		}
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: note %q lacks %q", c.name, got, w)
			}
		}
	}
}

// TestOneShotUsedUpByTheSlotInFlightHasNoNote: a run-now while a slot is
// in flight up to gov.InFlightWindow ahead is served by that slot (the
// governor keeps it, and the trail says it is the one-shot hint): no
// note, however far ahead the slot lies within the window and whichever
// clock the CLI has. The check allowed 1 s by the CLI's own clock, so
// "hint --interval 2s" then "run-now" printed "note: the one-shot does
// not run at its time: slot … is in flight … and is the one-shot hint
// for …: kept" about half the time.
func TestOneShotUsedUpByTheSlotInFlightHasNoNote(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	spec := &events.TaskSpec{ID: "web", Schedule: events.Schedule{Interval: events.Duration(2 * time.Second)}}
	for _, ahead := range []time.Duration{1500 * time.Millisecond, gov.InFlightWindow} {
		st := gov.State{
			TaskID: "web", CreatedAt: now.Add(-time.Hour), LastScheduledAt: now.Add(ahead - 2*time.Second),
			NextRunAt: now.Add(ahead), Source: gov.SourceBaselineInterval,
		}
		d := gov.Decide(now, spec, st, gov.Input{Kind: gov.KindHinted, Hint: &gov.Hint{At: now}})
		if !d.NextRunAt.Equal(now.Add(ahead)) {
			t.Fatalf("slot %s ahead: the governor planned %s (%s), want the slot in flight kept; trail %q", ahead, d.NextRunAt, d.Source, d.Trail)
		}
		acc := &events.TaskAccepted{NextRunAt: &d.NextRunAt, Source: string(d.Source), Trail: d.Trail}
		// The CLI's clock may lag the server's: run-now's time is the
		// server's, not the CLI's.
		for _, skew := range []time.Duration{0, -3 * time.Second} {
			if note := oneShotOverruled("web", now.Add(skew), acc); note != "" {
				t.Errorf("slot %s ahead, CLI clock off by %s: note %q, want none", ahead, skew, note)
			}
		}
	}
}
