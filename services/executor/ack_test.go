package executor

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/repeatlog"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newTestSettler returns a settler whose tries wait try for an answer
// and retry after retry.
func newTestSettler(t *testing.T, try, retry time.Duration) (*settler, *nats.Conn) {
	t.Helper()
	srv := natstest.Start(t)
	nc, _ := srv.Connect(t)
	st, err := newSettler(nc, quietLog(), metrics.New())
	if err != nil {
		t.Fatal(err)
	}
	st.try, st.retry, st.tick = try, retry, time.Millisecond
	return st, nc
}

// tries is how many tries the only pending settle has made (0 if none is
// pending).
func (st *settler) triesOfPending() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, p := range st.pending {
		return p.tries
	}
	return 0
}

// settled waits until no settle is pending.
func settled(t *testing.T, st *settler, within time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { st.idle.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(within):
		t.Fatalf("still pending after %v: %d tries", within, st.triesOfPending())
	}
}

// TestSettlerRetriesUntilAnswered: while nobody answers (the consumer has
// no leader, and the server says "no responders") a settle is retried, and
// it is confirmed once a responder appears.
func TestSettlerRetriesUntilAnswered(t *testing.T) {
	st, nc := newTestSettler(t, time.Second, 5*time.Millisecond)
	st.settle("ack.reply", "d.t", "nak", []byte("-NAK"), time.Now().Add(time.Minute))
	natstest.Eventually(t, 10*time.Second, "three unanswered tries", func() bool { return st.triesOfPending() >= 3 })
	var answered atomic.Int32
	natstest.Subscribe(t, nc, "ack.reply", func(m *nats.Msg) { answered.Add(1); _ = m.Respond(nil) })
	settled(t, st, 10*time.Second)
	if answered.Load() == 0 {
		t.Fatal("settled without an answer")
	}
}

