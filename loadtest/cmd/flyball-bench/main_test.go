package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/flyballhq/flyball/loadtest/bench"
	"github.com/flyballhq/flyball/services/embedded"
)

// TestBenchmarksDocCommandsParse: every flyball-bench command that
// docs/benchmarks.md and the runs and findings split from it
// (docs/benchmark-runs.md, docs/benchmark-findings.md) show (in a shell
// block or inline, where the reader copies the exact measurement from)
// parses with today's flags, and names tiers and systems that exist.
// Commands with a placeholder (… or <…>) are checked up to it.
func TestBenchmarksDocCommandsParse(t *testing.T) {
	t.Parallel()
	var raw []byte
	for _, doc := range []string{"benchmarks.md", "benchmark-runs.md", "benchmark-findings.md"} {
		b, err := os.ReadFile("../../../docs/" + doc)
		if err != nil {
			t.Fatal(err)
		}
		raw = append(append(raw, b...), '\n')
	}
	spans := regexp.MustCompile("`([^`]*flyball-bench [^`]*)`").FindAllStringSubmatch(string(raw), -1)
	var cmds []string
	for _, m := range spans {
		cmds = append(cmds, m[1])
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.Contains(line, "go run ./cmd/flyball-bench ") {
			cmds = append(cmds, line)
		}
	}
	checked := 0
	for _, c := range cmds {
		_, rest, _ := strings.Cut(c, "flyball-bench ")
		rest, _, _ = strings.Cut(rest, "|")
		words := quotedFields(rest)
		if len(words) > 0 && (words[0] == "target" || words[0] == "nats-server") {
			continue
		}
		if i := slices.IndexFunc(words, func(w string) bool { return strings.ContainsAny(w, "…<") }); i >= 0 {
			words = words[:i]
			if len(words) > 0 && strings.HasPrefix(words[len(words)-1], "-") {
				words = words[:len(words)-1] // the flag whose value is the placeholder
			}
		}
		if len(words) == 0 {
			continue
		}
		o, err := parseFlags(words)
		if err != nil {
			t.Errorf("flyball-bench %s: %v", strings.Join(words, " "), err)
			continue
		}
		for _, tier := range o.cfg.Tiers {
			if !slices.Contains(bench.TierNames(), tier) {
				t.Errorf("flyball-bench %s: unknown tier %q", strings.Join(words, " "), tier)
			}
		}
		for _, s := range o.cfg.Systems {
			if !slices.Contains(bench.AllSystems, s) {
				t.Errorf("flyball-bench %s: unknown system %q", strings.Join(words, " "), s)
			}
		}
		checked++
	}
	if checked < 15 {
		t.Fatalf("checked %d flyball-bench commands, want at least 15", checked)
	}
}

// quotedFields splits s at spaces, as a shell splits a plain command
// line (a span of the docs may break across lines): a single- or
// double-quoted part is one word without its quotes
// (`--conditions "idle but for the benchmark"`).
func quotedFields(s string) []string {
	var words []string
	var w strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			w.WriteByte(c)
		case c == '"' || c == '\'':
			quote, in = c, true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, w.String())
	}
	return words
}

func TestNATSSyncFlag(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"--nats-sync", "always"})
	if err != nil || !o.cfg.NATSSync.Always {
		t.Fatalf("--nats-sync always: %+v, %v", o.cfg.NATSSync, err)
	}
	if o, err := parseFlags(nil); err != nil || o.cfg.NATSSync != embedded.RecommendedSync {
		t.Fatalf("no --nats-sync: %+v, %v; want flyball dev's default, %s", o.cfg.NATSSync, err, embedded.RecommendedSync)
	}
	if o, err := parseFlags([]string{"--nats-url", "nats://127.0.0.1:4222"}); err != nil || o.cfg.NATSSync != (embedded.Sync{}) {
		t.Fatalf("--nats-url: %+v, %v; want no sync setting (the stack's server has its own)", o.cfg.NATSSync, err)
	}
	o, err = parseFlags([]string{"--nats-url", "nats://127.0.0.1:4222", "--nats-sync", "1s"})
	if err != nil || o.cfg.NATSSync != embedded.RecommendedSync {
		t.Fatalf("--nats-url with --nats-sync 1s: %+v, %v; want it kept, for validate to refuse", o.cfg.NATSSync, err)
	}
	if _, err := parseFlags([]string{"--nats-sync", "sometimes"}); err == nil || !strings.Contains(err.Error(), `--nats-sync: want always or a positive duration such as 2m or 1s, got "sometimes"`) {
		t.Fatalf("--nats-sync sometimes: %v, want an error naming the flag", err)
	}
}
