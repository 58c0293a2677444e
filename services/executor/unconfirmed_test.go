package executor

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/repeatlog"
	"github.com/flyballhq/flyball/streams"
)

// lostRunAcks is the executor's JetStream whose run-event publishes are
// stored while lose is set, but whose acks never come back, like those of
// a RUNS leader that stored the event and died before its ack went out
// (what natstest.LostAcks's lossy connection does, here on the fixture's
// own server, whose streams the executor needs).
type lostRunAcks struct {
	jetstream.JetStream
	lose atomic.Bool
}

func (j *lostRunAcks) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	f, err := j.JetStream.PublishMsgAsync(m, opts...)
	if err != nil || !j.lose.Load() || !strings.HasPrefix(m.Subject, "flyball.run.") {
		return f, err
	}
	return lostAck{f}, nil
}

// lostAck is a publish whose ack never arrives.
type lostAck struct{ jetstream.PubAckFuture }

func (lostAck) Ok() <-chan *jetstream.PubAck { return nil }
func (lostAck) Err() <-chan error            { return nil }

// givenUpFirstEvent starts an executor whose run-event acks are lost
// (lossy.lose, set), with maxAttempts, dispatches the fixture's task and
// waits until the outbox gives up on the first call's event (and keeps
// the dispatch to publish it again).
func givenUpFirstEvent(t *testing.T, target *attemptTarget, maxAttempts int) (*attemptsFixture, *lostRunAcks) {
	t.Helper()
	lossy := &lostRunAcks{}
	lossy.lose.Store(true)
	f := newTunedAttemptsFixture(t, target, maxAttempts, 0, 0, func(s *Service) {
		lossy.JetStream = s.cfg.JS
		s.cfg.JS = lossy
		s.outRound, s.outBudget = 200*time.Millisecond, time.Second
	})
	abandoned := f.ex.cfg.Metrics.OutboxAbandoned
	f.dispatch(t)
	natstest.Eventually(t, 20*time.Second, "the outbox giving up on the run event", func() bool { return testutil.ToFloat64(abandoned) >= 1 })
	return f, lossy
}

// TestGivenUpRunEventIsPublishedAgainRatherThanCallingAgain: the target
// is called, and every ack of its run event's publishes is lost (the
// event is stored), until the outbox gives up. The executor knows the
// call's outcome: it must publish that event again and settle the
// dispatch from it, as it would have, not call the target a second time.
// A failure goes on to its retry, counted, as it would have. Before
// replays, the redelivery called the target again with the same attempt
// number (its event then dropped by RUNS as a duplicate).
func TestGivenUpRunEventIsPublishedAgainRatherThanCallingAgain(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		given  []int // the target's statuses
		calls  string
		stored []string
		// orStored is also right: a success is sent again as
		// run.recovered while this executor's breaker view cannot tell
		// its key settled (Settled: not known, as while a watch of
		// flyball-breakers starts again on a loaded machine).
		orStored []string
	}{
		{
			name: "succeeded", given: []int{http.StatusOK}, calls: "[1]", stored: []string{"succeeded(attempt 1, final false)"},
			orStored: []string{"succeeded(attempt 1, final false)", "recovered(attempt 1, final false)"},
		},
		{
			name: "failed, then retried", given: []int{http.StatusServiceUnavailable, http.StatusOK}, calls: "[1 2]",
			// The success after a failure is also sent as run.recovered.
			stored: []string{"failed(attempt 1, final false)", "succeeded(attempt 2, final false)", "recovered(attempt 2, final false)"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			target := newAttemptTarget(t, tt.given...)
			f, lossy := givenUpFirstEvent(t, target, 3)
			lossy.lose.Store(false)
			natstest.Eventually(t, 20*time.Second, "the dispatch acked", func() bool {
				info := f.dispatchInfo(t)
				return len(f.stored(t)) >= len(tt.stored) && info.NumAckPending == 0 && info.NumPending == 0
			})
			if got := target.attempts(); fmt.Sprint(got) != tt.calls {
				t.Errorf("target called with attempts %v, want %s: the redelivery after the give-up called it again", got, tt.calls)
			}
			if got := f.stored(t); fmt.Sprint(got) != fmt.Sprint(tt.stored) && (tt.orStored == nil || fmt.Sprint(got) != fmt.Sprint(tt.orStored)) {
				t.Errorf("RUNS holds %v, want %s", got, tt.stored)
			}
		})
	}
}

