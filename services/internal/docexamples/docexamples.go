// Package docexamples reads the examples in flyball's markdown docs, so
// tests can hold each one to the code that reads it: a JSON example
// preceded by a marker such as <!-- check:TaskSpec --> is decoded with the
// decoder of that kind, and every `nats pub` command is run through the
// governor's translation. It also reads the links between the docs
// (Links), so a test can hold each to a file and a heading that exist.
// The tests fail when the docs and the code drift.
package docexamples

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Block is one fenced code block.
type Block struct {
	File string // path relative to the repository root
	Line int    // 1-based line of the opening fence
	Lang string // the fence's info string: json, sh, ...
	// Kind is the marker's kind from a <!-- check:Kind --> line right
	// before the fence; empty without a marker.
	Kind string
	Body string
}

// Where names the block for test messages.
func (b Block) Where() string { return fmt.Sprintf("%s:%d", b.File, b.Line) }

var markerRE = regexp.MustCompile(`^<!-- check:([A-Za-z]+) -->$`)

// Root returns the repository root: the nearest directory at or above the
// working directory that holds go.work. It fails t without one.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.work above the working directory")
		}
		dir = parent
	}
}

// DocFiles returns the markdown files of flyball's docs, relative to
// root: the README, then docs/*.md.
func DocFiles(root string) ([]string, error) {
	files := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			return nil, err
		}
		files = append(files, rel)
	}
	return files, nil
}

// DecodeStrict decodes one JSON value into v as flyball's decoders do:
// unknown fields and trailing content are errors.
func DecodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing content after the JSON value")
	}
	return nil
}

// MoveLast returns xs with the elements last reports true for moved to the
// end, each group in its original order (the docs' delete commands, run
// after everything that needs the task).
func MoveLast[T any](xs []T, last func(T) bool) []T {
	out := make([]T, 0, len(xs))
	var tail []T
	for _, x := range xs {
		if last(x) {
			tail = append(tail, x)
		} else {
			out = append(out, x)
		}
	}
	return append(out, tail...)
}

