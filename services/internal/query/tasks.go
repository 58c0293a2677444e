package query

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

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
	ent, err := r.tasks.Get(ctx, id)
	if jsutil.IsKeyMissing(err) {
		return nil, fmt.Errorf("task %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read task %q: %w", id, err)
	}
	var v TaskView
	if err := json.Unmarshal(ent.Value(), &v.Spec); err != nil {
		v = TaskView{Spec: events.TaskSpec{ID: id}, Unreadable: unreadable(err)}
	}
	se, err := r.schedules.Get(ctx, id)
	switch {
	case err == nil:
		var st gov.State
		if json.Unmarshal(se.Value(), &st) == nil {
			v.Schedule = &st
		}
	case !jsutil.IsKeyMissing(err):
		return nil, fmt.Errorf("read schedule of task %q: %w", id, err)
	}
	return &v, nil
}

// Tasks lists the tasks that match f, sorted by ID.
func (r *Reader) Tasks(ctx context.Context, f TaskFilter) ([]TaskView, error) {
	specs, raw, err := decodeEntries[events.TaskSpec](ctx, r.tasks)
	if err != nil {
		return nil, err
	}
	states, _, err := decodeEntries[gov.State](ctx, r.schedules)
	if err != nil {
		return nil, err
	}
	out := []TaskView{}
	for id, spec := range specs {
		if !f.match(&spec) {
			continue
		}
		v := TaskView{Spec: spec}
		if st, ok := states[id]; ok {
			v.Schedule = &st
		}
		out = append(out, v)
	}
	if f.Job == "" && len(f.Labels) == 0 {
		// A spec that does not decode has no job or labels to filter on,
		// and left out of the list it was nowhere but in its skipped runs.
		for id, e := range raw {
			if _, ok := specs[id]; ok {
				continue
			}
			var bad events.TaskSpec
			v := TaskView{Spec: events.TaskSpec{ID: id}, Unreadable: unreadable(json.Unmarshal(e.Value(), &bad))}
			if st, ok := states[id]; ok {
				v.Schedule = &st
			}
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b TaskView) int { return strings.Compare(a.Spec.ID, b.Spec.ID) })
	return out, nil
}

// TaskPage returns the tasks that match f with IDs after after (every
// one with after ""), sorted by ID: at most limit of them (every one when
// limit <= 0) and, when more follow, the ID to pass as after for the next
// page. A cursor that is an ID rather than a position keeps the pages
// whole while tasks are created and deleted between them.
func (r *Reader) TaskPage(ctx context.Context, f TaskFilter, after string, limit int) ([]TaskView, string, error) {
	all, err := r.Tasks(ctx, f)
	if err != nil {
		return nil, "", err
	}
	i, found := slices.BinarySearchFunc(all, after, func(v TaskView, id string) int { return strings.Compare(v.Spec.ID, id) })
	if found {
		i++
	}
	page := all[i:]
	if limit <= 0 || len(page) <= limit {
		return page, "", nil
	}
	page = page[:limit]
	return page, page[limit-1].Spec.ID, nil
}

// unreadable is TaskView.Unreadable for a spec that failed to decode with
// err, and what repairs it.
func unreadable(err error) string {
	return fmt.Sprintf("%s: %v; publish task.updated to replace it, or task.deleted", ErrBadSpec, err)
}
