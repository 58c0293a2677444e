package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/docexamples"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestDocsNatsPubWithTheNatsCLI runs every `nats pub` command of the
// README and docs/ with the real nats CLI (the user's way in: no flyball
// binary, no client library) against a running stack, file by file and
// each on a fresh stack, deletes last, and requires the governor's
// task.accepted for each. `make test` installs the CLI into bin/ and
// passes it in FLYBALL_TEST_NATSCLI.
func TestDocsNatsPubWithTheNatsCLI(t *testing.T) {
	t.Parallel()
	natsCLI := natsCLIPath(t)
	root := docexamples.Root(t)
	files := 0
	for _, f := range docFiles(t, root) {
		blocks, err := docexamples.Blocks(root, f)
		if err != nil {
			t.Fatal(err)
		}
		pubs, err := docexamples.Pubs(blocks)
		if err != nil {
			t.Fatal(err)
		}
		if len(pubs) == 0 {
			continue
		}
		files++
		pubs = docexamples.MoveLast(pubs, func(p docexamples.Pub) bool { return strings.HasPrefix(p.Subject, "flyball.task.deleted.") })
		t.Run(f, func(t *testing.T) {
			t.Parallel()
			runPubsWithNatsCLI(t, natsCLI, pubs)
		})
	}
	if files < 3 {
		t.Fatalf("found nats pub commands in %d files, want at least 3 (README, events, operations)", files)
	}
}

// natsCLIPath is the nats CLI make test installs. Without it the test is
// skipped, except in CI, where that is a failure.
func natsCLIPath(t *testing.T) string {
	t.Helper()
	p := os.Getenv("FLYBALL_TEST_NATSCLI")
	if p == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("FLYBALL_TEST_NATSCLI is not set; make test installs the nats CLI into bin/ and sets it")
		}
		t.Skip("FLYBALL_TEST_NATSCLI is not set; run make test, which installs the nats CLI and sets it")
	}
	return p
}

func runPubsWithNatsCLI(t *testing.T, natsCLI string, pubs []docexamples.Pub) {
	e := newCLIEnv(t)
	nc, _ := e.srv.Connect(t)
	answers := make(chan *nats.Msg, 64)
	natstest.ChanSubscribe(t, nc, "flyball.task.*.*", answers)
	for _, p := range pubs {
		id := commandID(p)
		if id == "" {
			t.Fatalf("%s: nats pub %s: the event has no id", p.Block.Where(), p.Subject)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, natsCLI, p.Words...)
		cmd.Env = append(os.Environ(), "NATS_URL="+e.url)
		cmd.Dir = e.dir
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("%s: nats %s: %v\n%s", p.Block.Where(), p.Subject, err, out)
		}
		if err := awaitAnswer(answers, id); err != nil {
			t.Errorf("%s: nats pub %s (id %s): %v", p.Block.Where(), p.Subject, id, err)
		}
	}
}

// commandID is the CloudEvents id of a pub: the body's, or ce-id in
// binary mode.
func commandID(p docexamples.Pub) string {
	if ids := p.Header["ce-id"]; len(ids) > 0 {
		return ids[0]
	}
	var ev struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(p.Body, &ev)
	return ev.ID
}

// awaitAnswer waits for the governor's answer to the command id: nil for
// task.accepted, an error carrying the reasons of a task.rejected.
func awaitAnswer(answers <-chan *nats.Msg, id string) error {
	timeout := time.After(15 * time.Second)
	for {
		select {
		case m := <-answers:
			ev, err := events.Decode(m.Header, m.Data)
			if err != nil {
				continue // a command (ours), or not an event
			}
			switch ev.Type() {
			case events.TypeTaskAccepted:
				var a events.TaskAccepted
				if events.DecodeData(ev, &a) == nil && a.CommandID == id {
					return nil
				}
			case events.TypeTaskRejected:
				var r events.TaskRejected
				if events.DecodeData(ev, &r) == nil && r.CommandID == id {
					b, _ := json.Marshal(r.Reasons)
					return fmt.Errorf("rejected: %s", b)
				}
			}
		case <-timeout:
			return errors.New("no answer from the governor within 15s (a command it cannot read is answered without its id)")
		}
	}
}

