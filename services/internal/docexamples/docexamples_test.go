package docexamples

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestBlocksAndPubs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	md := strings.Join([]string{
		"# doc",
		"<!-- check:TaskSpec -->",
		"```json",
		`{"id": "a"}`,
		"```",
		"text",
		"```json",
		`{"unmarked": true}`,
		"```",
		"```sh",
		"nats sub 'flyball.>'   # not a pub",
		"nats pub flyball.task.paused.a \\",
		"  -H 'ce-id:1' -H 'Nats-Msg-Id:1' \\",
		`  '{"until":`,
		`    "2026-03-02T11:00:00Z"}'  # a comment`,
		"nats pub flyball.task.resumed.a '{}'",
		"```",
	}, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "doc.md"), []byte(md), 0o600); err != nil {
		t.Fatal(err)
	}
	blocks, err := Blocks(dir, "doc.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 3 {
		t.Fatalf("got %d blocks, want 3: %+v", len(blocks), blocks)
	}
	if b := blocks[0]; b.Kind != "TaskSpec" || b.Lang != "json" || b.Line != 3 || b.Body != "{\"id\": \"a\"}\n" {
		t.Errorf("block 0 = %+v", b)
	}
	if b := blocks[1]; b.Kind != "" || b.Where() != "doc.md:7" {
		t.Errorf("block 1 = %+v, want no marker (text came between)", b)
	}
	pubs, err := Pubs(blocks)
	if err != nil {
		t.Fatal(err)
	}
	if len(pubs) != 2 {
		t.Fatalf("got %d pubs, want 2: %+v", len(pubs), pubs)
	}
	p := pubs[0]
	if p.Subject != "flyball.task.paused.a" || string(p.Body) != "{\"until\":\n    \"2026-03-02T11:00:00Z\"}" {
		t.Errorf("pub 0 = %q %q", p.Subject, p.Body)
	}
	if want := map[string][]string{"ce-id": {"1"}, "Nats-Msg-Id": {"1"}}; !reflect.DeepEqual(p.Header, want) {
		t.Errorf("pub 0 header = %v, want %v", p.Header, want)
	}
	if pubs[1].Subject != "flyball.task.resumed.a" || string(pubs[1].Body) != "{}" {
		t.Errorf("pub 1 = %q %q", pubs[1].Subject, pubs[1].Body)
	}
}

// TestPubsRefusesWhatItCannotRead: an example the check cannot parse fails
// it rather than being skipped.
func TestPubsRefusesWhatItCannotRead(t *testing.T) {
	t.Parallel()
	for name, cmd := range map[string]string{
		"expansion":       `nats pub flyball.task.created.a "$BODY"`,
		"variable":        `nats pub flyball.task.created.$id '{}'`,
		"command subst":   "nats pub flyball.task.created.a `cat x`",
		"unterminated":    `nats pub flyball.task.created.a '{`,
		"unknown option":  `nats pub --count 3 flyball.task.created.a '{}'`,
		"missing body":    `nats pub flyball.task.created.a`,
		"header no colon": `nats pub -H 'x' flyball.task.created.a '{}'`,
	} {
		_, err := Pubs([]Block{{File: "x.md", Line: 1, Lang: "sh", Body: cmd + "\n"}})
		if err == nil {
			t.Errorf("%s: %s parsed", name, cmd)
		}
	}
}

func TestRootFindsTheWorkspace(t *testing.T) {
	t.Parallel()
	root := Root(t)
	if _, err := os.Stat(filepath.Join(root, "docs", "events.md")); err != nil {
		t.Fatalf("root %s: %v", root, err)
	}
}

