package stack_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/heartbeat"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

func startBeater(t *testing.T, srv *natstest.Server) (*heartbeat.Beater, *nats.Conn) {
	t.Helper()
	nc, err := nats.Connect("", nats.InProcessServer(srv.Server))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	b := heartbeat.Start(context.Background(), heartbeat.Config{JS: js, Kind: "executor", Name: "ghost", Interval: 100 * time.Millisecond})
	t.Cleanup(func() { b.Stop(); nc.Close() })
	return b, nc
}

func TestSilentInstanceGoesOfflineAndComesBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // sweeper: OfflineAfter 400ms, sweeps every 100ms
	offline := e.collect("flyball.runtime.offline.executor.ghost")
	online := e.collect("flyball.runtime.online.executor.ghost")
	_, nc := startBeater(t, e.srv)
	natstest.Eventually(t, 5*time.Second, "runtime.online on start", func() bool { return len(online()) == 1 })

	crashed := time.Now()
	nc.Close() // the instance dies: its beats stop, nothing deregisters it
	natstest.Eventually(t, 5*time.Second, "runtime.offline after the heartbeat goes stale", func() bool { return len(offline()) == 1 })
	if took := time.Since(crashed); took > 400*time.Millisecond+time.Second {
		t.Fatalf("offline after %s, want within OfflineAfter (400ms) plus a sweep", took)
	}
	var hb events.Heartbeat
	if err := events.DecodeData(offline()[0], &hb); err != nil || hb.Status != events.RuntimeOffline || hb.Name != "ghost" {
		t.Fatalf("offline event = %+v (%v)", hb, err)
	}

	startBeater(t, e.srv) // restart re-registers
	natstest.Eventually(t, 5*time.Second, "runtime.online after restart", func() bool { return len(online()) == 2 })
	kv, err := e.srv.JS.KeyValue(context.Background(), streams.BucketRuntime)
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, "registry shows the instance online", func() bool {
		ent, err := kv.Get(context.Background(), heartbeat.Key("executor", "ghost"))
		if err != nil {
			return false
		}
		var cur events.Heartbeat
		return json.Unmarshal(ent.Value(), &cur) == nil && cur.Status == events.RuntimeOnline
	})
}

// TestHandWrittenRegistryEntryIsMarkedUnderItsKey: an entry written by
// hand (or by an older version) without kind or name in its value made the
// sweeper publish its offline mark to flyball.runtime.offline.. , which
// nothing answers: the publish timed out after 5 s on every sweep, and the
// instance was never announced. The key, <kind>.<name>, names it.
func TestHandWrittenRegistryEntryIsMarkedUnderItsKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // sweeper: OfflineAfter 400ms, sweeps every 100ms
	offline := e.collect("flyball.runtime.offline.executor.handmade")
	natstest.PutJSON(t, e.srv.JS, streams.BucketRuntime, "executor.handmade", map[string]any{"status": "online", "lastBeat": time.Now().UTC()})
	natstest.Eventually(t, 5*time.Second, "runtime.offline for executor.handmade", func() bool { return len(offline()) == 1 })
}
