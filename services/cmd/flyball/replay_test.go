package main

import (
	"strings"
	"testing"
	"time"
)

// TestReplayRefusesAFromTimeUnixNanosCannotHold: a --from-time outside
// 1677-09-21..2262-04-11 is refused in one line naming --from-time. The
// server reads the start time in Unix nanoseconds, which wrapped: 3000
// replayed the whole stream (with --to --force, republished it), 1600
// none of it.
func TestReplayRefusesAFromTimeUnixNanosCannotHold(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	for _, from := range []string{"3000-01-01T00:00:00Z", "1600-01-01T00:00:00Z", "2262-04-11T23:47:17Z", "9999-12-31T23:59:59Z"} {
		f := replayFlags{stream: "RUNS", fromTime: from}
		err := f.check(now)
		if err == nil || !strings.HasPrefix(err.Error(), "--from-time "+from+": ") || strings.Contains(err.Error(), "\n") {
			t.Errorf("replay --from-time %s: %v; want one line naming --from-time", from, err)
		}
	}
	for _, from := range []string{"2026-01-02T15:04:05Z", "1970-01-01T00:00:00Z", "1700-01-01T00:00:00Z", "2262-04-11T23:47:16Z"} {
		f := replayFlags{stream: "RUNS", fromTime: from}
		if err := f.check(now); err != nil {
			t.Errorf("replay --from-time %s: %v, want it accepted", from, err)
		}
	}
}
