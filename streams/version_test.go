package streams

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestEnsureLeavesNewerDefinitions is the rolling upgrade: a newer
// flyball's ensure changed a consumer's filter and ack wait and a KV
// bucket's max age, and recorded its definitions version on them. This
// binary's ensure (an old instance restarting) leaves both as they are
// and says so; once the version recorded is this binary's or older, or
// absent (a stream made before versions were recorded), it updates them
// as before.
func TestEnsureLeavesNewerDefinitions(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	js := startJS(t)
	mustEnsure(t, ctx, js)

	const newer = "1000000"
	bucket := "KV_" + BucketAttempts
	editStream(t, js, bucket, func(c *jetstream.StreamConfig) {
		c.MaxAge = 96 * time.Hour
		c.Metadata = withKey(c.Metadata, "flyball.defs.version", newer)
	})
	editConsumer(t, js, StreamRuns, ConsumerBreaker, func(c *jetstream.ConsumerConfig) {
		c.FilterSubjects = []string{"flyball.run.failed.*", "flyball.run.recovered.*", "flyball.run.rebooted.*"}
		c.AckWait = time.Minute
		c.Metadata = withKey(c.Metadata, "flyball.defs.version", newer)
	})

	var report []string
	mustEnsureReport(t, js, &report)
	if got := streamCfg(t, js, bucket); got.MaxAge != 96*time.Hour || got.Metadata["flyball.defs.version"] != newer {
		t.Errorf("%s max_age %v metadata %v after an older ensure, want the newer 96h and version %s", bucket, got.MaxAge, got.Metadata, newer)
	}
	if got := consumerCfg(t, js, StreamRuns, ConsumerBreaker); len(got.FilterSubjects) != 3 || got.AckWait != time.Minute {
		t.Errorf("RUNS.breaker filters %q ack_wait %v after an older ensure, want the newer definitions' 3 filters and 1m", got.FilterSubjects, got.AckWait)
	}
	want := []string{
		"KV_flyball-attempts: newer definitions in place (version 1000000), left as they are",
		"RUNS.breaker: newer definitions in place (version 1000000), left as they are",
	}
	for _, w := range want {
		if !slices.Contains(report, w) {
			t.Errorf("report %q lacks %q", report, w)
		}
	}

	// Older, or no version at all: updated, and this binary's recorded.
	editStream(t, js, bucket, func(c *jetstream.StreamConfig) { c.Metadata = withKey(c.Metadata, "flyball.defs.version", "0") })
	editConsumer(t, js, StreamRuns, ConsumerBreaker, func(c *jetstream.ConsumerConfig) { delete(c.Metadata, "flyball.defs.version") })
	mustEnsure(t, ctx, js)
	s := streamCfg(t, js, bucket)
	if s.MaxAge != 72*time.Hour {
		t.Errorf("%s max_age %v after ensure over an older version, want the definition's 72h", bucket, s.MaxAge)
	}
	c := consumerCfg(t, js, StreamRuns, ConsumerBreaker)
	if len(c.FilterSubjects) != 2 || c.AckWait != 30*time.Second {
		t.Errorf("RUNS.breaker filters %q ack_wait %v after ensure over no version, want the definition's", c.FilterSubjects, c.AckWait)
	}
	for what, md := range map[string]map[string]string{bucket: s.Metadata, "RUNS.breaker": c.Metadata} {
		if v, err := strconv.Atoi(md["flyball.defs.version"]); err != nil || v < 1 || v >= 1000000 {
			t.Errorf("%s metadata %v, want this binary's flyball.defs.version", what, md)
		}
		if md["_nats.req.level"] == "" {
			t.Errorf("%s metadata %v lost nats-server's _nats.req.level", what, md)
		}
	}
}

func withKey(md map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(md)+1)
	for mk, mv := range md {
		out[mk] = mv
	}
	out[k] = v
	return out
}

func streamCfg(t *testing.T, js jetstream.JetStream, name string) jetstream.StreamConfig {
	t.Helper()
	s, err := js.Stream(testCtx(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().Config
}

func consumerCfg(t *testing.T, js jetstream.JetStream, stream, name string) jetstream.ConsumerConfig {
	t.Helper()
	c, err := js.Consumer(testCtx(t), stream, name)
	if err != nil {
		t.Fatal(err)
	}
	return c.CachedInfo().Config
}

// editConsumer changes a durable's config as an operator, or a newer
// flyball, would.
func editConsumer(t *testing.T, js jetstream.JetStream, stream, name string, edit func(*jetstream.ConsumerConfig)) {
	t.Helper()
	cfg := consumerCfg(t, js, stream, name)
	edit(&cfg)
	if _, err := js.UpdateConsumer(testCtx(t), stream, cfg); err != nil {
		t.Fatalf("UpdateConsumer %s.%s: %v", stream, name, err)
	}
}