// Blocks returns the fenced code blocks of the markdown file at rel, a
// path relative to root.
func Blocks(root, rel string) ([]Block, error) {
	f, err := os.Open(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		out    []Block
		cur    *Block
		body   strings.Builder
		marker string
		line   int
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line++
		text := sc.Text()
		switch {
		case cur != nil && strings.TrimSpace(text) == "```":
			cur.Body = body.String()
			out = append(out, *cur)
			cur, marker = nil, ""
		case cur != nil:
			body.WriteString(text)
			body.WriteByte('\n')
		case strings.HasPrefix(text, "```"):
			cur = &Block{File: rel, Line: line, Lang: strings.TrimSpace(text[3:]), Kind: marker}
			body.Reset()
		default:
			marker = ""
			if m := markerRE.FindStringSubmatch(strings.TrimSpace(text)); m != nil {
				marker = m[1]
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("%s: unterminated code block", cur.Where())
	}
	return out, nil
}

// InlineBlocks returns the inline code spans of the prose of each markdown
// file (outside fenced blocks) as one-line "sh" blocks of Kind "inline", so
// Commands reads
// the commands a runbook names in passing: `flyball dlq retry <seq>`. A
// span may wrap onto the next line. A placeholder such as <seq> or
// <kind>.<name> becomes the word x (x.x), and a span with an ellipsis
// (`flyball task …`), an expansion or a backslash is left out: it stands
// for commands rather than being one.
func InlineBlocks(root string, files ...string) ([]Block, error) {
	var out []Block
	for _, rel := range files {
		raw, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			return nil, err
		}
		// Blank out fenced blocks, keeping the line count.
		lines := strings.Split(string(raw), "\n")
		fenced := false
		for i, l := range lines {
			if strings.HasPrefix(strings.TrimSpace(l), "```") {
				fenced = !fenced
				lines[i] = ""
			} else if fenced {
				lines[i] = ""
			}
		}
		text := strings.Join(lines, "\n")
		for _, m := range inlineSpanRE.FindAllStringSubmatchIndex(text, -1) {
			span := strings.Join(strings.Fields(text[m[2]:m[3]]), " ")
			if strings.ContainsAny(span, "…$\\") {
				continue
			}
			span = placeholderRE.ReplaceAllString(span, "x")
			out = append(out, Block{File: rel, Line: 1 + strings.Count(text[:m[0]], "\n"), Lang: "sh", Kind: KindInline, Body: span + "\n"})
		}
	}
	return out, nil
}

// KindInline is the Kind of the blocks InlineBlocks returns.
const KindInline = "inline"

var (
	// inlineSpanRE is a single-backtick code span, on one line or wrapped
	// onto the next.
	inlineSpanRE  = regexp.MustCompile("`([^`\n]+(?:\n[^`\n]+)?)`")
	placeholderRE = regexp.MustCompile(`<[a-z][a-z ]*>`)
)

// MDTable is one markdown table.
type MDTable struct {
	Heading string     // the nearest heading above it, without the #s
	Header  string     // its header line
	Rows    [][]string // body rows, split into trimmed cells
}

// Tables returns every table of the markdown file at rel.
func Tables(root, rel string) ([]MDTable, error) {
	raw, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	return TablesIn(string(raw)), nil
}

// TablesIn returns every table of the markdown text raw, for a caller
// that also reads the text itself.
func TablesIn(raw string) []MDTable {
	var (
		out     []MDTable
		heading string
		cur     *MDTable
		skip    int // the separator line after a header
	)
	for _, l := range strings.Split(raw, "\n") {
		switch {
		case cur != nil && skip > 0:
			skip--
		case cur != nil && strings.HasPrefix(l, "|"):
			cells := strings.Split(strings.Trim(l, "|"), "|")
			for j := range cells {
				cells[j] = strings.TrimSpace(cells[j])
			}
			cur.Rows = append(cur.Rows, cells)
		case strings.HasPrefix(l, "|"):
			out = append(out, MDTable{Heading: heading, Header: l})
			cur, skip = &out[len(out)-1], 1
		default:
			cur = nil
			if strings.HasPrefix(l, "#") {
				heading = strings.TrimSpace(strings.TrimLeft(l, "#"))
			}
		}
	}
	return out
}

// Table returns the body rows of the first table in the file at rel whose
// header line starts with header.
func Table(root, rel, header string) ([][]string, error) {
	tables, err := Tables(root, rel)
	if err != nil {
		return nil, err
	}
	return FindTable(tables, rel, header)
}

// FindTable returns the body rows of the first of tables (those of the
// file rel) whose header line starts with header.
func FindTable(tables []MDTable, rel, header string) ([][]string, error) {
	for _, t := range tables {
		if strings.HasPrefix(t.Header, header) {
			if len(t.Rows) == 0 {
				return nil, fmt.Errorf("%s: table %q has no rows", rel, header)
			}
			return t.Rows, nil
		}
	}
	return nil, fmt.Errorf("%s has no table starting %q", rel, header)
}

// Command is one command line from a shell block.
type Command struct {
	Block Block
	Words []string
	// Expanded reports a shell variable among the words, read as "x".
	Expanded bool
}

// Commands returns the command lines of the shell blocks that start with
// one of names (after an optional "$ " prompt). It understands what the
// docs use: single- and double-quoted words (which may span lines), a
// backslash at the end of a line, and a comment, pipe, redirection, "&",
// "&&" or ";" ending the command. A shell variable ($name, ${name}, also
// inside double quotes) reads as the placeholder "x", and marks the
// command Expanded. A line it cannot read (any other "$" expansion, a
// backquote, an escape in double quotes, an unterminated quote) is an
// error, so an example cannot escape its check by being malformed.
func Commands(blocks []Block, names ...string) ([]Command, error) {
	var out []Command
	for _, b := range blocks {
		if b.Lang != "sh" && b.Lang != "bash" && b.Lang != "console" {
			continue
		}
		rest := b.Body
		for rest != "" {
			line := strings.TrimLeft(rest, " \t")
			line = strings.TrimPrefix(line, "$ ")
			first, _, _ := strings.Cut(line, " ")
			if !slices.Contains(names, first) {
				_, rest, _ = strings.Cut(rest, "\n")
				continue
			}
			words, n, expanded, err := shellWords(line)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", b.Where(), first, err)
			}
			out = append(out, Command{Block: b, Words: words, Expanded: expanded})
			rest = line[n:]
		}
	}
	return out, nil
}

// BlocksOf returns the fenced code blocks of each markdown file, in order.
func BlocksOf(root string, files ...string) ([]Block, error) {
	var all []Block
	for _, f := range files {
		b, err := Blocks(root, f)
		if err != nil {
			return nil, err
		}
		all = append(all, b...)
	}
	return all, nil
}

// Pub is one `nats pub` command from a shell block.
type Pub struct {
	Block   Block
	Words   []string // the command's words after "nats"
	Subject string
	Header  map[string][]string // from -H 'Name:value'
	Body    []byte
}

