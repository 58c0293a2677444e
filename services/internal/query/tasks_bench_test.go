package query_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
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
