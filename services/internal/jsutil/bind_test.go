package jsutil

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/natstest"
)

// TestBindBucketsSetsEachHandleAndNamesTheMissingBucket binds buckets on
// an embedded server: each handle is set to its own bucket, and a bucket
// that does not exist fails the bind with its name in the error.
func TestBindBucketsSetsEachHandleAndNamesTheMissingBucket(t *testing.T) {
	srv := natstest.Start(t)
	ctx := t.Context()
	for _, name := range []string{"a", "b"} {
		if _, err := srv.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name}); err != nil {
			t.Fatal(err)
		}
	}
	var a, b, missing jetstream.KeyValue
	if err := BindBuckets(ctx, srv.JS, Bucket{Name: "a", KV: &a}, Bucket{Name: "b", KV: &b}); err != nil {
		t.Fatal(err)
	}
	if a == nil || b == nil || a.Bucket() != "a" || b.Bucket() != "b" {
		t.Fatalf("handles bound to %v and %v, want a and b", a, b)
	}
	err := BindBuckets(ctx, srv.JS, Bucket{Name: "a", KV: &a}, Bucket{Name: "nope", KV: &missing})
	if err == nil || !strings.Contains(err.Error(), "bind KV nope") || missing != nil {
		t.Fatalf("binding a missing bucket: err %v, handle %v; want an error naming it and no handle", err, missing)
	}
}
