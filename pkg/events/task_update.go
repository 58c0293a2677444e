package events

// TaskUpdate is the data of task.updated: the whole new spec and,
// optionally, the revision of the spec it replaces.
type TaskUpdate struct {
	TaskSpec
	// IfRevision, when set, is the flyball-tasks revision of the spec
	// the update was made from (the API's If-Match, from its ETag; a
	// task.accepted's specRevision). The governor rejects the update,
	// naming ifRevision, when the stored spec's revision differs: another
	// update came in between, and this one would undo it. Zero (absent)
	// replaces the spec whatever its revision.
	IfRevision uint64 `json:"ifRevision,omitempty"`
}

// DecodeTaskUpdate decodes, validates and normalizes the data of a
// task.updated event, as DecodeTaskSpec does a task.created's.
func DecodeTaskUpdate(e Event) (TaskUpdate, error) {
	var u TaskUpdate
	if err := decodeSpec(e, &u, &u.TaskSpec, false); err != nil {
		return TaskUpdate{}, err
	}
	return u, nil
}

// TaskDelete is the data of task.deleted: the task and, optionally, the
// revision of the spec the delete was decided on. Without ifRevision it
// is a TaskRef, as it was before ifRevision.
type TaskDelete struct {
	TaskRef
	// IfRevision, when set, is the flyball-tasks revision of the spec
	// the delete was decided on (the API's If-Match). The governor rejects
	// the delete, naming ifRevision, when the stored spec's revision
	// differs, as it does an update's. Zero (absent) deletes the task
	// whatever its revision.
	IfRevision uint64 `json:"ifRevision,omitempty"`
}

// StaleRevision starts the reason of a task.rejected for an ifRevision the
// stored spec is no longer at: the API answers that 412, and any other
// rejection naming ifRevision (an older governor's "unknown field") 422.
const StaleRevision = "stale revision: "
