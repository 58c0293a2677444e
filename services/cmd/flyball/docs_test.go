package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/flyballhq/flyball/services/internal/docexamples"
)

// docFiles are the markdown files whose shell examples name flyball
// commands.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files, err := docexamples.DocFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// docBlocks returns the repository root and the code blocks of the README
// and docs/*.md.
func docBlocks(t *testing.T) (string, []docexamples.Block) {
	t.Helper()
	root := docexamples.Root(t)
	blocks, err := docexamples.BlocksOf(root, docFiles(t, root)...)
	if err != nil {
		t.Fatal(err)
	}
	return root, blocks
}

// docCommandBlocks is docBlocks and the inline code spans of the same
// files' prose, where runbooks name commands in passing.
func docCommandBlocks(t *testing.T) []docexamples.Block {
	t.Helper()
	root, blocks := docBlocks(t)
	inline, err := docexamples.InlineBlocks(root, docFiles(t, root)...)
	if err != nil {
		t.Fatal(err)
	}
	return append(blocks, inline...)
}

// TestDocsCommandLinesParse: every flyball command line in the README and
// docs/, in a code block or inline in the prose, names a real subcommand, with flags it has and values of the right
// type, and the positional arguments it accepts. Running it is left to the
// CLI tests; this catches a renamed flag or command the docs still use.
// Prose often names a command without its arguments (`flyball runs`), so
// an inline span's positional arguments are not counted.
func TestDocsCommandLinesParse(t *testing.T) {
	t.Parallel()
	cmds, err := docexamples.Commands(docCommandBlocks(t), "flyball", "bin/flyball", "docker-compose")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, c := range cmds {
		args := c.Words[1:]
		if c.Words[0] == "docker-compose" {
			// docker-compose … run --rm cli <flyball arguments>
			i := slices.Index(c.Words, "cli")
			if !slices.Contains(c.Words, "run") || i < 0 {
				continue
			}
			args = c.Words[i+1:]
		}
		if err := parseCommandLine(args, c.Block.Kind != docexamples.KindInline); err != nil {
			t.Errorf("%s: flyball %s: %v", c.Block.Where(), strings.Join(args, " "), err)
		}
		checked++
	}
	if checked < 40 {
		t.Fatalf("checked %d flyball command lines, want at least 40: is the parser still finding them?", checked)
	}
}

// parseCommandLine resolves args to a subcommand and parses its flags and
// positional arguments (unless !positional), without running it.
func parseCommandLine(args []string, positional bool) error {
	root := newRoot()
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if cmd == root && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return errUnknownCommand(args[0])
	}
	if err := cmd.ParseFlags(rest); err != nil && !errors.Is(err, pflag.ErrHelp) {
		return err
	}
	if !positional {
		return nil
	}
	pos := cmd.Flags().Args()
	if err := cmd.ValidateArgs(pos); err != nil {
		return err
	}
	if len(cmd.ValidArgs) > 0 {
		for _, a := range pos {
			if !slices.Contains(cmd.ValidArgs, a) {
				return errInvalidArg{a, cmd.ValidArgs}
			}
		}
	}
	return nil
}

type errUnknownCommand string

func (e errUnknownCommand) Error() string { return "unknown command " + string(e) }

type errInvalidArg struct {
	arg   string
	valid []string
}

func (e errInvalidArg) Error() string {
	return "argument " + e.arg + " is not one of " + strings.Join(e.valid, ", ")
}

// TestDocsTaskFilesAreValid: the task files the docs show (a YAML block
// whose first line names a .yaml or .json file) and the compose examples
// are read by `flyball task create -f` without a complaint.
func TestDocsTaskFilesAreValid(t *testing.T) {
	t.Parallel()
	root, blocks := docBlocks(t)
	checked := 0
	for _, b := range blocks {
		first, _, _ := strings.Cut(b.Body, "\n")
		if b.Lang != "yaml" || !strings.HasPrefix(first, "# ") || !strings.HasSuffix(first, ".yaml") {
			continue
		}
		if _, err := readSpec("-", strings.NewReader(b.Body)); err != nil {
			t.Errorf("%s: %s: %v", b.Where(), strings.TrimPrefix(first, "# "), err)
		}
		checked++
	}
	examples, err := filepath.Glob(filepath.Join(root, "deploy", "compose", "examples", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range examples {
		b, err := os.ReadFile(e)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := readSpec("-", strings.NewReader(string(b))); err != nil {
			t.Errorf("%s: %v", e, err)
		}
		checked++
	}
	if checked < 2 {
		t.Fatalf("checked %d task files, want at least 2 (docs/operations.md's and the compose demo)", checked)
	}
}

// TestDocsFlagsExist: every `--flag` the README and docs/ name (outside
// docs/benchmarks.md, docs/benchmark-runs.md and
// docs/benchmark-findings.md, which document flyball-bench) is a flag of
// some flyball command.
func TestDocsFlagsExist(t *testing.T) {
	t.Parallel()
	root := docexamples.Root(t)
	flags := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) { flags[f.Name] = true })
		c.PersistentFlags().VisitAll(func(f *pflag.Flag) { flags[f.Name] = true })
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot())
	flagRE := regexp.MustCompile("`--([a-z][a-z0-9-]*)")
	seen := 0
	for _, f := range docFiles(t, root) {
		switch f {
		case filepath.Join("docs", "benchmarks.md"), filepath.Join("docs", "benchmark-runs.md"), filepath.Join("docs", "benchmark-findings.md"):
			continue
		}
		raw, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range flagRE.FindAllStringSubmatch(string(raw), -1) {
			seen++
			if !flags[m[1]] {
				t.Errorf("%s names --%s, which no flyball command has", f, m[1])
			}
		}
	}
	if seen < 20 {
		t.Fatalf("found %d flag mentions, want at least 20", seen)
	}
}