func TestCommands(t *testing.T) {
	t.Parallel()
	body := strings.Join([]string{
		"export TOKEN=$(cat token)   # not ours: never parsed",
		"$ flyball task list --label \"team=payments\" | jq .   # a prompt, a pipe",
		"  bin/flyball dlq retry --all \\",
		"    --reason 'endpoint fixed' && echo done",
		"flyball status>/tmp/x",
		"docker compose ps",
	}, "\n") + "\n"
	cmds, err := Commands([]Block{{File: "x.md", Line: 1, Lang: "sh", Body: body}}, "flyball", "bin/flyball")
	if err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, c := range cmds {
		got = append(got, c.Words)
	}
	want := [][]string{
		{"flyball", "task", "list", "--label", "team=payments"},
		{"bin/flyball", "dlq", "retry", "--all", "--reason", "endpoint fixed"},
		{"flyball", "status"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Commands = %q, want %q", got, want)
	}
}

// TestCommandsReadVariablesAsPlaceholders: a shell variable reads as
// "x" and marks the command, so a loop over stream names can be checked
// for its command and flags; any other expansion is refused.
func TestCommandsReadVariablesAsPlaceholders(t *testing.T) {
	t.Parallel()
	cmds, err := Commands([]Block{{File: "x.md", Line: 1, Lang: "sh", Body: "  nats backup stream $s \"$dir/${s}.d\" || break\nnats stream ls\n"}}, "nats")
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) != 2 {
		t.Fatalf("Commands = %d commands, want 2", len(cmds))
	}
	if want := []string{"nats", "backup", "stream", "x", "x/x.d"}; !reflect.DeepEqual(cmds[0].Words, want) || !cmds[0].Expanded {
		t.Errorf("Commands[0] = %q expanded %v, want %q expanded", cmds[0].Words, cmds[0].Expanded, want)
	}
	if cmds[1].Expanded {
		t.Errorf("Commands[1] %q marked expanded", cmds[1].Words)
	}
	for _, line := range []string{`nats stream info $(cat name)`, `nats stream info "$1"`, `nats stream info ${s:-x}`, `nats stream info $`} {
		if _, err := Commands([]Block{{File: "x.md", Line: 1, Lang: "sh", Body: line + "\n"}}, "nats"); err == nil {
			t.Errorf("%s: read without an error", line)
		}
	}
}

func TestInlineBlocks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	md := strings.Join([]string{
		"Run `flyball dlq retry <seq>` once fixed, or `nats kv del",
		"flyball-runtime <kind>.<name>` as admin; `flyball task …` stands for many.",
		"```sh",
		"flyball status   # a block: Blocks reads it, not InlineBlocks",
		"```",
		"A `$VAR` is skipped, and so is the `KV_<bucket>` placeholder: it becomes `KV_x`.",
	}, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "doc.md"), []byte(md), 0o600); err != nil {
		t.Fatal(err)
	}
	blocks, err := InlineBlocks(dir, "doc.md")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range blocks {
		if b.Kind != KindInline || b.Lang != "sh" {
			t.Errorf("%s: Kind %q Lang %q, want %q sh", b.Where(), b.Kind, b.Lang, KindInline)
		}
		got = append(got, b.Where()+" "+strings.TrimSuffix(b.Body, "\n"))
	}
	want := []string{
		"doc.md:1 flyball dlq retry x",
		"doc.md:1 nats kv del flyball-runtime x.x",
		"doc.md:6 KV_x",
		"doc.md:6 KV_x",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("InlineBlocks = %q, want %q", got, want)
	}
	cmds, err := Commands(blocks, "flyball", "nats")
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) != 2 || cmds[1].Words[len(cmds[1].Words)-1] != "x.x" {
		t.Fatalf("Commands of the inline blocks = %+v, want the retry and the kv del", cmds)
	}
}

func TestTable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	md := "# t\n\n| a | b |\n|---|---|\n| `x` | 1 |\n|y|2|\n\nafter\n| c |\n|---|\n"
	if err := os.WriteFile(filepath.Join(dir, "t.md"), []byte(md), 0o600); err != nil {
		t.Fatal(err)
	}
	rows, err := Table(dir, "t.md", "| a |")
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]string{{"`x`", "1"}, {"y", "2"}}; !reflect.DeepEqual(rows, want) {
		t.Errorf("rows = %q, want %q", rows, want)
	}
	if _, err := Table(dir, "t.md", "| z |"); err == nil {
		t.Error("a missing table is not an error")
	}
	if _, err := Table(dir, "t.md", "| c |"); err == nil {
		t.Error("a table without rows is not an error")
	}
}

func TestMoveLastAndDecodeStrict(t *testing.T) {
	t.Parallel()
	got := MoveLast([]string{"create", "delete-1", "pause", "delete-2", "resume"}, func(s string) bool { return strings.HasPrefix(s, "delete") })
	if want := []string{"create", "pause", "resume", "delete-1", "delete-2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("MoveLast = %q, want %q", got, want)
	}
	var v struct{ A int }
	if err := DecodeStrict([]byte(`{"A":1}`), &v); err != nil || v.A != 1 {
		t.Errorf("DecodeStrict of a valid value: %v, %+v", err, v)
	}
	for _, bad := range []string{`{"A":1,"B":2}`, `{"A":1} {}`, `{"A":"x"}`} {
		if err := DecodeStrict([]byte(bad), &v); err == nil {
			t.Errorf("DecodeStrict(%s) accepted it", bad)
		}
	}
}
