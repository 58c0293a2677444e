package streams

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// HistoryStreams are the streams whose retention limits belong to the
// operator once the stream exists: they keep a history (commands, run
// outcomes, dead letters, breaker and runtime events, delivery
// advisories) that flyball reads back but whose length no guarantee
// depends on. Their max_age, max_bytes, max_msgs and
// max_msgs_per_subject (the [RetentionLimits]) are the definition's when
// [Ensure] creates the stream; on a stream that exists, Ensure keeps the
// live values, as an operator set them with `nats stream edit`, and
// reports each one that differs from the definition. Raising a limit
// there is never undone by a provision or a restart (which dropped the
// messages past the definition's limit), and lowering one to free
// storage stays lowered.
//
// Everything else is the definition's on every Ensure, because flyball's
// logic depends on it: DISPATCH's limits (one pending dispatch per task:
// max_msgs_per_subject 1 with discard new per subject, no max age, so a
// pending dispatch is never dropped), every stream's retention, discard
// policy, duplicate window (the dedup of commands, dispatches and run
// events), subjects, storage and allow_direct (the direct gets of
// TASKS, RUNS and DEADLETTER), and all of the KV buckets' streams (their
// history is what the services read and compare-and-set; the attempts
// bucket's 72h max age outlives the longest retry delay, the probes
// bucket's 1h max age backs its claims' TTLs). A retention limit of these
// that differs is set back and reported, never changed silently.
//
// A new version of flyball that changes a history stream's default does
// not change an existing stream's: Ensure reports the difference, and
// the CHANGELOG says when to apply it by hand.
var HistoryStreams = []string{StreamAdvisories, StreamDeadLetter, StreamHealth, StreamRuns, StreamTasks}

// RetentionLimits are the settings of [HistoryStreams] that [Ensure]
// keeps as it finds them, in the server API's JSON names.
var RetentionLimits = []string{"max_age", "max_bytes", "max_msgs", "max_msgs_per_subject"}

// LimitDuplicateWindow is the [Difference.Limit] of a stream's duplicate
// window that differs from its definition's. [Ensure] sets it back, but
// keeps a history stream's below the definition's (Kept) when the
// stream's kept max_age is shorter than the definition's window:
// nats-server refuses a window longer than max_age. The window is then
// the max age, or the stream's own window if smaller, and a copy
// published after it (a retried command, a republished dead letter) is
// stored again.
const LimitDuplicateWindow = "duplicate_window"

// LimitReplicas is the [Difference.Limit] of a stream [Ensure] created,
// without [WithReplicas], with the highest replica count among flyball's
// existing streams (Live) instead of its definition's (Def).
const LimitReplicas = "num_replicas"

// A Difference is a retention limit or the duplicate window of an
// existing stream that differs from flyball's definition, which [Ensure]
// reports through
// [WithReport]: Kept (a [HistoryStreams] limit, left as it was) or set
// back to the definition's; or a stream or consumer left under newer
// definitions ([LimitDefinitions]), or a new stream created with the
// existing streams' replica count ([LimitReplicas]).
type Difference struct {
	Stream string // "<stream>.<durable>" for a consumer's LimitDefinitions
	Limit  string // one of RetentionLimits, LimitDuplicateWindow, LimitDefinitions or LimitReplicas
	Live   string // the stream's value before Ensure ("unlimited" for none)
	Def    string // the definition's value
	Kept   bool
}

// String is the line provision prints, such as
// "RUNS: max_age 72h kept (flyball's default is 168h)".
func (d Difference) String() string {
	if d.Limit == LimitReplicas {
		return fmt.Sprintf("%s: created with %s replicas, the highest among flyball's existing streams (the definition's is %s)", d.Stream, d.Live, d.Def)
	}
	if d.Limit == LimitDefinitions {
		return fmt.Sprintf("%s: newer definitions in place (%s), left as they are", d.Stream, d.Live)
	}
	if d.Kept && d.Limit == LimitDuplicateWindow {
		return fmt.Sprintf("%s: %s %s kept (flyball's default is %s; nats-server refuses a window longer than the max_age kept)", d.Stream, d.Limit, d.Live, d.Def)
	}
	if d.Kept {
		return fmt.Sprintf("%s: %s %s kept (flyball's default is %s)", d.Stream, d.Limit, d.Live, d.Def)
	}
	return fmt.Sprintf("%s: %s %s set back to %s (flyball relies on its definition's)", d.Stream, d.Limit, d.Live, d.Def)
}

