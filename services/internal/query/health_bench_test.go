package query_test

import (
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
		sp, st := benchTask(now, i, id)
		if i%10 == 0 {
			sp.Schedule = events.Schedule{Cron: "*/5 * * * *", Timezone: "Europe/Berlin"}
		}
		return sp, st
	})
	peak := samplePeakHeap(b)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		h, err := r.Health(ctx, query.MaxStaleness)
		if err != nil || h.StalenessCount != tasks || h.Queue.Depth != tasks || len(h.Staleness) != query.MaxStaleness {
			b.Fatalf("health: %d scored, depth %d, %d listed, %v", h.StalenessCount, h.Queue.Depth, len(h.Staleness), err)
		}
	}
	b.StopTimer()
	b.ReportMetric(peak(), "peak-heap-MB")
}
