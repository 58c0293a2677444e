// Package streams declares every JetStream stream, durable consumer and
// key-value bucket used by flyball, and provides [Ensure] to create or
// reconcile them idempotently.
//
// # Definitions
//
// The definitions are JSON files embedded from the defs directory:
//
//	defs/streams/<NAME>.json              stream config
//	defs/kv/<bucket>.json                 the KV_<bucket> stream backing a KV bucket
//	defs/consumers/<STREAM>.<durable>.json durable pull consumer on STREAM
//
// The files use the JetStream server API JSON format (the snake_case keys of
// nats-server's StreamConfig and ConsumerConfig, durations as integer
// nanoseconds), so each one also works with the nats CLI:
//
//	nats stream add --config defs/streams/TASKS.json
//	nats stream add --config defs/kv/flyball-tasks.json
//	nats consumer add TASKS --config defs/consumers/TASKS.governor.json
//
// The retention limits of the [HistoryStreams] are defaults: an existing
// stream keeps its own, and [Ensure] reports each that differs
// ([WithReport]). Editing the files changes nothing on a running
// deployment until it is rebuilt; change a limit with
// `nats stream edit <STREAM> --max-age …` instead.
//
// A KV file holds the stream config that jetstream.CreateKeyValue
// produces for that bucket (subjects $KV.<bucket>.>, max_msgs_per_subject =
// history, discard new, deny_delete, allow_direct, duplicate_window 2m,
// unlimited msgs/bytes/consumers/msg size), but for allow_rollup_hdrs,
// which is off: a "Nats-Rollup: all" header on a key any user may write
// would otherwise empty the bucket. jetstream.JetStream.KeyValue binds to
// it, and every KV operation but Purge works; CreateKeyValue over it
// fails, the bucket existing with another config.
//
// # Subjects
//
//	flyball.task.<verb>.<id>      TASKS       control plane; verbs created, updated,
//	                                          deleted, paused, resumed, hinted,
//	                                          requeued, accepted, rejected
//	flyball.dispatch.<id>         DISPATCH    work queue, at most one pending run per
//	                                          task (max_msgs_per_subject 1 with
//	                                          discard_new_per_subject)
//	flyball.run.<outcome>.<id>    RUNS        run outcomes (succeeded, failed, skipped)
//	flyball.deadletter.<id>       DEADLETTER  dead-lettered tasks
//	flyball.breaker.>             HEALTH      circuit breaker events
//	flyball.runtime.>             HEALTH      runtime health events
//	$JS.EVENT.ADVISORY.CONSUMER.{MAX_DELIVERIES,MSG_TERMINATED}.DISPATCH.*
//	                              ADVISORIES  DISPATCH deliveries that were exhausted
//	                                          or terminated
//
// # Publishing to DISPATCH
//
// A second message on a flyball.dispatch.<id> subject that still holds a
// pending message is rejected by the server with error code 10077
// (JSStreamStoreFailedF, "maximum messages per subject exceeded"). Messages
// carrying a Nats-Msg-Id already seen within the 2 minute duplicate window
// are acknowledged with PubAck.Duplicate set instead of being stored.
package streams
