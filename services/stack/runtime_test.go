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

	nc.Close() // the instance dies: its beats stop, nothing deregisters it
	natstest.Eventually(t, 10*time.Second, "runtime.offline after the heartbeat goes stale", func() bool { return len(offline()) == 1 })
	var hb events.Heartbeat
	if err := events.DecodeData(offline()[0], &hb); err != nil || hb.Status != events.RuntimeOffline || hb.Name != "ghost" {
		t.Fatalf("offline event = %+v (%v)", hb, err)
	}
	// The mark's time (the event's) less the last beat is how long the
	// instance had been silent when the sweeper marked it: OfflineAfter
	// (400ms) by the sweeper's clock from the sweep that first saw the
	// last beat, so never less, and at most a sweep more, so at most two
	// sweeps more than OfflineAfter after the beat. A sweep lists the
	// registry and reads every entry (eight instances here) and the task
	// views: on a loaded 2-core machine under -race it takes far longer
	// than its 100ms interval (offline came 1.45s and 2.1s after the crash
	// there, against a bound of 1.4s). 1.5s a sweep still fails a sweeper
	// that waits its 45s default, or anything but OfflineAfter.
	silent := offline()[0].Time().Sub(hb.LastBeat)
	if silent <= 400*time.Millisecond || silent > 400*time.Millisecond+2*1500*time.Millisecond {
		t.Fatalf("marked offline %s after its last beat, want past OfflineAfter (400ms) by at most two sweeps", silent)
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
