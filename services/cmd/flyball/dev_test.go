package main

import (
	"testing"
	"time"

	"github.com/flyballhq/flyball/services/embedded"
)

// TestDevNATSSyncReachesTheServer: dev's --nats-sync, parsed from its
// command line (and its default, 1s), is what the embedded nats-server it
// starts runs with.
func TestDevNATSSyncReachesTheServer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args         []string
		wantInterval time.Duration
		wantAlways   bool
	}{
		{nil, time.Second, false},
		{[]string{"--nats-sync", "5s"}, 5 * time.Second, false},
		{[]string{"--nats-sync", "always"}, embedded.DefaultSyncInterval, true},
	} {
		cmd := newDevCmd()
		args := append([]string{"--listen", "127.0.0.1:14222", "--data-dir", t.TempDir()}, tc.args...)
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		get := func(name string) string {
			v, err := cmd.Flags().GetString(name)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		cfg, err := devServerConfig(get("listen"), get("data-dir"), get("nats-sync"), false)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		cfg.DontListen = true // the port is not what this test is about; no clash with a running dev
		srv, err := embedded.Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		got := srv.JetStreamConfig()
		srv.Shutdown()
		srv.WaitForShutdown()
		if got == nil || got.SyncInterval != tc.wantInterval || got.SyncAlways != tc.wantAlways {
			t.Errorf("flyball dev %v: JetStream config %+v, want sync_interval %s and sync_always %v", tc.args, got, tc.wantInterval, tc.wantAlways)
		}
	}
}
