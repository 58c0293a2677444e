package query_test

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/query"
)

// BenchmarkHealth computes the health summary over 20,000 tasks, each
// with a schedule: an HTTP target with headers and a body, an interval,
// every tenth a cron. Besides B/op it reports peak-heap-MB, the most
// heap in use above the idle heap while Health runs (sampled every
// millisecond, with GOGC=10 so that it follows the live set): the
// memory a monitoring poll holds in the API.
//
//	go test -run '^$' -bench BenchmarkHealth -benchmem ./internal/query/
func BenchmarkHealth(b *testing.B) {
	const tasks = 20_000
	now := time.Now().UTC()
	ctx, r := seededReader(b, tasks, func(i int, id string) (events.TaskSpec, gov.State) {
		sp := spec(id, fmt.Sprintf("job-%d", i%7), "10s")
		sp.Target.HTTP.Method = "POST"
		sp.Target.HTTP.Headers = map[string]string{"Authorization": "Bearer 0123456789abcdef0123456789abcdef", "Content-Type": "application/json"}
		sp.Target.HTTP.Body = fmt.Sprintf(`{"task":%q,"report":"daily-orders","region":"eu-west-1","limit":500}`, id)
		if i%10 == 0 {
			sp.Schedule = events.Schedule{Cron: "*/5 * * * *", Timezone: "Europe/Berlin"}
		}
		return sp, gov.State{
			TaskID: id, Source: gov.SourceBaselineInterval, CreatedAt: now.Add(-time.Hour),
			NextRunAt: now.Add(time.Duration(i%60) * time.Second), LastScheduledAt: now.Add(-10 * time.Second),
			LastSuccessAt: now.Add(-time.Duration(i%600) * time.Second),
		}
	})
	defer debug.SetGCPercent(debug.SetGCPercent(10))
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
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		h, err := r.Health(ctx, query.MaxStaleness)
		if err != nil || h.StalenessCount != tasks || h.Queue.Depth != tasks || len(h.Staleness) != query.MaxStaleness {
			b.Fatalf("health: %d scored, depth %d, %d listed, %v", h.StalenessCount, h.Queue.Depth, len(h.Staleness), err)
		}
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(peak-idle)/1e6, "peak-heap-MB")
}