// Pubs returns every `nats pub` command in the shell blocks of blocks.
func Pubs(blocks []Block) ([]Pub, error) {
	cmds, err := Commands(blocks, "nats")
	if err != nil {
		return nil, err
	}
	var out []Pub
	for _, c := range cmds {
		if len(c.Words) < 2 || c.Words[1] != "pub" {
			continue
		}
		if c.Expanded {
			return nil, fmt.Errorf("%s: nats pub: a shell variable: this check publishes each example as written", c.Block.Where())
		}
		p, err := parsePub(c.Words[2:])
		if err != nil {
			return nil, fmt.Errorf("%s: nats pub: %w", c.Block.Where(), err)
		}
		p.Block, p.Words = c.Block, c.Words[1:]
		out = append(out, p)
	}
	return out, nil
}

func parsePub(words []string) (Pub, error) {
	p := Pub{Header: map[string][]string{}}
	var args []string
	for i := 0; i < len(words); i++ {
		switch w := words[i]; {
		case w == "-H" || w == "--header":
			if i+1 == len(words) {
				return Pub{}, errors.New("-H without a value")
			}
			i++
			name, value, ok := strings.Cut(words[i], ":")
			if !ok {
				return Pub{}, fmt.Errorf("header %q is not Name:value", words[i])
			}
			p.Header[name] = append(p.Header[name], value)
		case strings.HasPrefix(w, "-"):
			return Pub{}, fmt.Errorf("option %s is not understood by this check", w)
		default:
			args = append(args, w)
		}
	}
	if len(args) != 2 {
		return Pub{}, fmt.Errorf("want a subject and a body, got %d arguments", len(args))
	}
	p.Subject, p.Body = args[0], []byte(args[1])
	return p, nil
}

// shellWords splits one command off s and returns its words, the bytes
// it consumed (through the end of its line), and whether a shell
// variable was read as "x".
func shellWords(s string) (words []string, consumed int, expanded bool, err error) {
	var (
		word strings.Builder
		inW  bool
		done bool // the command ended; skip to the end of the line
	)
	flush := func() {
		if inW {
			words = append(words, word.String())
			word.Reset()
			inW = false
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if done {
			if c == '\n' {
				return words, i + 1, expanded, nil
			}
			continue
		}
		switch {
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, 0, false, errors.New("unterminated single quote")
			}
			word.WriteString(s[i+1 : i+1+end])
			inW = true
			i += end + 1
		case c == '"':
			end := strings.IndexByte(s[i+1:], '"')
			if end < 0 {
				return nil, 0, false, errors.New("unterminated double quote")
			}
			q := s[i+1 : i+1+end]
			if strings.ContainsAny(q, "`\\") {
				return nil, 0, false, fmt.Errorf("double-quoted %q: escapes and command substitutions are not understood by this check", q)
			}
			for j := 0; j < len(q); j++ {
				if q[j] != '$' {
					word.WriteByte(q[j])
					continue
				}
				n := variableLen(q[j:])
				if n == 0 {
					return nil, 0, false, fmt.Errorf("double-quoted %q: expansions other than $name are not understood by this check", q)
				}
				word.WriteByte('x')
				expanded = true
				j += n - 1
			}
			inW = true
			i += end + 1
		case c == '$':
			n := variableLen(s[i:])
			if n == 0 {
				return nil, 0, false, errors.New("'$': expansions other than $name are not understood by this check")
			}
			word.WriteByte('x')
			inW, expanded = true, true
			i += n - 1
		case c == '`':
			return nil, 0, false, errors.New("'`': command substitutions are not understood by this check")
		case c == '\\' && i+1 < len(s) && s[i+1] == '\n':
			flush()
			i++
		case c == '\n':
			flush()
			return words, i + 1, expanded, nil
		case (c == '#' && !inW) || c == '|' || c == '&' || c == ';' || c == '>' || c == '<':
			flush()
			done = true
		case c == ' ' || c == '\t':
			flush()
		default:
			word.WriteByte(c)
			inW = true
		}
	}
	flush()
	return words, len(s), expanded, nil
}

// variableLen is the length of the shell variable ($name or ${name}) s
// starts with, or 0 if it starts with another expansion.
func variableLen(s string) int {
	isName := func(b byte) bool {
		return b == '_' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9'
	}
	if strings.HasPrefix(s, "${") {
		end := strings.IndexByte(s, '}')
		if end < 3 {
			return 0
		}
		for i := 2; i < end; i++ {
			if !isName(s[i]) {
				return 0
			}
		}
		return end + 1
	}
	n := 1
	for n < len(s) && isName(s[n]) {
		n++
	}
	if n == 1 || '0' <= s[1] && s[1] <= '9' {
		return 0 // "$" alone, $?, $(…), or a positional $1
	}
	return n
}
