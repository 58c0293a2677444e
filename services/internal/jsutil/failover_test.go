package jsutil

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/natstest"
)

// TestConsumersResumeAfterLeaderLoss cuts off, without warning, the server
// leading both durables of a 3-node cluster (as `docker kill` does). The
// pulls waiting on it go silent; ConsumeWorkers gives up on its pull when
// two heartbeats are missing and then retries against a consumer with no
// leader until the raft election (4-9 s) ends. It must deliver a message
// within a retry interval of the new leader being there; an uncapped
// backoff waited up to 5 s more. nats.go's Consume is checked alongside:
// the new leader answers its replicated pull request with "409 Leadership
// Change" at once.
func TestConsumersResumeAfterLeaderLoss(t *testing.T) {
	cl, admin, js := natstest.ElectionCluster(t)
	natstest.Settle(t, time.Minute, "create stream W", func(ctx context.Context) (jetstream.Stream, error) {
		return js.CreateStream(ctx, jetstream.StreamConfig{Name: "W", Subjects: []string{"work.>"}, Replicas: 3})
	})
	for _, d := range []string{"w", "c"} {
		natstest.Settle(t, time.Minute, "create consumer "+d, func(ctx context.Context) (jetstream.Consumer, error) {
			return js.CreateOrUpdateConsumer(ctx, "W", jetstream.ConsumerConfig{Durable: d, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, Replicas: 3})
		})
	}
	// Put both consumer leaders on one server, the victim.
	var victim string
	natstest.Eventually(t, 20*time.Second, "consumer w to have a leader", func() bool { victim = consumerLeader(t, js, "w"); return victim != "" })
	// A step-down can elect another server than the preferred one (one
	// that is not caught up yet is passed over, and a loaded machine slows
	// the election): ask again while c has a leader that is not the victim.
	req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": victim}})
	var asked time.Time
	natstest.Eventually(t, 40*time.Second, "consumer c to move to "+victim, func() bool {
		l := consumerLeader(t, js, "c")
		if l == victim {
			return true
		}
		if l != "" && time.Since(asked) > 3*time.Second {
			asked = time.Now()
			if _, err := admin.Request("$JS.API.CONSUMER.LEADER.STEPDOWN.W.c", req, 5*time.Second); err != nil {
				t.Logf("step-down of c: %v (asking again)", err)
			}
		}
		return false
	})
	_, js = cl.ConnectTo(t, cl.Other(victim))

	got := map[string]chan time.Time{"w": make(chan time.Time, 8), "c": make(chan time.Time, 8)}
	handler := func(d string) jetstream.MessageHandler {
		return func(m jetstream.Msg) {
			_ = m.DoubleAck(context.Background())
			if string(m.Data()) == "after" {
				got[d] <- time.Now()
			}
		}
	}
	// Binding looks the durable up on its leader. On a loaded runner a
	// raft group can lose its leader for a while (CI once waited out the
	// whole 30 s API timeout here, before the kill), so bind as a
	// service's restart would: again, until the durable answers.
	wc := natstest.Settle(t, time.Minute, "bind w", func(ctx context.Context) (*WorkerConsume, error) {
		return ConsumeWorkers(ctx, js, "W", "w", slog.Default(), Workers{N: 2}, handler("w"))
	})
	t.Cleanup(wc.Stop)
	cc := natstest.Settle(t, time.Minute, "bind c", func(ctx context.Context) (jetstream.ConsumeContext, error) {
		return Consume(ctx, js, "W", "c", slog.Default(), nil, handler("c"))
	})
	t.Cleanup(cc.Stop)
	// Both pulls are waiting on the victim: a first message went through.
	publishRetry(t, js, "before")
	natstest.Eventually(t, 10*time.Second, "both consumers to handle a message", func() bool {
		return consumerDelivered(t, js, "w") == 1 && consumerDelivered(t, js, "c") == 1
	})

	killed := time.Now()
	cl.Kill(t, victim)
	stored := publishRetry(t, js, "after")
	// Each durable elects its own leader.
	elected := map[string]time.Time{}
	natstest.Eventually(t, 30*time.Second, "both consumers to elect a new leader", func() bool {
		for d := range got {
			if l := consumerLeader(t, js, d); elected[d].IsZero() && l != "" && l != victim {
				elected[d] = time.Now()
			}
		}
		return len(elected) == len(got)
	})
	for d, ch := range got {
		select {
		case at := <-ch:
			ready := elected[d] // the message can flow from here on
			if stored.After(ready) {
				ready = stored
			}
			lag := at.Sub(ready)
			t.Logf("%s: delivered %s after the kill, %s after the message was stored and a leader elected", d, at.Sub(killed).Round(10*time.Millisecond), lag.Round(10*time.Millisecond))
			// A retry interval (1 s) plus the poll above and -race slack.
			if lag > 2500*time.Millisecond {
				t.Errorf("%s: delivered %s after it could have been", d, lag)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: not delivered within 30s of the new leader", d)
		}
	}
}

// consumerInfo is the durable's info, or a zero one while the request
// fails (during an election).
func consumerInfo(t *testing.T, js jetstream.JetStream, durable string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 250*time.Millisecond)
	defer cancel()
	c, err := js.Consumer(ctx, "W", durable)
	if err != nil {
		return &jetstream.ConsumerInfo{}
	}
	return c.CachedInfo()
}

// consumerDelivered is how many messages the durable has had acked.
func consumerDelivered(t *testing.T, js jetstream.JetStream, durable string) uint64 {
	return consumerInfo(t, js, durable).AckFloor.Consumer
}

// consumerLeader names the durable's leader, or "" while it has none.
func consumerLeader(t *testing.T, js jetstream.JetStream, durable string) string {
	if ci := consumerInfo(t, js, durable); ci.Cluster != nil {
		return ci.Cluster.Leader
	}
	return ""
}

// publishRetry publishes data to work.x until the stream stores it (its
// leader may be electing) and returns when it was stored.
func publishRetry(t *testing.T, js jetstream.JetStream, data string) time.Time {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, err := js.Publish(ctx, "work.x", []byte(data), jetstream.WithMsgID(data))
		cancel()
		if err == nil {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("publish %q: %v", data, err)
		}
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
			// no responders and the like return at once: pace the retries
			<-time.After(100 * time.Millisecond)
		}
	}
}
