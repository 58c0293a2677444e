// Package executor runs due work. It consumes DISPATCH through the durable
// pull consumer "executor" with bounded concurrency (a global limit and a
// per-host limit), calls each task's target with the dispatch ID as its
// idempotency key, and reports every attempt on RUNS.
//
// Outcomes:
//   - success: publish run.succeeded, then ack; when the success may
//     change its breaker, repeat it as run.recovered for the breaker
//     service right after (recovered.go);
//   - transient failure (5xx, 408, 429, timeouts, connection errors):
//     publish run.failed (final=false), then NakWithDelay with exponential
//     backoff and jitter; Retry-After is honoured within the task's bounds;
//   - permanent failure (other 4xx, a blocked or invalid target) or the last
//     attempt: publish run.failed with final=true and the dispatch embedded,
//     then TermWithReason (which deletes the work-queue message, so the
//     event must carry it);
//   - deleted or paused task: publish run.skipped, then ack (a task is
//     paused when it has a key in flyball-pauses and its schedule says so);
//   - a catchUp "none" task's slot that arrives after the next slot
//     passed too (governor.MissedUnderNone, judged on the NATS server's
//     clock: Config.ClockOffset), on its first delivery or on a
//     redelivery marked handed back at shutdown without a call
//     (markHandedBack): publish run.skipped, then ack;
//   - a dispatch of a task deleted since and created again under its ID
//     (its taskCreatedAt is not the task's, ofTask), or a slot published
//     again a minute or more after it fell due whose outcome is already on
//     RUNS or DEADLETTER (ranAlready): publish run.skipped, then ack;
//   - open breaker: the delivery is kept (marked in progress) until the
//     breaker's retryAt or its next change, without calling the target,
//     counting an attempt or using one of the consumer's deliveries (park);
//     past the room such waits may take in the consumer's max_ack_pending
//     (half of it: parkroom.go), publish run.skipped, then ack;
//   - half-open breaker (or open past retryAt): one call per breaker key
//     and half-open period, across every executor, is the probe: the one
//     whose Create of the claim in KV flyball-probes wins. Every other
//     call is kept the same way and checks again until the probe's
//     outcome closes or re-opens the breaker, or the claim expires.
//
// Outbound calls pass an SSRF guard that refuses loopback, link-local and
// cloud-metadata addresses unless explicitly allowed, checked on the
// resolved address at dial time so DNS tricks cannot bypass it.
package executor
