package sweeper

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/streams"
)

// TestBacklogReportsEveryDurable: each sweep reads every durable consumer
// flyball defines, its own or not, into flyball_consumer_*: a backlog
// shows there whether or not the service that consumes it runs. A
// durable that is gone loses its series, and the read is counted as a
// failure.
func TestBacklogReportsEveryDurable(t *testing.T) {
	ctx := t.Context()
	srv := natstest.StartWithStreams(t)
	m := metrics.New()
	s, err := New(Config{Common: svcconf.Common{JS: srv.JS, Metrics: m}, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// Three outcomes nobody consumes; the governor's durable takes one
	// and gives it back.
	for range 3 {
		if _, err := srv.JS.Publish(ctx, "flyball.run.succeeded.t1", []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := srv.JS.Consumer(ctx, streams.StreamRuns, streams.ConsumerGovernor)
	if err != nil {
		t.Fatal(err)
	}
	fetch := func() jetstream.Msg {
		t.Helper()
		b, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for msg := range b.Messages() {
			return msg
		}
		t.Fatalf("no message fetched: %v", b.Error())
		return nil
	}
	if err := fetch().Nak(); err != nil {
		t.Fatal(err)
	}
	// Then it takes messages, acking none, until the nakked one comes
	// again. The nak may reach the server after the next pull, so the
	// others may come first: held counts what was delivered and not acked.
	held := 0
	for again := false; !again; held++ {
		if held == 3 {
			t.Fatal("the nakked message was not delivered again")
		}
		md, err := fetch().Metadata()
		if err != nil {
			t.Fatal(err)
		}
		again = md.NumDelivered == 2
	}

	s.reportBacklog(ctx)

	defs, err := streams.ConsumerConfigs()
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for stream, cs := range defs {
		for _, c := range cs {
			want++
			if got := testutil.ToFloat64(m.ConsumerMaxAckPending.WithLabelValues(stream, c.Durable)); got != float64(c.MaxAckPending) {
				t.Errorf("max_ack_pending of %s/%s = %v, want %d", stream, c.Durable, got, c.MaxAckPending)
			}
		}
	}
	if got := testutil.CollectAndCount(m.ConsumerPending); got != want {
		t.Errorf("flyball_consumer_pending has %d series, want one per durable (%d)", got, want)
	}
	for _, c := range []struct {
		name string
		g    float64
		want float64
	}{
		{"pending RUNS/governor", testutil.ToFloat64(m.ConsumerPending.WithLabelValues(streams.StreamRuns, streams.ConsumerGovernor)), float64(3 - held)},
		{"ack_pending RUNS/governor", testutil.ToFloat64(m.ConsumerAckPending.WithLabelValues(streams.StreamRuns, streams.ConsumerGovernor)), float64(held)},
		{"redelivered RUNS/governor", testutil.ToFloat64(m.ConsumerRedelivered.WithLabelValues(streams.StreamRuns, streams.ConsumerGovernor)), 1},
		// The breaker's filter takes failures and run.recovered only.
		{"pending RUNS/breaker", testutil.ToFloat64(m.ConsumerPending.WithLabelValues(streams.StreamRuns, streams.ConsumerBreaker)), 0},
		{"read failures", testutil.ToFloat64(m.BacklogReadFailures.WithLabelValues("consumer")), 0},
	} {
		if c.g != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.g, c.want)
		}
	}
	if got := testutil.ToFloat64(m.JetStreamStorage.WithLabelValues("file")); got <= 0 {
		t.Errorf("flyball_jetstream_storage_bytes{type=file} = %v, want the bytes RUNS and the buckets hold", got)
	}
	if got := testutil.CollectAndCount(m.JetStreamStorageLimit); got != 0 {
		t.Errorf("flyball_jetstream_storage_limit_bytes has %d series for an account without limits, want none", got)
	}

	if err := srv.JS.DeleteConsumer(ctx, streams.StreamRuns, streams.ConsumerBreaker); err != nil {
		t.Fatal(err)
	}
	s.reportBacklog(ctx)
	if got := testutil.CollectAndCount(m.ConsumerPending); got != want-1 {
		t.Errorf("after deleting RUNS/breaker flyball_consumer_pending has %d series, want %d", got, want-1)
	}
	if got := testutil.ToFloat64(m.BacklogReadFailures.WithLabelValues("consumer")); got != 1 {
		t.Errorf("read failures after deleting a durable = %v, want 1", got)
	}
}
