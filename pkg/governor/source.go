package governor

// Source names the rule that chose a decision's NextRunAt. The values are
// part of flyball's public contract: they appear in KV, on events and in
// `flyball explain`.
type Source string

// Decision sources.
const (
	SourceBaselineInterval  Source = "baseline-interval"
	SourceBaselineCron      Source = "baseline-cron"
	SourceBackoff           Source = "failure-backoff"
	SourceHintInterval      Source = "hint-interval"
	SourceHintOneShot       Source = "hint-oneshot"
	SourceClampedMin        Source = "clamped-min"
	SourceClampedMax        Source = "clamped-max"
	SourcePaused            Source = "paused"
	SourceStartAt           Source = "start-at"
	SourceDeleted           Source = "deleted"
	SourceBreakerOpen       Source = "breaker-open"
	SourceDeadLetterRecheck Source = "deadletter-recheck"
	SourceRequeue           Source = "requeue"
	SourceUnchanged         Source = "unchanged"
)
