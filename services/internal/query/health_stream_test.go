package query_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/streams"
)

func (b *bundle) putRaw(t *testing.T, bucket, key, body string) time.Time {
	t.Helper()
	kv, err := b.srv.JS.KeyValue(b.ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(b.ctx, key, []byte(body)); err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(b.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return e.Created()
}

// TestHealthCountsOnlyWhatDecodes: the health summary scores a task only
// when its last stored spec and state both decode and the state is not a
// deleted task's; a state without CreatedAt is aged from when its spec
// was stored; a breaker is listed only when its last record decodes and
// is not closed. Health reads the buckets as a stream and keeps only a
// few fields of each task: these are the cases where that could differ
// from decoding every value whole.
func TestHealthCountsOnlyWhatDecodes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	specJSON := func(id, job, interval string) string {
		body, err := json.Marshal(spec(id, job, interval))
		if err != nil {
			t.Fatal(err)
		}
		return string(body)
	}
	// The spec of a task whose state has no CreatedAt: its age runs from
	// when NATS stored this spec.
	created := b.putRaw(t, streams.BucketTasks, "no-created", specJSON("no-created", "", "1m"))
	now := created.Add(3 * time.Minute) // (180s - 60s) / 240s = 0.5
	b.r.Now = func() time.Time { return now }
	b.put(t, streams.BucketSchedules, "no-created", gov.State{TaskID: "no-created", NextRunAt: now.Add(time.Minute)})

	// A spec that did not decode, then did: scored.
	b.putRaw(t, streams.BucketTasks, "respec", `{"id":`)
	b.putRaw(t, streams.BucketTasks, "respec", specJSON("respec", "orders", "1m"))
	b.put(t, streams.BucketSchedules, "respec", gov.State{TaskID: "respec", CreatedAt: now.Add(-time.Hour), NextRunAt: now.Add(5 * time.Second), LastSuccessAt: now.Add(-10 * time.Second)})

	// Not scored: a spec that decoded, then did not; one that never did;
	// a state that does not decode; a deleted task's state, stored after
	// a live one; a state without a spec.
	b.putRaw(t, streams.BucketTasks, "unspec", specJSON("unspec", "orders", "1m"))
	b.putRaw(t, streams.BucketTasks, "unspec", `not json`)
	b.putRaw(t, streams.BucketTasks, "bad-spec", `[1, 2]`)
	b.putRaw(t, streams.BucketTasks, "bad-state", specJSON("bad-state", "orders", "1m"))
	b.putRaw(t, streams.BucketSchedules, "bad-state", `{"nextRunAt": 7}`)
	b.putRaw(t, streams.BucketTasks, "deleted", specJSON("deleted", "orders", "1m"))
	b.put(t, streams.BucketSchedules, "deleted", gov.State{TaskID: "deleted", NextRunAt: now})
	b.put(t, streams.BucketSchedules, "deleted", gov.State{TaskID: "deleted", NextRunAt: now, Deleted: true})
	for _, id := range []string{"unspec", "bad-spec", "orphan"} {
		b.put(t, streams.BucketSchedules, id, gov.State{TaskID: id, NextRunAt: now, LastSuccessAt: now.Add(-time.Hour)})
	}

	// Breakers: only "reopened" and "host_h" are listed.
	b.put(t, streams.BucketBreakers, "reclosed", executor.BreakerRecord{Key: "reclosed", State: events.BreakerOpen, Failures: 3})
	b.put(t, streams.BucketBreakers, "reclosed", executor.BreakerRecord{Key: "reclosed", State: events.BreakerClosed})
	b.put(t, streams.BucketBreakers, "reopened", executor.BreakerRecord{Key: "reopened", State: events.BreakerClosed})
	b.put(t, streams.BucketBreakers, "reopened", executor.BreakerRecord{Key: "reopened", State: events.BreakerOpen, Failures: 5})
	b.put(t, streams.BucketBreakers, "unset", executor.BreakerRecord{Key: "unset", Failures: 1})
	b.putRaw(t, streams.BucketBreakers, "undecodable", `{"state": 1}`)
	b.put(t, streams.BucketBreakers, "host_h", executor.BreakerRecord{Key: "host_h", State: events.BreakerHalfOpen, Failures: 2})

	h, err := b.r.Health(b.ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if q := h.Queue; q.Depth != 2 || q.DueWithinSeconds != 1 || len(q.PerType) != 2 || q.PerType["default"] != 1 || q.PerType["orders"] != 1 {
		t.Errorf("queue = %+v, want depth 2, 1 due, default=1 orders=1", q)
	}
	got := ""
	for _, s := range h.Staleness {
		got += fmt.Sprintf("%s=%v ", s.TaskID, s.Score)
	}
	if want := "no-created=0.5 respec=0 "; got != want || h.StalenessCount != 2 {
		t.Errorf("staleness %q, stalenessCount %d; want %q and 2", got, h.StalenessCount, want)
	}
	if len(h.Staleness) == 2 && (h.Staleness[0].LastSuccess != nil || h.Staleness[1].LastSuccess == nil || h.Staleness[0].Expected != events.Duration(time.Minute)) {
		t.Errorf("staleness entries %+v: want no-created without a last success, expected 1m, and respec with one", h.Staleness)
	}
	if len(h.Breakers) != 2 || h.Breakers[0].Key != "host_h" || h.Breakers[0].TaskID != "" ||
		h.Breakers[1].Key != "reopened" || h.Breakers[1].TaskID != "reopened" || h.Breakers[1].Failures != 5 {
		t.Errorf("breakers = %+v, want host_h and reopened", h.Breakers)
	}
}
