package deadletter_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/deadletter"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
)

// lostPubAck is a JetStream that stores the first dead-letter entry
// published through it and answers that publish with a timeout, as a
// PubAck lost in a leader change does.
type lostPubAck struct {
	jetstream.JetStream
	lost atomic.Bool
}

func (j *lostPubAck) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	ack, err := j.JetStream.PublishMsg(ctx, m, opts...)
	if err == nil && strings.HasPrefix(m.Subject, events.DeadLetterSubject("")) && j.lost.CompareAndSwap(false, true) {
		return nil, nats.ErrTimeout
	}
	return ack, err
}

// TestDeadLetterWhosePubAckWasLostIsCountedOnce: the entry stored by a
// write whose PubAck was lost is counted and logged once, when the final
// failure (or the MAX_DELIVERIES advisory, or the reconcile pass) is
// handled again and its publish comes back a duplicate. It was counted
// never: the write that stored it got an error, and the one that came
// back a duplicate took the entry for one counted already, so
// FlyballDeadLetters could stay silent for a task that failed for good.
func TestDeadLetterWhosePubAckWasLostIsCountedOnce(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	js := &lostPubAck{JetStream: srv.JS}
	var logged atomic.Int32
	cfg := deadletter.Config{}
	cfg.JS = js
	cfg.Metrics = metrics.New()
	cfg.Logger = slog.New(warnCounter{msg: "run dead-lettered", n: &logged})
	startService(t, cfg)
	h := &harness{t: t, js: srv.JS, metrics: cfg.Metrics}
	total := func(reason string) float64 {
		return testutil.ToFloat64(cfg.Metrics.DeadLetterTotal.WithLabelValues(reason))
	}

	// A final failure: nakked after the lost PubAck, then handled again.
	h.failed("t1", `{"dispatchId":"t1:1772442000000","taskId":"t1","scheduledAt":"2026-03-02T09:00:00Z","attempt":1,"final":true,"errorKind":"permanent",`+
		`"dispatch":{"dispatchId":"t1:1772442000000","taskId":"t1","scheduledAt":"2026-03-02T09:00:00Z"}}`)
	if !js.lost.Load() {
		t.Fatal("no dead-letter publish lost its PubAck")
	}
	if n, c, w := h.entries("t1"), total(events.DeadLetterPermanent), logged.Load(); n != 1 || c != 1 || w != 1 {
		t.Fatalf(`final failure: %d entries, flyball_deadletter_total{reason="permanent"} = %v, %d "run dead-lettered" lines; want 1, 1, 1`, n, c, w)
	}

	// An exhausted dispatch: the advisory is nakked, then handled again.
	js.lost.Store(false)
	seq := publishDispatch(t, srv.JS, "t2")
	advise(t, srv.JS, seq, 5)
	requireDispatchGone(t, srv.JS, seq)
	if n, c, w := h.entries("t2"), total(events.DeadLetterMaxDeliveries), logged.Load(); n != 1 || c != 1 || w != 2 {
		t.Fatalf(`advisory: %d entries, flyball_deadletter_total{reason="max-deliveries"} = %v, %d "run dead-lettered" lines in all; want 1, 1, 2`, n, c, w)
	}
}

// TestReconciledDeadLetterWhosePubAckWasLostIsCountedOnce: the same for
// a dispatch the reconcile pass dead-letters: the pass after the one
// whose PubAck was lost finds the entry stored and counts it, once.
func TestReconciledDeadLetterWhosePubAckWasLostIsCountedOnce(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	js := &lostPubAck{JetStream: srv.JS}
	seq := publishDispatch(t, srv.JS, "t1")
	exhaustWithoutAdvisory(t, srv.JS, 2)

	_, m := startReconciling(t, js)
	waitReconciled(t, srv.JS, m, seq)
	h := &harness{t: t, js: srv.JS, metrics: m}
	if n, c := h.entries("t1"), testutil.ToFloat64(m.DeadLetterTotal.WithLabelValues(events.DeadLetterMaxDeliveries)); !js.lost.Load() || n != 1 || c != 1 {
		t.Fatalf(`PubAck lost %v, %d entries, flyball_deadletter_total{reason="max-deliveries"} = %v; want true, 1, 1`, js.lost.Load(), n, c)
	}
}
