package streams

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrDrift is wrapped by [Check]'s errors: a stream's config differs from
// its definition in a setting the services rely on.
var ErrDrift = errors.New("stream config drifted from its definition")

// dedupStreams are the streams whose duplicate window the services rely
// on: a command retried, a run event republished, a slot dispatched
// again or a dispatch dead-lettered again (its entry's Nats-Msg-Id, one
// per dispatch) within it is stored once. A shorter window stores the
// copy.
var dedupStreams = []string{StreamTasks, StreamDispatch, StreamRuns, StreamDeadLetter}

// Check compares the config of a stream a service binds with its
// definition, in the settings whose drift breaks a guarantee without an
// error: DISPATCH's work-queue retention and one message per subject (an
// acked dispatch that stays, or a second one stored or replacing the
// first), and the duplicate windows of [dedupStreams] (at least the
// definition's, but for one kept under a shorter max age). Services run
// with --ensure-streams=false trust what "flyball provision" left, which
// an old deployment, an operator's edit or a provision that failed
// partway may not be. Other settings, and
// streams flyball does not define, pass. Its error names the stream,
// every setting found and wanted, and the cure.
func Check(cfg *jetstream.StreamConfig) error {
	if cfg == nil {
		return nil
	}
	streams, _, err := load()
	if err != nil {
		return err
	}
	i := slices.IndexFunc(streams, func(d streamDef) bool { return d.cfg.Name == cfg.Name })
	if i < 0 {
		return nil
	}
	want := streams[i].cfg
	var bad []string
	retention := false
	if cfg.Name == StreamDispatch {
		if cfg.Retention != want.Retention {
			retention = true
			bad = append(bad, retentionDrift(cfg.Retention, want.Retention))
		}
		if cfg.MaxMsgsPerSubject != want.MaxMsgsPerSubject {
			bad = append(bad, fmt.Sprintf("max_msgs_per_subject %d, want %d", cfg.MaxMsgsPerSubject, want.MaxMsgsPerSubject))
		}
		if cfg.Discard != want.Discard || cfg.DiscardNewPerSubject != want.DiscardNewPerSubject {
			bad = append(bad, fmt.Sprintf("discard %s (per subject %t), want %s (per subject %t)",
				cfg.Discard, cfg.DiscardNewPerSubject, want.Discard, want.DiscardNewPerSubject))
		}
	}
	// A history stream's max_age an operator set below the window
	// leaves the window theirs: Ensure keeps it (LimitDuplicateWindow),
	// as nats-server refuses a window longer than the max age.
	if slices.Contains(dedupStreams, cfg.Name) && !keepsShorterWindow(cfg.Name, cfg.MaxAge, want.Duplicates) && cfg.Duplicates < want.Duplicates {
		bad = append(bad, fmt.Sprintf("duplicate_window %s, want at least %s", cfg.Duplicates, want.Duplicates))
	}
	if len(bad) == 0 {
		return nil
	}
	cure := `run "flyball provision"`
	if retention {
		cure = cureRetention
	}
	return fmt.Errorf("stream %s: %s: %w: %s", cfg.Name, strings.Join(bad, "; "), ErrDrift, cure)
}

// cureRetention is the cure of a DISPATCH whose retention is not its
// definition's work-queue, which [Check] and [Ensure] give: nats-server
// refuses to change a stream's retention to or from work-queue in
// place, so provision alone fails on it.
const cureRetention = `delete the stream (its pending dispatches are re-created by the sweeper), then run "flyball provision"`

// retentionDrift names a retention found and the one wanted.
func retentionDrift(live, want jetstream.RetentionPolicy) string {
	return fmt.Sprintf("retention %s, want %s", live, want)
}
