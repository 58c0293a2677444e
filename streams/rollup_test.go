package streams

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// kvConfigs are the definitions of the streams backing the KV buckets.
func kvConfigs(t *testing.T) []jetstream.StreamConfig {
	t.Helper()
	all, err := StreamConfigs()
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.StreamConfig
	for _, c := range all {
		if strings.HasPrefix(c.Name, kvStreamPrefix) {
			out = append(out, c)
		}
	}
	if len(out) != 8 {
		t.Fatalf("%d KV definitions, want 8", len(out))
	}
	return out
}

// expectRollupRefused writes a key to bucket, then a message with
// "Nats-Rollup: all" to another key, as any user allowed to write that
// key can: the server must refuse it (error 10111, "rollup not
// permitted"), and the first key must stay.
func expectRollupRefused(t *testing.T, ctx context.Context, js jetstream.JetStream, bucket string) {
	t.Helper()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatalf("KeyValue(%s): %v", bucket, err)
	}
	if _, err := kv.Put(ctx, "keep.1", []byte("kept")); err != nil {
		t.Fatalf("%s: put: %v", bucket, err)
	}
	m := nats.NewMsg("$KV." + bucket + ".mine")
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
	_, err = js.PublishMsg(ctx, m)
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10111 {
		t.Errorf("%s: a message with Nats-Rollup: all: err %v, want error 10111 (rollup not permitted)", bucket, err)
	}
	if e, err := kv.Get(ctx, "keep.1"); err != nil || string(e.Value()) != "kept" {
		t.Errorf("%s: key keep.1 after another key's rollup: %v, want it kept: one key's writer emptied the bucket", bucket, err)
	}
}

// TestKVBucketsRefuseRollups: every bucket allowed roll-ups
// (allow_rollup_hdrs, as jetstream.CreateKeyValue makes them), and
// nats-server honours "Nats-Rollup: all" on any message a user may
// publish into the stream, removing every other message of the stream.
// A user allowed to write one key emptied the whole bucket: the api's
// own heartbeat entry every service's, the executor's attempt records
// (which keep a redelivered, already-finished dispatch from calling its
// target again) everyone's. No bucket allows them now. A client that
// calls jetstream.CreateKeyValue on a bucket (which would make it with
// roll-ups on) is refused, the bucket existing with another config, and
// leaves the bucket as it was.
func TestKVBucketsRefuseRollups(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	js := startJS(t)
	mustEnsure(t, ctx, js)
	for _, cfg := range kvConfigs(t) {
		bucket := strings.TrimPrefix(cfg.Name, kvStreamPrefix)
		if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: uint8(cfg.MaxMsgsPerSubject)}); !errors.Is(err, jetstream.ErrBucketExists) {
			t.Errorf("CreateKeyValue(%s) over the provisioned bucket: %v, want it refused (the bucket exists with roll-ups off)", bucket, err)
		}
		expectRollupRefused(t, ctx, js, bucket)
	}
}

// TestEnsureTurnsRollupsOffInExistingBuckets: buckets made by an earlier
// provision (allow_rollup_hdrs on; flyball-probes with 1 min limit
// markers, for which nats-server turns roll-ups on) are updated in
// place by Ensure, keeping what they hold, and refuse roll-ups after it.
func TestEnsureTurnsRollupsOffInExistingBuckets(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	js := startJS(t)
	for _, cfg := range kvConfigs(t) {
		old := cfg
		old.AllowRollup = true
		if cfg.Name == kvStreamPrefix+BucketProbes {
			old.SubjectDeleteMarkerTTL = time.Minute
		}
		old.Metadata = map[string]string{MetadataVersion: "1"}
		if _, err := js.CreateStream(ctx, old); err != nil {
			t.Fatalf("create %s as before: %v", cfg.Name, err)
		}
		kv, err := js.KeyValue(ctx, strings.TrimPrefix(cfg.Name, kvStreamPrefix))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, "before.1", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	mustEnsure(t, ctx, js)
	version, err := DefinitionsVersion()
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range kvConfigs(t) {
		st, err := js.Stream(ctx, cfg.Name)
		if err != nil {
			t.Fatal(err)
		}
		live := st.CachedInfo().Config
		if live.AllowRollup || live.SubjectDeleteMarkerTTL != 0 || live.Metadata[MetadataVersion] != strconv.Itoa(version) {
			t.Errorf("%s after Ensure: allow_rollup_hdrs %t, subject_delete_marker_ttl %s, version %q; want false, 0, %d",
				cfg.Name, live.AllowRollup, live.SubjectDeleteMarkerTTL, live.Metadata[MetadataVersion], version)
		}
		bucket := strings.TrimPrefix(cfg.Name, kvStreamPrefix)
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Get(ctx, "before.1"); err != nil {
			t.Errorf("%s: a key written before the upgrade: %v", bucket, err)
		}
		expectRollupRefused(t, ctx, js, bucket)
	}
}
