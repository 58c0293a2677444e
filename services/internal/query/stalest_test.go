package query_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/query"
	"github.com/flyballhq/flyball/streams"
)

// TestHealthListsTheStalestAndCountsThemAll: the health summary lists at
// most the number of staleness entries asked for, the stalest, stalest
// first and ties by task id, and counts every task scored. It listed
// every task: at 100,000 tasks, tens of MB in the API's memory.
func TestHealthListsTheStalestAndCountsThemAll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	b.r.Now = func() time.Time { return now }
	// t00..t08, interval 1m: tN last succeeded 1m + N×12s ago, so it
	// scores N×12s / 4m = N/20. t09, t10 and t11 tie at 1.
	for i := range 12 {
		id := fmt.Sprintf("t%02d", i)
		last := now.Add(-time.Minute - time.Duration(i)*12*time.Second)
		if i >= 9 {
			last = now.Add(-time.Hour) // t09, t10, t11 tie at score 1
		}
		b.put(t, streams.BucketTasks, id, spec(id, "", "1m"))
		b.put(t, streams.BucketSchedules, id, gov.State{TaskID: id, NextRunAt: now.Add(time.Minute), LastSuccessAt: last})
	}
	b.put(t, streams.BucketSchedules, "orphan", gov.State{TaskID: "orphan", NextRunAt: now})

	for _, c := range []struct {
		n    int
		want string
	}{
		{5, "t09 t10 t11 t08 t07"},
		{1, "t09"},
		{0, ""},
		{12, "t09 t10 t11 t08 t07 t06 t05 t04 t03 t02 t01 t00"},
		{query.MaxStaleness, "t09 t10 t11 t08 t07 t06 t05 t04 t03 t02 t01 t00"},
	} {
		h, err := b.r.Health(b.ctx, c.n)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]string, 0, len(h.Staleness))
		for _, e := range h.Staleness {
			ids = append(ids, e.TaskID)
		}
		if got := strings.Join(ids, " "); got != c.want || h.StalenessCount != 12 || h.Staleness == nil {
			t.Errorf("Health(%d): staleness %q, stalenessCount %d; want %q and 12", c.n, got, h.StalenessCount, c.want)
		}
		if len(h.Staleness) > 0 && (h.Staleness[0].Score != 1 || h.Staleness[0].Expected.D() != time.Minute || h.Staleness[0].LastSuccess == nil) {
			t.Errorf("Health(%d): first entry %+v, want score 1, expected 1m and its last success", c.n, h.Staleness[0])
		}
	}
	for _, n := range []int{-1, query.MaxStaleness + 1} {
		if _, err := b.r.Health(b.ctx, n); err == nil || !strings.Contains(err.Error(), "staleness") {
			t.Errorf("Health(%d): err %v, want one naming staleness", n, err)
		}
	}
}
