package governor

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestPlainStatesFitTheirBuffer: every state a plain interval task goes
// through (accepted, runs that change, that repeat, that fail) encodes
// within a pooled buffer's first size, up to the longest task ID, so a
// decision's write allocates nothing once the pool is warm.
func TestPlainStatesFitTheirBuffer(t *testing.T) {
	for _, id := range []string{"t", strings.Repeat("x", 128)} {
		spec := minuteSpec(id)
		at := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
		var st gov.State
		check := func(what string, step Step) {
			t.Helper()
			dec := Apply(spec, st, step)
			if dec.Ignored {
				t.Fatalf("%s: ignored", what)
			}
			st = dec.State
			body, err := st.AppendJSON(nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(body) > stateBufSize {
				t.Errorf("%d-character ID, %s: the state is %d bytes, over %d:\n%s", len(id), what, len(body), stateBufSize, body)
			}
		}
		check("accepted", Step{TaskID: id, At: at, CommandID: "0196f3c2-7d2e-7c1a-9a4b-5e2f0d1c3b4a", Input: gov.Input{Kind: gov.KindAccepted}})
		for i, result := range []string{"succeeded", "succeeded", "succeeded", "failed", "succeeded"} {
			slot := st.NextRunAt
			fp := "sha256:0123456789abcdef0123456789abcde" + string(rune('0'+i%2)) // changes, then repeats
			check(result, Step{TaskID: id, At: slot.Add(40 * time.Millisecond), Input: gov.Input{Kind: gov.KindOutcome, Outcome: &gov.Outcome{
				DispatchID: events.DispatchID(id, slot), ScheduledAt: slot, Result: result,
				StartedAt: slot.Add(time.Millisecond), FinishedAt: slot.Add(30 * time.Millisecond), Fingerprint: fp,
			}}})
		}
	}
}

// TestScheduleWritesCopyTheirValue: stateBufs rests on KV's Create and
// Update having copied the value when they return. On a real server, a
// buffer overwritten right after each write leaves what was stored intact.
func TestScheduleWritesCopyTheirValue(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	kv, err := srv.JS.KeyValue(t.Context(), streams.BucketSchedules)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, stateBufSize)
	var rev uint64
	for i := range 20 {
		st := gov.State{TaskID: "t", Runs: uint64(i + 1), LastDispatchID: fmt.Sprintf("t:%d", i)}
		body, err := st.AppendJSON(buf[:0])
		if err != nil {
			t.Fatal(err)
		}
		want := string(body)
		if rev == 0 {
			rev, err = kv.Create(t.Context(), "t", body)
		} else {
			rev, err = kv.Update(t.Context(), "t", body, rev)
		}
		if err != nil {
			t.Fatal(err)
		}
		clear(body[:cap(body)]) // the next decision's encoding
		ent, err := kv.Get(t.Context(), "t")
		if err != nil {
			t.Fatal(err)
		}
		if string(ent.Value()) != want {
			t.Fatalf("write %d stored %q, want %q", i, ent.Value(), want)
		}
		buf = body
	}
}
