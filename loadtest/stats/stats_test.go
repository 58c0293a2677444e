package stats_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/flyballhq/flyball/loadtest/stats"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestPercentile(t *testing.T) {
	t.Parallel()
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = ms(i + 1) // 1ms..100ms
	}
	thousand := make([]time.Duration, 1000)
	for i := range thousand {
		thousand[i] = ms(i + 1)
	}
	tests := []struct {
		name  string
		given []time.Duration
		p     float64
		want  time.Duration
	}{
		{name: "empty", given: nil, p: 0.5, want: 0},
		{name: "single", given: []time.Duration{ms(7)}, p: 0.99, want: ms(7)},
		{name: "p0 is the minimum", given: hundred, p: 0, want: ms(1)},
		{name: "p50 of 1..100", given: hundred, p: 0.50, want: ms(50)},
		{name: "p99 of 1..100", given: hundred, p: 0.99, want: ms(99)},
		{name: "p99.9 of 1..100 is the maximum", given: hundred, p: 0.999, want: ms(100)},
		{name: "p100 is the maximum", given: hundred, p: 1, want: ms(100)},
		{name: "p99 of 1..1000", given: thousand, p: 0.99, want: ms(990)},
		{name: "p99.9 of 1..1000", given: thousand, p: 0.999, want: ms(999)},
		{name: "two values p50 takes the lower", given: []time.Duration{ms(1), ms(9)}, p: 0.5, want: ms(1)},
		{name: "two values p51 takes the upper", given: []time.Duration{ms(1), ms(9)}, p: 0.51, want: ms(9)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := stats.Percentile(tt.given, tt.p); got != tt.want {
				t.Errorf("Percentile(p=%v) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
}

func TestSummarizeSortsAndSummarizes(t *testing.T) {
	t.Parallel()
	ds := make([]time.Duration, 1000)
	for i := range ds {
		ds[i] = ms(i + 1)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
	got := stats.Summarize(ds)
	want := stats.Summary{
		Count: 1000, Min: ms(1), Mean: 500500 * time.Microsecond,
		P50: ms(500), P90: ms(900), P99: ms(990), P999: ms(999), Max: ms(1000),
	}
	if got != want {
		t.Errorf("Summarize = %+v\nwant        %+v", got, want)
	}
	if z := stats.Summarize(nil); z != (stats.Summary{}) {
		t.Errorf("Summarize(nil) = %+v, want zero", z)
	}
}

func TestExpectedSlots(t *testing.T) {
	t.Parallel()
	s := int64(time.Second)
	tests := []struct {
		name     string
		anchor   int64
		interval time.Duration
		w        stats.Window
		want     int
	}{
		{name: "whole seconds, window on slot edges", anchor: 0, interval: time.Second, w: stats.Window{From: 10 * s, To: 70 * s}, want: 60},
		{name: "half-interval offset window", anchor: 0, interval: time.Second, w: stats.Window{From: 9*s + s/2, To: 69*s + s/2}, want: 60},
		{name: "window before the anchor", anchor: 100 * s, interval: time.Second, w: stats.Window{From: 0, To: 50 * s}, want: 0},
		{name: "anchor inside the window", anchor: 5 * s, interval: 10 * time.Second, w: stats.Window{From: 0, To: 60 * s}, want: 6},
		{name: "one slot of a long interval", anchor: 0, interval: time.Minute, w: stats.Window{From: 30 * s, To: 90 * s}, want: 1},
		{name: "negative anchor", anchor: -5 * s, interval: 10 * time.Second, w: stats.Window{From: 0, To: 30 * s}, want: 3},
		{name: "empty window", anchor: 0, interval: time.Second, w: stats.Window{From: 5 * s, To: 5 * s}, want: 0},
		{name: "zero interval", anchor: 0, interval: 0, w: stats.Window{From: 0, To: 5 * s}, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := stats.ExpectedSlots(tt.anchor, tt.interval, tt.w); got != tt.want {
				t.Errorf("ExpectedSlots = %d, want %d", got, tt.want)
			}
		})
	}
}

// base anchors the synthetic grids: a zero Scheduled means "no header".
const base = int64(1000 * time.Second)

// synthetic builds a perfect run of tasks on a 1s grid anchored at base,
// each arriving late by lateness(task, slot), for slots 0..slots-1.
func synthetic(tasks, slots int, lateness func(task, slot int) time.Duration) ([]stats.Arrival, stats.Grid) {
	g := stats.Grid{Interval: time.Second, Anchors: map[string]int64{}}
	var out []stats.Arrival
	for i := range tasks {
		id := fmt.Sprintf("t%d", i)
		g.Anchors[id] = base
		for k := range slots {
			out = append(out, arrival(id, base+int64(k)*int64(time.Second), lateness(i, k)))
		}
	}
	return out, g
}

func arrival(task string, slot int64, late time.Duration) stats.Arrival {
	return stats.Arrival{
		At: slot + int64(late), Task: task, Scheduled: slot,
		Key: fmt.Sprintf("%s:%d", task, slot/int64(time.Millisecond)),
	}
}

func constLate(d time.Duration) func(int, int) time.Duration {
	return func(int, int) time.Duration { return d }
}

func TestAnalyze(t *testing.T) {
	t.Parallel()
	s := int64(time.Second)
	// Slots 2..7 of a 10-slot run: the window is offset by half an interval.
	w := stats.Window{From: base + 2*s - s/2, To: base + 8*s - s/2}

	type want struct {
		expected, observed, completed, missed, dups, keyDups int
		offGrid, badKey, noSchedule, unknown                 int
		gridCompleted, gridMissed, gridDups                  int
		p50, max                                             time.Duration
	}
	tests := []struct {
		name  string
		given func() ([]stats.Arrival, stats.Grid)
		want  want
	}{
		{
			name:  "perfect run",
			given: func() ([]stats.Arrival, stats.Grid) { return synthetic(3, 10, constLate(ms(4))) },
			want: want{
				expected: 18, observed: 18, completed: 18,
				gridCompleted: 18, p50: ms(4), max: ms(4),
			},
		},
		{
			name: "a missing arrival is missed by both checks",
			given: func() ([]stats.Arrival, stats.Grid) {
				a, g := synthetic(3, 10, constLate(ms(4)))
				return drop(a, "t1", base+5*s), g
			},
			want: want{
				expected: 18, observed: 17, completed: 17, missed: 1,
				gridCompleted: 17, gridMissed: 1, p50: ms(4), max: ms(4),
			},
		},
		{
			name: "the same key twice is a duplicate for both checks",
			given: func() ([]stats.Arrival, stats.Grid) {
				a, g := synthetic(3, 10, constLate(ms(4)))
				return append(a, arrival("t0", base+3*s, ms(20))), g
			},
			want: want{
				expected: 18, observed: 19, completed: 18, dups: 1, keyDups: 1,
				gridCompleted: 18, gridDups: 1, p50: ms(4), max: ms(20),
			},
		},
		{
			name: "two arrivals in one slot with different keys: a duplicate, not a key duplicate",
			given: func() ([]stats.Arrival, stats.Grid) {
				a, g := synthetic(1, 10, constLate(ms(4)))
				extra := arrival("t0", base+3*s, ms(9))
				extra.Key = "t0:other"
				return append(a, extra), g
			},
			want: want{
				expected: 6, observed: 7, completed: 6, dups: 1, badKey: 1,
				gridCompleted: 6, gridDups: 1, p50: ms(4), max: ms(9),
			},
		},
		{
			name: "a run that says it is on time but arrives a slot late fails only the grid check",
			given: func() ([]stats.Arrival, stats.Grid) {
				a, g := synthetic(1, 10, func(_, k int) time.Duration {
					if k == 4 {
						return ms(1000 + 4) // arrives in slot 5's window
					}
					return ms(4)
				})
				return a, g
			},
			want: want{
				expected: 6, observed: 6, completed: 6,
				gridCompleted: 5, gridMissed: 1, gridDups: 1, p50: ms(4), max: ms(1004),
			},
		},
		{
			name: "an off-grid schedule completes nothing",
			given: func() ([]stats.Arrival, stats.Grid) {
				a, g := synthetic(1, 10, constLate(ms(4)))
				for i := range a {
					if a[i].Scheduled == base+3*s {
						a[i].Scheduled += int64(ms(300))
						a[i].At += int64(ms(300))
						a[i].Key = fmt.Sprintf("t0:%d", a[i].Scheduled/int64(time.Millisecond))
					}
				}
				return a, g
			},
			want: want{
				expected: 6, observed: 6, completed: 5, missed: 1, offGrid: 1,
				gridCompleted: 6, p50: ms(4), max: ms(4),
			},
		},
		{
			name: "millisecond rounding of the header stays on the grid",
			given: func() ([]stats.Arrival, stats.Grid) {
				g := stats.Grid{Interval: time.Second, Anchors: map[string]int64{"t0": base + 123_456_789}}
				var a []stats.Arrival
				for k := range int64(10) {
					slot := base + 123_456_789 + k*s
					x := arrival("t0", slot, ms(2))
					x.Scheduled = slot / int64(time.Millisecond) * int64(time.Millisecond) // truncated to ms
					a = append(a, x)
				}
				return a, g
			},
			want: want{
				expected: 6, observed: 6, completed: 6,
				gridCompleted: 6, p50: ms(2) + 456_789, max: ms(2) + 456_789,
			},
		},
		{
			name: "arrivals without headers are attributed by time",
			given: func() ([]stats.Arrival, stats.Grid) {
				a, g := synthetic(1, 10, constLate(ms(7)))
				for i := range a {
					a[i].Scheduled, a[i].Key = 0, ""
				}
				return a, g
			},
			want: want{
				expected: 6, observed: 6, completed: 0, missed: 6, noSchedule: 6,
				gridCompleted: 6, p50: ms(7), max: ms(7),
			},
		},
		{
			name: "an unknown task is counted and ignored",
			given: func() ([]stats.Arrival, stats.Grid) {
				a, g := synthetic(1, 10, constLate(ms(4)))
				return append(a, arrival("stranger", base+3*s, ms(1))), g
			},
			want: want{
				expected: 6, observed: 6, completed: 6, unknown: 1,
				gridCompleted: 6, p50: ms(4), max: ms(4),
			},
		},
		{
			name: "arrivals outside the window are ignored",
			given: func() ([]stats.Arrival, stats.Grid) {
				return synthetic(2, 30, constLate(ms(3)))
			},
			want: want{
				expected: 12, observed: 12, completed: 12,
				gridCompleted: 12, p50: ms(3), max: ms(3),
			},
		},
		{
			name: "a slightly early arrival still counts for its slot",
			given: func() ([]stats.Arrival, stats.Grid) {
				return synthetic(1, 10, constLate(-ms(2)))
			},
			want: want{
				expected: 6, observed: 6, completed: 6,
				gridCompleted: 6, p50: -ms(2), max: -ms(2),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			arr, g := tt.given()
			r := stats.Analyze(arr, g, w)
			got := want{
				expected: r.Expected, observed: r.Observed, completed: r.Completed, missed: r.Missed,
				dups: r.Duplicates, keyDups: r.KeyDuplicates, offGrid: r.OffGrid, badKey: r.BadKey,
				noSchedule: r.NoSchedule, unknown: r.Unknown,
				gridCompleted: r.GridCompleted, gridMissed: r.GridMissed, gridDups: r.GridDuplicates,
				p50: r.Lateness.P50, max: r.Lateness.Max,
			}
			if got != tt.want {
				t.Errorf("Analyze:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestAnalyzeLatenessPercentiles(t *testing.T) {
	t.Parallel()
	// 1000 tasks, one slot in the window each; task i is i/2 ms late.
	arr, g := synthetic(1000, 3, func(task, _ int) time.Duration { return ms(task) / 2 })
	s := int64(time.Second)
	r := stats.Analyze(arr, g, stats.Window{From: base + s - s/2, To: base + 2*s - s/2})
	if r.Expected != 1000 || r.Completed != 1000 {
		t.Fatalf("expected/completed = %d/%d, want 1000/1000", r.Expected, r.Completed)
	}
	l := r.Lateness
	if l.P50 != ms(499)/2 || l.P99 != ms(989)/2 || l.P999 != ms(998)/2 || l.Max != ms(999)/2 {
		t.Errorf("lateness = %+v, want p50 249.5ms p99 494.5ms p99.9 499ms max 499.5ms", l)
	}
	if r.GridLateness != r.Lateness {
		t.Errorf("grid lateness %+v differs from header lateness %+v on a clean run", r.GridLateness, r.Lateness)
	}
}

func drop(a []stats.Arrival, task string, slot int64) []stats.Arrival {
	out := a[:0:0]
	for _, x := range a {
		if x.Task == task && x.Scheduled == slot {
			continue
		}
		out = append(out, x)
	}
	return out
}
