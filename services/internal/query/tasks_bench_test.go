package query_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/query"
	"github.com/flyballhq/flyball/streams"
)

// benchTasks is how many tasks BenchmarkTaskPage seeds.
var benchTasks = flag.Int("bench.tasks", 20_000, "tasks BenchmarkTaskPage seeds")

// BenchmarkTaskPage reads one page of 50 tasks out of 20,000 (or
// -bench.tasks), each with a schedule: the first page, and one near the
// end of the listing, by a reader that lists the keys for each page (the
// CLI's) and by one that keeps a task index (the API's). The cost of a
// page should follow the page and not the number of tasks. index-build
// is what a one-shot reader would pay to build an index for its page:
// the build and the first page. (The index's memory per task is
// BenchmarkSortedKeys's: here the embedded server shares the heap.)
//
//	go test -run '^$' -bench BenchmarkTaskPage -benchmem ./internal/query/
//	go test -run '^$' -bench BenchmarkTaskPage -benchmem ./internal/query/ -args -bench.tasks=100000
func BenchmarkTaskPage(b *testing.B) {
	tasks := *benchTasks
	now := time.Now().UTC()
	ctx, js := seeded(b, tasks, func(_ int, id string) (events.TaskSpec, gov.State) {
		return spec(id, "orders", "10s"), gov.State{TaskID: id, Source: gov.SourceBaselineInterval, NextRunAt: now}
	})
	listing, err := query.NewReader(ctx, js)
	if err != nil {
		b.Fatal(err)
	}
	indexed, err := query.NewReader(ctx, js)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(indexed.IndexTasks(ctx))
	b.Run("index-build", func(b *testing.B) {
		for b.Loop() {
			r, err := query.NewReader(ctx, js)
			if err != nil {
				b.Fatal(err)
			}
			stop := r.IndexTasks(ctx)
			if _, _, err := r.TaskPage(ctx, query.TaskFilter{}, "", 50); err != nil {
				b.Fatal(err)
			}
			stop()
		}
	})
	if _, _, err := indexed.TaskPage(ctx, query.TaskFilter{}, "", 50); err != nil { // builds its index
		b.Fatal(err)
	}
	for _, rd := range []struct {
		name string
		r    *query.Reader
	}{{"listing", listing}, {"indexed", indexed}} {
		for _, c := range []struct {
			name  string
			after string
			next  string
		}{
			{"first", "", seededID(49)},
			{"deep", seededID(tasks - 101), seededID(tasks - 51)},
		} {
			b.Run(rd.name+"/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					page, next, err := rd.r.TaskPage(ctx, query.TaskFilter{}, c.after, 50)
					if err != nil || len(page) != 50 || next != c.next {
						b.Fatalf("page of %d, next %q, %v", len(page), next, err)
					}
				}
			})
		}
	}
}

// seededID is the ID of the i-th task seededReader stores.
func seededID(i int) string { return fmt.Sprintf("task-%07d", i) }

// seededReader starts a server, stores n tasks (task-0000000 …) with the
// spec and schedule gen gives each, and returns a reader of them with
// its context.
func seededReader(b *testing.B, n int, gen func(i int, id string) (events.TaskSpec, gov.State)) (context.Context, *query.Reader) {
	b.Helper()
	ctx, js := seeded(b, n, gen)
	r, err := query.NewReader(ctx, js)
	if err != nil {
		b.Fatal(err)
	}
	return ctx, r
}

// seeded starts a server and stores n tasks as seededReader does, and
// returns a JetStream of it with its context.
func seeded(b *testing.B, n int, gen func(i int, id string) (events.TaskSpec, gov.State)) (context.Context, jetstream.JetStream) {
	b.Helper()
	srv := natstest.StartWithStreams(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	b.Cleanup(cancel)
	specs, err := srv.JS.KeyValue(ctx, streams.BucketTasks)
	if err != nil {
		b.Fatal(err)
	}
	schedules, err := srv.JS.KeyValue(ctx, streams.BucketSchedules)
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		id := seededID(i)
		sp, st := gen(i, id)
		s, _ := json.Marshal(sp)
		stj, _ := json.Marshal(st)
		if _, err := specs.Put(ctx, id, s); err != nil {
			b.Fatal(err)
		}
		if _, err := schedules.Put(ctx, id, stj); err != nil {
			b.Fatal(err)
		}
	}
	return ctx, srv.JS
}

