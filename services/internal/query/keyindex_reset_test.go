package query_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/flyballhq/flyball/services/internal/query"
	"github.com/flyballhq/flyball/streams"
)

// TestAnIndexOfARecreatedBucketIsNotCurrent: the task bucket's stream is
// deleted and provisioned again (or restored) while the API runs, so its
// sequences start again from 1. The index kept the old stream's last
// sequence, so every page took it as current (its sequence was above
// the new stream's) and answered from it, leaving out the tasks written
// since, until the new stream passed the old sequence. A page now sees
// that the stream's last sequence went back (or that the stream was
// created again) and loads the index anew.
func TestAnIndexOfARecreatedBucketIsNotCurrent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ix := indexed(t, b)
	id := func(i int) string { return fmt.Sprintf("t%03d", i) }
	for i := range 50 {
		b.put(t, streams.BucketTasks, id(i), spec(id(i), "orders", "10s"))
	}
	if page, _, err := ix.TaskPage(b.ctx, query.TaskFilter{}, "", 100); err != nil || len(page) != 50 {
		t.Fatalf("first page: %d tasks, %v; want 50", len(page), err)
	}
	if err := b.srv.JS.DeleteStream(b.ctx, "KV_"+streams.BucketTasks); err != nil {
		t.Fatal(err)
	}
	if err := streams.Ensure(b.ctx, b.srv.JS); err != nil {
		t.Fatal(err)
	}
	b.put(t, streams.BucketTasks, "new1", spec("new1", "orders", "10s"))
	b.put(t, streams.BucketTasks, "new2", spec("new2", "orders", "10s"))
	page, next, err := ix.TaskPage(b.ctx, query.TaskFilter{}, "", 100)
	if err != nil || !slices.Equal(ids(page), []string{"new1", "new2"}) || next != "" {
		t.Fatalf("page after the bucket was provisioned again: %v, next %q, %v; want [new1 new2]", ids(page), next, err)
	}
}
