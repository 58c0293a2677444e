package query_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/query"
	"github.com/flyballhq/flyball/streams"
)

// indexed returns a second reader of b's server that keeps a task index.
func indexed(t *testing.T, b *bundle) *query.Reader {
	t.Helper()
	r, err := query.NewReader(b.ctx, b.srv.JS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.IndexTasks(b.ctx))
	return r
}

// recordFallbacks makes ix record why its pages listed the keys instead
// of answering from its index, and returns the reasons recorded so far.
func recordFallbacks(ix *query.Reader) func() []error {
	var (
		mu        sync.Mutex
		fallbacks []error
	)
	ix.IndexFallback = func(reason error) {
		mu.Lock()
		defer mu.Unlock()
		fallbacks = append(fallbacks, reason)
	}
	return func() []error {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(fallbacks)
	}
}

// ids returns the IDs of a page.
func ids(page []query.TaskView) []string {
	out := []string{}
	for _, v := range page {
		out = append(out, v.Spec.ID)
	}
	return out
}

// TestIndexedTaskPagesMatchTheListing: walking the tasks in pages, with
// tasks created (before and after the cursor) and deleted between pages,
// a reader with a task index answers every page as the reader that
// lists the keys for each: the same tasks, the same next, the
// unreadable spec listed without a filter, a filtered page read on
// through batches of the index until it is full.
func TestIndexedTaskPagesMatchTheListing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ix := indexed(t, b)
	id := func(i int) string { return fmt.Sprintf("t%04d", i) }
	job := func(i int) string {
		if i%151 == 0 {
			return "rare"
		}
		return "orders"
	}
	const n = 640 // a filtered page reads on past a batch of 256 ids
	for i := 0; i < n; i += 2 {
		b.put(t, streams.BucketTasks, id(i), spec(id(i), job(i), "10s"))
	}
	b.put(t, streams.BucketTasks, id(501), "not a spec")
	kv, err := b.srv.JS.KeyValue(b.ctx, streams.BucketTasks)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []query.TaskFilter{{}, {Job: "rare"}} {
		after, pages := "", 0
		for {
			want, wantNext, err := b.r.TaskPage(b.ctx, f, after, 37)
			if err != nil {
				t.Fatal(err)
			}
			got, next, err := ix.TaskPage(b.ctx, f, after, 37)
			// (The index's chunks are TestSortedKeysMatchASortedSet's.)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids(got), ids(want)) || next != wantNext {
				t.Fatalf("job %q, page %d after %q: %v, next %q; the listing: %v, next %q", f.Job, pages, after, ids(got), next, ids(want), wantNext)
			}
			if next == "" {
				break
			}
			// Between pages: a task created before the cursor, one
			// after it, and the first of the next page deleted.
			pages++
			var cur int
			if _, err := fmt.Sscanf(next, "t%04d", &cur); err != nil {
				t.Fatal(err)
			}
			for _, i := range []int{cur - 1, min(cur+3, n+pages)} {
				b.put(t, streams.BucketTasks, id(i), spec(id(i), job(i), "10s"))
			}
			if err := kv.Delete(b.ctx, id(cur+2)); err != nil {
				t.Fatal(err)
			}
			after = next
		}
		if f.Job == "" && pages < n/2/37 {
			t.Errorf("walked %d pages; want at least %d", pages, n/2/37)
		}
	}
}

// TestTaskIndexCatchesUpAfterWrites: once built, the index follows the
// creates and deletes of tasks by itself, with no page asking.
func TestTaskIndexCatchesUpAfterWrites(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ix := indexed(t, b)
	b.put(t, streams.BucketTasks, "a", spec("a", "orders", "10s"))
	if _, _, err := ix.TaskPage(b.ctx, query.TaskFilter{}, "", 10); err != nil { // builds the index
		t.Fatal(err)
	}
	kv, err := b.srv.JS.KeyValue(b.ctx, streams.BucketTasks)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c", "b", "d"} {
		b.put(t, streams.BucketTasks, id, spec(id, "orders", "10s"))
	}
	b.put(t, streams.BucketTasks, "c", spec("c", "billing", "10s")) // an update: no second c
	if err := kv.Delete(b.ctx, "a"); err != nil {
		t.Fatal(err)
	}
	// A second delete, not a purge: no flyball bucket allows the roll-up
	// a KV purge sends (streams.validateKV).
	if err := kv.Delete(b.ctx, "d"); err != nil {
		t.Fatal(err)
	}
	want := []string{"b", "c"}
	var got []string
	natstest.Eventually(t, 5*time.Second, "the index holds b and c", func() bool {
		got, _ = query.TaskIndex(ix)
		return slices.Equal(got, want)
	})
}

