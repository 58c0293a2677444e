package query

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/flyballhq/flyball/streams"
)

// TestReplayOrderKeepsEachStreamInSequence: the governor reads each
// stream in sequence order, so the replay must too, even when stored
// times step back within a stream (a new stream leader whose clock is
// behind the old one's); only across streams does the stored time order
// the inputs.
func TestReplayOrderKeepsEachStreamInSequence(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	msgs := []Message{
		{Stream: streams.StreamTasks, Seq: 3, Time: t0},
		{Stream: streams.StreamRuns, Seq: 7, Time: t0.Add(2 * time.Second)},
		{Stream: streams.StreamRuns, Seq: 8, Time: t0.Add(1 * time.Second)}, // stored after 7, stamped earlier
		{Stream: streams.StreamTasks, Seq: 4, Time: t0.Add(1500 * time.Millisecond)},
		{Stream: streams.StreamHealth, Seq: 2, Time: t0.Add(3 * time.Second)},
	}
	// RUNS 7 before RUNS 8 (their sequence); TASKS 4 (1.5s) before the
	// head of RUNS (7, at 2s); HEALTH last (3s).
	want := []string{"TASKS 3", "TASKS 4", "RUNS 7", "RUNS 8", "HEALTH 2"}
	got := []string{}
	for _, i := range replayOrder(msgs) {
		got = append(got, fmt.Sprint(msgs[i].Stream, " ", msgs[i].Seq))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("replay order %v, want %v", got, want)
	}
}

// TestReplayOrderBreaksTiesByStreamNotSequence: two streams' sequences
// count different things, so on equal stored times (a coarse server
// clock) they say nothing about which input came first. The replay takes
// the streams in the order it reads them: a breaker transition or dead
// letter comes after the run outcome that caused it, stamped the same.
func TestReplayOrderBreaksTiesByStreamNotSequence(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	msgs := []Message{
		{Stream: streams.StreamTasks, Seq: 90, Time: t0},
		{Stream: streams.StreamRuns, Seq: 50, Time: t0},
		{Stream: streams.StreamHealth, Seq: 2, Time: t0},
		{Stream: streams.StreamDeadLetter, Seq: 1, Time: t0},
	}
	want := []string{"TASKS 90", "RUNS 50", "HEALTH 2", "DEADLETTER 1"}
	got := []string{}
	for _, i := range replayOrder(msgs) {
		got = append(got, fmt.Sprint(msgs[i].Stream, " ", msgs[i].Seq))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("replay order %v, want %v", got, want)
	}
}
