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
	res, err := r.RunPageEdges(ctx, id, p)
	return res.Runs, res.Next, err
}

// RunPageResult is one page of a task's runs and what RUNS holds of the
// task at the page's two edges.
type RunPageResult struct {
	// Runs is the page, oldest first; Next the Before of the page of older
	// ones (zero on the oldest page).
	Runs []RunRecord
	Next uint64
	// OlderCreatedAt is the taskCreatedAt of the newest run older than
	// the page (the one read to know that Next follows), and
	// NewerCreatedAt that of the run at the page's Before, when that is
	// one of the task's runs (it is when Before is the Next of the newer
	// page). Zero when there is no such run or it names none: a listing
	// compares them with the page's first and last run to mark where a
	// deleted task's runs give way to those of a task created again
	// under its ID.
	OlderCreatedAt, NewerCreatedAt time.Time
}

// RunPageEdges is RunPage with the createdAt of the runs at the page's
// edges. It reads no more than RunPage would but the run at Before.
func (r *Reader) RunPageEdges(ctx context.Context, id string, p Page) (RunPageResult, error) {
	if p.empty() {
		return RunPageResult{Runs: []RunRecord{}}, nil
	}
	var newer time.Time
	keep := lastN[RunRecord]{n: p.keep()}
	err := Scan(ctx, r.js, ScanOptions{
		Stream:   streams.StreamRuns,
		Subjects: []string{events.RunSubject("*", id)},
		// The run at Before, if it is the task's, is the page's newer
		// neighbour: read it too, and keep it off the page.
		EndSeq: p.Before,
	}, func(m Message) error {
		if strings.HasPrefix(m.Subject, recoveredPrefix) {
			return nil
		}
		rec := runRecord(m)
		if p.Before > 0 && m.Seq >= p.Before {
			newer = rec.Run.TaskCreatedAt
			return nil
		}
		keep.push(rec)
		return nil
	})
	all := keep.values()
	res := RunPageResult{NewerCreatedAt: newer}
	if p.Limit > 0 && len(all) > p.Limit {
		res.OlderCreatedAt = all[len(all)-p.Limit-1].Run.TaskCreatedAt
	}
	res.Runs, res.Next = cut(p, all, func(rec *RunRecord) uint64 { return rec.Seq })
	if res.Runs == nil {
		res.Runs = []RunRecord{}
	}
	return res, err
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
