package sweeper

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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

// TestStorageCountsOneCopyOfEachStream: on a 3-node cluster an R3 stream
// is stored on every node, and the account's JetStream usage counts every
// copy. flyball_jetstream_storage_bytes is what one server holds at most
// (one copy of each stream), the figure FlyballJetStreamStorageHigh
// compares with a server's max_file_store; the account's usage, every
// replica, is flyball_jetstream_account_storage_bytes, the figure its
// limit bounds. The metric was the account's usage, three times a
// server's, so the alert fired at a quarter of the store, not 75%.
func TestStorageCountsOneCopyOfEachStream(t *testing.T) {
	ctx := t.Context()
	cl := natstest.StartCluster(t, 3)
	_, js := cl.ConnectTo(t, "n1")
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BIG", Subjects: []string{"big.>"}, Replicas: 3, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	mem, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "MEM", Subjects: []string{"mem.>"}, Replicas: 1, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 64<<10)
	for i := range 32 {
		// The R3 stream may not have its leader yet ("no response from
		// stream"): try again under one message ID, stored once.
		id := jetstream.WithMsgID("big-" + strconv.Itoa(i))
		natstest.Eventually(t, 10*time.Second, "a publish to the R3 stream stored", func() bool {
			_, err := js.Publish(ctx, "big.x", payload, id)
			return err == nil
		})
	}
	if _, err := js.Publish(ctx, "mem.x", payload); err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	memInfo, err := mem.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	one := info.State.Bytes
	// Every replica holds its copy once the account counts three.
	natstest.Eventually(t, 10*time.Second, "the account counting all 3 copies of BIG", func() bool {
		ai, err := js.AccountInfo(ctx)
		return err == nil && ai.Store == 3*one
	})

	m := metrics.New()
	s, err := New(Config{Common: svcconf.Common{JS: js, Metrics: m}, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s.readAccount(ctx)
	if got := testutil.ToFloat64(m.JetStreamStorage.WithLabelValues("file")); got != float64(one) {
		t.Errorf("flyball_jetstream_storage_bytes{type=file} = %v, want %d (one copy of the R3 stream)", got, one)
	}
	if got := testutil.ToFloat64(m.JetStreamStorage.WithLabelValues("memory")); got != float64(memInfo.State.Bytes) {
		t.Errorf("flyball_jetstream_storage_bytes{type=memory} = %v, want %d", got, memInfo.State.Bytes)
	}
	if got := testutil.ToFloat64(m.JetStreamAccountStorage.WithLabelValues("file")); got != float64(3*one) {
		t.Errorf("flyball_jetstream_account_storage_bytes{type=file} = %v, want %d (every replica)", got, 3*one)
	}
}

// TestAccountFiguresSurviveAFailedStreamList: a sweeper whose user may
// read the account's usage but not list the streams (permissions from
// before the per-stream figure) lost the account's figures and limits
// with the stream list, and after a restart exported no storage series
// at all. The account's are kept, and the failed list is counted.
func TestAccountFiguresSurviveAFailedStreamList(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithUsers(t,
		&server.User{Username: "admin", Password: "pw"},
		&server.User{Username: "sweeper", Password: "pw", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"$JS.API.INFO"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
		}},
	)
	ctx := t.Context()
	_, admin := natstest.ConnectAs(t, srv, "admin", "pw")
	if _, err := admin.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Publish(ctx, "s.x", make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	_, js := natstest.ConnectAs(t, srv, "sweeper", "pw")
	m := metrics.New()
	s, err := New(Config{Common: svcconf.Common{JS: js, Metrics: m}, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s.readAccount(ctx)
	if got := testutil.ToFloat64(m.JetStreamAccountStorage.WithLabelValues("file")); got < 4096 {
		t.Errorf("flyball_jetstream_account_storage_bytes{type=file} = %v after a failed stream list, want the account's usage (at least 4096)", got)
	}
	if got := testutil.ToFloat64(m.BacklogReadFailures.WithLabelValues("account")); got != 1 {
		t.Errorf("flyball_backlog_read_failures_total{read=account} = %v, want 1 (the stream list)", got)
	}
}