// TestTaskIndexSurvivesTheLossOfItsWatch: when the index's consumer is
// deleted on the server, the index stops following the bucket. A page
// then does not answer from it (a task created since would be missing):
// it lists the keys itself, and the next page builds the index again,
// which then follows the bucket.
func TestTaskIndexSurvivesTheLossOfItsWatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ix := indexed(t, b)
	fellBack := recordFallbacks(ix)
	for _, id := range []string{"a", "b", "c"} {
		b.put(t, streams.BucketTasks, id, spec(id, "orders", "10s"))
	}
	page := func(want ...string) {
		t.Helper()
		got, next, err := ix.TaskPage(b.ctx, query.TaskFilter{}, "", 10)
		if err != nil || !slices.Equal(ids(got), want) || next != "" {
			t.Fatalf("page: %v, next %q, %v; want %v", ids(got), next, err, want)
		}
	}
	page("a", "b", "c")
	if got := fellBack(); len(got) != 0 {
		t.Fatalf("the index fell back with its watch running: %v", got)
	}
	stream, err := b.srv.JS.Stream(b.ctx, "KV_"+streams.BucketTasks)
	if err != nil {
		t.Fatal(err)
	}
	names := stream.ConsumerNames(b.ctx)
	lost := 0
	for name := range names.Name() {
		if err := stream.DeleteConsumer(b.ctx, name); err != nil {
			t.Fatal(err)
		}
		lost++
	}
	if names.Err() != nil || lost != 1 {
		t.Fatalf("deleted %d consumers of the tasks bucket (%v); want 1, the index's", lost, names.Err())
	}
	b.put(t, streams.BucketTasks, "d", spec("d", "orders", "10s"))
	page("a", "b", "c", "d") // listed, the index lagging
	// An operator sees that page's cost: the API logs and counts it.
	if got := fellBack(); len(got) != 1 || !strings.Contains(got[0].Error(), "watch of "+streams.BucketTasks) {
		t.Fatalf("fallbacks reported %v; want one, naming the watch of %s", got, streams.BucketTasks)
	}
	page("a", "b", "c", "d") // the index again
	if _, restarts := query.TaskIndex(ix); restarts != 1 {
		t.Errorf("the index's watch started again %d times; want 1", restarts)
	}
	b.put(t, streams.BucketTasks, "e", spec("e", "orders", "10s"))
	page("a", "b", "c", "d", "e")
	if got := fellBack(); len(got) != 1 {
		t.Errorf("fallbacks reported %v; want only the one while the watch was lost", got)
	}
	natstest.Eventually(t, 5*time.Second, "the new index holds a to e", func() bool {
		got, _ := query.TaskIndex(ix)
		return slices.Equal(got, []string{"a", "b", "c", "d", "e"})
	})
}

