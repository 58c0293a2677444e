package main

import (
	"testing"
	"time"

	"github.com/flyballhq/flyball/services/embedded"
)

// TestDevNATSSyncReachesTheServer: dev's --nats-sync, parsed from its
// command line (and its default, 1s), is the Sync of the config dev
// starts its embedded nats-server with (devServerConfig, then
// embedded.Start). That a config's Sync is what the running server uses
// is embedded's TestStartAppliesSync, against a real server.
func TestDevNATSSyncReachesTheServer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want embedded.Sync
	}{
		{nil, embedded.Sync{Interval: time.Second}},
		{[]string{"--nats-sync", "5s"}, embedded.Sync{Interval: 5 * time.Second}},
		{[]string{"--nats-sync", "always"}, embedded.Sync{Always: true}},
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
		if cfg.Sync != tc.want {
			t.Errorf("flyball dev %v: the server's Sync is %+v, want %+v", tc.args, cfg.Sync, tc.want)
		}
	}
}
