// Package query is flyball's read side, shared by the CLI and the HTTP API
// so both show exactly the same data: tasks (KV flyball-tasks and
// flyball-schedules), run history (RUNS), dead letters (DEADLETTER), the
// scheduler-health summary and the runtime registry (KV flyball-runtime).
//
// Every read is non-destructive: streams are read with ephemeral ordered
// consumers (or, for the DISPATCH work queue, which refuses consumers that
// do not ack, with direct message gets), never with durables, and nothing
// is acknowledged. The one exception is [Reader.PurgeDeadLetters], the
// operator's explicit `dlq purge`, kept here beside the listing it mirrors.
package query
