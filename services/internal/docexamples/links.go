package docexamples

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// Link is one markdown link in prose: [text](Target).
type Link struct {
	File   string // the file it is in, relative to the repository root
	Line   int    // 1-based
	Target string // as written: a URL, a path, a path#anchor or #anchor
}

// Where names the link for test messages.
func (l Link) Where() string { return fmt.Sprintf("%s:%d", l.File, l.Line) }

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	codeRE    = regexp.MustCompile("`[^`]*`")
	inlineRE  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// Links returns the links of the markdown file at rel (relative to root),
// outside fenced code blocks and inline code spans, and the anchors its
// headings define, as GitHub renders them.
func Links(root, rel string) (links []Link, anchors map[string]bool, err error) {
	f, err := os.Open(filepath.Join(root, rel))
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	anchors = map[string]bool{}
	seen := map[string]int{}
	fenced := false
	line := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line++
		text := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(text), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if m := headingRE.FindStringSubmatch(text); m != nil {
			a := Anchor(m[1])
			if n := seen[a]; n > 0 {
				anchors[fmt.Sprintf("%s-%d", a, n)] = true
			} else {
				anchors[a] = true
			}
			seen[a]++
		}
		for _, m := range linkRE.FindAllStringSubmatch(codeRE.ReplaceAllString(text, ""), -1) {
			links = append(links, Link{File: rel, Line: line, Target: m[1]})
		}
	}
	return links, anchors, sc.Err()
}

// Anchor is the anchor GitHub gives a heading: its text without markup,
// lower-cased, with every character but letters, digits, spaces, hyphens
// and underscores dropped, and spaces turned into hyphens. A repeated
// heading gets -1, -2, … (Links).
func Anchor(heading string) string {
	h := inlineRE.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