// BenchmarkTasks lists every task (Tasks, what `flyball task list`
// without --limit does) out of 20,000 (or -bench.tasks), each with a
// schedule and a spec with headers, a body and labels. Besides B/op it
// reports peak-heap-MB, the most heap in use above the idle heap while
// Tasks runs, sampled as BenchmarkHealth does (GOGC=10): the memory the
// CLI holds for a listing, plus the embedded server's share.
//
//	go test -run '^$' -bench BenchmarkTasks -benchmem ./internal/query/
//	go test -run '^$' -bench BenchmarkTasks -benchmem ./internal/query/ -args -bench.tasks=100000
func BenchmarkTasks(b *testing.B) {
	tasks := *benchTasks
	now := time.Now().UTC()
	ctx, r := seededListing(b, tasks, now)
	peak := samplePeakHeap(b)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		list, err := r.Tasks(ctx, query.TaskFilter{})
		if err != nil || len(list) != tasks || list[tasks-1].Schedule == nil {
			b.Fatalf("%d tasks, %v", len(list), err)
		}
	}
	b.StopTimer()
	b.ReportMetric(peak(), "peak-heap-MB")
}

// seededListing seeds tasks of BenchmarkTasks's kind: benchTask's, each
// labelled with a region.
func seededListing(b *testing.B, tasks int, now time.Time) (context.Context, *query.Reader) {
	b.Helper()
	return seededReader(b, tasks, func(i int, id string) (events.TaskSpec, gov.State) {
		sp, st := benchTask(now, i, id)
		sp.Labels["region"] = "eu-west-1"
		return sp, st
	})
}

// BenchmarkTaskPageRest lists every task after a cursor (TaskPage with
// limit 0, what `flyball task list --after ID` without --limit does) out
// of 20,000 (or -bench.tasks) tasks of BenchmarkTasks's kind: the last
// 100 (tail), and the second half (half). It reports peak-heap-MB as
// BenchmarkTasks does. The cost should follow the tasks after the
// cursor, not every task.
//
//	go test -run '^$' -bench BenchmarkTaskPageRest -benchmem ./internal/query/
func BenchmarkTaskPageRest(b *testing.B) {
	tasks := *benchTasks
	now := time.Now().UTC()
	ctx, r := seededListing(b, tasks, now)
	for _, c := range []struct {
		name string
		rest int
	}{{"tail", 100}, {"half", tasks / 2}} {
		b.Run(c.name, func(b *testing.B) {
			after := seededID(tasks - c.rest - 1)
			peak := samplePeakHeap(b)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				page, next, err := r.TaskPage(ctx, query.TaskFilter{}, after, 0)
				if err != nil || len(page) != c.rest || next != "" || page[0].Spec.ID != seededID(tasks-c.rest) || page[c.rest-1].Schedule == nil {
					b.Fatalf("%d tasks, next %q, %v", len(page), next, err)
				}
			}
			b.StopTimer()
			b.ReportMetric(peak(), "peak-heap-MB")
		})
	}
}

// benchTask is task i of the listing and health benchmarks: a POST with
// headers and a body, every 10s, in one of seven jobs, and its schedule.
func benchTask(now time.Time, i int, id string) (events.TaskSpec, gov.State) {
	sp := spec(id, fmt.Sprintf("job-%d", i%7), "10s")
	sp.Target.HTTP.Method = "POST"
	sp.Target.HTTP.Headers = map[string]string{"Authorization": "Bearer 0123456789abcdef0123456789abcdef", "Content-Type": "application/json"}
	sp.Target.HTTP.Body = fmt.Sprintf(`{"task":%q,"report":"daily-orders","region":"eu-west-1","limit":500}`, id)
	return sp, gov.State{
		TaskID: id, Source: gov.SourceBaselineInterval, CreatedAt: now.Add(-time.Hour),
		NextRunAt: now.Add(time.Duration(i%60) * time.Second), LastScheduledAt: now.Add(-10 * time.Second),
		LastSuccessAt: now.Add(-time.Duration(i%600) * time.Second),
	}
}

// samplePeakHeap sets GOGC=10 (so that the heap follows the live set),
// collects, and samples HeapInuse every millisecond until the function
// it returns is called, which restores GOGC and returns the most heap in
// use above the heap at the start, in MB.
func samplePeakHeap(b *testing.B) func() float64 {
	b.Helper()
	gc := debug.SetGCPercent(10)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	idle, peak := ms.HeapInuse, ms.HeapInuse
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms runtime.MemStats
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapInuse)
			}
		}
	})
	return func() float64 {
		close(stop)
		wg.Wait()
		debug.SetGCPercent(gc)
		return float64(peak-idle) / 1e6
	}
}
