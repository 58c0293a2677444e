package sweeper

import (
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/streams"
)

const durableFailed = "reading a durable consumer's state failed"

// consumerConfig is the definition of stream's durable name.
func consumerConfig(t *testing.T, stream, name string) jetstream.ConsumerConfig {
	t.Helper()
	defs, err := streams.ConsumerConfigs()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range defs[stream] {
		if c.Durable == name {
			return c
		}
	}
	t.Fatalf("no durable %s/%s", stream, name)
	return jetstream.ConsumerConfig{}
}

// linesWith returns the lines of logs that hold every one of subs.
func linesWith(logs string, subs ...string) []string {
	var out []string
	for l := range strings.Lines(logs) {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(l, s)
		}
		if all {
			out = append(out, l)
		}
	}
	return out
}

// TestBacklogFailureCountIsWrittenOnceTheWindowEnds: the failed reads of a
// durable repeated within the log's window are counted, and the count is
// written at the first sweep after the window, even when the reads have
// recovered by then. It was written only at the durable's next failure,
// weeks later perhaps, reading as if the failures were recent.
func TestBacklogFailureCountIsWrittenOnceTheWindowEnds(t *testing.T) {
	ctx := t.Context()
	srv := natstest.StartWithStreams(t)
	var logs syncBuffer
	var ahead atomic.Int64
	s, err := New(Config{Common: svcconf.Common{
		JS: srv.JS, Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Now: func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) },
	}, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.JS.DeleteConsumer(ctx, streams.StreamRuns, streams.ConsumerBreaker); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		s.reportBacklog(ctx)
	}
	if got := linesWith(logs.String(), durableFailed); len(got) != 1 {
		t.Fatalf("3 failed reads in a window logged %d lines, want 1:\n%s", len(got), logs.String())
	}
	if _, err := srv.JS.CreateConsumer(ctx, streams.StreamRuns, consumerConfig(t, streams.StreamRuns, streams.ConsumerBreaker)); err != nil {
		t.Fatal(err)
	}
	ahead.Store(int64(backlogLogWindow))
	s.reportBacklog(ctx)
	if got := linesWith(logs.String(), durableFailed, "repeated=2", "consumer="+streams.ConsumerBreaker); len(got) != 1 {
		t.Fatalf("the sweep after the window, the read recovered, wrote %d lines counting 2 repeats of %s, want 1:\n%s", len(got), streams.ConsumerBreaker, logs.String())
	}
}

// TestBacklogFailureCountIsWrittenAtStop: a stopping sweeper writes the
// count of the failed reads its window held. It was lost.
func TestBacklogFailureCountIsWrittenAtStop(t *testing.T) {
	ctx := t.Context()
	srv := natstest.StartWithStreams(t)
	if err := srv.JS.DeleteConsumer(ctx, streams.StreamRuns, streams.ConsumerBreaker); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	s, err := New(Config{Common: svcconf.Common{
		JS: srv.JS, Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	}, Interval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-s.Swept()
	<-s.Swept() // a second failure, counted
	s.Stop()
	if got := linesWith(logs.String(), durableFailed, "repeated=", "consumer="+streams.ConsumerBreaker); len(got) != 1 {
		t.Fatalf("a stopped sweeper wrote %d lines counting the repeats of %s, want 1:\n%s", len(got), streams.ConsumerBreaker, logs.String())
	}
}

// TestBacklogFailuresOfTwoDurablesAreLoggedApart: each durable's failed
// read is logged with its name. One durable's failure was counted in the
// line of another that failed first in the window, with no name.
func TestBacklogFailuresOfTwoDurablesAreLoggedApart(t *testing.T) {
	ctx := t.Context()
	srv := natstest.StartWithStreams(t)
	var logs syncBuffer
	s, err := New(Config{Common: svcconf.Common{
		JS: srv.JS, Metrics: metrics.New(), Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	}, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{streams.ConsumerBreaker, streams.ConsumerGovernor} {
		if err := srv.JS.DeleteConsumer(ctx, streams.StreamRuns, c); err != nil {
			t.Fatal(err)
		}
	}
	s.reportBacklog(ctx)
	for _, c := range []string{streams.ConsumerBreaker, streams.ConsumerGovernor} {
		if got := linesWith(logs.String(), durableFailed, "consumer="+c+" "); len(got) != 1 {
			t.Errorf("the failed read of %s logged %d lines naming it, want 1:\n%s", c, len(got), logs.String())
		}
	}
}