// TestDocsNameEveryEnvironmentVariable: every environment variable a
// flyball flag reads (its usage says "env NAME") is in docs/operations.md,
// "Configuration from the environment". FLYBALL_LOG_LEVEL,
// FLYBALL_METRICS_ADDR and four more were read, and named only by --help.
func TestDocsNameEveryEnvironmentVariable(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(docexamples.Root(t), "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	envRE := regexp.MustCompile(`env ((?:FLYBALL|NATS)_[A-Z_]+)`)
	seen := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			for _, m := range envRE.FindAllStringSubmatch(f.Usage, -1) {
				if !seen[m[1]] && !strings.Contains(doc, "`"+m[1]+"`") {
					t.Errorf("--%s of flyball %s reads %s, which docs/operations.md does not name", f.Name, c.Name(), m[1])
				}
				seen[m[1]] = true
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot())
	if len(seen) < 15 {
		t.Fatalf("found %d variables in the flags' usages, want at least 15", len(seen))
	}
}

// TestDocsComposeCommandsNameTheProject: every docker-compose (or docker
// compose) command of the README, docs/ and the compose files' comments
// that acts on the running stack names its project (-p) and its files
// (-f), as `make up` starts it. Without -p, compose takes the project name
// from the first file's directory, "compose", not make's "flyball": `run
// --rm cli` started a container on a new, empty network that could not
// resolve nats, `logs provision` showed nothing, and `up provision` would
// start a second NATS cluster. Without -f, compose looks for a file in the
// current directory, and the repository root has none.
func TestDocsComposeCommandsNameTheProject(t *testing.T) {
	t.Parallel()
	blocks := docCommandBlocks(t)
	root := docexamples.Root(t)
	composeFiles, err := filepath.Glob(filepath.Join(root, "deploy", "compose", "docker-compose*.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range composeFiles {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		for i, l := range strings.Split(string(raw), "\n") {
			if c, ok := strings.CutPrefix(strings.TrimSpace(l), "#"); ok {
				blocks = append(blocks, docexamples.Block{File: rel, Line: i + 1, Body: strings.Trim(c, " `") + "\n"})
			}
		}
	}
	acting := map[string]bool{"up": true, "run": true, "logs": true, "stop": true, "start": true, "exec": true, "ps": true, "kill": true, "restart": true, "down": true}
	composeRE := regexp.MustCompile("(?:docker-compose|docker compose)((?: [^ ;&|)`]+)+)")
	seen := 0
	for _, b := range blocks {
		for _, m := range composeRE.FindAllStringSubmatch(b.Body, -1) {
			words := strings.Fields(m[1])
			var flags []string
			sub := ""
			for i := 0; i < len(words); i++ {
				w := words[i]
				if !strings.HasPrefix(w, "-") {
					sub = w
					break
				}
				flags = append(flags, w)
				if w == "-p" || w == "-f" || w == "--profile" {
					i++ // its value
				}
			}
			if !acting[sub] {
				continue // prose naming compose, or version, config, ...
			}
			seen++
			if !slices.Contains(flags, "-p") || !slices.Contains(flags, "-f") {
				t.Errorf("%s: %q: give -p <project> and -f <file>, as make up does (docker-compose -p flyball -f deploy/compose/docker-compose.yml %s)", b.Where(), strings.TrimSpace(m[0]), sub)
			}
		}
	}
	if seen < 5 {
		t.Fatalf("found %d compose commands, want at least 5", seen)
	}
}
