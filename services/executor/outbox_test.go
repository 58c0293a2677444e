package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

func testOutbox(t *testing.T, js jetstream.JetStream, round, budget time.Duration) *outbox {
	t.Helper()
	o := newOutbox(js, slog.New(slog.DiscardHandler), 16, metrics.New(), nil)
	o.round, o.budget = round, budget
	t.Cleanup(o.close)
	return o
}

// republished reads flyball_outbox_republished_total.
func republished(o *outbox) float64 { return testutil.ToFloat64(o.m.OutboxRepublished) }

func outMsg(id string) *nats.Msg {
	m := nats.NewMsg("out.x")
	m.Header.Set(jetstream.MsgIDHeader, id)
	m.Data = []byte(id)
	return m
}

// TestOutboxRidesOutAMissingStream: while no stream takes the subject
// (a RUNS leader being elected answers "no responders" the same way),
// the outbox keeps publishing the event in rounds, past nats.go's own
// retries, and settles it stored once the stream is there.
func TestOutboxRidesOutAMissingStream(t *testing.T) {
	srv := natstest.Start(t)
	o := testOutbox(t, srv.JS, 300*time.Millisecond, time.Minute)
	settled := make(chan error, 1)
	o.publish(outMsg("ev-1"), outboxLinger, func(err error) { settled <- err })
	natstest.Eventually(t, 20*time.Second, "two rounds that stored nothing", func() bool { return republished(o) >= 2 })
	select {
	case err := <-settled:
		t.Fatalf("settled before the stream existed: %v", err)
	default:
	}
	createOut(t, srv.JS)
	awaitStored(t, o, settled, 1, "the event, once the stream appeared")
	st, err := srv.JS.Stream(t.Context(), "OUT")
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("stream holds %d messages, want 1", n)
	}
}

