package query_test

import (
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/query"
	"github.com/flyballhq/flyball/streams"
)

// TestHealthReportsEveryDurablesBacklog: the health summary (flyball
// status, GET /api/v1/scheduler/health) lists every durable consumer with
// what waits for it, so a service that is down or behind shows as the
// work it leaves in NATS. A durable that cannot be read is listed with
// why, and the rest are still read.
func TestHealthReportsEveryDurablesBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Three outcomes; nothing consumes RUNS here.
	b.run(t, events.OutcomeSucceeded, "a", 1)
	b.run(t, events.OutcomeFailed, "a", 2)
	b.run(t, events.OutcomeSucceeded, "a", 3)
	if err := b.srv.JS.DeleteConsumer(b.ctx, streams.StreamAdvisories, streams.ConsumerDeadLetter); err != nil {
		t.Fatal(err)
	}
	ds, err := streams.Durables()
	if err != nil {
		t.Fatal(err)
	}
	want := map[streams.Durable]uint64{
		{Stream: streams.StreamRuns, Name: streams.ConsumerGovernor}:   3,
		{Stream: streams.StreamRuns, Name: streams.ConsumerBreaker}:    1, // failures and run.recovered only
		{Stream: streams.StreamRuns, Name: streams.ConsumerDeadLetter}: 1, // failures only
	}
	// The server counts a stored message into a consumer's pending an
	// instant after it acked the publish: read until the three durables
	// of RUNS show what they take.
	var h *query.Health
	natstest.Eventually(t, 10*time.Second, "RUNS's durables count the outcomes", func() bool {
		var err error
		if h, err = b.r.Health(b.ctx, query.MaxStaleness); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, c := range h.Backlog {
			if p, ok := want[streams.Durable{Stream: c.Stream, Name: c.Consumer}]; ok && c.Pending == p {
				n++
			}
		}
		return n == len(want)
	})
	if len(h.Backlog) != len(ds) {
		t.Fatalf("backlog lists %d durables, want %d: %+v", len(h.Backlog), len(ds), h.Backlog)
	}
	for i, c := range h.Backlog {
		d := streams.Durable{Stream: c.Stream, Name: c.Consumer}
		if d != ds[i] {
			t.Errorf("backlog[%d] is %v, want %v (sorted by stream, then consumer)", i, d, ds[i])
		}
		if d == (streams.Durable{Stream: streams.StreamAdvisories, Name: streams.ConsumerDeadLetter}) {
			if c.Error == "" {
				t.Errorf("the deleted durable %v has no error: %+v", d, c)
			}
			continue
		}
		if c.Error != "" || c.Pending != want[d] || c.MaxAckPending <= 0 {
			t.Errorf("%v: %+v, want %d pending, a max_ack_pending and no error", d, c, want[d])
		}
	}
}
