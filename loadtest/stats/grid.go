package stats

import (
	"strconv"
	"time"
)

// Arrival is one request a target received.
type Arrival struct {
	// At is when the target's handler saw the request (Unix ns).
	At int64 `json:"at"`
	// Task is the Flyball-Task header.
	Task string `json:"task"`
	// Scheduled is the Flyball-Scheduled-At header (Unix ns); zero when the
	// header was absent or unparseable.
	Scheduled int64 `json:"scheduled,omitempty"`
	// Key is the Idempotency-Key header.
	Key string `json:"key,omitempty"`
}

// Grid is the schedule the load generator asked for: task t runs at
// Anchors[t] + k·Interval for every k >= 0.
type Grid struct {
	Interval time.Duration
	// Anchors maps each task to its first slot (Unix ns).
	Anchors map[string]int64
}

// Window is the half-open range [From, To) of slot times (Unix ns) that a
// measurement covers. A run belongs to the window when its slot does, even
// if it arrives after To.
type Window struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// Duration is the window's length.
func (w Window) Duration() time.Duration { return time.Duration(w.To - w.From) }

// Report is what Analyze finds.
//
// Two independent checks run over the same arrivals. The header check
// attributes each arrival to the slot named by its Flyball-Scheduled-At
// header; the grid check ignores the headers and attributes each arrival to
// the grid slot it arrived in (with a small tolerance for early arrivals).
// A scheduler that sends the right headers but fires at the wrong times
// passes the first check and fails the second; one that fires on time but
// labels runs wrongly fails the first.
type Report struct {
	// Expected counts the grid slots inside the window, over every task.
	Expected int `json:"expected"`
	// Observed counts the arrivals attributed to a slot inside the window,
	// duplicates and off-grid arrivals included.
	Observed int `json:"observed"`
	// Completed counts the expected slots that an arrival named in its
	// Flyball-Scheduled-At header.
	Completed int `json:"completed"`
	// Missed is Expected - Completed.
	Missed int `json:"missed"`
	// Duplicates counts the arrivals that repeat a (task, slot) already
	// seen or an Idempotency-Key already seen.
	Duplicates int `json:"duplicates"`
	// KeyDuplicates counts the arrivals whose Idempotency-Key was seen
	// before (a subset of Duplicates).
	KeyDuplicates int `json:"keyDuplicates"`
	// OffGrid counts the arrivals whose header names a time that is not a
	// slot of the task's grid.
	OffGrid int `json:"offGrid"`
	// BadKey counts the arrivals whose Idempotency-Key is not
	// "<task>:<scheduled Unix ms>".
	BadKey int `json:"badKey"`
	// NoSchedule counts the arrivals without a usable Flyball-Scheduled-At.
	NoSchedule int `json:"noSchedule"`
	// Unknown counts the arrivals for tasks that are not in the grid.
	Unknown int `json:"unknown"`
	// GridCompleted, GridMissed and GridDuplicates are the grid check's
	// counterparts of Completed, Missed and Duplicates.
	GridCompleted  int `json:"gridCompleted"`
	GridMissed     int `json:"gridMissed"`
	GridDuplicates int `json:"gridDuplicates"`
	// Lateness is arrival - Flyball-Scheduled-At over the attributed
	// arrivals (arrival - grid slot for those without the header).
	Lateness Summary `json:"lateness"`
	// GridLateness is arrival - grid slot from the grid check.
	GridLateness Summary `json:"gridLateness"`
}

type slotKey struct {
	task string
	slot int64
}

// ExpectedSlots counts the slots anchor + k·interval (k >= 0) inside w.
func ExpectedSlots(anchor int64, interval time.Duration, w Window) int {
	iv := int64(interval)
	if iv <= 0 || w.To <= w.From {
		return 0
	}
	first := max(ceilDiv(w.From-anchor, iv), 0)
	last := ceilDiv(w.To-anchor, iv) - 1
	if last < first {
		return 0
	}
	return int(last - first + 1)
}

