package query_test

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/query"
	"github.com/flyballhq/flyball/streams"
)

// seqs returns the Seq of each record.
func seqs[T any](list []T, seq func(*T) uint64) []uint64 {
	out := []uint64{}
	for i := range list {
		out = append(out, seq(&list[i]))
	}
	return out
}

// TestRunPagesWalkBackToTheOldest: following next from the newest page
// returns every run of the task once, newest pages first, each oldest
// first, and the oldest page has no next. Another task's runs and
// run.recovered events in between neither fill a page nor end the walk.
func TestRunPagesWalkBackToTheOldest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := 1; i <= 3; i++ {
		b.run(t, events.OutcomeSucceeded, "a", i) // seqs 1, 4, 7
		b.run(t, events.OutcomeRecovered, "a", i)
		b.run(t, events.OutcomeFailed, "other", i)
	}
	seq := func(r *query.RunRecord) uint64 { return r.Seq }
	for _, c := range []struct {
		name string
		page query.Page
		want []uint64
		next uint64
	}{
		{"newest page", query.Page{Limit: 2}, []uint64{4, 7}, 4},
		{"oldest page", query.Page{Limit: 2, Before: 4}, []uint64{1}, 0},
		{"a page that ends exactly at the oldest", query.Page{Limit: 2, Before: 7}, []uint64{1, 4}, 0},
		{"before a sequence of another task", query.Page{Limit: 1, Before: 6}, []uint64{4}, 4},
		{"before the first sequence", query.Page{Limit: 2, Before: 1}, []uint64{}, 0},
		{"every run before a sequence", query.Page{Before: 7}, []uint64{1, 4}, 0},
		{"a cursor past the last sequence", query.Page{Limit: 5, Before: 1000}, []uint64{1, 4, 7}, 0},
	} {
		runs, next, err := b.r.RunPage(b.ctx, "a", c.page)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := seqs(runs, seq); !slices.Equal(got, c.want) || next != c.next {
			t.Errorf("%s (%+v): seqs %v, next %d; want %v, next %d", c.name, c.page, got, next, c.want, c.next)
		}
	}
}

// TestDeadLetterPagesWalkBackToTheOldest: the pages of every task's
// entries (read back from the end of DEADLETTER) and of one task's (a
// filtered scan) both end at the oldest entry, with no next there.
func TestDeadLetterPagesWalkBackToTheOldest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := 1; i <= 3; i++ {
		b.publish(t, events.DeadLetterSubject("a"), events.TypeDeadLettered, "a", deadLetter("a", i)) // seqs 1, 3, 5
		b.publish(t, events.DeadLetterSubject("b"), events.TypeDeadLettered, "b", deadLetter("b", i)) // seqs 2, 4, 6
	}
	seq := func(r *query.DeadLetterRecord) uint64 { return r.Seq }
	for _, c := range []struct {
		name string
		task string
		page query.Page
		want []uint64
		next uint64
	}{
		{"all: newest page", "", query.Page{Limit: 4}, []uint64{3, 4, 5, 6}, 3},
		{"all: oldest page", "", query.Page{Limit: 4, Before: 3}, []uint64{1, 2}, 0},
		{"all: a page that ends exactly at the oldest", "", query.Page{Limit: 2, Before: 3}, []uint64{1, 2}, 0},
		{"all: every entry before a sequence", "", query.Page{Before: 4}, []uint64{1, 2, 3}, 0},
		{"all: before the first sequence", "", query.Page{Limit: 4, Before: 1}, []uint64{}, 0},
		{"one task: newest page", "a", query.Page{Limit: 2}, []uint64{3, 5}, 3},
		{"one task: oldest page", "a", query.Page{Limit: 2, Before: 3}, []uint64{1}, 0},
		{"one task: before a sequence of another task", "b", query.Page{Limit: 1, Before: 5}, []uint64{4}, 4},
	} {
		list, next, err := b.r.DeadLetterPage(b.ctx, c.task, c.page)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := seqs(list, seq); !slices.Equal(got, c.want) || next != c.next {
			t.Errorf("%s (%+v): seqs %v, next %d; want %v, next %d", c.name, c.page, got, next, c.want, c.next)
		}
	}
}

// TestTaskPagesResumeAfterTheCursor: pages of tasks by ID, each starting
// after the cursor whether or not a task of that ID still exists.
func TestTaskPagesResumeAfterTheCursor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, id := range []string{"c", "a", "e"} {
		b.put(t, streams.BucketTasks, id, spec(id, "orders", "10s"))
	}
	for _, c := range []struct {
		after string
		limit int
		want  []string
		next  string
	}{
		{"", 2, []string{"a", "c"}, "c"},
		{"c", 2, []string{"e"}, ""},
		{"a", 2, []string{"c", "e"}, ""},
		{"b", 1, []string{"c"}, "c"}, // b does not exist: the page starts after it
		{"e", 2, []string{}, ""},
		{"", 0, []string{"a", "c", "e"}, ""},
		// Without a limit (the CLI's task list --after): every task after
		// the cursor, and no next page.
		{"a", 0, []string{"c", "e"}, ""},
		{"b", 0, []string{"c", "e"}, ""},
		{"e", 0, []string{}, ""},
	} {
		tasks, next, err := b.r.TaskPage(b.ctx, query.TaskFilter{}, c.after, c.limit)
		if err != nil {
			t.Fatal(err)
		}
		got := []string{}
		for _, v := range tasks {
			got = append(got, v.Spec.ID)
		}
		if !slices.Equal(got, c.want) || next != c.next {
			t.Errorf("after %q, limit %d: %v, next %q; want %v, next %q", c.after, c.limit, got, next, c.want, c.next)
		}
	}
}