// TestOutboxGivesUpAfterTheBudget: an event that cannot be stored settles
// with an error once the budget is spent, so its dispatch is nakked.
func TestOutboxGivesUpAfterTheBudget(t *testing.T) {
	srv := natstest.Start(t)
	o := testOutbox(t, srv.JS, 200*time.Millisecond, time.Second)
	settled := make(chan error, 1)
	o.publish(outMsg("ev-1"), outboxLinger, func(err error) { settled <- err })
	select {
	case err := <-settled:
		if err == nil || !strings.Contains(err.Error(), "not confirmed stored within 1s") {
			t.Fatalf("settled with %v, want a not-stored error", err)
		}
		if n := testutil.ToFloat64(o.m.OutboxAbandoned); n != 1 {
			t.Fatalf("flyball_outbox_abandoned_total = %v, want 1", n)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("not settled 20s into a 1s budget")
	}
}

// TestOutboxGiveUpNamesTheLastPublishError: with RUNS deleted, every
// round's publish of the run event fails with "no response from stream",
// but the round the budget cuts short ends with no ack yet. The give-up,
// logged with the dispatch kept for another publish (the line FlyballRunEventsAbandoned's
// runbook sends the operator to), said only "no publish ack within the ack
// timeout", hiding the cause the retry lines had shown. It must carry the
// last error a publish of that event got, and still say the outbox gave
// up after its budget.
func TestOutboxGiveUpNamesTheLastPublishError(t *testing.T) {
	t.Parallel()
	target := newAttemptTarget(t, http.StatusOK)
	// A round outlasts nats.go's own retries of "no responders" (about a
	// second), so the first rounds end with the stream's error before the
	// budget cuts the last one short.
	f := newTunedAttemptsFixture(t, target, 3, 0, 0, func(s *Service) {
		s.outRound, s.outBudget = 5*time.Second, 3*time.Second
	})
	if err := f.srv.JS.DeleteStream(t.Context(), streams.StreamRuns); err != nil {
		t.Fatal(err)
	}
	f.dispatch(t)
	const giveUp = "flyball's own state not read or written; trying the dispatch again in place"
	var errs []string
	natstest.Eventually(t, 30*time.Second, "the outbox giving up on the run event", func() bool {
		errs = f.logs.errs(giveUp)
		return len(errs) > 0
	})
	got := errs[0]
	if !strings.Contains(got, "run event not confirmed stored within 3s") {
		t.Fatalf("the give-up logged err %q, want it to say it gave up within the 3s budget", got)
	}
	if !strings.Contains(got, jetstream.ErrNoStreamResponse.Error()) || strings.Contains(got, jsutil.ErrAckTimeout.Error()) {
		t.Fatalf("the give-up logged err %q, want the publishes' own error (%q), not the cut-short round's %q",
			got, jetstream.ErrNoStreamResponse, jsutil.ErrAckTimeout)
	}
}

// TestOutboxGivingUpOnAnEventWhoseAcksWereLostDoesNotSayNotStored: every
// round's ack is lost (the outbox's connection may not subscribe to its
// inboxes), while RUNS stores the event in the first round and drops the
// later rounds' publishes as duplicates. The outbox gives up after its
// budget, and its dispatch is nakked, but the event is stored: the error
// it settles with, logged with the nak, said "run event not stored".
// It now says the event may have been stored: the redelivery calls the
// target again, and its event, under the same Nats-Msg-Id, is dropped as
// a duplicate within RUNS's duplicate window.
func TestOutboxGivingUpOnAnEventWhoseAcksWereLostDoesNotSayNotStored(t *testing.T) {
	_, js, _, lossy := natstest.LostAcks(t, 0)
	createOut(t, js)
	o := testOutbox(t, lossy, 200*time.Millisecond, time.Second)
	settled := make(chan error, 1)
	o.publish(outMsg("ev-1"), outboxLinger, func(err error) { settled <- err })
	var err error
	select {
	case err = <-settled:
	case <-time.After(20 * time.Second):
		t.Fatal("not settled 20s into a 1s budget")
	}
	if n := len(natstest.Read(t, js, "OUT", "out.x")); n != 1 {
		t.Fatalf("OUT holds %d events, want 1", n)
	}
	if err == nil || strings.Contains(err.Error(), "not stored") || !strings.Contains(err.Error(), "may have been stored") {
		t.Fatalf("settled with %v: want an error that says the event may have been stored", err)
	}
}

// TestOutboxSettlesPermanentErrorsAtOnce: an error no retry fixes (the
// event exceeds the stream's message size) settles in the first round.
func TestOutboxSettlesPermanentErrorsAtOnce(t *testing.T) {
	srv := natstest.Start(t)
	if _, err := srv.JS.CreateStream(t.Context(), jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.>"}, MaxMsgSize: 4}); err != nil {
		t.Fatal(err)
	}
	o := testOutbox(t, srv.JS, 200*time.Millisecond, time.Minute)
	settled := make(chan error, 1)
	o.publish(outMsg("too-long"), outboxLinger, func(err error) { settled <- err })
	select {
	case err := <-settled:
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) {
			t.Fatalf("settled with %v, want the stream's API error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not settled")
	}
	if n := republished(o); n != 0 {
		t.Fatalf("published %v events again, want none", n)
	}
}

// TestOutboxRidesOutANATSRestart: when the connection to NATS drops,
// nats.go fails every publish still waiting for its ack with
// nats.ErrDisconnected. The event may be stored or not; publishing it
// again with its Nats-Msg-Id once reconnected settles it either way. The
// outbox used to settle it with the error instead, so a NATS restart
// nakked the dispatch of every call that had just ended, and the target
// was called again, even with NATS back well within the budget.
//
// The client connects as flyball serve does, with no reconnect buffer:
// the next round's publish, while still reconnecting, fails at once with
// nats.ErrReconnectBufExceeded. The outbox settled the event with that
// error too; it now waits for the connection and publishes it again.
func TestOutboxRidesOutANATSRestart(t *testing.T) {
	srv := natstest.StartRestartable(t)
	nc, js := srv.Connect(t, nats.ReconnectBufSize(-1))
	// A subscriber that never answers holds the event's ack pending until
	// the server goes down.
	sink, err := nats.Connect(srv.URL, nats.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sink.Close)
	received := make(chan struct{}, 1)
	if _, err := sink.Subscribe("out.x", func(*nats.Msg) {
		select {
		case received <- struct{}{}:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := sink.Flush(); err != nil {
		t.Fatal(err)
	}
	o := testOutbox(t, js, 5*time.Second, time.Minute)
	settled := make(chan error, 1)
	o.publish(outMsg("ev-1"), outboxLinger, func(err error) { settled <- err })
	select {
	case <-received:
	case <-time.After(10 * time.Second):
		t.Fatal("the event was not published")
	}
	srv.Restart(t) // within the 5 s round: the pending ack fails with nats.ErrDisconnected
	natstest.Eventually(t, 10*time.Second, "the client reconnected", nc.IsConnected)
	createOut(t, js)
	awaitStored(t, o, settled, 1, "the event, once NATS was back")
}

// TestOutboxWaitsForNATSButNotAtStop: with NATS down and no reconnect
// buffer every publish fails at once, with no ack to wait on. The outbox
// publishes again only once the connection is back (one round here, not
// a spin through its budget), and a stop does not wait for NATS: what is
// left settles with its error at once, as before the outbox waited.
func TestOutboxWaitsForNATSButNotAtStop(t *testing.T) {
	srv := natstest.StartRestartable(t)
	nc, js := srv.Connect(t, nats.ReconnectBufSize(-1))
	srv.Server.Shutdown()
	srv.Server.WaitForShutdown()
	natstest.Eventually(t, 10*time.Second, "the client disconnected", func() bool { return !nc.IsConnected() })
	o := newOutbox(js, slog.New(slog.DiscardHandler), 16, metrics.New(), nil)
	settled := make(chan error, 1)
	o.publish(outMsg("ev-1"), outboxLinger, func(err error) { settled <- err })
	natstest.Eventually(t, 10*time.Second, "a round that met the connection down", func() bool { return republished(o) >= 1 })
	closed := make(chan struct{})
	go func() {
		o.close()
		close(closed)
	}()
	awaitClosed(t, closed, 5*time.Second, "the outbox's close with NATS down")
	if err := <-settled; !errors.Is(err, nats.ErrReconnectBufExceeded) {
		t.Errorf("settled with %v at the stop, want %v", err, nats.ErrReconnectBufExceeded)
	}
	if n := republished(o); n != 1 {
		t.Errorf("published again %v times while NATS was down, want 1 (the rounds wait for the connection)", n)
	}
}

// TestCallEndingDuringANATSRestartIsNotCalledAgain: a call ends, 200,
// while the executor's connection (no reconnect buffer, as flyball serve
// connects) is down, NATS restarting. Its run event's publish fails at
// once (nats: outbound buffer limit exceeded); the outbox used to settle
// it with that error, the dispatch was nakked, and the target was called
// again a second later with the same attempt. The outbox now waits for
// the connection and stores the event: one call, one run.succeeded, the
// dispatch delivered once.
func TestCallEndingDuringANATSRestartIsNotCalledAgain(t *testing.T) {
	r := natstest.StartRestartable(t)
	adminNC, adminJS := r.Connect(t)
	exNC, _ := r.Connect(t, nats.ReconnectBufSize(-1))
	target := newAttemptTarget(t, http.StatusOK)
	target.gate = make(chan struct{})
	f := startAttemptsFixture(t, &natstest.Server{Server: r.Server, NC: adminNC, JS: adminJS}, exNC, target, 3, nil)
	f.dispatch(t)
	natstest.Eventually(t, 10*time.Second, "the call", func() bool { return len(target.attempts()) == 1 })
	r.Server.Shutdown()
	r.Server.WaitForShutdown()
	natstest.Eventually(t, 10*time.Second, "the executor disconnected", func() bool { return !exNC.IsConnected() })
	close(target.gate) // the call ends while NATS is down
	natstest.Eventually(t, 10*time.Second, "the run event's publish failed", func() bool {
		return f.logs.count("run events not stored yet; publishing them again")+f.logs.count("transient failure; redelivering") > 0
	})
	r.Restart(t)
	natstest.Eventually(t, 30*time.Second, "the run event stored and the dispatch settled", func() bool {
		if !adminNC.IsConnected() {
			return false
		}
		c, err := adminJS.Consumer(t.Context(), streams.StreamDispatch, streams.ConsumerExecutor)
		if err != nil {
			return false
		}
		info, err := c.Info(t.Context())
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0 && len(f.stored(t)) > 0
	})
	if got := target.attempts(); fmt.Sprint(got) != "[1]" {
		t.Fatalf("target called with attempts %v, want [1]: the call that ended while NATS restarted was made again (nakked: %q)",
			got, f.logs.errs("transient failure; redelivering"))
	}
	if got := successOf(f.stored(t)); fmt.Sprint(got) != "[succeeded(attempt 1, final false)]" {
		t.Errorf("RUNS holds %v, want the one run.succeeded of attempt 1", got)
	}
	if n := f.delivered(t); n != 1 {
		t.Errorf("%d deliveries, want 1", n)
	}
}

// TestOutboxRidesOutALeaderElection cuts off, without warning, the leader
// of an R3 stream on a 3-node cluster and hands the outbox events at once:
// until the raft election ends (4-9 s) every publish gets "no responders"
// or no ack. Every event must still settle stored, each exactly once, so
// no dispatch is nakked and no target is called twice. nats.go's own
// retries alone give up after about a second.
func TestOutboxRidesOutALeaderElection(t *testing.T) {
	cl, _, admin := natstest.ElectionCluster(t)
	ctx := t.Context()
	st := natstest.Settle(t, time.Minute, "create stream OUT", func(ctx context.Context) (jetstream.Stream, error) {
		return admin.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.>"}, Replicas: 3})
	})
	victim := st.CachedInfo().Cluster.Leader
	_, js := cl.ConnectTo(t, cl.Other(victim))
	o := testOutbox(t, js, outboxRound, outboxBudget)

	cl.Kill(t, victim)
	const n = 20
	settled := make(chan error, n)
	for i := range n {
		o.publish(outMsg(fmt.Sprintf("ev-%d", i)), outboxLinger, func(err error) { settled <- err })
	}
	for range n {
		select {
		case err := <-settled:
			if err != nil {
				t.Fatalf("an event settled with %v, want stored", err)
			}
		case <-time.After(outboxBudget + 10*time.Second):
			t.Fatal("events not settled within the budget")
		}
	}
	st, err := js.Stream(ctx, "OUT")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().State.Msgs; got != n {
		t.Fatalf("stream holds %d events, want %d", got, n)
	}
	t.Logf("%d events stored once each; %v published again while %s's successor was elected", n, republished(o), victim)
}

// createOut creates the stream outMsg publishes to.
func createOut(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.>"}}); err != nil {
		t.Fatal(err)
	}
}

// lingering starts an outbox on a fresh server with a stream. Events
// published with an hour's hold can only go out because the outbox is
// full or the executor is idle. busy says whether calls are in flight.
func lingering(t *testing.T, capacity int, busy func() bool) *outbox {
	t.Helper()
	srv := natstest.Start(t)
	createOut(t, srv.JS)
	o := newOutbox(srv.JS, slog.New(slog.DiscardHandler), capacity, metrics.New(), busy)
	t.Cleanup(o.close)
	return o
}

// awaitStored waits for n settlements, each a stored event. It waits past
// the outbox's own publish budget, so an event the outbox gave up on fails
// with the outbox's error rather than a timeout; a timeout reports where
// the outbox stands, and its goroutines, to tell a batch that never left
// from one whose acks did not come back.
func awaitStored(t *testing.T, o *outbox, settled <-chan error, n int, what string) {
	t.Helper()
	wait := max(2*o.budget, 30*time.Second)
	for i := range n {
		select {
		case err := <-settled:
			if err != nil {
				t.Fatalf("%s: settled with %v, want stored", what, err)
			}
		case <-time.After(wait):
			t.Fatalf("%s: %d of %d not stored within %s; outbox: %v events held, %d queued, %v republished, %v abandoned\n%s",
				what, n-i, n, wait, testutil.ToFloat64(o.m.OutboxEvents), len(o.in), republished(o),
				testutil.ToFloat64(o.m.OutboxAbandoned), outboxStacks())
		}
	}
}

// outboxStacks returns the stacks of the goroutines in the outbox's code
// or in nats.go's publish path.
func outboxStacks() string {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var b strings.Builder
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "(*outbox)") || strings.Contains(g, "jetstream.(*jetStream)") {
			b.WriteString(g)
			b.WriteString("\n\n")
		}
	}
	return b.String()
}

// TestOutboxFlushesAFullOutboxAtOnce: when the outbox holds all it can, the
// calls behind it are blocked, so the batch goes out without waiting for
// the linger.
func TestOutboxFlushesAFullOutboxAtOnce(t *testing.T) {
	o := lingering(t, 4, func() bool { return true }) // calls in flight throughout
	settled := make(chan error, 4)
	for i := range 4 {
		o.publish(outMsg(fmt.Sprintf("ev-%d", i)), time.Hour, func(err error) { settled <- err })
	}
	awaitStored(t, o, settled, 4, "a full outbox")
}

// TestOutboxSendsAtOnceWhenIdle: with no call in flight there is nothing to
// batch with, so an event goes out without the linger.
func TestOutboxSendsAtOnceWhenIdle(t *testing.T) {
	o := lingering(t, 16, func() bool { return false })
	settled := make(chan error, 1)
	o.publish(outMsg("ev-1"), time.Hour, func(err error) { settled <- err })
	awaitStored(t, o, settled, 1, "an idle executor's event")
}

// TestOutboxLingersUntilTheLastCallEnds: while calls are in flight the
// events wait for company; the wake-up when the last call ends sends them
// all in one batch, without the linger.
func TestOutboxLingersUntilTheLastCallEnds(t *testing.T) {
	var busy atomic.Bool
	busy.Store(true)
	o := lingering(t, 16, busy.Load)
	settled := make(chan error, 3)
	for i := range 3 {
		o.publish(outMsg(fmt.Sprintf("ev-%d", i)), time.Hour, func(err error) {
			if busy.Load() {
				err = errors.Join(err, errors.New("sent while calls were in flight"))
			}
			settled <- err
		})
	}
	o.wake() // a stale wake-up while calls are in flight changes nothing
	natstest.Eventually(t, 10*time.Second, "the outbox took every event", func() bool { return len(o.in) == 0 })
	busy.Store(false)
	o.wake()
	awaitStored(t, o, settled, 3, "the batch after the last call's wake-up")
}

// TestOutboxLingersPastABatch: while calls are in flight, events keep
// lingering past a publish round's worth; the batch then goes out in
// rounds, every event stored.
func TestOutboxLingersPastABatch(t *testing.T) {
	var busy atomic.Bool
	busy.Store(true)
	o := lingering(t, 16, busy.Load)
	o.max = 4
	const n = 10
	settled := make(chan error, n)
	for i := range n {
		o.publish(outMsg(fmt.Sprintf("ev-%d", i)), time.Hour, func(err error) { settled <- err })
	}
	natstest.Eventually(t, 10*time.Second, "the outbox took every event", func() bool { return len(o.in) == 0 })
	if len(settled) != 0 {
		t.Fatalf("%d events settled while calls were in flight and their hold is an hour", len(settled))
	}
	if got := testutil.ToFloat64(o.m.OutboxEvents); got != n {
		t.Fatalf("flyball_outbox_events = %v while %d linger, want %d", got, n, n)
	}
	busy.Store(false)
	o.wake()
	awaitStored(t, o, settled, n, "three rounds after the last call's wake-up")
	if got := testutil.ToFloat64(o.m.OutboxEvents); got != 0 {
		t.Fatalf("flyball_outbox_events = %v once every event is stored, want 0", got)
	}
	st, err := o.js.Stream(t.Context(), "OUT")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().State.Msgs; got != n {
		t.Fatalf("stream holds %d events, want %d", got, n)
	}
}

// TestOutboxFlushesAtTheEarliestHold: a batch goes out when the shortest
// hold among its events ends, though calls are still in flight.
func TestOutboxFlushesAtTheEarliestHold(t *testing.T) {
	o := lingering(t, 16, func() bool { return true })
	settled := make(chan error, 2)
	o.publish(outMsg("ev-long"), time.Hour, func(err error) { settled <- err })
	o.publish(outMsg("ev-short"), 50*time.Millisecond, func(err error) { settled <- err })
	awaitStored(t, o, settled, 2, "both events, at the short hold")
}

// TestOutboxFlushesWhenItsBytesAreFull: a publish that would take the
// outbox past its byte bound waits, and the batch goes out at once rather
// than after its hold.
func TestOutboxFlushesWhenItsBytesAreFull(t *testing.T) {
	o := lingering(t, 16, func() bool { return true })
	o.room.maxBytes = 8 // two of the 4-byte events below
	settled := make(chan error, 3)
	published := make(chan struct{})
	go func() {
		defer close(published)
		for i := range 3 {
			o.publish(outMsg(fmt.Sprintf("ev-%d", i)), time.Hour, func(err error) { settled <- err })
		}
	}()
	awaitStored(t, o, settled, 2, "the events that filled the outbox's bytes")
	<-published // the third got in once the first two were stored
}

// TestRoomBoundsEventsAndBytes: take waits while the count or the byte
// bound would be passed, says so (blocked, full), and goes on when give
// frees room; an event larger than the byte bound gets in alone.
func TestRoomBoundsEventsAndBytes(t *testing.T) {
	blocked := make(chan struct{}, 4)
	r := newRoom(2, 100, func() { blocked <- struct{}{} }, prometheus.NewGauge(prometheus.GaugeOpts{Name: "held"}))
	r.take(500) // larger than the bound, but the room is empty
	if r.n != 1 || r.full() {
		t.Fatalf("after one take: %d events held, full %v; want 1, not full", r.n, r.full())
	}
	took := make(chan struct{})
	go func() {
		r.take(10)
		close(took)
	}()
	<-blocked
	if !r.full() {
		t.Fatal("not full while a take waits")
	}
	r.give(500)
	<-took
	r.take(80)
	if !r.full() {
		t.Fatal("not full at the event bound")
	}
	r.give(80)
	if r.full() {
		t.Fatal("full with one 10-byte event of 2 and 100 bytes")
	}
	go func() { r.take(95) }()
	<-blocked // 10 + 95 > 100
	r.give(10)
	natstest.Eventually(t, 10*time.Second, "the 95-byte event got in", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.n == 1 && r.bytes == 95
	})
}