// TestGivenUpRunEventIsNotPublishedAgainOverLaterAttempts: the outbox
// gives up on attempt 1's run event, and before it is published again,
// deliveries to another executor (after a keep-alive that did not get
// through) make attempts 1 and 2 and record them (written here as that
// executor would). The republish settled from attempt 1's event, writing
// its record over theirs:
// the count went back to 1, attempt 2 was made again (past maxAttempts
// in the end) and its event dropped by RUNS as a duplicate. The
// redelivery now goes on from the record: attempt 3.
func TestGivenUpRunEventIsNotPublishedAgainOverLaterAttempts(t *testing.T) {
	t.Parallel()
	target := newAttemptTarget(t, http.StatusServiceUnavailable, http.StatusServiceUnavailable, http.StatusServiceUnavailable, http.StatusServiceUnavailable)
	// The give-up keeps the dispatch for a second before the event is
	// published again: the other executor's record is written within it.
	f, lossy := givenUpFirstEvent(t, target, 4)
	runs := f.stored(t)
	if len(runs) != 1 {
		t.Fatalf("RUNS holds %v; want attempt 1's failure", runs)
	}
	d := events.Dispatch{DispatchID: runs[0].run.DispatchID}
	natstest.PutJSON(t, f.srv.JS, streams.BucketAttempts, attemptKey(&d), attemptRecord{Attempts: 2})
	lossy.lose.Store(false)
	natstest.Eventually(t, 20*time.Second, "the dispatch ended", func() bool {
		info := f.dispatchInfo(t)
		return info.NumAckPending == 0 && info.NumPending == 0
	})
	if got := target.attempts(); fmt.Sprint(got) != "[1 3 4]" {
		t.Errorf("target called with attempts %v, want [1 3 4]: the replay of attempt 1 set the count back", got)
	}
	if r, _ := f.attemptRecordOf(t, &d); r.Attempts != 4 || r.Outcome != events.OutcomeFailed {
		t.Errorf("attempt record %+v; want 4 attempts, failed", r)
	}
}

// TestKeptEventsStayCountedUntilSettled: the bytes of a run event kept to
// publish again were counted only while its dispatch waited for its next
// try, and left the count while the event was back in the outbox: a newer
// give-up took that room, and the event kept first was then nakked at its
// own next give-up, its target called again. An event now stays counted
// from its first give-up until its dispatch is settled or handed back.
func TestKeptEventsStayCountedUntilSettled(t *testing.T) {
	s := &Service{eventBytesMax: 10, settles: &settler{warns: repeatlog.New(slog.New(slog.DiscardHandler), time.Minute)}}
	first := unconfirmedRun{msg: &nats.Msg{Data: make([]byte, 6)}}
	if !s.keepsEvent(len(first.msg.Data)) {
		t.Fatal("the first event given up was not kept, with room for it")
	}
	first.counted = true
	// The first event is published again: it stays counted meanwhile.
	if s.keepsEvent(6) {
		t.Fatal("a newer give-up was kept in the room of an event being published again")
	}
	s.releaseEvent(&first) // stored, its dispatch settled
	if first.counted || s.eventBytes.Load() != 0 {
		t.Fatalf("after the settle: kept %v, %d bytes counted; want none", first.counted, s.eventBytes.Load())
	}
	s.releaseEvent(&first) // a second release changes nothing
	if n := s.eventBytes.Load(); n != 0 {
		t.Fatalf("a second release counted %d bytes", n)
	}
	if !s.keepsEvent(6) {
		t.Fatal("no room once the first event's dispatch was settled")
	}
}