// TestAPageDoesNotWaitForAStalledLoad: the index's first load can stall
// (here its consumer is paused on the server mid-load, which keeps its
// heartbeats coming, so the client sees nothing wrong). A page waited
// for the load with no limit, until its client gave up; it now lists
// the keys itself once the load applied nothing for a second, and the
// next page loads the index again.
//
// Seeding the keys is not what the test measures, and under -race on a
// loaded 2-core machine it took 15 to 50 s, most or all of setup's 20 s
// context, which the pages then had left: they failed with "context
// deadline exceeded" (or "list keys of KV flyball-tasks: watch closed",
// the listing's watch closed by that context). So the seeding and the
// index live in a context of the test's own, and each page gets a minute
// of its own (listing the 20000 keys took up to 20 s there), still far
// short of the hour the consumer is paused for.
func TestAPageDoesNotWaitForAStalledLoad(t *testing.T) {
	t.Parallel()
	b := setup(t)
	life, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	b.ctx = life
	pageCtx := func() context.Context {
		ctx, cancel := context.WithTimeout(life, time.Minute)
		t.Cleanup(cancel)
		return ctx
	}
	ix := indexed(t, b)
	fellBack := recordFallbacks(ix)
	// Enough keys that the load is still running when the test, which
	// polls for its consumer, pauses it.
	const n = 20000
	natstest.PublishMany(b.ctx, t, b.srv.JS, n, func(i int) (string, []byte) {
		id := fmt.Sprintf("t%05d", i)
		body, err := json.Marshal(spec(id, "orders", "10s"))
		if err != nil {
			t.Fatal(err)
		}
		return "$KV." + streams.BucketTasks + "." + id, body
	})
	stream, err := b.srv.JS.Stream(b.ctx, "KV_"+streams.BucketTasks)
	if err != nil {
		t.Fatal(err)
	}

	type result struct {
		page []query.TaskView
		next string
		err  error
	}
	done := make(chan result, 1)
	ctx := pageCtx()
	go func() {
		page, next, err := ix.TaskPage(ctx, query.TaskFilter{}, "", 3)
		done <- result{page, next, err}
	}()
	var paused string
	natstest.Eventually(t, 5*time.Second, "the index's consumer is created and paused", func() bool {
		names := stream.ConsumerNames(b.ctx)
		for name := range names.Name() {
			if _, err := stream.PauseConsumer(b.ctx, name, time.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			paused = name
		}
		return paused != ""
	})
	if got, _ := query.TaskIndex(ix); got != nil {
		t.Fatalf("the index loaded all %d keys before its consumer was paused: raise n", len(got))
	}
	r := <-done
	if r.err != nil || !slices.Equal(ids(r.page), []string{"t00000", "t00001", "t00002"}) || r.next != "t00002" {
		t.Fatalf("page while the load stalled: %v, next %q, %v; want the first three tasks", ids(r.page), r.next, r.err)
	}
	if got := fellBack(); len(got) != 1 || !strings.Contains(got[0].Error(), "applied nothing") {
		t.Fatalf("fallbacks reported %v; want one, saying the watch applied nothing", got)
	}
	// The next page loads the index again, on a new consumer.
	page, next, err := ix.TaskPage(pageCtx(), query.TaskFilter{}, "t19997", 3)
	if err != nil || !slices.Equal(ids(page), []string{"t19998", "t19999"}) || next != "" {
		t.Fatalf("page after the stall: %v, next %q, %v; want the last two tasks", ids(page), next, err)
	}
	if _, restarts := query.TaskIndex(ix); restarts != 1 {
		t.Errorf("the index's watch started again %d times; want 1", restarts)
	}
}

// TestAFilteredPageChecksTheIndexOnce: a filtered page reads the index
// in batches of 256 IDs until the page is full. It asked the server for
// the bucket's stream state (to wait until the index is current) before
// every batch; it now asks once, for the first.
func TestAFilteredPageChecksTheIndexOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ix := indexed(t, b)
	const n = 700 // three batches of 256
	for i := range n {
		job := "orders"
		if i == n-1 {
			job = "rare"
		}
		id := fmt.Sprintf("t%04d", i)
		b.put(t, streams.BucketTasks, id, spec(id, job, "10s"))
	}
	if _, _, err := ix.TaskPage(b.ctx, query.TaskFilter{}, "", 1); err != nil { // loads the index
		t.Fatal(err)
	}
	nc := b.srv.JS.Conn()
	infos, err := nc.SubscribeSync("$JS.API.STREAM.INFO.KV_" + streams.BucketTasks)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	page, next, err := ix.TaskPage(b.ctx, query.TaskFilter{Job: "rare"}, "", 1)
	if err != nil || !slices.Equal(ids(page), []string{fmt.Sprintf("t%04d", n-1)}) || next != "" {
		t.Fatalf("filtered page: %v, next %q, %v; want the one rare task", ids(page), next, err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if asked, _, err := infos.Pending(); err != nil || asked != 1 {
		t.Fatalf("the filtered page asked for the stream's state %d times (%v); want 1", asked, err)
	}
}
