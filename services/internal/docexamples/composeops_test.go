package docexamples_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/flyballhq/flyball/services/internal/docexamples"
)

// provisionCmd matches a compose command that runs the provision service:
// `docker-compose … up provision`, `docker compose … run --rm provision`,
// across line breaks.
var provisionCmd = regexp.MustCompile(`(docker-compose|docker compose|\$\(compose\))\s[^` + "`" + `;|&]*?\b(up|run)\b[^` + "`" + `;|&]*?\sprovision\b`)

// TestDocsRunProvisionAloneWithoutItsDependencies: provision depends_on
// nats1-3, and `up provision` brings its dependencies up to date first, so
// after `make images` (the NATS image carries bin/flyball, so it always
// changes) it recreated the three NATS nodes at once, mid-upgrade; run
// with the base file alone it brought a TLS or official-nats stack's nodes
// back without TLS or on the other image. Every documented command that
// runs provision on its own must say --no-deps.
func TestDocsRunProvisionAloneWithoutItsDependencies(t *testing.T) {
	root := docexamples.Root(t)
	files, err := docexamples.DocFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	more, err := filepath.Glob(filepath.Join(root, "deploy", "compose", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range more {
		rel, _ := filepath.Rel(root, m)
		if strings.HasSuffix(m, ".yml") || strings.HasSuffix(m, ".sh") {
			files = append(files, rel)
		}
	}
	files = append(files, "Makefile")
	found := 0
	for _, f := range files {
		raw, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		// A command wrapped over lines (markdown, comments) reads as one.
		text := regexp.MustCompile(`\s*\n\s*(#\s*)?`).ReplaceAllString(string(raw), " ")
		for _, m := range provisionCmd.FindAllString(text, -1) {
			if strings.Contains(m, " logs ") || strings.Contains(m, " stop ") {
				continue
			}
			found++
			if !strings.Contains(m, "--no-deps") {
				t.Errorf("%s: %q runs provision with its dependencies (the NATS nodes are recreated): use run --rm --no-deps provision", f, m)
			}
		}
	}
	if found == 0 {
		t.Error("no command that runs the provision container found in the docs (the pattern is stale)")
	}
}

// TestE2EVariantsCheckViolationsBeforeEachTeardown: docs/security.md says
// make e2e fails if any container logs a permission Violation; e2e.sh
// checks, but e2e-variants.sh (the single-node and TLS stacks) removed
// its stacks without looking. Each stack brought up with make_up must be
// checked (no_violations) before it is torn down or make down removes its
// containers and their logs.
func TestE2EVariantsCheckViolationsBeforeEachTeardown(t *testing.T) {
	root := docexamples.Root(t)
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "compose", "e2e-variants.sh"))
	if err != nil {
		t.Fatal(err)
	}
	up, checks := false, 0
	for i, line := range strings.Split(string(raw), "\n") {
		l := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(l, "#"), strings.Contains(l, "() {"):
			// comments and function definitions
		case strings.HasPrefix(l, "make_up "):
			up = true
		case strings.HasPrefix(l, "no_violations"):
			up = false
			checks++
		case l == "teardown" || strings.Contains(l, " down "):
			if up {
				t.Errorf("e2e-variants.sh:%d: %q removes a stack whose logs were not checked for Violation (no_violations)", i+1, l)
			}
			up = false
		}
	}
	if checks == 0 {
		t.Error("e2e-variants.sh never calls no_violations")
	}
}