// TestSettleHold: an eighth of the tightest interval the cadence can
// take, between outboxLinger and outboxMaxHold; and only on slots of the
// task's cadence (which sources those are: governor's TestSourceCadence).
func TestSettleHold(t *testing.T) {
	every := func(iv time.Duration, minGap time.Duration) *events.TaskSpec {
		s := &events.TaskSpec{Schedule: events.Schedule{Interval: events.Duration(iv)}}
		if minGap > 0 {
			s.Bounds = &events.Bounds{Min: events.Duration(minGap)}
		}
		return s
	}
	for _, c := range []struct {
		name string
		spec *events.TaskSpec
		want time.Duration
	}{
		{"1s", every(time.Second, 0), 125 * time.Millisecond},
		{"10s", every(10*time.Second, 0), 312500 * time.Microsecond},
		{"60s", every(time.Minute, 0), time.Second},
		{"1h", every(time.Hour, 0), time.Second},
		{"60s, bounds.min 2s", every(time.Minute, 2*time.Second), 250 * time.Millisecond},
		{"60s, bounds.min 1m", every(time.Minute, time.Minute), time.Second},
		{"1s, bounds.min 4s (every gap clamped up)", every(time.Second, 4*time.Second), 500 * time.Millisecond},
		{"cron", &events.TaskSpec{Schedule: events.Schedule{Cron: "* * * * * *"}}, outboxLinger},
	} {
		if got := settleHold(c.spec); got != c.want {
			t.Errorf("%s: settleHold = %s, want %s", c.name, got, c.want)
		}
	}
	tk := &task{hold: time.Second}
	if got := holdOf(tk, &events.Dispatch{Source: string(governor.SourceBaselineInterval)}); got != time.Second {
		t.Errorf("a cadence slot: holdOf = %s, want the task's hold", got)
	}
	if got := holdOf(tk, &events.Dispatch{Source: string(governor.SourceHintOneShot)}); got != outboxLinger {
		t.Errorf("a hinted slot: holdOf = %s, want outboxLinger", got)
	}
}
