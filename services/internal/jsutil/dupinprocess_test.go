package jsutil

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/natstest"
)

// TestPublishNewEventDoesNotTakeInProcessForStored provokes error 10158
// ("duplicate message id is in process") on an R3 stream whose leader has
// lost both followers: a first publish of ID x is proposed and never
// commits, so a second publish of x is answered 10158. PublishNewEvent
// used to answer that as stored (false, nil), and the dead-letter service
// then deleted the dispatch although the entry it deferred to was never
// stored. It must not report x stored while the publish it would defer to
// has not committed.
func TestPublishNewEventDoesNotTakeInProcessForStored(t *testing.T) {
	cl, _, js := natstest.ElectionCluster(t)
	natstest.Settle(t, time.Minute, "create stream D", func(ctx context.Context) (jetstream.Stream, error) {
		return js.CreateStream(ctx, jetstream.StreamConfig{Name: "D", Subjects: []string{"d.>"}, Replicas: 3, Duplicates: time.Hour})
	})
	var leader string
	natstest.Eventually(t, 20*time.Second, "stream D to have a leader", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		s, err := js.Stream(ctx, "D")
		if err == nil && s.CachedInfo().Cluster != nil {
			leader = s.CachedInfo().Cluster.Leader
		}
		return leader != ""
	})
	_, ljs := cl.ConnectTo(t, leader)
	for _, s := range cl.Servers {
		if s.Name() != leader {
			cl.Kill(t, s.Name())
		}
	}
	// The first publish is proposed and never answered: no quorum.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	_, err := ljs.PublishMsg(ctx, EventMsg("d.1", "x", []byte("{}")))
	cancel()
	if err == nil {
		t.Fatal("first publish was stored without a quorum")
	}
	// The same ID again: in process.
	ctx, cancel = context.WithTimeout(t.Context(), time.Second)
	_, err = ljs.PublishMsg(ctx, EventMsg("d.1", "x", []byte("{}")))
	cancel()
	if !IsDuplicateInProcess(err) {
		t.Skipf("second publish of x not answered 10158 (the leader may have stepped down): %v", err)
	}
	ctx, cancel = context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	stored, err := PublishNewEvent(ctx, ljs, "d.1", "x", "t.x", "test", "t1", map[string]string{}, time.Now())
	if err == nil {
		t.Fatalf("PublishNewEvent answered (stored=%v, nil) while the publish of the same ID it deferred to never committed", stored)
	}
	t.Logf("PublishNewEvent: %v", err)
}