// ceilDiv is ⌈a/b⌉ for b > 0 and any sign of a.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a > 0 {
		q++
	}
	return q
}

// floorDiv is ⌊a/b⌋ for b > 0 and any sign of a.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// earlyTolerance is how early an arrival may come and still count for the
// grid slot it precedes: a tenth of the interval, at most 100ms.
func earlyTolerance(interval time.Duration) int64 {
	return int64(min(interval/10, 100*time.Millisecond))
}

// offGridTolerance absorbs rounding in schedulers that keep times in
// milliseconds.
const offGridTolerance = int64(time.Millisecond)

// Analyze checks arrivals against the grid over the window.
func Analyze(arrivals []Arrival, g Grid, w Window) Report {
	var r Report
	iv := int64(g.Interval)
	if iv <= 0 {
		return r
	}
	for _, a := range g.Anchors {
		r.Expected += ExpectedSlots(a, g.Interval, w)
	}
	tol := earlyTolerance(g.Interval)
	inWindow := func(slot int64) bool { return slot >= w.From && slot < w.To }

	bySlot := make(map[slotKey]int, r.Expected)
	byGrid := make(map[slotKey]int, r.Expected)
	keys := make(map[string]struct{}, r.Expected)
	var late, gridLate []time.Duration
	for i := range arrivals {
		a := &arrivals[i]
		anchor, known := g.Anchors[a.Task]
		if !known {
			if a.Scheduled != 0 && inWindow(a.Scheduled) || a.Scheduled == 0 && inWindow(a.At) {
				r.Unknown++
			}
			continue
		}
		// Grid check: arrival time only.
		k := floorDiv(a.At-anchor+tol, iv)
		gslot := anchor + k*iv
		if k >= 0 && inWindow(gslot) {
			gk := slotKey{a.Task, gslot}
			if byGrid[gk] == 0 {
				r.GridCompleted++
			} else {
				r.GridDuplicates++
			}
			byGrid[gk]++
			gridLate = append(gridLate, time.Duration(a.At-gslot))
		}
		// Header check.
		slot := a.Scheduled
		if slot == 0 {
			slot = gslot
		}
		if !inWindow(slot) {
			continue
		}
		r.Observed++
		if a.Scheduled == 0 {
			r.NoSchedule++
		} else {
			late = append(late, time.Duration(a.At-a.Scheduled))
		}
		dup := false
		if a.Key != "" {
			if _, seen := keys[a.Key]; seen {
				r.KeyDuplicates++
				dup = true
			}
			keys[a.Key] = struct{}{}
		}
		if a.Scheduled == 0 {
			late = append(late, time.Duration(a.At-gslot))
			if dup {
				r.Duplicates++
			}
			continue
		}
		if a.Key != a.Task+":"+strconv.FormatInt(a.Scheduled/int64(time.Millisecond), 10) {
			r.BadKey++
		}
		off := (a.Scheduled - anchor) % iv
		if off < 0 {
			off += iv
		}
		onGrid := a.Scheduled >= anchor && (off <= offGridTolerance || iv-off <= offGridTolerance)
		if !onGrid {
			r.OffGrid++
			if dup {
				r.Duplicates++
			}
			continue
		}
		// Snap to the exact slot so millisecond rounding still matches.
		exact := anchor + floorDiv(a.Scheduled-anchor+offGridTolerance, iv)*iv
		sk := slotKey{a.Task, exact}
		if bySlot[sk] == 0 {
			r.Completed++
		} else {
			dup = true
		}
		bySlot[sk]++
		if dup {
			r.Duplicates++
		}
	}
	r.Missed = r.Expected - r.Completed
	r.GridMissed = r.Expected - r.GridCompleted
	r.Lateness = Summarize(late)
	r.GridLateness = Summarize(gridLate)
	return r
}