// TestDocsNatsCommandsParse: every other nats command line of the README
// and docs/ (sub, kv, stream, consumer …), in a code block or inline in
// the prose, names a command the nats CLI
// has, with flags it has. It asks the CLI for that command's help, so
// nothing needs to be running.
func TestDocsNatsCommandsParse(t *testing.T) {
	t.Parallel()
	natsCLI := natsCLIPath(t)
	cmds, err := docexamples.Commands(docCommandBlocks(t), "nats")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, c := range cmds {
		args := c.Words[1:]
		if len(args) > 0 && args[0] == "pub" {
			continue // TestDocsNatsPubWithTheNatsCLI runs them
		}
		helpArgs := slices.Clone(args)
		if last := len(helpArgs) - 1; c.Block.Kind == docexamples.KindInline && last > 0 &&
			strings.HasPrefix(helpArgs[last], "--") && !strings.Contains(helpArgs[last], "=") {
			// Prose names a flag without its value (`nats sub --stream`):
			// ask for the command's help, and look the flag up in it below.
			helpArgs = helpArgs[:last]
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, natsCLI, append(helpArgs, "--help")...).CombinedOutput()
		cancel()
		help := string(out)
		if err != nil || strings.Contains(help, "error:") {
			t.Errorf("%s: nats %s: %v\n%s", c.Block.Where(), strings.Join(args, " "), err, firstLine(help))
			continue
		}
		for _, a := range args {
			name, _, _ := strings.Cut(a, "=")
			if !strings.HasPrefix(name, "--") {
				continue
			}
			if !strings.Contains(help, name+"=") && !strings.Contains(help, name+" ") && !strings.Contains(help, "--[no-]"+name[2:]) {
				t.Errorf("%s: nats %s: the nats CLI has no flag %s here", c.Block.Where(), strings.Join(args, " "), name)
			}
		}
		checked++
	}
	if checked < 20 {
		t.Fatalf("checked %d nats command lines, want at least 20", checked)
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// TestDocsNatsNamesExist: the streams, durable consumers and KV buckets
// that the docs' nats command lines name (`nats stream info DISPATCH`,
// `nats consumer info TASKS governor`, `nats kv get flyball-schedules …`),
// in code blocks and in the prose, are ones flyball defines. Placeholders
// (<stream>, KV_<bucket>) are not checked.
func TestDocsNatsNamesExist(t *testing.T) {
	t.Parallel()
	cmds, err := docexamples.Commands(docCommandBlocks(t), "nats")
	if err != nil {
		t.Fatal(err)
	}
	cfgs, err := streams.StreamConfigs()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, c := range cfgs {
		known[c.Name] = true
	}
	ccs, err := streams.ConsumerConfigs()
	if err != nil {
		t.Fatal(err)
	}
	durables := map[string][]string{}
	for stream, cs := range ccs {
		for _, c := range cs {
			durables[stream] = append(durables[stream], c.Durable)
		}
	}
	placeholder := func(w string) bool { return w == "x" || w == "KV_x" }
	checked := 0
	for _, c := range cmds {
		words := c.Words[1:]
		i := slices.IndexFunc(words, func(w string) bool { return w == "stream" || w == "consumer" || w == "kv" })
		if i < 0 || i+1 >= len(words) {
			continue
		}
		first := i + 2 // nats stream <operation> NAME …
		if words[0] == "backup" {
			first = i + 1 // nats backup stream NAME DIR
		}
		var pos []string // the operation's positional arguments
		for _, w := range words[first:] {
			if strings.HasPrefix(w, "-") {
				break
			}
			pos = append(pos, w)
		}
		if len(pos) == 0 || placeholder(pos[0]) {
			continue
		}
		where := c.Block.Where() + ": nats " + strings.Join(words, " ")
		checked++
		switch words[i] {
		case "kv":
			if !known["KV_"+pos[0]] {
				t.Errorf("%s: no KV bucket %q", where, pos[0])
			}
		case "stream":
			if !known[pos[0]] {
				t.Errorf("%s: no stream %q", where, pos[0])
			}
		case "consumer":
			if !known[pos[0]] {
				t.Errorf("%s: no stream %q", where, pos[0])
			} else if len(pos) > 1 && !placeholder(pos[1]) && !slices.Contains(durables[pos[0]], pos[1]) {
				t.Errorf("%s: %s has no durable %q (it has %s)", where, pos[0], pos[1], strings.Join(durables[pos[0]], ", "))
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d nats command lines naming a stream, consumer or bucket, want at least 20", checked)
	}
}

// TestDocsNatsCommandsThatAskRunWithoutATerminal: a nats command of the
// README and docs/ that asks for confirmation (kv del, stream purge,
// consumer rm …) and is given with what it acts on carries -f. Without a
// terminal (a script, docker compose exec -T, ssh host cmd) the nats CLI
// (v0.5.0) cannot ask, and exits 1 with "cannot ask for confirmation
// without a terminal", having done nothing.
func TestDocsNatsCommandsThatAskRunWithoutATerminal(t *testing.T) {
	t.Parallel()
	cmds, err := docexamples.Commands(docCommandBlocks(t), "nats")
	if err != nil {
		t.Fatal(err)
	}
	asks := map[string]bool{
		"kv del": true, "kv rm": true, "kv purge": true,
		"stream rm": true, "stream del": true, "stream purge": true, "stream rmm": true, "stream edit": true,
		"consumer rm": true, "consumer del": true, "consumer reset": true, "consumer edit": true,
		"consumer pause": true, "consumer resume": true, "consumer unpin": true,
	}
	checked := 0
	for _, c := range cmds {
		words := c.Words[1:]
		// A mention without what it acts on (`nats consumer edit`) is
		// prose, not a command to run.
		if len(words) < 3 || !asks[words[0]+" "+words[1]] {
			continue
		}
		checked++
		if !slices.Contains(words, "-f") && !slices.Contains(words, "--force") {
			t.Errorf("%s: nats %s: without -f it fails where there is no terminal to confirm in", c.Block.Where(), strings.Join(words, " "))
		}
	}
	if checked < 3 {
		t.Fatalf("checked %d nats commands that ask for confirmation, want at least 3", checked)
	}
}

// TestDocsNatsCommandsThatNeedAdminSaySo: a nats command of the README and
// docs/ that writes (a KV write, a stream or consumer change) is refused
// to the `cli` user the README has operators export, so the text around it
// (a few lines before, or just after) must name the user that may:
// `admin` in the compose stack.
func TestDocsNatsCommandsThatNeedAdminSaySo(t *testing.T) {
	t.Parallel()
	blocks := docCommandBlocks(t)
	cmds, err := docexamples.Commands(blocks, "nats")
	if err != nil {
		t.Fatal(err)
	}
	writes := map[string]bool{
		"kv put": true, "kv create": true, "kv update": true, "kv del": true, "kv rm": true, "kv purge": true,
		"stream edit": true, "stream rm": true, "stream del": true, "stream rmm": true, "stream restore": true,
		"consumer rm": true, "consumer del": true, "consumer edit": true, "consumer pause": true, "consumer resume": true,
	}
	root := docexamples.Root(t)
	lines := map[string][]string{}
	checked := 0
	for _, c := range cmds {
		words := c.Words[1:]
		// Without what it acts on (`nats stream rm -f` of each stream) it
		// is prose, under a section that names the user once.
		if len(words) < 3 || !writes[words[0]+" "+words[1]] || !slices.ContainsFunc(words[2:], func(w string) bool { return !strings.HasPrefix(w, "-") }) {
			continue
		}
		checked++
		if lines[c.Block.File] == nil {
			raw, err := os.ReadFile(filepath.Join(root, c.Block.File))
			if err != nil {
				t.Fatal(err)
			}
			lines[c.Block.File] = strings.Split(string(raw), "\n")
		}
		ls := lines[c.Block.File]
		// Block.Line is 1-based: the fence of a block, the span's line inline.
		from, to := max(c.Block.Line-7, 0), min(c.Block.Line+3, len(ls))
		if c.Block.Kind != docexamples.KindInline {
			to = min(c.Block.Line+strings.Count(c.Block.Body, "\n")+3, len(ls))
		}
		if !strings.Contains(strings.Join(ls[from:to], "\n"), "admin") {
			t.Errorf("%s: nats %s: the cli user may not do this; say it needs admin in the compose stack", c.Block.Where(), strings.Join(words, " "))
		}
	}
	if checked < 5 {
		t.Fatalf("checked %d nats commands that write, want at least 5", checked)
	}
}