// TestTaskPagesKeepUnreadableSpecsAndFillFilteredPages: a spec that does
// not decode is listed (with Unreadable) unless a job or label filter
// asks for what it cannot tell, and a filtered page reads on past the
// tasks that do not match until it is full, with next only when another
// match follows.
func TestTaskPagesKeepUnreadableSpecsAndFillFilteredPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, id := range []string{"a", "c", "e", "g"} {
		b.put(t, streams.BucketTasks, id, spec(id, "orders", "10s"))
	}
	for _, id := range []string{"b", "d", "f"} {
		b.put(t, streams.BucketTasks, id, spec(id, "billing", "10s"))
	}
	b.put(t, streams.BucketTasks, "bad", "not a spec")
	for _, c := range []struct {
		name  string
		job   string
		after string
		limit int
		want  []string
		next  string
	}{
		{"every task", "", "", 0, []string{"a", "b", "bad", "c", "d", "e", "f", "g"}, ""},
		{"a page over the unreadable spec", "", "b", 2, []string{"bad", "c"}, "c"},
		{"one job", "orders", "", 2, []string{"a", "c"}, "c"},
		{"one job, next page", "orders", "c", 2, []string{"e", "g"}, ""},
		{"one job, last match ends the page", "billing", "b", 2, []string{"d", "f"}, ""},
		{"no match", "nobody", "", 2, []string{}, ""},
		{"every task after a cursor", "", "b", 0, []string{"bad", "c", "d", "e", "f", "g"}, ""},
		{"every task after the unreadable spec", "", "bad", 0, []string{"c", "d", "e", "f", "g"}, ""},
		{"one job after a cursor", "orders", "c", 0, []string{"e", "g"}, ""},
		{"one job after a cursor, no match left", "billing", "f", 0, []string{}, ""},
	} {
		tasks, next, err := b.r.TaskPage(b.ctx, query.TaskFilter{Job: c.job}, c.after, c.limit)
		if err != nil {
			t.Fatal(err)
		}
		got := []string{}
		for _, v := range tasks {
			got = append(got, v.Spec.ID)
			if (v.Unreadable != "") != (v.Spec.ID == "bad") {
				t.Errorf("%s: task %s unreadable %q", c.name, v.Spec.ID, v.Unreadable)
			}
		}
		if !slices.Equal(got, c.want) || next != c.next {
			t.Errorf("%s: %v, next %q; want %v, next %q", c.name, got, next, c.want, c.next)
		}
	}
}

// TestTaskPageWithoutALimitAttachesTheSchedulesAfterTheCursor: the tasks
// after the cursor come with their schedules, and a schedule of a task
// before it (or of none) changes nothing.
func TestTaskPageWithoutALimitAttachesTheSchedulesAfterTheCursor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now().UTC().Truncate(time.Second)
	for _, id := range []string{"a", "c", "e"} {
		b.put(t, streams.BucketTasks, id, spec(id, "orders", "10s"))
	}
	for _, id := range []string{"a", "e", "orphan"} {
		b.put(t, streams.BucketSchedules, id, gov.State{TaskID: id, NextRunAt: now})
	}
	tasks, next, err := b.r.TaskPage(b.ctx, query.TaskFilter{}, "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, v := range tasks {
		got[v.Spec.ID] = v.Schedule != nil && v.Schedule.TaskID == v.Spec.ID
	}
	if want := map[string]bool{"c": false, "e": true}; !maps.Equal(got, want) || next != "" {
		t.Errorf("after a: tasks (with a schedule) %v, next %q; want %v, no next", got, next, want)
	}
}

