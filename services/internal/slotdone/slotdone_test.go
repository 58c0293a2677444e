package slotdone_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/slotdone"
	"github.com/flyballhq/flyball/streams"
)

// TestAWatchedReadEndsAtItsOwnTasksRefusalOnly: a direct get the user may
// not make ends the read of the task it was for, naming the refused
// subject and the permission (under the connection's API prefix), and no
// other task's read in flight: a user granted some of RUNS's subjects and
// not others could answer that one, and the executor, ending it, would
// call a slot whose outcome is stored. The test's JetStream API is served
// through a relay (an API prefix) that holds task b's first read, so it is
// in flight when task a's read is refused.
func TestAWatchedReadEndsAtItsOwnTasksRefusalOnly(t *testing.T) {
	t.Parallel()
	const prefix = "held.API"
	_, admin, reader := natstest.StartDenying(t, "reader", prefix+".DIRECT.GET.RUNS.flyball.run.*.a", nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	ctx := t.Context()
	adminNC := admin.Conn()
	// The relay: every request under prefix to $JS.API, but task b's
	// direct gets of RUNS, held unanswered.
	held := make(chan string, 4)
	natstest.Subscribe(t, adminNC, prefix+".>", func(m *nats.Msg) {
		if strings.HasPrefix(m.Subject, prefix+".DIRECT.GET.RUNS.") && strings.HasSuffix(m.Subject, ".b") {
			held <- m.Subject
			return
		}
		resp, err := adminNC.RequestMsg(&nats.Msg{Subject: "$JS.API" + strings.TrimPrefix(m.Subject, prefix), Data: m.Data, Header: m.Header}, 5*time.Second)
		if err != nil {
			return
		}
		_ = m.RespondMsg(&nats.Msg{Data: resp.Data, Header: resp.Header})
	})
	nc := reader.Conn()
	var refusals jsutil.PubWatch
	refusals.Install(nc)
	js, err := jetstream.NewWithAPIPrefix(nc, prefix)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := js.Stream(ctx, streams.StreamRuns)
	if err != nil {
		t.Fatal(err)
	}
	dead, err := js.Stream(ctx, streams.StreamDeadLetter)
	if err != nil {
		t.Fatal(err)
	}
	w := slotdone.Watched{Refusals: &refusals, JS: js, Service: "test"}
	slot := time.Now().UTC()

	bctx, cancelB := context.WithCancel(ctx)
	defer cancelB()
	bDone := make(chan error, 1)
	go func() {
		_, _, err := w.Find(bctx, runs, dead, "b", slot, time.Time{}, slotdone.SlotOnly)
		bDone <- err
	}()
	select {
	case s := <-held:
		if want := prefix + ".DIRECT.GET.RUNS." + events.RunSubject(events.OutcomeSucceeded, "b"); s != want {
			t.Fatalf("held %s, want b's first read, %s", s, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b's first read did not reach the relay within 10s")
	}

	_, _, err = w.Find(ctx, runs, dead, "a", slot, time.Time{}, slotdone.SlotOnly)
	want := "permissions violation: may not publish to " + prefix + ".DIRECT.GET.RUNS." + events.RunSubject(events.OutcomeSucceeded, "a") +
		"; the test service's NATS user needs " + prefix + ".DIRECT.GET.RUNS.> (docs/security.md lists its subjects)"
	if err == nil || err.Error() != want {
		t.Fatalf("a's read: err %v\nwant %q", err, want)
	}
	// The refusal ended every watch it matched before a's read returned:
	// b's, still held, is ended now by its own context.
	cancelB()
	select {
	case err := <-bDone:
		if v, ok := errors.AsType[*jsutil.PubViolation](err); ok {
			t.Fatalf("b's read was ended by the refusal of %s: %v", v.Subject, err)
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("b's read: err %v, want its context's cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b's read did not end within 10s of its context's cancel")
	}
}
