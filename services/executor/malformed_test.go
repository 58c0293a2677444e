package executor

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestDispatchOfAnotherTypeIsTerminated: a message on DISPATCH whose type
// is not run.due (a command published on the wrong subject, with data
// that happens to read as a dispatch) is terminated as malformed, not
// run.
func TestDispatchOfAnotherTypeIsTerminated(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	logs := newLogLines()
	const id = "wrongtype"
	startExecutor(t, srv, logs, events.TaskSpec{
		ID:       id,
		Target:   events.Target{NATS: &events.NATSTarget{Subject: "nobody.listens"}},
		Schedule: events.Schedule{Interval: events.Duration(time.Hour)},
	})
	slot := time.Now().UTC()
	d := events.Dispatch{DispatchID: events.DispatchID(id, slot), TaskID: id, ScheduledAt: slot, FiredAt: slot}
	body, err := events.Marshal(events.TypeTaskCreated, "test", id, d, slot, d.DispatchID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.JS.Publish(context.Background(), events.DispatchSubject(id), body); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "the dispatch is terminated as malformed", func() bool {
		return logs.count("terminating malformed message") == 1
	})
}

// lossyDelivery is a delivery whose settles reach the consumer through
// relay, a subject the test forwards: the test can lose one on the way, as
// a consumer leader election does.
type lossyDelivery struct {
	jetstream.Msg
	nc    *nats.Conn
	relay string
}

func (m lossyDelivery) Reply() string { return m.relay }

func (m lossyDelivery) TermWithReason(reason string) error {
	return m.nc.Publish(m.relay, termBody(reason))
}

// TestALostTermOfAMalformedDispatchIsSentAgain: the executor terminated
// a malformed dispatch with a plain, fire-and-forget term, unlike every
// other settle (ack.go). One lost on the way (a consumer leader election)
// left the dispatch in DISPATCH, holding its task's one slot, until
// AckWait (30 s), and its redelivery was counted and logged again. The
// term now goes through the settler: sent again when unconfirmed, it
// removes the dispatch, counted and logged once, with its reason.
func TestALostTermOfAMalformedDispatchIsSentAgain(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	const id = "far-ahead"
	slot := time.Now().UTC().Add(MaxDispatchAhead + time.Hour).Truncate(time.Millisecond)
	d := events.Dispatch{DispatchID: events.DispatchID(id, slot), TaskID: id, ScheduledAt: slot, FiredAt: time.Now().UTC()}
	body, err := events.Marshal(events.TypeRunDue, "test", id, d, d.FiredAt, d.DispatchID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.JS.Publish(ctx, events.DispatchSubject(id), body); err != nil {
		t.Fatal(err)
	}
	cons, err := srv.JS.Consumer(ctx, streams.StreamDispatch, streams.ConsumerExecutor)
	if err != nil {
		t.Fatal(err)
	}
	m := fetchOne(t, cons, 5*time.Second)
	if m == nil {
		t.Fatal("the dispatch was not delivered")
	}
	// The relay loses the first settle and forwards the others,
	// answering with the consumer's confirmation.
	nc, _ := srv.Connect(t)
	var tries atomic.Int32
	var terms sync.Map // the bodies that reached the relay
	natstest.Subscribe(t, nc, "relay.settle", func(r *nats.Msg) {
		terms.Store(string(r.Data), true)
		if tries.Add(1) == 1 {
			return // lost
		}
		if ok, err := nc.Request(m.Reply(), r.Data, 5*time.Second); err == nil {
			_ = r.Respond(ok.Data)
		}
	})
	logs := newLogLines()
	met := metrics.New()
	st, err := newSettler(srv.JS.Conn(), slog.New(logs), met)
	if err != nil {
		t.Fatal(err)
	}
	st.try, st.tick = 200*time.Millisecond, time.Millisecond
	s := &Service{cfg: Config{JS: srv.JS, AckWait: 30 * time.Second, Metrics: met, Now: time.Now}, log: slog.New(logs), settles: st}
	s.handle(ctx, lossyDelivery{Msg: m, nc: srv.JS.Conn(), relay: "relay.settle"})
	natstest.Eventually(t, 10*time.Second, "the dispatch leaves DISPATCH well before AckWait (30 s)", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	})
	if n := tries.Load(); n < 2 {
		t.Errorf("%d tries of the term reached the relay, want it sent again after the lost one", n)
	}
	terms.Range(func(k, _ any) bool {
		if !strings.HasPrefix(k.(string), "+TERM malformed dispatch: scheduledAt ") {
			t.Errorf("settle %q, want a term with the reason", k)
		}
		return true
	})
	if n := testutil.ToFloat64(met.RejectedEvents.WithLabelValues("malformed dispatch")); n != 1 {
		t.Errorf(`flyball_rejected_events_total{reason="malformed dispatch"} = %v, want 1`, n)
	}
	if n := logs.count("terminating malformed message"); n != 1 {
		t.Errorf("%d warnings, want 1", n)
	}
}
