package events

import "strconv"

// RunIDSuffix ends the event ID (and Nats-Msg-Id) the executor gives a
// run event (docs/events.md). The breaker reads a success's suffix from
// the header to skip decoding its body: both sides take them from here,
// so a change to one cannot silently turn the other's fast path off.
type RunIDSuffix string

// Run event ID suffixes.
const (
	RunIDStarted   RunIDSuffix = ":started"
	RunIDSucceeded RunIDSuffix = ":succeeded"
	RunIDRecovered RunIDSuffix = ":recovered"
	// RunIDFailed is a non-final failure.
	RunIDFailed RunIDSuffix = ":failed"
	// RunIDFinal is a final failure after a call. It is never RunIDFailed:
	// an attempt number can be repeated, and the repeat's final failure
	// under the earlier non-final one's ID was dropped as a duplicate.
	RunIDFinal RunIDSuffix = ":final"
	// RunIDExhausted is a final failure without a call: a lowered
	// retry.maxAttempts ended the run.
	RunIDExhausted RunIDSuffix = ":exhausted"
	// RunIDSkipped follows the dispatch ID alone (SkippedRunID).
	RunIDSkipped RunIDSuffix = ":skipped"
)

// RunID is the event ID of a run event of one attempt:
// <dispatchId>:<attempt><suffix>.
func RunID(dispatchID string, attempt int, suffix RunIDSuffix) string {
	return dispatchID + ":" + strconv.Itoa(attempt) + string(suffix)
}

// SkippedRunID is the event ID of a run.skipped: <dispatchId>:skipped.
func SkippedRunID(dispatchID string) string { return dispatchID + string(RunIDSkipped) }
