package streams

import (
	"slices"
	"testing"
)

// TestBackupOrderCoversEveryStream: a stream left out of BackupOrder
// would be left out of every backup that follows docs/operations.md.
func TestBackupOrderCoversEveryStream(t *testing.T) {
	t.Parallel()
	cfgs, err := StreamConfigs()
	if err != nil {
		t.Fatal(err)
	}
	var defined []string
	for _, c := range cfgs {
		defined = append(defined, c.Name)
	}
	listed := slices.Sorted(slices.Values(BackupOrder))
	if !slices.Equal(listed, defined) {
		t.Fatalf("BackupOrder lists %v; the definitions are %v", listed, defined)
	}
}

// TestBackupOrderPutsEachStreamBeforeWhereItsConsumersWrite checks the
// rule BackupOrder states against the consumers and their writes
// (docs/architecture.md, "Streams, consumers and buckets").
func TestBackupOrderPutsEachStreamBeforeWhereItsConsumersWrite(t *testing.T) {
	t.Parallel()
	kv := func(b string) string { return kvStreamPrefix + b }
	writes := map[string][]string{
		StreamTasks:      {kv(BucketTasks), kv(BucketSchedules), kv(BucketPauses)},
		StreamAdvisories: {StreamDeadLetter},
		StreamDispatch:   {StreamRuns, kv(BucketAttempts), kv(BucketProbes)},
		StreamRuns:       {kv(BucketSchedules), kv(BucketPauses), kv(BucketBreakers), StreamHealth, StreamDeadLetter},
		StreamHealth:     {kv(BucketSchedules), kv(BucketPauses)},
		StreamDeadLetter: {kv(BucketSchedules), kv(BucketPauses)},
		kv(BucketTasks):  {kv(BucketSchedules)}, // the spec, then its schedule
	}
	consumers, err := ConsumerConfigs()
	if err != nil {
		t.Fatal(err)
	}
	for stream := range consumers {
		if _, ok := writes[stream]; !ok {
			t.Errorf("stream %s has durable consumers; say here where they write", stream)
		}
	}
	at := func(s string) int {
		i := slices.Index(BackupOrder, s)
		if i < 0 {
			t.Fatalf("%s is not in BackupOrder", s)
		}
		return i
	}
	for from, tos := range writes {
		for _, to := range tos {
			if at(from) > at(to) {
				t.Errorf("BackupOrder has %s after %s, which its consumers write to", from, to)
			}
		}
	}
}