// TestRunPageEdgesNameTheNeighbours: a page of runs names the
// taskCreatedAt of the run just older than it (read to know that a next
// page follows) and of the run at its Before, when that is the task's
// (not another task's, not a run.recovered); the page holds neither.
func TestRunPageEdgesNameTheNeighbours(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := time.Date(2026, 11, 27, 19, 0, 0, 0, time.UTC)
	recreated := old.Add(time.Hour)
	created := map[uint64]time.Time{}
	for i, c := range []time.Time{old, old, recreated, recreated} { // seqs 1, 4, 7, 10
		for _, o := range []events.Outcome{events.OutcomeSucceeded, events.OutcomeRecovered} {
			b.publish(t, events.RunSubject(o, "a"), o.Type(), "a", events.Run{DispatchID: fmt.Sprintf("a:%d", i), TaskID: "a", TaskCreatedAt: c, Attempt: 1})
		}
		b.run(t, events.OutcomeFailed, "other", i)
		created[uint64(3*i+1)] = c
	}
	seq := func(r *query.RunRecord) uint64 { return r.Seq }
	for _, c := range []struct {
		name         string
		page         query.Page
		want         []uint64
		older, newer time.Time
	}{
		{"newest page", query.Page{Limit: 2}, []uint64{7, 10}, old, time.Time{}},
		{"older page", query.Page{Limit: 2, Before: 7}, []uint64{1, 4}, time.Time{}, recreated},
		{"middle page", query.Page{Limit: 1, Before: 7}, []uint64{4}, old, recreated},
		{"before a recovered", query.Page{Limit: 1, Before: 8}, []uint64{7}, old, time.Time{}},
		{"before another task's run", query.Page{Limit: 1, Before: 9}, []uint64{7}, old, time.Time{}},
		{"every run", query.Page{}, []uint64{1, 4, 7, 10}, time.Time{}, time.Time{}},
	} {
		res, err := b.r.RunPageEdges(b.ctx, "a", c.page)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := seqs(res.Runs, seq); !slices.Equal(got, c.want) || !res.OlderCreatedAt.Equal(c.older) || !res.NewerCreatedAt.Equal(c.newer) {
			t.Errorf("%s (%+v): seqs %v, older %s, newer %s; want %v, %s, %s", c.name, c.page, got, res.OlderCreatedAt, res.NewerCreatedAt, c.want, c.older, c.newer)
		}
		for _, r := range res.Runs {
			if !r.Run.TaskCreatedAt.Equal(created[r.Seq]) {
				t.Errorf("%s: run %d created %s, want %s", c.name, r.Seq, r.Run.TaskCreatedAt, created[r.Seq])
			}
		}
	}
}

// TestHugeLimitsListEverything: a limit too large to add one to, or to
// double, lists every entry, as no limit does. keep (Limit+1), lastN
// (2*n) and the task batch (limit+1) overflowed: a page of runs or of one
// task's dead letters, a follow, an indexed page of tasks and a page of
// every dead letter with a purge gap panicked with a slice bounds or
// makeslice error (flyball dlq list --limit 9223372036854775807).
func TestHugeLimitsListEverything(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ix := indexed(t, b)
	for i := 1; i <= 3; i++ {
		b.run(t, events.OutcomeSucceeded, "a", i)                                                     // seqs 1, 2, 3
		b.publish(t, events.DeadLetterSubject("a"), events.TypeDeadLettered, "a", deadLetter("a", i)) // seqs 1, 3, 5
		b.publish(t, events.DeadLetterSubject("b"), events.TypeDeadLettered, "b", deadLetter("b", i)) // seqs 2, 4, 6
		b.put(t, streams.BucketTasks, fmt.Sprintf("t%d", i), spec(fmt.Sprintf("t%d", i), "orders", "10s"))
	}
	// A purge gap: the span read back from the end of DEADLETTER adds
	// the deleted count to the limit.
	if _, err := b.r.PurgeDeadLetters(b.ctx, "b"); err != nil {
		t.Fatal(err)
	}
	runSeq := func(r *query.RunRecord) uint64 { return r.Seq }
	dlSeq := func(r *query.DeadLetterRecord) uint64 { return r.Seq }
	for _, limit := range []int{math.MaxInt, math.MaxInt - 1, math.MaxInt/2 + 1, 5_000_000_000_000_000_000} {
		p := query.Page{Limit: limit}
		runs, next, err := b.r.RunPage(b.ctx, "a", p)
		if got := seqs(runs, runSeq); err != nil || !slices.Equal(got, []uint64{1, 2, 3}) || next != 0 {
			t.Errorf("limit %d: runs %v, next %d, %v; want [1 2 3], no next", limit, got, next, err)
		}
		for _, task := range []string{"", "a"} {
			list, next, err := b.r.DeadLetterPage(b.ctx, task, p)
			if got := seqs(list, dlSeq); err != nil || !slices.Equal(got, []uint64{1, 3, 5}) || next != 0 {
				t.Errorf("limit %d, task %q: dead letters %v, next %d, %v; want [1 3 5], no next", limit, task, got, next, err)
			}
		}
		var followed []uint64
		err = b.r.FollowRuns(b.ctx, "a", limit, false, func(rec query.RunRecord) error {
			followed = append(followed, rec.Seq)
			return nil
		})
		if err != nil || !slices.Equal(followed, []uint64{1, 2, 3}) {
			t.Errorf("limit %d: followed runs %v, %v; want [1 2 3]", limit, followed, err)
		}
		for name, r := range map[string]*query.Reader{"listing": b.r, "indexed": ix} {
			tasks, next, err := r.TaskPage(b.ctx, query.TaskFilter{}, "", limit)
			if got := ids(tasks); err != nil || !slices.Equal(got, []string{"t1", "t2", "t3"}) || next != "" {
				t.Errorf("limit %d, %s: tasks %v, next %q, %v; want [t1 t2 t3], no next", limit, name, got, next, err)
			}
		}
	}
}
