package stack_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/flyballhq/flyball/services/embedded"
)

// TestComposeNATSConfigsSyncEverySecond: the compose stack's nats-server
// configs parse, and each forces JetStream writes to disk as `flyball
// dev` does by default (embedded.RecommendedSync; docs/operations.md,
// "Durability"), not every 2 minutes as nats-server would.
func TestComposeNATSConfigsSyncEverySecond(t *testing.T) {
	dir := filepath.Join("..", "..", "deploy", "compose", "nats")
	accounts, err := os.ReadFile(filepath.Join(dir, "accounts.conf"))
	if err != nil {
		t.Fatal(err)
	}
	// The configs read the passwords and the server's name from the
	// environment, as compose passes them.
	for _, v := range regexp.MustCompile(`FLYBALL_NATS_[A-Z]+_PASSWORD`).FindAllString(string(accounts), -1) {
		t.Setenv(v, "x")
	}
	t.Setenv("NATS_SERVER_NAME", "nats1")
	for _, name := range []string{"single.conf", "cluster.conf"} {
		opts, err := server.ProcessConfigFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if opts.SyncInterval != embedded.RecommendedSync.Interval || opts.SyncAlways {
			t.Errorf("%s: sync_interval %s (always %v), want %s", name, opts.SyncInterval, opts.SyncAlways, embedded.RecommendedSync)
		}
	}
	// cluster-tls.conf loads its certificates as it parses, so compare its
	// jetstream block with cluster.conf's instead.
	block := regexp.MustCompile(`(?s)\njetstream \{.*?\n\}`)
	plain, err := os.ReadFile(filepath.Join(dir, "cluster.conf"))
	if err != nil {
		t.Fatal(err)
	}
	withTLS, err := os.ReadFile(filepath.Join(dir, "cluster-tls.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := block.Find(plain), block.Find(withTLS); a == nil || string(a) != string(b) {
		t.Errorf("cluster-tls.conf's jetstream block differs from cluster.conf's:\n%s\nwant\n%s", b, a)
	}
}
