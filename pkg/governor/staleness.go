package governor

import "time"

// Staleness scores how overdue a task's last success is, in [0, 1]: 0 while
// the last success is no older than the expected interval, rising linearly
// to 1 when it is five intervals old. A task that never succeeded is scored
// from its creation time (since). The same function feeds the sweeper's
// metric, the health API and the CLI, so they always agree.
func Staleness(now, lastSuccess, since time.Time, expected time.Duration) float64 {
	if expected <= 0 {
		return 0
	}
	ref := lastSuccess
	if ref.IsZero() {
		ref = since
	}
	if ref.IsZero() {
		return 0
	}
	over := now.Sub(ref) - expected
	if over <= 0 {
		return 0
	}
	score := float64(over) / float64(4*expected)
	if score > 1 {
		return 1
	}
	return score
}
