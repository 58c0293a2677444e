// Package timer turns schedules into dispatches. It watches KV
// flyball-schedules, keeps every task's nextRunAt in one in-memory min-heap
// driven by a single time.Timer, and when an entry falls due publishes a
// run.due event to flyball.dispatch.<id> with Nats-Msg-Id
// "<id>:<nextRunAt unix ms>".
//
// Several timer replicas may run at once: they all fire, JetStream keeps one
// message per Nats-Msg-Id, and DISPATCH holds at most one pending run per
// task. A duplicate PubAck or error 10077 for the per-subject limit (the
// subject already holds a pending run; 10077 for a stream-wide limit or a
// storage error is a failure) therefore means the run is already
// dispatched: success, not failure. For 10077 that holds only if the
// pending run is this slot; an earlier slot still pending (its ack not yet
// processed) makes the timer retry the new slot with a backoff until it is
// stored or superseded. Error 10158 (a publish of the same Nats-Msg-Id,
// another replica's or this timer's own earlier try, is being stored right
// now) is not success: that publish may yet fail (a stream leader that
// lost its quorum never commits it), so the slot is published again, every
// RetryDelay, until the stream answers stored or duplicate. Any other
// publish error is retried with a short backoff; a run is never silently
// dropped.
//
// Each slot is published its lead early (the executor holds it until the
// slot): a quarter of the time since the task's previous slot, at most
// Config.Lead (1 s by default). The heap is ordered by that publish time.
//
// Due runs leave in batches: up to 1,024 are taken off the heap in one lock
// hold and published asynchronously, then their acks are collected; an ack
// that does not come within 3 s counts as an error and is published again. Loading the bucket
// reads only nextRunAt, source and createdAt from each stored state
// (decodeSchedule); createdAt goes into every dispatch as taskCreatedAt.
package timer
