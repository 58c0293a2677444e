package query

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
)

// TaskView is a task as operators see it: the accepted spec (KV
// flyball-tasks) and the governor's schedule state (KV flyball-schedules),
// if any.
type TaskView struct {
	Spec     events.TaskSpec `json:"spec"`
	Schedule *gov.State      `json:"schedule,omitempty"`
	// Unreadable, when set, says why the stored spec does not decode
	// (written by hand, or by another version): Spec holds only the ID,
	// the executor skips the task's runs ("invalid stored spec"), and
	// task.updated replaces the spec or task.deleted removes the task.
	Unreadable string `json:"unreadable,omitempty"`
	// SpecRevision is the flyball-tasks revision of the spec: the API's
	// ETag, and the ifRevision of a task.updated made from this view.
	SpecRevision uint64 `json:"-"`
}

// TaskFilter selects tasks. The zero value selects every task.
type TaskFilter struct {
	// Job, if set, keeps tasks of this job only.
	Job string
	// Labels keeps tasks that carry every one of these labels.
	Labels map[string]string
}

func (f *TaskFilter) match(s *events.TaskSpec) bool {
	if f.Job != "" && s.Job != f.Job {
		return false
	}
	for k, v := range f.Labels {
		if got, ok := s.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// ParseLabels parses label selectors of the form key=value. Every one must
// match, so two different values for one key are refused: no task could
// match them.
func ParseLabels(selectors []string) (map[string]string, error) {
	if len(selectors) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(selectors))
	for _, s := range selectors {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return nil, &events.FieldError{Field: "label", Rule: fmt.Sprintf("want key=value, got %q", s)}
		}
		if prev, dup := out[k]; dup && prev != v {
			return nil, &events.FieldError{Field: "label", Rule: fmt.Sprintf("key %q given twice, as %q and %q: a task has one value per key, so none could match", k, prev, v)}
		}
		out[k] = v
	}
	return out, nil
}

