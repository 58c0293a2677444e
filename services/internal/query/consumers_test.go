package query_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/query"
	"github.com/flyballhq/flyball/streams"
)

// TestReadsLeaveNoConsumers: each scan reads its stream through an
// ordered consumer. Stopping the scan's iterator leaves the consumer on
// the server (nats.go deletes only the ones it replaces), so every health
// poll, runs or dead-letter page and explain left consumers on RUNS,
// DEADLETTER and TASKS for their 30 s inactive threshold: a dashboard
// polling the API kept a crowd of idle consumers. Each scan now deletes
// its consumer when it is done (the threshold covers a delete that
// fails).
func TestReadsLeaveNoConsumers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := 1; i <= 3; i++ {
		b.run(t, events.OutcomeSucceeded, "a", i)
		b.run(t, events.OutcomeFailed, "a", i)
		b.publish(t, events.DeadLetterSubject("a"), events.TypeDeadLettered, "a", deadLetter("a", i))
	}
	b.put(t, streams.BucketTasks, "a", spec("a", "orders", "10s"))
	names := []string{streams.StreamRuns, streams.StreamDeadLetter, streams.StreamTasks}
	consumers := func() map[string]int {
		out := map[string]int{}
		for _, name := range names {
			st, err := b.srv.JS.Stream(b.ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			info, err := st.Info(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			out[name] = info.State.Consumers
		}
		return out
	}
	base := consumers()
	const n = 10
	for range n {
		if _, err := b.r.Health(b.ctx, 0); err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.r.RunPage(b.ctx, "a", query.Page{Limit: 2}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.r.DeadLetterPage(b.ctx, "a", query.Page{Limit: 2}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.r.Explain(b.ctx, "a", time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	// Each read deletes its consumer before it returns.
	if got := consumers(); fmt.Sprint(got) != fmt.Sprint(base) {
		t.Fatalf("consumers after %d health polls, runs and dead-letter pages and explains: %v; want the %v there were before", n, got, base)
	}
}
