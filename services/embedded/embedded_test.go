package embedded

import (
	"strings"
	"testing"
	"time"
)

func TestParseListen(t *testing.T) {
	t.Parallel()
	host, port, err := ParseListen("127.0.0.1:4222")
	if err != nil || host != "127.0.0.1" || port != 4222 {
		t.Fatalf("ParseListen(127.0.0.1:4222) = %q, %d, %v", host, port, err)
	}
	for addr, want := range map[string]string{
		"4222":            `want host:port, got "4222"`,
		"127.0.0.1:http":  `bad port "http"`,
		"127.0.0.1:70000": `bad port "70000"`,
	} {
		if _, _, err := ParseListen(addr); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseListen(%q) = %v, want an error containing %q", addr, err, want)
		}
	}
}

func TestParseSync(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]Sync{
		"always": {Always: true},
		"2m":     {Interval: 2 * time.Minute},
		"250ms":  {Interval: 250 * time.Millisecond},
	} {
		got, err := ParseSync(v)
		if err != nil || got != want {
			t.Errorf("ParseSync(%q) = %+v, %v; want %+v", v, got, err, want)
		}
		if back, err := ParseSync(got.String()); err != nil || back != got {
			t.Errorf("ParseSync(%q.String() = %q) = %+v, %v", v, got.String(), back, err)
		}
	}
	for _, v := range []string{"", "0s", "-1s", "never", "Always", "2"} {
		if _, err := ParseSync(v); err == nil || !strings.Contains(err.Error(), "want always or a positive duration") {
			t.Errorf("ParseSync(%q) = %v, want an error", v, err)
		}
	}
	if got := (Sync{}).String(); got != "2m0s" {
		t.Errorf("the zero Sync reads %q, want nats-server's default 2m0s", got)
	}
}

// TestStartAppliesSync checks the running server's JetStream settings,
// which /varz and `nats server info` report to an operator.
func TestStartAppliesSync(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sync         Sync
		wantInterval time.Duration
		wantAlways   bool
	}{
		{Sync{}, DefaultSyncInterval, false},
		{Sync{Interval: 5 * time.Second}, 5 * time.Second, false},
		{Sync{Always: true}, DefaultSyncInterval, true},
	} {
		srv, err := Start(Config{StoreDir: t.TempDir(), DontListen: true, Sync: tc.sync})
		if err != nil {
			t.Fatal(err)
		}
		got := srv.JetStreamConfig()
		srv.Shutdown()
		srv.WaitForShutdown()
		if got == nil || got.SyncInterval != tc.wantInterval || got.SyncAlways != tc.wantAlways {
			t.Errorf("Start with Sync %+v: JetStream config %+v, want sync_interval %s and sync_always %v", tc.sync, got, tc.wantInterval, tc.wantAlways)
		}
	}
}