// Task returns one task, or an error wrapping ErrNotFound. A task whose
// stored spec does not decode is returned with Unreadable set.
func (r *Reader) Task(ctx context.Context, id string) (*TaskView, error) {
	v, err := r.taskSpec(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := r.addSchedule(ctx, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// taskSpec reads the spec of task id, or returns an error wrapping
// ErrNotFound. A spec that does not decode is returned with only its ID
// and Unreadable set.
func (r *Reader) taskSpec(ctx context.Context, id string) (TaskView, error) {
	ent, err := r.tasks.Get(ctx, id)
	if jsutil.IsKeyMissing(err) {
		return TaskView{}, fmt.Errorf("task %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return TaskView{}, fmt.Errorf("read task %q: %w", id, err)
	}
	v := decodeTask(id, ent.Value())
	v.SpecRevision = ent.Revision()
	return v, nil
}

// decodeTask decodes the flyball-tasks value stored under key. The key is
// the task's ID (its schedule's key, the page cursor): a value that does
// not decode, or whose id is not its key (null, or written by hand), is
// returned with only the key as ID and Unreadable set.
func decodeTask(key string, raw []byte) TaskView {
	var v TaskView
	err := json.Unmarshal(raw, &v.Spec)
	if err == nil && v.Spec.ID != key {
		err = fmt.Errorf("its id is %q, not its key %q", v.Spec.ID, key)
	}
	if err != nil {
		return TaskView{Spec: events.TaskSpec{ID: key}, Unreadable: unreadable(err)}
	}
	v.Spec.UTCStartAt() // a spec stored before the governor wrote it in UTC
	return v
}

// addSchedule sets v.Schedule from flyball-schedules. A task without one
// (not yet seen by the governor) or with one that does not decode is left
// without.
func (r *Reader) addSchedule(ctx context.Context, v *TaskView) error {
	se, err := r.schedules.Get(ctx, v.Spec.ID)
	switch {
	case err == nil:
		var st gov.State
		if json.Unmarshal(se.Value(), &st) == nil {
			v.Schedule = &st
		}
	case !jsutil.IsKeyMissing(err):
		return fmt.Errorf("read schedule of task %q: %w", v.Spec.ID, err)
	}
	return nil
}

// Tasks lists every task that matches f, sorted by ID. It reads both
// buckets in one pass each (a consumer, not a read per task): the
// cheapest way to every task, and what TaskPage does without a limit.
// It streams them: each spec is decoded as it comes and only the views
// are kept, then each schedule is attached to its view as it comes, so
// a listing never holds either bucket's raw values (at 20,000 tasks that
// was most of its peak heap; see docs/benchmark-findings.md, finding 48).
func (r *Reader) Tasks(ctx context.Context, f TaskFilter) ([]TaskView, error) {
	return r.tasksAfter(ctx, f, "")
}

// tasksAfter is Tasks of the tasks whose IDs sort after after: an entry
// at or before the cursor is passed over as it comes, before its value
// is decoded, so a listing after a cursor holds and decodes only what it
// returns (the buckets are still read whole: a KV consumer cannot start
// at a key).
func (r *Reader) tasksAfter(ctx context.Context, f TaskFilter, after string) ([]TaskView, error) {
	filtered := f.Job != "" || len(f.Labels) > 0
	out := []TaskView{}
	// at is the position in out of each listed task, by key. A key
	// written again while the watch delivers comes twice, its newer value
	// last: that value replaces the view, or drops its key from at when
	// it no longer matches (its view is left in out, and not listed).
	at := map[string]int{}
	err := eachEntry(ctx, r.tasks, func(e jetstream.KeyValueEntry) {
		if e.Key() <= after {
			return
		}
		v := decodeTask(e.Key(), e.Value())
		// A spec that does not decode has no job or labels to filter on,
		// and left out of the list it was nowhere but in its skipped runs.
		keep := !filtered
		if v.Unreadable == "" {
			keep = f.match(&v.Spec)
		}
		i, seen := at[e.Key()]
		switch {
		case seen && keep:
			out[i] = v
		case seen:
			out[i] = TaskView{}
			delete(at, e.Key())
		case keep:
			at[e.Key()] = len(out)
			out = append(out, v)
		}
	})
	if err != nil {
		return nil, err
	}
	if len(at) == 0 {
		return []TaskView{}, nil // none listed: no schedule to read
	}
	err = eachEntry(ctx, r.schedules, func(e jetstream.KeyValueEntry) {
		i, ok := at[e.Key()]
		if !ok {
			return // a schedule of no listed task is not decoded
		}
		// A schedule that does not decode leaves its task without one.
		var st gov.State
		if json.Unmarshal(e.Value(), &st) == nil {
			out[i].Schedule = &st
		} else {
			out[i].Schedule = nil
		}
	})
	if err != nil {
		return nil, err
	}
	if len(at) < len(out) { // some were dropped
		listed := make([]TaskView, 0, len(at))
		for _, i := range at {
			listed = append(listed, out[i])
		}
		out = listed
	}
	slices.SortFunc(out, func(a, b TaskView) int { return strings.Compare(a.Spec.ID, b.Spec.ID) })
	return out, nil
}

// TaskPage returns the tasks that match f with IDs after after (every
// one with after ""), sorted by ID: at most limit of them (every one when
// limit <= 0) and, when more follow, the ID to pass as after for the next
// page. A cursor that is an ID rather than a position keeps the pages
// whole while tasks are created and deleted between them.
//
// A page costs a spec and a schedule read per task on it, not every
// task's spec and schedule: with a million tasks, reading every value
// for a page of 50 held hundreds of MB. Its IDs come from the reader's
// task index (IndexTasks) when it keeps one, in O(log n + page), else
// from the keys of flyball-tasks (names only, no values), every one of
// them for each page. With a job or label filter, the specs after the
// cursor are read one by one until the page is full, so a filter that
// few tasks match reads many.
func (r *Reader) TaskPage(ctx context.Context, f TaskFilter, after string, limit int) ([]TaskView, string, error) {
	if limit <= 0 {
		// Every task after the cursor (the CLI's task list --after
		// without --limit; the API's limit is at least 1): one pass over
		// each bucket costs less than a read per task, and a listing in
		// pages of any size would list every key again for each page.
		// The tasks before the cursor are passed over, not decoded and
		// cut off after.
		tasks, err := r.tasksAfter(ctx, f, after)
		return tasks, "", err
	}
	filtered := f.Job != "" || len(f.Labels) > 0
	// The next page's first task tells whether there is one; a filter
	// reads on past the tasks it leaves out.
	batch := plusOne(limit)
	if filtered {
		batch = max(batch, 256)
	}
	out := []TaskView{}
	cursor, listed := after, false
	for first := true; ; first = false {
		ids, err := r.taskIDsAfter(ctx, cursor, batch, first)
		if errors.Is(err, errIndexDown) {
			if r.taskIndex != nil && r.IndexFallback != nil {
				r.IndexFallback(err)
			}
			// Every key after the cursor at once, and no further batch.
			ids, err = keysAfter(ctx, r.tasks, cursor)
			listed = true
		}
		if err != nil {
			return nil, "", err
		}
		for _, id := range ids {
			v, err := r.taskSpec(ctx, id)
			if errors.Is(err, ErrNotFound) {
				continue // deleted since the keys were listed
			}
			if err != nil {
				return nil, "", err
			}
			// A spec that does not decode has no job or labels to filter
			// on, and left out of the list it was nowhere but in its
			// skipped runs.
			if filtered && (v.Unreadable != "" || !f.match(&v.Spec)) {
				continue
			}
			if len(out) == limit {
				// v is the first task of the next page.
				return out, out[limit-1].Spec.ID, nil
			}
			if err := r.addSchedule(ctx, &v); err != nil {
				return nil, "", err
			}
			out = append(out, v)
		}
		if listed || len(ids) < batch {
			return out, "", nil
		}
		cursor = ids[len(ids)-1]
	}
}

// taskIDsAfter returns up to n task IDs after after, sorted, from the
// task index, checking first (check) that it is current; errIndexDown
// when the reader keeps none or it cannot answer.
func (r *Reader) taskIDsAfter(ctx context.Context, after string, n int, check bool) ([]string, error) {
	if r.taskIndex == nil {
		return nil, errIndexDown
	}
	return r.taskIndex.after(ctx, after, n, check)
}

// keysAfter returns the live keys of a bucket that sort after after,
// sorted. It watches the bucket for entry headers only, so a listing
// holds the key names, never every value.
func keysAfter(ctx context.Context, kv jetstream.KeyValue, after string) ([]string, error) {
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes(), jetstream.MetaOnly())
	if err != nil {
		return nil, fmt.Errorf("list keys of KV %s: %w", kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	var keys []string
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("list keys of KV %s: %w", kv.Bucket(), ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, jsutil.WatchClosed(ctx, "list keys of KV "+kv.Bucket())
			}
			if e == nil { // every stored key has been delivered
				slices.Sort(keys)
				// A key written again during the watch can be delivered twice.
				return slices.Compact(keys), nil
			}
			if e.Key() > after {
				keys = append(keys, e.Key())
			}
		}
	}
}

// unreadable is TaskView.Unreadable for a spec that failed to decode with
// err, and what repairs it.
func unreadable(err error) string {
	return fmt.Sprintf("%s: %v; publish task.updated to replace it, or task.deleted", ErrBadSpec, err)
}
