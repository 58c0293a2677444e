// Package governor is the service that owns every task's schedule. It
// consumes control commands from TASKS and final run outcomes from RUNS,
// applies each through the pure pkg/governor Decide function, and writes the
// result to KV flyball-schedules with compare-and-set. It is the only writer
// of flyball-tasks, flyball-schedules and flyball-pauses (a key per paused
// task, see pauses.go), and the only publisher of task.accepted and
// task.rejected.
//
// A malformed command never crashes the service and is never dropped: it is
// answered with a task.rejected event whose reasons name the offending
// fields. A malformed message on RUNS is terminated with a reason and
// counted in flyball_rejected_events_total.
package governor
