package events

import "testing"

// TestRunIDsKeepTheirWireFormat pins the bytes of every run event ID.
// They are Nats-Msg-Ids: RUNS drops a second event with the same ID, and
// the breaker reads a success from its suffix. An executor of another
// release must give the same attempt the same ID, so a change here is a
// change of the wire format, not a refactor.
func TestRunIDsKeepTheirWireFormat(t *testing.T) {
	const dispatch = "t1:1796057183918"
	for _, c := range []struct {
		suffix RunIDSuffix
		want   string
	}{
		{RunIDStarted, "t1:1796057183918:3:started"},
		{RunIDSucceeded, "t1:1796057183918:3:succeeded"},
		{RunIDRecovered, "t1:1796057183918:3:recovered"},
		{RunIDFailed, "t1:1796057183918:3:failed"},
		{RunIDFinal, "t1:1796057183918:3:final"},
		{RunIDExhausted, "t1:1796057183918:3:exhausted"},
	} {
		if got := RunID(dispatch, 3, c.suffix); got != c.want {
			t.Errorf("RunID(%q, 3, %q) = %q, want %q", dispatch, c.suffix, got, c.want)
		}
	}
	if got, want := SkippedRunID(dispatch), "t1:1796057183918:skipped"; got != want {
		t.Errorf("SkippedRunID(%q) = %q, want %q", dispatch, got, want)
	}
}
