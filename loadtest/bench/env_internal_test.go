package bench

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/flyballhq/flyball/services/embedded"
)

// TestInProcessServerTakesTheSyncSetting: --nats-sync reaches the server
// every in-process system and the ceiling run on.
func TestInProcessServerTakesTheSyncSetting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sync         embedded.Sync
		wantAlways   bool
		wantInterval time.Duration
	}{
		{embedded.Sync{}, false, embedded.DefaultSyncInterval},
		{embedded.Sync{Always: true}, true, embedded.DefaultSyncInterval},
		{embedded.Sync{Interval: time.Second}, false, time.Second},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		r := &runner{cfg: Config{Stack: StackInProcess, NATSSync: tc.sync}, log: slog.New(slog.DiscardHandler)}
		env, err := r.startNATS(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		got := env.srv.JetStreamConfig()
		env.close()
		if got == nil || got.SyncAlways != tc.wantAlways || got.SyncInterval != tc.wantInterval {
			t.Errorf("NATSSync %+v: the server's JetStream config is %+v, want sync_always %v and sync_interval %s", tc.sync, got, tc.wantAlways, tc.wantInterval)
		}
	}
}
