package streams

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestCheckDeadLetterWindow: the dead-letter service stores one entry per
// dispatch by its Nats-Msg-Id, across DEADLETTER's 24h duplicate window,
// so Check refuses a shorter window, as it does TASKS', DISPATCH's and
// RUNS'. It passed DEADLETTER with any window. Under a max_age the
// operator shortened below 24h, the window is the operator's (Ensure
// keeps it, LimitDuplicateWindow) and passes: provision would not set
// it back.
func TestCheckDeadLetterWindow(t *testing.T) {
	t.Parallel()
	defs, err := StreamConfigs()
	if err != nil {
		t.Fatal(err)
	}
	def := defs[slices.IndexFunc(defs, func(c jetstream.StreamConfig) bool { return c.Name == StreamDeadLetter })]

	short := def
	short.Duplicates = 10 * time.Second
	err = Check(&short)
	if !errors.Is(err, ErrDrift) || !strings.Contains(err.Error(), "stream DEADLETTER: duplicate_window 10s, want at least 24h0m0s") {
		t.Errorf("Check of DEADLETTER with a 10s window: %v, want the drift of its duplicate_window", err)
	}

	kept := def
	kept.MaxAge, kept.Duplicates = 12*time.Hour, 12*time.Hour
	if err := Check(&kept); err != nil {
		t.Errorf("Check of DEADLETTER with max_age and window 12h: %v, want it to pass (the window Ensure keeps)", err)
	}
	kept.Duplicates = time.Hour
	if err := Check(&kept); err != nil {
		t.Errorf("Check of DEADLETTER with max_age 12h, window 1h: %v, want it to pass (the operator's, which Ensure keeps)", err)
	}
}
