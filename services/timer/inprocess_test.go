package timer

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestDispatchAnsweredInProcessIsRetried: error 10158 ("duplicate message
// id is in process") does not mean the slot is stored. Here DISPATCH is R3
// and its leader, which the timer talks to, has lost both followers: the
// first try is proposed and never committed, its ack times out, and the
// retry is answered 10158 for that very try. The timer took the answer
// for a duplicate and the slot for dispatched, and the slot was lost
// until the sweeper re-sent it as a zombie 5 minutes later. The slot must
// stay queued and be published again until the stream answers stored or
// duplicate.
func TestDispatchAnsweredInProcessIsRetried(t *testing.T) {
	cl, _, admin := natstest.ElectionCluster(t)
	natstest.Settle(t, time.Minute, "flyball's streams at 3 replicas", func(ctx context.Context) (struct{}, error) {
		return struct{}{}, streams.Ensure(ctx, admin, streams.WithReplicas(3))
	})
	var leader string
	natstest.Eventually(t, 20*time.Second, "DISPATCH to have a leader", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		st, err := admin.Stream(ctx, streams.StreamDispatch)
		if err == nil && st.CachedInfo().Cluster != nil {
			leader = st.CachedInfo().Cluster.Leader
		}
		return leader != ""
	})
	_, js := cl.ConnectTo(t, leader)
	s := startTimer(t, js, func(s *Service) { s.ackTimeout = time.Second })
	for _, srv := range cl.Servers {
		if srv.Name() != leader {
			cl.Kill(t, srv.Name())
		}
	}
	slot := time.Now().Add(-time.Second).Truncate(time.Millisecond).UnixNano()
	s.upsert("task", slot, "baseline-interval", 0, 0)
	// The first try times out (1 s); the retry, 20 ms later, meets it in
	// process. Once the leader steps down (no quorum) tries fail outright.
	natstest.Eventually(t, within, "a try answered 10158, or the leader gone", func() bool {
		r := results(s)
		return r[resultInProcess]+r[resultDuplicate] >= 1 || r[resultError] >= 3
	})
	r := results(s)
	if r[resultDuplicate] != 0 {
		s.mu.Lock()
		it := *s.items["task"]
		s.mu.Unlock()
		t.Fatalf("results %v: a try answered 10158 was taken for stored, the slot for dispatched (fired %v, queued %v); the first try was never committed",
			r, it.fired == slot, it.index >= 0)
	}
	if r[resultInProcess] == 0 {
		t.Skipf("no try answered 10158 (the leader may have stepped down first): results %v", r)
	}
	natstest.Eventually(t, within, "the slot published again after the 10158 answer", func() bool {
		r := results(s)
		return r[resultDuplicate] == 0 && r[resultInProcess]+r[resultError] >= 3
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if it := s.items["task"]; it == nil || it.due != slot {
		t.Fatalf("item %+v, want slot %d still held for a retry", it, slot)
	}
}

// TestSettleRequeuesAnInProcessAnswer is the rule without a cluster (the
// test above skips under -short): a try answered 10158 is counted
// in-process, not duplicate, records no lateness, and its slot is queued
// again.
func TestSettleRequeuesAnInProcessAnswer(t *testing.T) {
	srv := natstest.Start(t)
	s, err := New(Config{JS: srv.JS, Metrics: metrics.New(), RetryDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	slot := time.Now().Add(-time.Minute).UnixNano()
	s.upsert("a", slot, "x", 0, 0)
	runs, _ := s.takeDue()
	if len(runs) != 1 {
		t.Fatalf("took %d runs, want 1", len(runs))
	}
	inProcess := &jetstream.APIError{Code: 400, ErrorCode: 10158, Description: "duplicate message id is in process"}
	if s.settle(&runs[0], nil, inProcess) {
		t.Fatal("a try answered 10158 settled as stored")
	}
	if r := results(s); r[resultInProcess] != 1 || r[resultDuplicate] != 0 {
		t.Fatalf("results %v, want one in-process and no duplicate", r)
	}
	if n, _ := lateness(t, s); n != 0 {
		t.Fatalf("lateness observed %d times for a try not stored, want 0", n)
	}
	if it := s.items["a"]; it.index < 0 || it.due != slot || it.fired != noSlot || it.tried != 0 {
		t.Fatalf("item %+v, want slot %d queued again, with no try that may be stored", it, slot)
	}
}
