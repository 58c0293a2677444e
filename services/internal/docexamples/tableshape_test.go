package docexamples_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flyballhq/flyball/services/internal/docexamples"
)

// cellCount is the number of cells of a markdown table line, as GitHub
// splits it: at every pipe that is not escaped (\|), a pipe inside a code
// span included, less the optional ones at either end.
func cellCount(line string) int {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	if strings.HasSuffix(line, "|") && !strings.HasSuffix(line, `\|`) {
		line = line[:len(line)-1]
	}
	n := 1
	for i := 0; i < len(line); i++ {
		switch line[i] {
		case '\\':
			i++
		case '|':
			n++
		}
	}
	return n
}

// raggedRows returns a line for each row of the markdown text raw (the
// file rel) whose cell count differs from its table's header, outside
// fenced code blocks.
func raggedRows(rel, raw string) []string {
	var (
		out    []string
		fenced bool
		header int // the header's cell count; 0 outside a table
		hline  int
	)
	for i, l := range strings.Split(raw, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced, header = !fenced, 0
			continue
		}
		if fenced || !strings.HasPrefix(l, "|") {
			header = 0
			continue
		}
		n := cellCount(l)
		if header == 0 {
			header, hline = n, i+1
			continue
		}
		if n != header {
			out = append(out, fmt.Sprintf("%s:%d: %d cells in a table whose header (line %d) has %d", rel, i+1, n, hline, header))
		}
	}
	return out
}

// TestDocTablesRowsMatchTheirHeader: every row of every table in the
// README and docs/ has as many cells as its header. A row with fewer
// renders blank cells; GitHub drops the cells of a row with more. The log
// table of docs/operations.md showed "ack not confirmed" with no "what to
// do" and its advice only in a dropped fourth cell of the row after it,
// and four benchmark reports ran their target verdicts on from the
// results table above them (no blank line, three without their header),
// so they rendered as rows of it, under its column names.
func TestDocTablesRowsMatchTheirHeader(t *testing.T) {
	t.Parallel()
	root := docexamples.Root(t)
	files, err := docexamples.DocFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	tables := 0
	for _, f := range files {
		raw, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		tables += len(docexamples.TablesIn(string(raw)))
		for _, r := range raggedRows(f, string(raw)) {
			t.Error(r)
		}
	}
	if tables < 30 {
		t.Fatalf("found %d tables, want at least 30: is the reader still finding them?", tables)
	}
}

func TestRaggedRows(t *testing.T) {
	t.Parallel()
	doc := "| a | b |\n|---|---|\n| `x\\|y` | z |\n| one |\n| 1 | 2 | 3 |\n\n```\n| not | a | table |\n```\n| c | d |\n|---|---|\n| e | f |\n"
	got := raggedRows("t.md", doc)
	want := []string{"t.md:4: 1 cells in a table whose header (line 1) has 2", "t.md:5: 3 cells in a table whose header (line 1) has 2"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("raggedRows = %q, want %q", got, want)
	}
}