// TestSettlerRetriesAnUnansweredTry: a try whose answer never comes (lost
// in a leader change) is tried again after ackTry. So is a nak whose delay
// is long: the retry lands well before the delivery the nak asked for
// (TestSettlerDoesNotResendANakWhoseDelayMayHavePassed has the other case).
func TestSettlerRetriesAnUnansweredTry(t *testing.T) {
	for _, c := range []struct {
		kind string
		body []byte
	}{{"ack", ackBody}, {"nak", nakBody(time.Minute)}} {
		st, nc := newTestSettler(t, 50*time.Millisecond, time.Millisecond)
		var got atomic.Int32
		sub, err := nc.Subscribe("ack.reply", func(m *nats.Msg) {
			if got.Add(1) == 3 { // the first two are swallowed
				_ = m.Respond(nil)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		st.settle("ack.reply", "d.t", c.kind, c.body, time.Now().Add(time.Minute))
		settled(t, st, 10*time.Second)
		if n := got.Load(); n != 3 {
			t.Fatalf("%s: %d tries reached the server, want 3", c.kind, n)
		}
		_ = sub.Unsubscribe()
	}
}

// TestSettlerDoesNotResendANakWhoseDelayMayHavePassed: a nak (no delay)
// is applied, but its confirmation is lost, and the message is delivered
// again at once. The settler must not send the nak again: nats-server
// applies it to whichever delivery is current, so it would hand back the
// new delivery, whose call is running, and deliver the message once more.
// Before, the settler retried it until the AckWait.
func TestSettlerDoesNotResendANakWhoseDelayMayHavePassed(t *testing.T) {
	s, cons, m1 := settleFixture(t) // AckWait 1m: a redelivery before it comes from a nak
	st := s.settles
	st.mu.Lock()
	st.try, st.tick = 100*time.Millisecond, time.Millisecond
	st.mu.Unlock()
	if err := st.sub.Unsubscribe(); err != nil { // confirmations are lost from now on
		t.Fatal(err)
	}
	s.settle(m1, "nak", nakBody(0))
	m2 := fetchOne(t, cons, 5*time.Second) // delivery 2: "its call runs"
	if m2 == nil {
		t.Fatal("the nak was not applied: no second delivery")
	}
	settled(t, st, 10*time.Second)
	if n := testutil.ToFloat64(st.unconfirmed.WithLabelValues("nak")); n != 1 {
		t.Fatalf("flyball_settles_unconfirmed_total{kind=nak} = %v, want 1", n)
	}
	if m3 := fetchOne(t, cons, time.Second); m3 != nil {
		md, _ := m3.Metadata()
		t.Fatalf("delivered again (NumDelivered=%d) while delivery 2 was pending: the nak of delivery 1 was sent again", md.NumDelivered)
	}
}

// TestUnconfirmedNakDoesNotDoubleACall: attempt 1 fails and its dispatch
// is nakked (100ms), but the confirmation of the nak is lost (the
// settler's reply subscription is gone). The nak was applied, so attempt
// 2 starts 100ms later and is held at the target. The settler must give
// the nak up rather than send it again: the retry would land on the
// delivery of attempt 2, and the server would deliver the dispatch once
// more while attempt 2 runs, so the same process called the target twice
// at once for one dispatch.
func TestUnconfirmedNakDoesNotDoubleACall(t *testing.T) {
	t.Parallel()
	target := newAttemptTarget(t, http.StatusInternalServerError, http.StatusOK)
	target.gate, target.gateAfter = make(chan struct{}), 1 // hold attempt 2
	f := newAttemptsFixture(t, target, 3, 0, 0)
	st := f.ex.settles
	st.mu.Lock()
	st.try = 300 * time.Millisecond
	st.mu.Unlock()
	if err := st.sub.Unsubscribe(); err != nil { // confirmations are lost from now on
		t.Fatal(err)
	}
	f.dispatch(t)
	const gaveUp = "nak not confirmed and not sent again, as its delay may have passed; the dispatch is redelivered after its delay, or after AckWait if the nak was lost"
	// The settler counts the give-up, then logs it: wait for the line.
	natstest.Eventually(t, 20*time.Second, "the nak given up, or a third call", func() bool {
		return len(target.attempts()) >= 3 || f.logs.count(gaveUp) >= 1
	})
	got := target.attempts()
	close(target.gate)
	if fmt.Sprint(got) != "[1 2]" {
		t.Fatalf("target called with attempts %v while attempt 2 was held, want [1 2]: a nak sent again reached the delivery of attempt 2", got)
	}
	if n := testutil.ToFloat64(f.ex.cfg.Metrics.SettlesUnconfirmed.WithLabelValues("nak")); n != 1 {
		t.Errorf("flyball_settles_unconfirmed_total{kind=nak} = %v, want 1", n)
	}
	if f.logs.count(gaveUp) != 1 {
		t.Fatal("no warning for the nak given up")
	}
}

// TestNakDelayReadsNakBody: the settler reads a nak's delay off its body.
func TestNakDelayReadsNakBody(t *testing.T) {
	for _, d := range []time.Duration{0, time.Nanosecond, 1500 * time.Millisecond, 24 * time.Hour} {
		if got, ok := nakDelay(nakBody(d)); !ok || got != d {
			t.Errorf("nakDelay(nakBody(%s)) = %s, %v", d, got, ok)
		}
	}
	for _, b := range [][]byte{ackBody, termBody(""), termBody("x"), []byte("+WPI")} {
		if _, ok := nakDelay(b); ok {
			t.Errorf("nakDelay(%q) reads a nak", b)
		}
	}
}

func TestSettlerGivesUpAtTheDeadline(t *testing.T) {
	st, _ := newTestSettler(t, time.Second, time.Millisecond)
	var logged atomic.Int32
	st.warns = repeatlog.New(slog.New(countingHandler{&logged}), settleLogWindow)
	st.settle("ack.reply", "d.t", "ack", ackBody, time.Now().Add(50*time.Millisecond))
	settled(t, st, 10*time.Second)
	if logged.Load() != 1 {
		t.Fatalf("%d warnings, want the one saying the dispatch is redelivered after AckWait", logged.Load())
	}
	if n := testutil.ToFloat64(st.unconfirmed.WithLabelValues("ack")); n != 1 {
		t.Fatalf("flyball_settles_unconfirmed_total{kind=ack} = %v, want 1", n)
	}
}

// TestSettlerLogsABurstOfGiveUpsOnce: when every settle of a burst gives
// up at once (NATS overloaded), the log gets the first warning and the
// count of the rest in a line or two (written when the settler goes
// quiet, which it can do more than once while a slow machine is still
// adding the burst), and the metric counts each. Before, each wrote its
// own warning.
func TestSettlerLogsABurstOfGiveUpsOnce(t *testing.T) {
	st, _ := newTestSettler(t, time.Second, time.Millisecond)
	logs := newLogLines()
	st.warns = repeatlog.New(slog.New(logs), settleLogWindow)
	deadline := time.Now().Add(time.Second)
	for i := range 500 {
		st.settle("ack.reply", fmt.Sprintf("d.t%d", i), "ack", ackBody, deadline)
		st.settle("term.reply", fmt.Sprintf("d.u%d", i), "term", termBody("test"), deadline)
	}
	settled(t, st, 10*time.Second)
	for _, kind := range []string{"ack", "term"} {
		if n := testutil.ToFloat64(st.unconfirmed.WithLabelValues(kind)); n != 500 {
			t.Errorf("flyball_settles_unconfirmed_total{kind=%s} = %v, want 500", kind, n)
		}
		msg := kind + " not confirmed; the dispatch is redelivered after AckWait"
		natstest.Eventually(t, 5*time.Second, "the log to account for 500 "+kind+" give-ups", func() bool {
			given, _ := logs.account(msg)
			return given == 500
		})
		if _, lines := logs.account(msg); lines > 10 {
			t.Errorf("%d lines for 500 %s give-ups, want the first and a count or a few", lines, kind)
		}
	}
}

// TestSettlerStopGivesOneLastTry: at shutdown a settle waiting to retry is
// tried once more at once, and given up if that fails too.
func TestSettlerStopGivesOneLastTry(t *testing.T) {
	st, _ := newTestSettler(t, time.Second, time.Hour) // only stop can end the wait
	st.settle("ack.reply", "d.t", "ack", ackBody, time.Now().Add(24*time.Hour))
	natstest.Eventually(t, 10*time.Second, "the first try fails", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		for _, p := range st.pending {
			return !p.sent
		}
		return false
	})
	var p *pendingSettle
	st.mu.Lock()
	for _, q := range st.pending {
		p = q
	}
	st.mu.Unlock()
	done := make(chan struct{})
	go func() { st.stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("stop did not return: the settle was not given up after its last try")
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if p.tries != 2 || len(st.pending) != 0 {
		t.Fatalf("after stop: %d tries, %d pending; want 2 tries (one last at stop) and none pending", p.tries, len(st.pending))
	}
}

// countingHandler counts warnings.
type countingHandler struct{ n *atomic.Int32 }

func (h countingHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn
}

func (h countingHandler) Handle(context.Context, slog.Record) error {
	h.n.Add(1)
	return nil
}

func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }

func (h countingHandler) WithGroup(string) slog.Handler { return h }

func TestSettleBodiesMatchNATSGo(t *testing.T) {
	for got, want := range map[string]string{
		string(ackBody):                          "+ACK",
		string(nakBody(0)):                       "-NAK",
		string(nakBody(1500 * time.Millisecond)): `-NAK {"delay": 1500000000}`,
		string(termBody("")):                     "+TERM",
		string(termBody("final failure")):        "+TERM final failure",
	} {
		if got != want {
			t.Errorf("body %q, want %q", got, want)
		}
	}
}

// settleFixture is a work-queue stream with one delivered, unacked message
// and an executor Service with just what settle needs. AckWait is long, so
// a redelivery before it can only come from a nak that reached the server.
func settleFixture(t *testing.T) (*Service, jetstream.Consumer, jetstream.Msg) {
	t.Helper()
	return settleFixtureWait(t, time.Minute)
}

// settleFixtureWait is settleFixture with the consumer's AckWait. The
// stream holds one message per subject and refuses a second, as DISPATCH
// does (at most one pending run per task).
func settleFixtureWait(t *testing.T, ackWait time.Duration) (*Service, jetstream.Consumer, jetstream.Msg) {
	t.Helper()
	srv := natstest.Start(t)
	ctx := t.Context()
	if _, err := srv.JS.CreateStream(ctx, jetstream.StreamConfig{
		Name: "D", Subjects: []string{"d.>"}, Retention: jetstream.WorkQueuePolicy,
		MaxMsgsPerSubject: 1, Discard: jetstream.DiscardNew, DiscardNewPerSubject: true,
	}); err != nil {
		t.Fatal(err)
	}
	cons, err := srv.JS.CreateOrUpdateConsumer(ctx, "D", jetstream.ConsumerConfig{Durable: "x", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.JS.Publish(ctx, "d.t", []byte("run")); err != nil {
		t.Fatal(err)
	}
	m := fetchOne(t, cons, 5*time.Second)
	if m == nil {
		t.Fatal("the message was not delivered")
	}
	st, err := newSettler(srv.JS.Conn(), quietLog(), metrics.New())
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{cfg: Config{JS: srv.JS, AckWait: ackWait}, log: quietLog(), settles: st}
	return s, cons, m
}

func fetchOne(t *testing.T, cons jetstream.Consumer, wait time.Duration) jetstream.Msg {
	t.Helper()
	b, err := cons.Fetch(1, jetstream.FetchMaxWait(wait))
	if err != nil {
		t.Fatal(err)
	}
	for m := range b.Messages() {
		return m
	}
	return nil
}

func TestSettleNakRedeliversAfterTheDelay(t *testing.T) {
	s, cons, m := settleFixture(t)
	s.settle(m, "nak", nakBody(100*time.Millisecond))
	settled(t, s.settles, 10*time.Second)
	again := fetchOne(t, cons, 10*time.Second)
	if again == nil {
		t.Fatal("not redelivered 10s after a 100ms nak (AckWait is 1m)")
	}
	if md, err := again.Metadata(); err != nil || md.NumDelivered != 2 {
		t.Fatalf("metadata %+v, %v; want the second delivery", md, err)
	}
}

func TestSettleTermRemovesTheMessage(t *testing.T) {
	s, cons, m := settleFixture(t)
	s.settle(m, "term", termBody("final failure after 3 attempt(s)"))
	settled(t, s.settles, 10*time.Second)
	info, err := cons.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.NumRedelivered != 0 || info.NumPending != 0 {
		t.Fatalf("consumer after term: %d ack pending, %d redelivered, %d pending; want none", info.NumAckPending, info.NumRedelivered, info.NumPending)
	}
}

func TestSettleAckRemovesTheMessage(t *testing.T) {
	s, cons, m := settleFixture(t)
	s.ack(m)
	settled(t, s.settles, 10*time.Second)
	info, err := cons.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.AckFloor.Stream != 1 {
		t.Fatalf("consumer after ack: %d ack pending, ack floor %d; want 0 and 1", info.NumAckPending, info.AckFloor.Stream)
	}
}

// TestInProgressAfterASettleIsHarmless: keepWaitersAlive may send an
// InProgress for a dispatch whose ack or term settle has just sent (settle
// holds it back only behind a nak, which an InProgress would delay). The
// server must ignore it: the message stays gone, nothing comes back after
// AckWait, and the subject takes the task's next dispatch. The settle goes
// out as the settler's own request, so the jetstream.Msg does not know it
// is settled and sends the InProgress, as in the executor.
func TestInProgressAfterASettleIsHarmless(t *testing.T) {
	for _, kind := range []string{"ack", "term"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			const ackWait = 300 * time.Millisecond
			s, cons, m := settleFixtureWait(t, ackWait)
			if kind == "ack" {
				s.ack(m)
			} else {
				s.settle(m, "term", termBody("final failure after 1 attempt(s)"))
			}
			settled(t, s.settles, 10*time.Second)
			if err := m.InProgress(); err != nil {
				t.Fatalf("InProgress after the %s: %v", kind, err)
			}
			js := s.cfg.JS
			if err := js.Conn().Flush(); err != nil { // the InProgress is at the server
				t.Fatal(err)
			}
			// Revived, it would come back one AckWait after the InProgress.
			if again := fetchOne(t, cons, 5*ackWait); again != nil {
				md, _ := again.Metadata()
				t.Fatalf("redelivered after the %s and an InProgress: %+v", kind, md)
			}
			info, err := cons.Info(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if info.NumAckPending != 0 || info.NumRedelivered != 0 || info.NumPending != 0 {
				t.Fatalf("consumer after the %s and an InProgress: %d ack pending, %d redelivered, %d pending; want none",
					kind, info.NumAckPending, info.NumRedelivered, info.NumPending)
			}
			// One message per subject, new ones refused: this publish
			// fails while the first is still held.
			if _, err := js.Publish(t.Context(), "d.t", []byte("next")); err != nil {
				t.Fatalf("the next dispatch on the subject: %v", err)
			}
			next := fetchOne(t, cons, 5*time.Second)
			if next == nil {
				t.Fatal("the next dispatch was not delivered")
			}
			if md, err := next.Metadata(); err != nil || string(next.Data()) != "next" || md.NumDelivered != 1 {
				t.Fatalf("next delivery %q, metadata %+v, %v; want the new message, delivered once", next.Data(), md, err)
			}
		})
	}
}

// TestSettlerRidesOutAConsumerLeaderElection cuts off, without warning,
// the leader of an R3 work-queue consumer on a 3-node cluster and acks
// ten deliveries at once: until the raft election ends (4-9 s) every ack
// is answered "no responders" or not at all. Each must be confirmed by
// the new leader with the default timings, so none is redelivered after
// AckWait (finding 11).
func TestSettlerRidesOutAConsumerLeaderElection(t *testing.T) {
	cl, _, admin := natstest.ElectionCluster(t)
	ctx := t.Context()
	natstest.Settle(t, time.Minute, "create stream D", func(ctx context.Context) (jetstream.Stream, error) {
		return admin.CreateStream(ctx, jetstream.StreamConfig{Name: "D", Subjects: []string{"d.>"}, Retention: jetstream.WorkQueuePolicy, Replicas: 3})
	})
	cons := natstest.Settle(t, time.Minute, "create consumer x", func(ctx context.Context) (jetstream.Consumer, error) {
		return admin.CreateOrUpdateConsumer(ctx, "D", jetstream.ConsumerConfig{Durable: "x", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute, Replicas: 3})
	})
	const n = 10
	// A new R3 stream can answer its first publishes with "no response"
	// while its leader settles in; the message ID makes a retry of one
	// that was stored after all a duplicate the stream drops.
	for i := range n {
		natstest.Settle(t, 30*time.Second, fmt.Sprintf("publish d.t%d", i), func(ctx context.Context) (*jetstream.PubAck, error) {
			return admin.Publish(ctx, fmt.Sprintf("d.t%d", i), []byte("run"), jetstream.WithMsgID(fmt.Sprintf("t%d", i)))
		})
	}
	victim := cons.CachedInfo().Cluster.Leader
	nc, js := cl.ConnectTo(t, cl.Other(victim))
	c, err := js.Consumer(ctx, "D", "x")
	if err != nil {
		t.Fatal(err)
	}
	// A fetch can end early while the new R3 consumer settles in.
	var msgs []jetstream.Msg
	var fetchErr error
	for deadline := time.Now().Add(20 * time.Second); len(msgs) < n && time.Now().Before(deadline); {
		b, err := c.Fetch(n-len(msgs), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			fetchErr = err
			continue
		}
		for m := range b.Messages() {
			msgs = append(msgs, m)
		}
		fetchErr = b.Error()
	}
	if len(msgs) != n {
		t.Fatalf("fetched %d of %d (last error: %v)", len(msgs), n, fetchErr)
	}
	st, err := newSettler(nc, quietLog(), metrics.New())
	if err != nil {
		t.Fatal(err)
	}
	cl.Kill(t, victim)
	for _, m := range msgs {
		st.settle(m.Reply(), m.Subject(), "ack", ackBody, time.Now().Add(time.Minute))
	}
	settled(t, st, 45*time.Second)
	natstest.Eventually(t, 10*time.Second, "the new leader reports every delivery acked", func() bool {
		info, err := c.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumRedelivered == 0 && info.AckFloor.Stream == n
	})
}
