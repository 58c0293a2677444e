package query

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/executor"
)

// entry is a watched KV value; its other methods are not called.
type entry struct {
	jetstream.KeyValueEntry
	key     string
	value   []byte
	created time.Time
}

func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return e.value }
func (e entry) Created() time.Time              { return e.created }
func (e entry) Bucket() string                  { return "test" }
func (e entry) Revision() uint64                { return 1 }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

func jsonEntry(t *testing.T, key string, v any) entry {
	t.Helper()
	body, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return entry{key: key, value: body}
}

// TestHealthScanKeepsTheLastValueOfAKey: a key updated while Health's
// watch reads its bucket is delivered twice, and Health counts what its
// last value says, as the map of every entry it used to build did: a
// spec or state that stops decoding, or a state marked deleted, takes
// its task out of the counts, and a breaker that closes is not listed.
func TestHealthScanKeepsTheLastValueOfAKey(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s := healthScan{now: now, tasks: map[string]healthTask{}, jobs: map[string]string{}}
	spec := func(id string) events.TaskSpec {
		return events.TaskSpec{ID: id, Job: "orders", Schedule: events.Schedule{Interval: events.Duration(time.Minute)}}
	}
	bad := func(key string) entry { return entry{key: key, value: []byte(`not json`)} }
	for _, e := range []entry{
		jsonEntry(t, "unspec", spec("unspec")), bad("unspec"),
		bad("respec"), jsonEntry(t, "respec", spec("respec")),
		jsonEntry(t, "deleted", spec("deleted")),
		jsonEntry(t, "restate", spec("restate")),
		jsonEntry(t, "unstate", spec("unstate")),
	} {
		s.spec(e)
	}
	due := gov.State{CreatedAt: now.Add(-time.Hour), NextRunAt: now, LastSuccessAt: now.Add(-time.Hour)}
	for _, e := range []entry{
		jsonEntry(t, "unspec", due),
		jsonEntry(t, "respec", due),
		jsonEntry(t, "deleted", due), jsonEntry(t, "deleted", gov.State{Deleted: true, NextRunAt: now}),
		bad("restate"), jsonEntry(t, "restate", gov.State{CreatedAt: now.Add(-time.Hour), NextRunAt: now.Add(time.Minute), LastSuccessAt: now.Add(-3 * time.Minute)}),
		jsonEntry(t, "unstate", due), bad("unstate"),
	} {
		s.state(e)
	}
	got := map[string]float64{}
	queued := 0
	for id, tk := range s.tasks {
		if tk.scored {
			got[id] = tk.score
		}
		if tk.scored && tk.queued {
			queued++
		}
	}
	if len(got) != 2 || got["respec"] != 1 || got["restate"] != 0.5 || queued != 2 || s.tasks["restate"].due {
		t.Errorf("scored %v, %d queued, restate %+v; want respec=1 and restate=0.5 (not due), both queued", got, queued, s.tasks["restate"])
	}
	if _, ok := s.tasks["unspec"]; ok {
		t.Errorf("a spec that stopped decoding was kept: %+v", s.tasks["unspec"])
	}

	open := breakerSet{}
	for _, e := range []entry{
		jsonEntry(t, "closed", executor.BreakerRecord{State: events.BreakerOpen}), jsonEntry(t, "closed", executor.BreakerRecord{State: events.BreakerClosed}),
		jsonEntry(t, "opened", executor.BreakerRecord{State: events.BreakerClosed}), jsonEntry(t, "opened", executor.BreakerRecord{State: events.BreakerHalfOpen, Failures: 2}),
		jsonEntry(t, "garbled", executor.BreakerRecord{State: events.BreakerOpen}), bad("garbled"),
	} {
		open.add(e)
	}
	if len(open) != 1 || open["opened"].State != events.BreakerHalfOpen || open["opened"].Failures != 2 {
		t.Errorf("breakers %+v, want only opened, half-open", open)
	}
}
