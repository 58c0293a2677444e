package docexamples_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flyballhq/flyball/services/internal/docexamples"
)

// brokenLinks returns a line for every relative link in files (relative
// to root) whose file does not exist, or whose #anchor no heading of the
// target markdown file defines, and how many relative links it checked.
func brokenLinks(t *testing.T, root string, files []string) (broken []string, checked int) {
	t.Helper()
	anchors := map[string]map[string]bool{}
	var links []docexamples.Link
	for _, rel := range files {
		l, a, err := docexamples.Links(root, rel)
		if err != nil {
			t.Fatal(err)
		}
		links, anchors[filepath.Clean(rel)] = append(links, l...), a
	}
	for _, l := range links {
		if strings.Contains(l.Target, "://") || strings.HasPrefix(l.Target, "mailto:") {
			continue
		}
		checked++
		path, anchor, _ := strings.Cut(l.Target, "#")
		target := filepath.Clean(l.File)
		if path != "" {
			target = filepath.Join(filepath.Dir(l.File), path)
			if _, err := os.Stat(filepath.Join(root, target)); err != nil {
				broken = append(broken, l.Where()+": "+l.Target+": no such file")
				continue
			}
		}
		if anchor == "" || !strings.HasSuffix(target, ".md") {
			continue
		}
		a, ok := anchors[target]
		if !ok {
			_, a, _ = docexamples.Links(root, target)
			anchors[target] = a
		}
		if !a[anchor] {
			broken = append(broken, l.Where()+": "+l.Target+": no heading has this anchor")
		}
	}
	return broken, checked
}

// TestDocLinksResolve: every link between flyball's docs names a file
// that exists and, with an #anchor, a heading of that file, as GitHub
// renders it. An operator following a runbook's link at 3 a.m. lands
// where it says.
func TestDocLinksResolve(t *testing.T) {
	root := docexamples.Root(t)
	files, err := docexamples.DocFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "CHANGELOG.md")
	if len(files) < 8 {
		t.Fatalf("read %v; want the README, the changelog and docs/*.md", files)
	}
	broken, checked := brokenLinks(t, root, files)
	for _, b := range broken {
		t.Error(b)
	}
	t.Logf("%d relative links in %d files", checked, len(files))
	if checked < 100 {
		t.Errorf("checked %d relative links; the docs hold hundreds, so the reader missed some", checked)
	}
}

// TestBrokenLinksAreFound: the check reports a missing file and a missing
// anchor, and follows GitHub's anchors (markup dropped, repeats numbered),
// ignoring links inside code.
func TestBrokenLinksAreFound(t *testing.T) {
	root := t.TempDir()
	write := func(rel, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, rel), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/b.md", "# B\n\n## flyball-breakers (`executor.BreakerRecord`)\n\n## Same\n\n## Same\n\n### 43. A failover takes about 6 s (measured)\n")
	write("docs/a.md", strings.Join([]string{
		"# A",
		"[ok](b.md#flyball-breakers-executorbreakerrecord) [ok](b.md#same-1) [ok](b.md#43-a-failover-takes-about-6-s-measured)",
		"[ok](#a) [ok](https://example.com/x#y) [ok](../docs/b.md)",
		"[bad](b.md#flyball-breakers) [bad](c.md) [bad](#nowhere) [bad](b.md#same-2)",
		"`[in code](nowhere.md)`",
		"```",
		"[in a block](nowhere.md)",
		"```",
	}, "\n"))
	got, checked := brokenLinks(t, root, []string{"docs/a.md"})
	if checked != 9 {
		t.Errorf("checked %d relative links, want 9", checked)
	}
	want := []string{
		"docs/a.md:4: b.md#flyball-breakers: no heading has this anchor",
		"docs/a.md:4: c.md: no such file",
		"docs/a.md:4: #nowhere: no heading has this anchor",
		"docs/a.md:4: b.md#same-2: no heading has this anchor",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("broken links:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
