package main

import (
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
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
