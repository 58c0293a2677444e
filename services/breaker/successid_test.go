package breaker

import (
	"testing"

	"github.com/flyballhq/flyball/pkg/events"
)

// TestSuccessIDMatchesOutcomeID: the header shortcut names a success by
// its event ID, as the executor publishes it, and must name it as the
// record does (outcomeID), or every success of a breaker that once closed
// is decoded, and the one whose closing failed to publish is acked
// without publishing it.
func TestSuccessIDMatchesOutcomeID(t *testing.T) {
	run := &events.Run{DispatchID: "t1:1796057183918", Attempt: 3}
	for _, msgID := range []string{"t1:1796057183918:3:succeeded", "t1:1796057183918:3:recovered"} {
		if got, want := successID(msgID), outcomeID(run, true); got != want {
			t.Errorf("successID(%q) = %q, want %q", msgID, got, want)
		}
	}
	for _, msgID := range []string{"", "by-hand", "t1:1796057183918:3:failed", ":succeeded"} {
		if got := successID(msgID); got != "" {
			t.Errorf("successID(%q) = %q, want none", msgID, got)
		}
	}
}
