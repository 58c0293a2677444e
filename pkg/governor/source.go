package governor

// Source names the rule that chose a decision's NextRunAt. The values are
// part of flyball's public contract: they appear in KV, on events and in
// `flyball explain`. The package documentation lists them in order of
// precedence.
type Source string

// Decision sources.
const (
	// SourceBaselineInterval: the next slot of the interval grid.
	SourceBaselineInterval Source = "baseline-interval"
	// SourceBaselineCron: the next occurrence of the cron expression.
	SourceBaselineCron Source = "baseline-cron"
	// SourceBackoff: an interval cadence stretched by failure backoff.
	SourceBackoff Source = "failure-backoff"
	// SourceStartAt: the spec's startAt, for the first run.
	SourceStartAt Source = "start-at"
	// SourceCatchUp: a run owed to slots missed during downtime.
	SourceCatchUp Source = "catch-up"
	// SourceAdaptiveTighten: the adaptive interval is shorter than the
	// baseline (responses change, errors appear, or data goes stale).
	SourceAdaptiveTighten Source = "adaptive-tighten"
	// SourceAdaptiveRelax: the adaptive interval is longer than the
	// baseline (responses stopped changing).
	SourceAdaptiveRelax Source = "adaptive-relax"
	// SourceActivityIdle: the interval is stretched by the idle multiplier.
	SourceActivityIdle Source = "activity-idle"
	// SourceActivityDormant: the interval is stretched by the dormant
	// multiplier.
	SourceActivityDormant Source = "activity-dormant"
	// SourceHintInterval: an interval hint replaced the cadence.
	SourceHintInterval Source = "hint-interval"
	// SourceHintOneShot: a one-shot hint was the earliest candidate.
	SourceHintOneShot Source = "hint-oneshot"
	// SourceQuietHours: the quiet-hours interval applied.
	SourceQuietHours Source = "quiet-hours"
	// SourceBudget: the daily run budget stretched the interval or is used
	// up.
	SourceBudget Source = "budget"
	// SourceBreakerOpen: the run waits for the open breaker's retryAt.
	SourceBreakerOpen Source = "breaker-open"
	// SourceDeadLetterRecheck: a dead-lettered task's recheck run.
	SourceDeadLetterRecheck Source = "deadletter-recheck"
	// SourceRequeue: an operator requeued the task: it runs now.
	SourceRequeue Source = "requeue"
	// SourceClampedMin: raised to bounds.min after the last run.
	SourceClampedMin Source = "clamped-min"
	// SourceClampedMax: lowered to bounds.max after the last run.
	SourceClampedMax Source = "clamped-max"
	// SourcePaused: the task is paused.
	SourcePaused Source = "paused"
	// SourceDeleted: the task was deleted; nothing is scheduled.
	SourceDeleted Source = "deleted"
	// SourceUnchanged is reserved: Decide never produces it.
	SourceUnchanged Source = "unchanged"
)

// AllSources lists every source Decide can produce, highest precedence
// first (sources of equal rank are adjacent).
//
// See also [Source.Cadence].
func AllSources() []Source {
	return []Source{
		SourcePaused, SourceDeleted,
		SourceClampedMin, SourceClampedMax,
		SourceRequeue, SourceDeadLetterRecheck,
		SourceBreakerOpen,
		SourceBudget, SourceQuietHours,
		SourceHintOneShot, SourceHintInterval,
		SourceActivityDormant, SourceActivityIdle, SourceAdaptiveTighten, SourceAdaptiveRelax,
		SourceCatchUp, SourceBackoff, SourceStartAt, SourceBaselineCron, SourceBaselineInterval,
	}
}

// Cadence reports whether s is a slot of the task's own interval cadence:
// the baseline grid, shaped by adaptive cadence or activity modes, or
// clamped to bounds. Such a slot's gap to the last is at least the low
// end of [AdaptiveRange], less the spec's jitter (at most half). A slot a
// hint, a catch-up, a retry backoff, a requeue, a cron expression or the
// startAt asked for may be followed by the next one at any distance.
func (s Source) Cadence() bool {
	switch s {
	case SourceBaselineInterval, SourceAdaptiveTighten, SourceAdaptiveRelax,
		SourceActivityIdle, SourceActivityDormant, SourceClampedMin, SourceClampedMax:
		return true
	}
	return false
}
