package docexamples_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/flyballhq/flyball/services/internal/docexamples"
)

// docs/benchmarks.md opens with "Where flyball stands": a count of the
// full runs that met each target, and "Every full run", one row per full
// run: the newest, in its Latest results, and every earlier one, in
// docs/benchmark-runs.md. Both are summaries a reader trusts without
// opening the runs, so these tests hold them to the runs' own target
// tables, in whichever file each run is.

const (
	benchmarksDoc = "docs/benchmarks.md"
	runsDoc       = "docs/benchmark-runs.md"
)

var (
	// A row's link to its run: #anchor in benchmarks.md, or
	// benchmark-runs.md#anchor.
	runLinkRE = regexp.MustCompile(`^\[[^\]]+\]\(((?:benchmark-runs\.md)?#[^)]+)\)$`)
	stressRE  = regexp.MustCompile(`at ([\d,]+) runs/s`)
	ofRE      = regexp.MustCompile(`^\d+ of (\d+)`)
)

// verdict is a target-table cell's figure and whether it says met:
// "+1.3 ms, met" is ("+1.3", true), "+8.0 ms, **not met**" ("+8.0",
// false).
func verdict(cell string) (figure string, met bool) {
	figure, rest, _ := strings.Cut(cell, ",")
	figure, _, _ = strings.Cut(strings.TrimSpace(figure), " ")
	return figure, strings.HasPrefix(strings.TrimSpace(rest), "met")
}

// summaryCell is an Every full run cell: bold when the target was not met.
func summaryCell(cell string) (figure string, met bool) {
	if f, ok := strings.CutPrefix(cell, "**"); ok {
		return strings.TrimSuffix(f, "**"), false
	}
	return cell, true
}

type benchRun struct {
	p99    []string // W1a–W1d cells of the p99 row
	stress string   // the runs/s Stress completed
	cpu    string   // the cheapest and dearest tier's CPU-ms per run: "0.277–0.543"
}

// cpuRange is the cheapest and dearest of a CPU row's tier cells, every
// tier that has one (W1a to Peak), as Every full run gives them.
func cpuRange(cells []string) (string, error) {
	lo, hi := "", ""
	var loV, hiV float64
	for _, cell := range cells {
		fig, _ := verdict(cell)
		if fig == "" {
			continue
		}
		v, err := strconv.ParseFloat(fig, 64)
		if err != nil {
			return "", fmt.Errorf("CPU cell %q: %w", cell, err)
		}
		if lo == "" || v < loV {
			lo, loV = fig, v
		}
		if hi == "" || v > hiV {
			hi, hiV = fig, v
		}
	}
	if lo == "" {
		return "", errors.New("no CPU figure")
	}
	return lo + "–" + hi, nil
}

// benchRuns adds to runs the runs among doc's tables that have a
// standard target table, by the link Every full run gives each: the
// anchor of its heading after linkPrefix ("" for benchmarks.md's own).
func benchRuns(t *testing.T, doc string, tables []docexamples.MDTable, linkPrefix string, runs map[string]benchRun) {
	t.Helper()
	found := 0
	for _, tb := range tables {
		if !strings.HasPrefix(tb.Header, "| target | W1a |") {
			continue
		}
		var r benchRun
		for _, row := range tb.Rows {
			switch {
			case strings.HasPrefix(row[0], "p99 over the floor"):
				r.p99 = row[1:5]
			case strings.HasPrefix(row[0], "CPU-s per 1,000 runs"):
				cpu, err := cpuRange(row[1:])
				if err != nil {
					t.Fatalf("%s: %q: %v", doc, tb.Heading, err)
				}
				r.cpu = cpu
			case row[0] == "0 missed, 0 duplicates":
				m := stressRE.FindStringSubmatch(row[5])
				if m == nil {
					t.Fatalf("%s: %q: Stress cell %q names no runs/s", doc, tb.Heading, row[5])
				}
				r.stress = m[1]
			}
		}
		if r.p99 == nil || r.stress == "" || r.cpu == "" {
			t.Fatalf("%s: %q: target table without the p99, the missed or the CPU row", doc, tb.Heading)
		}
		link := linkPrefix + "#" + docexamples.Anchor(tb.Heading)
		if _, dup := runs[link]; dup {
			t.Fatalf("%s: %q: two runs have the anchor %s", doc, tb.Heading, link)
		}
		runs[link] = r
		found++
	}
	if found == 0 {
		t.Fatalf("%s: no run's target table found", doc)
	}
}