// WithReport calls fn with each retention limit, and the duplicate
// window, of an existing stream that differs from its definition, before
// Ensure updates the stream:
// see [HistoryStreams]. A failed Ensure may have reported differences it
// did not get to apply.
func WithReport(fn func(Difference)) Option {
	return func(o *options) { o.report = fn }
}

// limits reconciles the retention limits of cfg, the definition of an
// existing stream, with live, its config on the server: a history
// stream's live limits replace the definition's. It returns the
// differences either way.
func limits(cfg *jetstream.StreamConfig, live *jetstream.StreamConfig) []Difference {
	keep := isHistory(cfg.Name)
	var out []Difference
	field := func(name string, def *int64, cur int64, format func(int64) string) {
		if cur == *def {
			return
		}
		out = append(out, Difference{Stream: cfg.Name, Limit: name, Live: format(cur), Def: format(*def), Kept: keep})
		if keep {
			*def = cur
		}
	}
	age := int64(cfg.MaxAge)
	field("max_age", &age, int64(live.MaxAge), func(v int64) string { return fmtAge(time.Duration(v)) })
	cfg.MaxAge = time.Duration(age)
	// nats-server refuses a duplicate window longer than max_age (error
	// 10052): a history stream's kept max_age below the definition's
	// window (DEADLETTER's 24h under an operator's 12h) failed every
	// Ensure, and with it every provision and every serve. The window
	// is kept at the max age, or the live window if smaller: messages
	// are deduplicated across that shorter window only.
	if keepsShorterWindow(cfg.Name, cfg.MaxAge, cfg.Duplicates) {
		window := min(cfg.MaxAge, live.Duplicates)
		if window <= 0 {
			window = cfg.MaxAge
		}
		out = append(out, Difference{Stream: cfg.Name, Limit: LimitDuplicateWindow, Live: fmtAge(window), Def: fmtAge(cfg.Duplicates), Kept: true})
		cfg.Duplicates = window
	} else if live.Duplicates != cfg.Duplicates {
		// Any other window is flyball's, written back and reported so:
		// a raised one (DEADLETTER's 48h) is cut to the definition's,
		// and a shortened one (which Check refuses) lengthened.
		out = append(out, Difference{Stream: cfg.Name, Limit: LimitDuplicateWindow, Live: fmtAge(live.Duplicates), Def: fmtAge(cfg.Duplicates)})
	}
	field("max_bytes", &cfg.MaxBytes, live.MaxBytes, fmtCount)
	field("max_msgs", &cfg.MaxMsgs, live.MaxMsgs, fmtCount)
	field("max_msgs_per_subject", &cfg.MaxMsgsPerSubject, live.MaxMsgsPerSubject, fmtCount)
	return out
}

func isHistory(name string) bool { return slices.Contains(HistoryStreams, name) }

// keepsShorterWindow reports whether the stream name, with the max age
// maxAge it keeps, keeps a duplicate window shorter than window, its
// definition's: a history stream whose max_age (an operator's) is below
// it, since nats-server refuses a window longer than the max age. Ensure
// (limits) keeps the shorter window, and Check accepts it, by this one
// rule.
func keepsShorterWindow(name string, maxAge, window time.Duration) bool {
	return isHistory(name) && maxAge > 0 && maxAge < window
}

// fmtAge spells a max age as nats stream edit --max-age takes it: 72h,
// 1h30m; 0 is unlimited.
func fmtAge(d time.Duration) string {
	if d <= 0 {
		return "unlimited"
	}
	s := d.String()
	for _, zero := range []string{"0s", "0m"} {
		if strings.HasSuffix(s, zero) && len(s) > len(zero) && strings.ContainsAny(s[:len(s)-len(zero)], "hm") {
			s = strings.TrimSuffix(s, zero)
		}
	}
	return s
}

// fmtCount spells a count or size limit; 0 and -1 are unlimited.
func fmtCount(v int64) string {
	if v <= 0 {
		return "unlimited"
	}
	return fmt.Sprint(v)
}
