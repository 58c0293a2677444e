package governor_test

import (
	"strings"
	"testing"
	"time"

	governor "github.com/flyballhq/flyball/pkg/governor"
)

// A spec update may change what a fingerprint is taken of (the URL, the
// method, maxResponseBytes, a NATS subject): the first run after it was
// compared with the old spec's fingerprint, so an unchanged target read
// as "response changed" (tightening the cadence and waking a dormant
// task), and the unchanged runs counted before the update relaxed it at
// once. The first fingerprint after an update only records, as the first
// one of a new task does.
func TestDecideFirstFingerprintAfterAnUpdateOnlyRecords(t *testing.T) {
	spec := withActivity(changeSpec())
	idleSince := t0.Add(-48 * time.Hour)
	st := stateWith(ran(t0), fingerprint("old-spec"), unchangedRuns(9), lastActivity(idleSince))

	up := governor.Decide(t0.Add(time.Second), spec, st, updated)
	if up.State.LastFingerprint != "" || up.State.UnchangedRuns != 0 {
		t.Fatalf("after the update: lastFingerprint %q, unchangedRuns %d; want both cleared", up.State.LastFingerprint, up.State.UnchangedRuns)
	}

	slot := up.NextRunAt
	d := governor.Decide(slot.Add(50*time.Millisecond), spec, up.State, outcomeFP("succeeded", slot, "new-spec"))
	trail := strings.Join(d.Trail, "\n")
	if strings.Contains(trail, "response changed") {
		t.Fatalf("the first run after an update was taken as a change:\n%s", trail)
	}
	if !d.State.LastActivityAt.Equal(idleSince) {
		t.Fatalf("lastActivityAt %s, want %s kept: an update is not activity of the target", d.State.LastActivityAt, idleSince)
	}
	if d.State.LastFingerprint != "new-spec" {
		t.Fatalf("lastFingerprint %q, want the first fingerprint after the update recorded", d.State.LastFingerprint)
	}
}