func TestEveryFullRunIsSummarised(t *testing.T) {
	root := docexamples.Root(t)
	raw, err := os.ReadFile(filepath.Join(root, benchmarksDoc))
	if err != nil {
		t.Fatal(err)
	}
	// The newest run is in benchmarks.md, every earlier one in
	// benchmark-runs.md; a row must link to the file its run is in.
	runs := map[string]benchRun{}
	tables := docexamples.TablesIn(string(raw))
	benchRuns(t, benchmarksDoc, tables, "", runs)
	older, err := docexamples.Tables(root, runsDoc)
	if err != nil {
		t.Fatal(err)
	}
	benchRuns(t, runsDoc, older, "benchmark-runs.md", runs)
	rows, err := docexamples.FindTable(tables, benchmarksDoc, "| run (UTC) | commit | stack | W1a |")
	if err != nil {
		t.Fatal(err)
	}

	listed := map[string]bool{}
	met := make([]int, 4) // W1a–W1d
	for _, row := range rows {
		if len(row) != 11 {
			t.Fatalf("Every full run: row %q has %d cells, want 11", row[0], len(row))
		}
		m := runLinkRE.FindStringSubmatch(row[0])
		if m == nil {
			t.Fatalf("Every full run: %q does not link to its run", row[0])
		}
		link := m[1]
		if listed[link] {
			t.Errorf("Every full run: %s is listed twice", link)
		}
		listed[link] = true
		for i, cell := range row[3:7] {
			fig, ok := summaryCell(cell)
			if ok {
				met[i]++
			}
			run, found := runs[link]
			if !found {
				continue // an early run whose targets are a table of another shape
			}
			if want, wantOK := verdict(run.p99[i]); fig != want || ok != wantOK {
				t.Errorf("Every full run: %s W1%c is %q (met %v), its run says %q (met %v)", link, 'a'+i, cell, ok, want, wantOK)
			}
		}
		if run, found := runs[link]; found && row[8] != run.stress {
			t.Errorf("Every full run: %s Stress is %s runs/s, its run says %s", link, row[8], run.stress)
		}
		if run, found := runs[link]; found && row[7] != run.cpu {
			t.Errorf("Every full run: %s CPU-ms per run is %s, its run's cheapest and dearest tier say %s", link, row[7], run.cpu)
		}
	}
	for link := range runs {
		if !listed[link] {
			t.Errorf("Every full run: the run %s is not listed (or its row links to the other file)", link)
		}
	}

	// Where flyball stands counts the same rows, and quotes the newest:
	// the first row, whose run is this page's own Latest results.
	stands, err := docexamples.FindTable(tables, benchmarksDoc, "| target | full runs that met it |")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal("Every full run has no rows")
	}
	link := runLinkRE.FindStringSubmatch(rows[0][0])
	if link == nil {
		t.Fatalf("Every full run's first row starts %q, not a link to its run", rows[0][0])
	}
	newestLink := link[1]
	newest, ok := runs[newestLink]
	if !ok || !strings.HasPrefix(newestLink, "#") {
		t.Fatalf("Every full run: its first row links to %s, want the run in this page's Latest results", newestLink)
	}
	when := strings.TrimPrefix(strings.SplitN(rows[0][0], "]", 2)[0], "[")
	for _, tb := range tables {
		if strings.HasPrefix(tb.Header, "| target | full runs that met it |") && !strings.Contains(tb.Header, "| newest run ("+when+") |") {
			t.Errorf("Where flyball stands: header %q does not name the newest run, %s", tb.Header, when)
		}
	}
	for _, row := range stands {
		for i := range met {
			if strings.HasPrefix(row[0], fmt.Sprintf("W1%c p99", 'a'+i)) && row[2] != newest.p99[i] {
				t.Errorf("Where flyball stands: %s: the newest run's cell is %q, the run says %q", row[0], row[2], newest.p99[i])
			}
		}
		if strings.HasPrefix(row[0], "Stress:") && !strings.HasPrefix(row[2], newest.stress+" runs/s") {
			t.Errorf("Where flyball stands: Stress: the newest run's cell is %q, the run says %s runs/s", row[2], newest.stress)
		}
	}
	counted := 0
	for _, row := range stands {
		// Every count is out of the runs listed.
		if m := ofRE.FindStringSubmatch(row[1]); m == nil {
			t.Errorf("Where flyball stands: %s: %q is not \"N of M\"", row[0], row[1])
		} else if m[1] != strconv.Itoa(len(rows)) {
			t.Errorf("Where flyball stands: %s counts %q, but Every full run lists %d", row[0], row[1], len(rows))
		}
		for i := range met {
			if !strings.HasPrefix(row[0], fmt.Sprintf("W1%c p99", 'a'+i)) {
				continue
			}
			counted++
			if want := fmt.Sprintf("%d of %d", met[i], len(rows)); row[1] != want {
				t.Errorf("Where flyball stands: %s is %q, Every full run says %s", row[0], row[1], want)
			}
		}
	}
	if want := fmt.Sprintf("counts the %d full runs", len(rows)); !strings.Contains(string(raw), want) {
		t.Errorf("Where flyball stands: its text does not say it %s", want)
	}
	if counted != len(met) {
		t.Errorf("Where flyball stands: %d W1 lateness rows, want %d", counted, len(met))
	}
}

func TestVerdictCells(t *testing.T) {
	for _, c := range []struct {
		cell, fig string
		met       bool
	}{
		{"+1.3 ms, met", "+1.3", true},
		{"+8.0 ms, **not met**", "+8.0", false},
		{"+5.4 ms, **not met** (by 0.4 ms; the floor's p99 was 10.6 ms)", "+5.4", false},
		{"−32.4 ms, met", "−32.4", true},
	} {
		if fig, met := verdict(c.cell); fig != c.fig || met != c.met {
			t.Errorf("verdict(%q) = %q, %v; want %q, %v", c.cell, fig, met, c.fig, c.met)
		}
	}
	if fig, met := summaryCell("**+8.0**"); fig != "+8.0" || met {
		t.Errorf("summaryCell(**+8.0**) = %q, %v", fig, met)
	}
	if fig, met := summaryCell("−0.5"); fig != "−0.5" || !met {
		t.Errorf("summaryCell(−0.5) = %q, %v", fig, met)
	}
}
