package streams

// BackupOrder is the order in which to snapshot flyball's streams (the
// KV buckets by their backing streams, KV_<bucket>) for a backup that
// loses nothing a service acknowledged. nats-server snapshots one stream
// at a time, so a backup is a series of instants, one per stream, and a
// message a service handles between two of them may be in one snapshot
// and not in the other.
//
// The rule: a stream comes before every stream and bucket its consumers
// write to. A service writes what a message decides, then acks the
// message. Snapshotting the consumed stream first, a message acked in its
// snapshot had every write done before the later snapshots began, and a
// message not yet acked comes again after a restore and is applied then.
// The other way round (what `nats backup account` does, by name: TASKS
// last) a command the governor applied between the snapshot of the
// schedules and that of TASKS comes back acked with its decision missing:
// it was answered task.accepted and is silently undone.
//
// The edges, each a consumer and where it writes:
//   - TASKS → governor → KV tasks, schedules, pauses (and its answers, in TASKS)
//   - ADVISORIES → deadletter → DEADLETTER
//   - DISPATCH → executor → RUNS, KV attempts, probes
//   - RUNS → governor → KV schedules; → breaker → KV breakers, HEALTH;
//     → deadletter → DEADLETTER
//   - HEALTH, DEADLETTER → governor → KV schedules, pauses
//
// The order is not enough for the buckets: a snapshot reads a stream's
// messages up to the last sequence it had when it started, so a key of a
// one-revision bucket rewritten meanwhile is in the backup neither way.
// docs/operations.md snapshots the buckets with flyball's writers stopped
// (TestLiveBucketSnapshotLosesAKeyRewrittenDuringIt in cmd/flyball).
//
// The timer and the sweeper write from what they read in the buckets,
// with no durable consumer, and redo it after a restore. Among the
// buckets, flyball-tasks comes right before flyball-schedules: the
// governor writes a spec before its schedule.
var BackupOrder = []string{
	StreamTasks,
	StreamAdvisories,
	StreamDispatch,
	StreamRuns,
	StreamHealth,
	StreamDeadLetter,
	kvStreamPrefix + BucketTasks,
	kvStreamPrefix + BucketSchedules,
	kvStreamPrefix + BucketPauses,
	kvStreamPrefix + BucketBreakers,
	kvStreamPrefix + BucketProbes,
	kvStreamPrefix + BucketAttempts,
	kvStreamPrefix + BucketRuntime,
	kvStreamPrefix + BucketLeases,
}
