package query

import (
	"context"
	"strings"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/streams"
)

// RunRecord is one run event of a task's history on RUNS.
type RunRecord struct {
	Seq uint64 `json:"seq"`
	// Time is when RUNS stored the event.
	Time    time.Time      `json:"time"`
	Outcome events.Outcome `json:"outcome"`
	Run     events.Run     `json:"run"`
	// Error is set when the stored event does not decode; Run is then empty.
	Error string `json:"error,omitempty"`
}

// runRecord decodes one RUNS message.
func runRecord(m Message) RunRecord {
	rec := RunRecord{Seq: m.Seq, Time: m.Time}
	if s, err := events.ParseSubject(m.Subject); err == nil {
		rec.Outcome = events.Outcome(s.Action)
	}
	e, err := events.Decode(m.Header, m.Data)
	if err == nil {
		err = events.DecodeData(e, &rec.Run)
	}
	if err != nil {
		rec.Error = err.Error()
	}
	return rec
}

// RunPage returns one page of the run events of task id, oldest first,
// and the Before of the page of older ones (zero on the oldest page). Like
// FollowRuns it leaves out run.recovered events.
func (r *Reader) RunPage(ctx context.Context, id string, p Page) ([]RunRecord, uint64, error) {
	if p.empty() {
		return []RunRecord{}, 0, nil
	}
	keep := lastN[RunRecord]{n: p.keep()}
	err := Scan(ctx, r.js, ScanOptions{
		Stream:   streams.StreamRuns,
		Subjects: []string{events.RunSubject("*", id)},
		EndSeq:   p.endSeq(),
	}, func(m Message) error {
		if !strings.HasPrefix(m.Subject, recoveredPrefix) {
			keep.push(runRecord(m))
		}
		return nil
	})
	out, next := cut(p, keep.values(), func(rec *RunRecord) uint64 { return rec.Seq })
	if out == nil {
		out = []RunRecord{}
	}
	return out, next, err
}

// recoveredPrefix starts the subject of a run.recovered, which repeats a
// run.succeeded for the breaker service: the run listings leave it out.
var recoveredPrefix = events.RunSubject(events.OutcomeRecovered, "")

// FollowRuns calls fn with the newest limit run events of task id, oldest
// first, and then, if follow, with every new one until ctx ends. It leaves
// out run.recovered events, which repeat a listed run.succeeded.
func (r *Reader) FollowRuns(ctx context.Context, id string, limit int, follow bool, fn func(RunRecord) error) error {
	keep := lastN[RunRecord]{n: limit}
	live := false
	return Scan(ctx, r.js, ScanOptions{
		Stream:   streams.StreamRuns,
		Subjects: []string{events.RunSubject("*", id)},
		Follow:   follow,
		CaughtUp: func() error {
			live = true
			for _, rec := range keep.drain() {
				if err := fn(rec); err != nil {
					return err
				}
			}
			return nil
		},
	}, func(m Message) error {
		if strings.HasPrefix(m.Subject, recoveredPrefix) {
			return nil // a success repeated for the breaker, not an attempt
		}
		rec := runRecord(m)
		if live {
			return fn(rec)
		}
		keep.push(rec)
		return nil
	})
}
