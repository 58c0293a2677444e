package main

// These tests build the real flyball binary once and run it, as an
// operator would, against an embedded NATS server (listening on a random
// localhost port) with every service running.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/query"
	"github.com/flyballhq/flyball/services/stack"
	"github.com/flyballhq/flyball/streams"
)

// cliBinary is the flyball binary built by TestMain.
var cliBinary string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "flyball-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	cliBinary = filepath.Join(dir, "flyball")
	build := exec.Command("go", "build", "-o", cliBinary, ".")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the flyball binary:", err)
		return 1
	}
	return m.Run()
}

// cliEnv is one embedded NATS server with every service, and a way to run
// the binary against it.
type cliEnv struct {
	url string
	srv *natstest.Server
	dir string
	env []string // more environment variables, NAME=value
}

func newCLIEnv(t *testing.T) *cliEnv {
	t.Helper()
	srv, url := natstest.StartListening(t)
	startTestStack(t, srv)
	return &cliEnv{url: url, srv: srv, dir: t.TempDir()}
}

type cliResult struct {
	stdout, stderr string
	code           int
}

func (e *cliEnv) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, cliBinary, args...)
	cmd.Env = append(append(os.Environ(), "NATS_URL="+e.url), e.env...)
	cmd.Dir = e.dir
	return cmd
}

func (e *cliEnv) run(t *testing.T, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := e.command(ctx, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("flyball %s: %v", strings.Join(args, " "), err)
	}
	return cliResult{stdout: out.String(), stderr: errOut.String(), code: code}
}

// ok runs the binary and fails the test unless it exits 0.
func (e *cliEnv) ok(t *testing.T, args ...string) string {
	t.Helper()
	r := e.run(t, args...)
	if r.code != 0 {
		t.Fatalf("flyball %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// fails runs the binary and fails the test unless it exits 1 with an
// error that starts with "flyball: " and contains every want.
func (e *cliEnv) fails(t *testing.T, args []string, want ...string) cliResult {
	t.Helper()
	r := e.run(t, args...)
	if r.code != 1 || !strings.HasPrefix(r.stderr, "flyball: ") {
		t.Fatalf("flyball %s: exit %d, stderr %q; want exit 1 and a 'flyball: ' error", strings.Join(args, " "), r.code, r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Fatalf("flyball %s: stderr %q does not contain %q", strings.Join(args, " "), r.stderr, w)
		}
	}
	return r
}

func (e *cliEnv) file(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(e.dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// cliTarget is an HTTP endpoint tasks call, answering with status.
type cliTarget struct {
	url    string
	calls  atomic.Int64
	status atomic.Int64
}

func newCLITarget(t *testing.T, status int) *cliTarget {
	t.Helper()
	tg := &cliTarget{}
	tg.status.Store(int64(status))
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		tg.calls.Add(1)
		w.WriteHeader(int(tg.status.Load()))
		_, _ = w.Write([]byte(`{"ok":true,"note":"hello from the target"}`))
	}))
	t.Cleanup(s.Close)
	tg.url = s.URL
	return tg
}

func taskYAML(id, url, interval string) string {
	return fmt.Sprintf(`# a task as an operator writes it
id: %s
job: web
labels:
  team: ops
target:
  http:
    url: %s
    timeout: 5s
schedule:
  interval: %s
`, id, url, interval)
}

var acceptedLine = regexp.MustCompile(`^accepted web: next run \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(baseline-interval\) \(revision \d+\)\n$`)

func TestCLITaskCommands(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	tg := newCLITarget(t, http.StatusOK)
	spec := e.file(t, "web.yaml", taskYAML("web", tg.url, "1h"))
	bad := e.file(t, "bad.yaml", "id: bad.id\ntarget:\n  http:\n    url: ftp://example.test\nschedule:\n  interval: 100ms\n")
	unknown := e.file(t, "unknown.json", fmt.Sprintf(`{"id":"web","colour":"red","target":{"http":{"url":%q}},"schedule":{"interval":"1h"}}`, tg.url))

	// Dry runs validate locally and publish nothing.
	if out := e.ok(t, "task", "create", "-f", spec, "--dry-run"); out != "valid\n" {
		t.Fatalf("dry run of a valid spec printed %q, want \"valid\"", out)
	}
	for _, args := range [][]string{{"task", "create", "-f", bad, "--dry-run"}, {"task", "create", "-f", bad}} {
		r := e.fails(t, args,
			"id: must be 1-128 characters",
			"target.http.url: scheme must be http or https",
			"schedule.interval: must be >= 1s, got 100ms")
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if len(lines) != 4 || lines[0] != "flyball: "+bad+": invalid task spec (3 reasons):" {
			t.Fatalf("want a summary line and one line per reason, got %q", r.stderr)
		}
	}
	e.fails(t, []string{"task", "create", "-f", unknown}, "colour: unknown field")
	e.fails(t, []string{"task", "get", "web"}, `no task "web"`)

	// Create, and create again (the governor rejects the duplicate).
	if out := e.ok(t, "task", "create", "-f", spec); !acceptedLine.MatchString(out) {
		t.Fatalf("create printed %q, want %s", out, acceptedLine)
	}
	e.fails(t, []string{"task", "create", "-f", spec}, `task.created for "web" rejected by the governor (1 reason):`, `id: task "web" already exists; publish task.updated to change it`)
	natstest.Eventually(t, 10*time.Second, "the first run of web", func() bool { return tg.calls.Load() >= 1 })

	view := func() query.TaskView {
		t.Helper()
		var v query.TaskView
		if err := json.Unmarshal([]byte(e.ok(t, "task", "get", "web", "-o", "json")), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := view(); v.Spec.ID != "web" || v.Spec.Labels["team"] != "ops" || v.Schedule == nil {
		t.Fatalf("task get: %+v", v)
	}
	if out := e.ok(t, "task", "get", "web", "-o", "table"); !strings.Contains(out, "every 1h0m0s") || !strings.Contains(out, "GET "+tg.url) {
		t.Fatalf("task get -o table:\n%s", out)
	}
	if out := e.ok(t, "task", "list", "--label", "team=ops"); !strings.Contains(out, "web ") {
		t.Fatalf("task list --label team=ops:\n%s", out)
	}
	if out := e.ok(t, "task", "list", "--job", "nope"); strings.Contains(out, "web ") {
		t.Fatalf("task list --job nope lists web:\n%s", out)
	}

	// Pause and resume.
	if out := e.ok(t, "task", "pause", "web", "--until", "2h", "--reason", "deploy"); !strings.HasPrefix(out, "paused web: next run ") || !strings.HasSuffix(out, "(paused)\n") {
		t.Fatalf("pause printed %q", out)
	}
	if v := view(); !v.Schedule.Paused || v.Schedule.PauseReason != "deploy" || time.Until(v.Schedule.PausedUntil) < 110*time.Minute {
		t.Fatalf("after pause: %+v", v.Schedule)
	}
	e.fails(t, []string{"task", "pause", "web", "--until", "yesterday"}, "--until: want an RFC 3339 time")
	e.fails(t, []string{"task", "pause", "nope"}, `task.paused for "nope" rejected by the governor`, `id: no task "nope"`)
	if out := e.ok(t, "task", "resume", "web"); !strings.HasPrefix(out, "resumed web: next run ") {
		t.Fatalf("resume printed %q", out)
	}
	if v := view(); v.Schedule.Paused {
		t.Fatalf("still paused after resume: %+v", v.Schedule)
	}

	// Hints.
	if out := e.ok(t, "task", "hint", "web", "--interval", "10m", "--ttl", "15m", "--reason", "incident"); !strings.HasSuffix(out, "(hint-interval)\n") {
		t.Fatalf("hint printed %q", out)
	}
	if h := view().Schedule.IntervalHint; h == nil || h.Interval != 10*time.Minute || h.Reason != "incident" {
		t.Fatalf("interval hint after hint: %+v", h)
	}
	e.fails(t, []string{"task", "hint", "web"}, "give --interval, --at, or both")
	e.fails(t, []string{"task", "hint", "web", "--interval", "10ms"}, "--interval: must be in [1s")

	// Run now: a one-shot hint that runs the task.
	before := tg.calls.Load()
	if out := e.ok(t, "task", "run-now", "web"); !strings.HasPrefix(out, "run-now web: next run ") || !strings.HasSuffix(out, "(hint-oneshot)\n") {
		t.Fatalf("run-now printed %q", out)
	}
	natstest.Eventually(t, 10*time.Second, "run-now calls the target", func() bool { return tg.calls.Load() > before })
	// Its one-shot carries no time of this host's clock, which may be off
	// from the NATS server's: a zero at, the governor's now.
	if h := lastHint(t, e, "web"); h.At == nil || !h.At.IsZero() || h.Reason != "run-now" {
		t.Fatalf("run-now stored hint %+v (at %v), want a zero at", h, h.At)
	}

	// Run history.
	natstest.Eventually(t, 10*time.Second, "two succeeded runs listed", func() bool {
		return strings.Count(e.ok(t, "runs", "web"), " succeeded ") >= 2
	})
	out := e.ok(t, "runs", "web")
	if !strings.HasPrefix(out, "TIME ") || !strings.Contains(out, " 200 ") || !strings.Contains(out, `{"ok":true,"note":"hello from the target"}`) {
		t.Fatalf("runs table:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(e.ok(t, "runs", "web", "--limit", "1", "-o", "json")), "\n")
	var last query.RunRecord
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &last) != nil || last.Run.TaskID != "web" || last.Run.Status != 200 {
		t.Fatalf("runs --limit 1 -o json: %q", lines)
	}

	// Update and delete.
	updated := e.file(t, "web2.yaml", taskYAML("web", tg.url, "2h"))
	if out := e.ok(t, "task", "update", "-f", updated); !strings.HasPrefix(out, "updated web: next run ") {
		t.Fatalf("update printed %q", out)
	}
	if v := view(); v.Spec.Schedule.Interval.D() != 2*time.Hour {
		t.Fatalf("after update: %+v", v.Spec.Schedule)
	}
	if out := e.ok(t, "task", "delete", "web"); out != "deleted web\n" {
		t.Fatalf("delete printed %q", out)
	}
	// Without --if-revision a delete sends what it sent before the flag:
	// a TaskRef, with no ifRevision for an older governor to refuse.
	var del events.TaskDelete
	if data := natstest.LastData(t, e.srv.JS, streams.StreamTasks, events.TaskSubject(events.VerbDeleted, "web"), &del); del.ID != "web" || strings.Contains(data, "ifRevision") {
		t.Fatalf("a delete without --if-revision sent %s", data)
	}
	e.fails(t, []string{"task", "get", "web"}, `no task "web"`)
	e.fails(t, []string{"task", "delete", "web"}, `no task "web"`)

	// Created again: its runs follow the deleted task's on RUNS, marked.
	if out := e.ok(t, "task", "create", "-f", spec); !strings.HasPrefix(out, "accepted web: ") {
		t.Fatalf("create again printed %q", out)
	}
	const mark = "-- task deleted and created again at "
	natstest.Eventually(t, 10*time.Second, "the new task's first run listed under a mark", func() bool {
		out := e.ok(t, "runs", "web", "--limit", "0")
		i := strings.Index(out, mark)
		return i > 0 && strings.Contains(out[:i], " succeeded ") && strings.Contains(out[i:], " succeeded ")
	})
}

// startCLI starts a long-running command and returns its stdout lines.
// It waits until stderr shows ready.
func (e *cliEnv) startCLI(t *testing.T, ready string, args ...string) (<-chan string, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cmd := e.command(ctx, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	readyc := make(chan string, 2)
	var readers sync.WaitGroup
	readers.Add(2)
	go func() {
		defer readers.Done()
		sc := bufio.NewScanner(stderr)
		var all strings.Builder
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), ready) {
				readyc <- ""
			}
		}
		readyc <- all.String()
	}()
	go func() {
		defer readers.Done()
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	select {
	case msg := <-readyc:
		if msg != "" {
			t.Fatalf("flyball %s ended before %q: %s", strings.Join(args, " "), ready, msg)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("flyball %s: no %q on stderr", strings.Join(args, " "), ready)
	}
	errc := make(chan error, 1)
	go func() {
		readers.Wait() // Wait closes the pipes: read them to the end first
		errc <- cmd.Wait()
	}()
	return lines, errc
}

func nextLine(t *testing.T, lines <-chan string, what string) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatalf("%s: output ended", what)
		}
		return l
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no line within 20s", what)
	}
	return ""
}

func TestCLIDeadLetters(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	tg := newCLITarget(t, http.StatusNotFound) // a 404 is permanent: dead-lettered at once

	table, tableDone := e.startCLI(t, "listening on", "dlq", "tail", "--count", "1")
	jsonl, jsonDone := e.startCLI(t, "listening on", "dlq", "tail", "--task", "gone", "-o", "json", "--count", "1")
	e.ok(t, "task", "create", "-f", e.file(t, "gone.yaml", strings.ReplaceAll(taskYAML("gone", tg.url, "1h"), "job: web", "job: broken")))

	if h := nextLine(t, table, "tail header"); !strings.HasPrefix(h, "SEQ ") {
		t.Fatalf("tail header %q", h)
	}
	row := nextLine(t, table, "tail row")
	for _, want := range []string{" gone ", " permanent ", "HTTP 404"} {
		if !strings.Contains(row, want) {
			t.Fatalf("tail row %q does not contain %q", row, want)
		}
	}
	var rec query.DeadLetterRecord
	if err := json.Unmarshal([]byte(nextLine(t, jsonl, "tail -o json")), &rec); err != nil || rec.Entry.TaskID != "gone" || rec.Entry.Errors[0].Status != 404 {
		t.Fatalf("tail -o json: %+v, %v", rec, err)
	}
	// tail read core NATS, which carries no stream metadata: every entry
	// was "seq":0 and SEQ 0, which dlq show and retry cannot address.
	if rec.Seq == 0 || rec.Time.IsZero() || !strings.HasPrefix(row, fmt.Sprint(rec.Seq)+" ") {
		t.Fatalf("tail: seq %d, time %s, row %q; want the DEADLETTER sequence and stored time in both", rec.Seq, rec.Time, row)
	}
	if out := e.ok(t, "dlq", "show", fmt.Sprint(rec.Seq)); !strings.Contains(out, "gone") {
		t.Fatalf("dlq show %d (the sequence tail printed): %q", rec.Seq, out)
	}
	for _, done := range []<-chan error{tableDone, jsonDone} {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("tail --count 1 exited with %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("tail --count 1 did not exit after one entry")
		}
	}

	// run-now on a dead-lettered task is accepted but waits for the
	// recheck: it says so, and how to run it now.
	natstest.Eventually(t, 10*time.Second, "gone held for its recheck", func() bool {
		return strings.Contains(e.ok(t, "task", "get", "gone", "-o", "json"), `"source": "deadletter-recheck"`)
	})
	if r := e.run(t, "task", "run-now", "gone"); r.code != 0 || !strings.Contains(r.stdout, "(deadletter-recheck)") ||
		!strings.Contains(r.stderr, "note: the one-shot does not run at its time: deadletter-recheck:") || !strings.Contains(r.stderr, "'flyball dlq retry --all --task gone' runs it now") {
		t.Fatalf("run-now on a dead-lettered task: exit %d\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
	}
	// Paused as well, the pause overrules it, and a resume alone leaves
	// it held until the recheck: the note names the retry too. It said
	// "'flyball task resume gone' runs it".
	e.ok(t, "task", "pause", "gone", "--until", "30s")
	if r := e.run(t, "task", "run-now", "gone"); r.code != 0 || !strings.Contains(r.stdout, "(paused)") ||
		!strings.Contains(r.stderr, "the task is paused and dead-lettered: 'flyball task resume gone' and 'flyball dlq retry --all --task gone' run it now") {
		t.Fatalf("run-now on a paused, dead-lettered task: exit %d\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
	}
	if out := e.ok(t, "task", "resume", "gone"); !strings.Contains(out, "(deadletter-recheck)") {
		t.Fatalf("resume of a dead-lettered task printed %q, want its recheck", out)
	}

	// List and show.
	var list []query.DeadLetterRecord
	if err := json.Unmarshal([]byte(e.ok(t, "dlq", "list", "-o", "json")), &list); err != nil || len(list) != 1 {
		t.Fatalf("dlq list -o json: %v, %v", list, err)
	}
	seq := fmt.Sprint(list[0].Seq)
	if out := e.ok(t, "dlq", "list", "--task", "gone"); !strings.Contains(out, "\n"+seq+" ") {
		t.Fatalf("dlq list:\n%s", out)
	}
	var shown struct {
		Seq   uint64 `json:"seq"`
		Event struct {
			Type string `json:"type"`
		} `json:"event"`
	}
	if err := json.Unmarshal([]byte(e.ok(t, "dlq", "show", seq)), &shown); err != nil || shown.Event.Type != "io.flyball.deadlettered" {
		t.Fatalf("dlq show: %+v, %v", shown, err)
	}
	// show gives the entry under the names dlq list -o json and the API
	// use (it printed only seq, time, subject and the raw event).
	var listed []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(e.ok(t, "dlq", "list", "-o", "json")), &listed); err != nil || len(listed) != 1 {
		t.Fatalf("dlq list -o json: %v, %v", listed, err)
	}
	var showFields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(e.ok(t, "dlq", "show", seq)), &showFields); err != nil {
		t.Fatal(err)
	}
	for k, v := range listed[0] {
		var a, b any
		_ = json.Unmarshal(v, &a)
		_ = json.Unmarshal(showFields[k], &b)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("dlq show %s: %q is %s, want %s as in dlq list -o json", seq, k, showFields[k], v)
		}
	}
	if _, ok := listed[0]["entry"]; !ok {
		t.Errorf("dlq list -o json has no entry: %v", listed[0])
	}
	e.fails(t, []string{"dlq", "show", "999"}, "no dead letter at sequence 999")

	// The endpoint is fixed: requeued runs now succeed, so no new dead
	// letters appear while the retries below are checked.
	tg.status.Store(http.StatusOK)
	// Retry publishes task.requeued naming the entry.
	if out := e.ok(t, "dlq", "retry", seq); !strings.HasPrefix(out, "requeued gone (dead letter "+seq+"): next run ") {
		t.Fatalf("dlq retry printed %q", out)
	}
	replayed := e.ok(t, "replay", "--stream", "TASKS", "--subject", "flyball.task.requeued.gone", "-o", "json")
	if !strings.Contains(replayed, `"deadLetterSeq":`+seq) {
		t.Fatalf("no task.requeued with deadLetterSeq %s on TASKS:\n%s", seq, replayed)
	}
	e.fails(t, []string{"dlq", "retry", "--all"}, "--all needs --task")
	if out := e.ok(t, "dlq", "retry", "--all", "--task", "gone"); strings.Count(out, "requeued gone") != 1 {
		t.Fatalf("dlq retry --all printed %q", out)
	}

	// Purge refuses without --yes and shows what it would delete.
	r := e.fails(t, []string{"dlq", "purge", "--task", "gone"}, "refusing to purge 1 dead letter(s) without --yes")
	if !strings.Contains(r.stdout, "would purge 1 dead letter(s)") {
		t.Fatalf("purge without --yes printed %q", r.stdout)
	}
	if out := e.ok(t, "dlq", "purge", "--task", "gone", "--yes"); out != "purged 1 dead letter(s) of task \"gone\"\n" {
		t.Fatalf("purge printed %q", out)
	}
	if out := e.ok(t, "dlq", "list", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("after purge: %s", out)
	}
}

func TestCLIReplayStatusRuntime(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	tg := newCLITarget(t, http.StatusOK)
	e.ok(t, "task", "create", "-f", e.file(t, "tick.yaml", taskYAML("tick", tg.url, "1s")))
	natstest.Eventually(t, 15*time.Second, "two runs of tick", func() bool { return tg.calls.Load() >= 2 })

	// Replay RUNS from a time, as JSON lines.
	var lines []replayed
	natstest.Eventually(t, 10*time.Second, "two run.succeeded replayed", func() bool {
		lines = lines[:0]
		for _, l := range strings.Split(strings.TrimSpace(e.ok(t, "replay", "--stream", "RUNS", "--since", "1h", "-o", "json")), "\n") {
			var r replayed
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatalf("replay line %q: %v", l, err)
			}
			if r.Subject == "flyball.run.succeeded.tick" && r.Stream == "RUNS" && r.Seq > 0 && len(r.Event) > 0 {
				lines = append(lines, r)
			}
		}
		return len(lines) >= 2
	})
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if r := e.run(t, "replay", "--stream", "RUNS", "--from-time", future); r.code != 0 || !strings.Contains(r.stderr, "0 message(s) from RUNS") {
		t.Fatalf("replay from the future: %+v", r)
	}
	if out := e.ok(t, "replay", "--stream", "runs", "--from-seq", fmt.Sprint(lines[1].Seq), "--subject", "flyball.run.*.tick"); strings.Contains(out, fmt.Sprintf("\n%d ", lines[0].Seq)) {
		t.Fatalf("replay --from-seq %d printed an earlier message:\n%s", lines[1].Seq, out)
	}
	if out := e.ok(t, "replay", "--stream", "DISPATCH"); !strings.HasPrefix(out, "SEQ ") {
		t.Fatalf("replay DISPATCH:\n%s", out)
	}
	e.fails(t, []string{"replay", "--stream", "NOPE"}, "--stream: want one of")
	e.fails(t, []string{"replay", "--stream", "RUNS", "--since", "1h", "--from-seq", "3"}, "none of the others can be")

	// Republishing: a dry run sends nothing, a real one copies each message.
	copies := make(chan *nats.Msg, 64)
	natstest.ChanSubscribe(t, e.srv.NC, "debug.tasks", copies)
	dry := e.run(t, "replay", "--stream", "TASKS", "--subject", "flyball.task.*.tick", "--to", "debug.tasks", "--dry-run")
	if dry.code != 0 || !strings.Contains(dry.stderr, "dry run: would republish 2 message(s) from TASKS to debug.tasks") {
		t.Fatalf("dry run: %+v", dry)
	}
	sent := e.run(t, "replay", "--stream", "TASKS", "--subject", "flyball.task.*.tick", "--to", "debug.tasks")
	if sent.code != 0 || !strings.Contains(sent.stderr, "warning: republishing") || !strings.Contains(sent.stderr, "republished 2 message(s)") {
		t.Fatalf("republish: %+v", sent)
	}
	for i := range 2 {
		select {
		case m := <-copies:
			if !strings.HasPrefix(m.Header.Get("Flyball-Replayed-From"), "TASKS:") || m.Header.Get("Nats-Msg-Id") != "" {
				t.Fatalf("copy %d headers: %v", i, m.Header)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("got %d copies on debug.tasks, want 2 (and none from the dry run)", i)
		}
	}
	select {
	case m := <-copies:
		t.Fatalf("an extra copy arrived: %s", m.Data)
	default:
	}
	e.fails(t, []string{"replay", "--stream", "RUNS", "--to", "flyball.dispatch.tick"}, "add --force")

	// Status, as JSON and as a table.
	var h query.Health
	if err := json.Unmarshal([]byte(e.ok(t, "status", "--json")), &h); err != nil {
		t.Fatal(err)
	}
	if !h.Enabled || h.Queue.Depth != 1 || h.Queue.PerType["web"] != 1 || len(h.Staleness) != 1 || h.Staleness[0].TaskID != "tick" {
		t.Fatalf("status --json: %+v", h)
	}
	// -o json, as every other listing command takes it.
	var o query.Health
	if err := json.Unmarshal([]byte(e.ok(t, "status", "-o", "json")), &o); err != nil || o.Queue.Depth != 1 {
		t.Fatalf("status -o json: %+v (%v)", o, err)
	}
	if len(h.Backlog) < 8 {
		t.Fatalf("status --json backlog: %+v, want every durable", h.Backlog)
	}
	for _, b := range h.Backlog {
		if b.Error != "" {
			t.Fatalf("status --json backlog: %s/%s unreadable: %s", b.Stream, b.Consumer, b.Error)
		}
	}
	if len(h.Services.Missing) != 0 || h.Services.Online["executor"] != 1 {
		t.Fatalf("status --json services: %+v, want every service online", h.Services)
	}
	if out := e.ok(t, "status"); !strings.Contains(out, "queue         1 scheduled") || !strings.Contains(out, "tick") || !strings.Contains(out, "services      ") || strings.Contains(out, "NONE ONLINE") {
		t.Fatalf("status:\n%s", out)
	}

	// Runtime: every service registered itself.
	out := e.ok(t, "runtime")
	for _, kind := range stack.All {
		if !regexp.MustCompile(`(?m)^` + kind + `\s.*\sonline\s`).MatchString(out) {
			t.Errorf("runtime lists no online %s:\n%s", kind, out)
		}
	}
	var instances []query.Instance
	if err := json.Unmarshal([]byte(e.ok(t, "runtime", "-o", "json")), &instances); err != nil || len(instances) != len(stack.All) {
		t.Fatalf("runtime -o json: %d instances, %v", len(instances), err)
	}
}

func TestCLIErrorsAreOneLine(t *testing.T) {
	t.Parallel()
	e := &cliEnv{url: "nats://127.0.0.1:1", dir: t.TempDir()} // nothing listens there
	for _, args := range [][]string{
		{"task", "list"},
		{"status"},
		{"task", "get", "bad.id"},
		{"runs", "x", "--limit", "-1"},
		{"dlq", "show", "abc"},
		{"task", "create"},
		{"serve", "executor", "--concurrency", "0"},
		{"dev", "--per-host", "-3"},
		{"dev", "--nats-sync", "never"},
		{"serve", "executor", "--redact-header", "X-Bad Name"},
		{"serve", "sweeper", "--zombie-after", "90s"},
		{"serve", "timer", "--timer-lease", "500ms"},
		{"task", "list", "--label", "team=ops", "--label", "team=dev"},
		{"task", "update", "-f", "web.yaml", "--if-revision", "0"},
		{"task", "update", "-f", "web.yaml", "--if-revision", "-3"},
		{"task", "delete", "web", "--if-revision", "seven"},
		{"task", "delete", "web", "--if-revision", ""},
		{"task", "create", "-f", "web.yaml", "--if-revision", "3"},
		{"serve", "api", "--api-token", "short"},
		{"serve", "governor", "--replicas", "0"},
		{"serve", "governor", "--replicas", "6", "--ensure-streams=false"},
		{"provision", "--replicas", "0"},
		{"provision", "--replicas", "3", "--async-persist"},
		{"provision", "--timeout", "0s"},
		{"provision", "extra"},
		{"provision", "--timeout", "1s"}, // nothing listens: connection refused
		{"task", "list", "--creds", "/nope.creds"},
		{"serve", "governor", "--creds", "/nope.creds"},
		// cobra's own help and completion commands, too.
		{"help", "nosuch"},
		{"help", "task", "nosuch"},
		{"completion"},
		{"completion", "tcsh"},
	} {
		r := e.run(t, args...)
		if r.code != 1 || !strings.HasPrefix(r.stderr, "flyball: ") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("flyball %s: exit %d, stderr %q; want exit 1 and one 'flyball: ' line", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	// A credentials, nkey or TLS file that does not read was named by
	// nats.go only, inside "connect to NATS at …", not by the flag or
	// variable that gave it.
	for _, f := range []struct{ flag, env string }{
		{"creds", "NATS_CREDS"}, {"nkey", "NATS_NKEY"}, {"tls-ca", "NATS_CA"}, {"tls-cert", "NATS_CERT"}, {"tls-key", "NATS_KEY"},
	} {
		want := "flyball: --" + f.flag + " (" + f.env + "): "
		args := []string{"task", "list", "--" + f.flag, "/nope.file"}
		env := []string{f.env + "=/nope.file"}
		switch f.flag { // each needs its pair, or the pair's error comes first
		case "tls-cert":
			args, env = append(args, "--tls-key", "/dev/null"), append(env, "NATS_KEY=/dev/null")
		case "tls-key":
			args, env = append(args, "--tls-cert", "/dev/null"), append(env, "NATS_CERT=/dev/null")
		}
		if r := e.run(t, args...); r.code != 1 || !strings.HasPrefix(r.stderr, want) || !strings.Contains(r.stderr, "/nope.file") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("unreadable --%s: exit %d, stderr %q, want one line beginning %q", f.flag, r.code, r.stderr, want)
		}
		fromEnv := &cliEnv{url: e.url, dir: e.dir, env: env}
		if r := fromEnv.run(t, "status"); r.code != 1 || !strings.HasPrefix(r.stderr, want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("unreadable %s: exit %d, stderr %q, want one line beginning %q", f.env, r.code, r.stderr, want)
		}
	}
	// nats.go expands a creds path ($VAR, a leading ~): an env file's
	// NATS_CREDS=~/… must not be refused as a file that does not open.
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "cli.creds"), []byte("not used: nothing listens"), 0o600); err != nil {
		t.Fatal(err)
	}
	tilde := &cliEnv{url: e.url, dir: e.dir, env: []string{"HOME=" + home, "NATS_CREDS=~/cli.creds"}}
	if r := tilde.run(t, "status"); r.code != 1 || strings.Contains(r.stderr, "--creds (NATS_CREDS)") || !strings.Contains(r.stderr, "connect to NATS") {
		t.Errorf("NATS_CREDS=~/cli.creds with the file in $HOME: exit %d, stderr %q; want it passed on to the connect", r.code, r.stderr)
	}
	// Files that read but hold no certificate failed at the connect too.
	if r := e.run(t, "task", "list", "--tls-ca", "/dev/null"); r.code != 1 || r.stderr != "flyball: --tls-ca (NATS_CA): no PEM certificate in /dev/null\n" {
		t.Errorf("--tls-ca with no certificate: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := e.run(t, "task", "list", "--tls-cert", "/dev/null", "--tls-key", "/dev/null"); r.code != 1 || !strings.HasPrefix(r.stderr, "flyball: --tls-cert/--tls-key (NATS_CERT/NATS_KEY): tls: ") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("--tls-cert/--tls-key with no certificate: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := e.run(t, "serve", "executor", "--concurrency", "0"); !strings.Contains(r.stderr, "--concurrency: want a number from 1") {
		t.Errorf("bad --concurrency: %q", r.stderr)
	}
	if r := e.run(t, "serve", "executor", "--redact-header", "X-Bad Name"); !strings.Contains(r.stderr, `--redact-header: want a header or query parameter name, got "X-Bad Name"`) {
		t.Errorf("bad --redact-header: %q", r.stderr)
	}
	if r := e.run(t, "serve", "sweeper", "--zombie-after", "90s"); !strings.Contains(r.stderr, "--zombie-after: want a duration from 2m0s to 24h, got 1m30s") {
		t.Errorf("short --zombie-after: %q", r.stderr)
	}
	if r := e.run(t, "serve", "timer", "--timer-lease", "500ms"); !strings.Contains(r.stderr, "--timer-lease: want 0 or a duration from 1s to 1m, got 500ms") {
		t.Errorf("short --timer-lease: %q", r.stderr)
	}
	if r := e.run(t, "dev", "--nats-sync", "0s"); !strings.Contains(r.stderr, `--nats-sync: want always or a positive duration such as 2m or 1s, got "0s"`) {
		t.Errorf("bad --nats-sync: %q", r.stderr)
	}
	if r := e.run(t, "task", "list", "--label", "team=ops", "--label", "team=dev"); !strings.Contains(r.stderr, `--label: label: key "team" given twice`) {
		t.Errorf("conflicting --label selectors: %q", r.stderr)
	}
	for _, args := range [][]string{
		{"task", "update", "-f", "web.yaml", "--if-revision", "0"},
		{"task", "update", "-f", "web.yaml", "--if-revision", "-3"},
		{"task", "delete", "web", "--if-revision", "seven"},
	} {
		if r := e.run(t, args...); !strings.Contains(r.stderr, "--if-revision: want the revision of the spec") {
			t.Errorf("flyball %s: %q, want --if-revision named before any connection", strings.Join(args, " "), r.stderr)
		}
	}
	// Given empty (a script's unset variable), it would read as not
	// given and apply whatever the revision: refused, naming the flag.
	for _, args := range [][]string{
		{"task", "update", "-f", "web.yaml", "--if-revision", ""},
		{"task", "delete", "web", "--if-revision", ""},
	} {
		if r := e.run(t, args...); !strings.Contains(r.stderr, "--if-revision: empty") {
			t.Errorf("flyball %s: %q, want the empty --if-revision refused", strings.Join(args, " "), r.stderr)
		}
	}
	if r := e.run(t, "task", "create", "-f", "web.yaml", "--if-revision", "3"); !strings.Contains(r.stderr, "unknown flag: --if-revision") {
		t.Errorf("task create --if-revision: %q, want an unknown flag: a create has no revision to check", r.stderr)
	}
	if r := e.run(t, "serve", "api", "--api-token", "short"); !strings.Contains(r.stderr, "--api-token (or FLYBALL_API_TOKENS): token 1 has 5 characters, want at least 16") || strings.Contains(r.stderr, "short") {
		t.Errorf("short --api-token: %q, want the flag named and the token not shown", r.stderr)
	}
	if r := e.run(t, "serve", "governor", "--replicas", "0"); !strings.Contains(r.stderr, "--replicas: want 1 to 5") {
		t.Errorf("bad --replicas: %q, want the flag named before any connection", r.stderr)
	}
	if r := e.run(t, "help", "task", "nosuch"); !strings.Contains(r.stderr, `help: no command "task nosuch"`) {
		t.Errorf("help on an unknown topic: %q", r.stderr)
	}
	if r := e.ok(t, "help", "task"); !strings.Contains(r, "flyball task [command]") {
		t.Errorf("help task: %q, want the task command's usage", r)
	}
	if r := e.ok(t, "completion", "bash"); !strings.Contains(r, "bash completion") {
		t.Errorf("completion bash: %.80q, want the bash completion script", r)
	}
	if r := e.run(t, "task", "list"); !strings.Contains(r.stderr, "connect to NATS at nats://127.0.0.1:1") {
		t.Errorf("unreachable NATS: %q", r.stderr)
	}
}

// TestReplayToThatStopsPartwaySaysWhereToGoOn: a replay --to whose
// destination refuses a copy partway (here a stream that holds one
// message and discards new ones) must say how many copies were already
// stored and where to go on from; running it again as it was would send
// them twice.
func TestReplayToThatStopsPartwaySaysWhereToGoOn(t *testing.T) {
	t.Parallel()
	srv, url := natstest.StartListening(t)
	ctx := t.Context()
	if _, err := srv.JS.CreateStream(ctx, jetstream.StreamConfig{
		Name: "FULL", Subjects: []string{"debug.full"}, MaxMsgs: 1, Discard: jetstream.DiscardNew,
	}); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for i := range 3 {
		ack, err := srv.JS.Publish(ctx, "flyball.task.created.partly", []byte(`{}`), jetstream.WithMsgID(fmt.Sprintf("partly-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ack.Sequence)
	}
	e := &cliEnv{url: url, srv: srv, dir: t.TempDir()}
	r := e.run(t, "replay", "--stream", "TASKS", "--to", "debug.full")
	want := fmt.Sprintf("1 message(s), up to seq %d, were stored to debug.full before it stopped: to go on without sending them again, use --from-seq %d", seqs[0], seqs[1])
	if r.code != 1 || !strings.Contains(r.stderr, fmt.Sprintf("flyball: republish seq %d to debug.full: ", seqs[1])) || !strings.Contains(r.stderr, want) {
		t.Fatalf("replay --to a stream that fills up: exit %d, stderr:\n%s\nwant exit 1 and %q", r.code, r.stderr, want)
	}
}

// TestTaskListAndGetShowAnUnreadableSpec: a task whose stored spec does
// not decode (written by hand, or by another version) has its runs
// skipped; `task list` left it out and `task get` failed, so it showed
// nowhere but in those skipped runs.
func TestTaskListAndGetShowAnUnreadableSpec(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	tg := newCLITarget(t, http.StatusOK)
	e.ok(t, "task", "create", "-f", e.file(t, "web.yaml", taskYAML("web", tg.url, "1h")))
	kv, err := e.srv.JS.KeyValue(t.Context(), "flyball-tasks")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.PutString(t.Context(), "web", "garbage"); err != nil {
		t.Fatal(err)
	}
	if out := e.ok(t, "task", "list"); !strings.Contains(out, "web") || !strings.Contains(out, "UNREADABLE SPEC (flyball task get web)") {
		t.Fatalf("task list:\n%s\nwant web listed as unreadable", out)
	}
	if out := e.ok(t, "task", "get", "web", "-o", "table"); !strings.Contains(out, "UNREADABLE") || !strings.Contains(out, "publish task.updated to replace it, or task.deleted") {
		t.Fatalf("task get:\n%s\nwant why the spec is unreadable and what repairs it", out)
	}
}

// TestCLIIfRevision: task update and task delete with --if-revision apply
// only while the spec is at that revision, as the API's If-Match does.
// Without it, an operator's get → edit → update with the CLI undid a
// change stored in between without a word.
func TestCLIIfRevision(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	tg := newCLITarget(t, http.StatusOK)
	revOf := func(what, out string) string {
		t.Helper()
		m := revisionSuffix.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("%s printed %q, want it to end with the spec's (revision N)", what, out)
		}
		return m[1]
	}
	type getJSON struct {
		query.TaskView
		SpecRevision uint64 `json:"specRevision"`
	}
	get := func() getJSON {
		t.Helper()
		var v getJSON
		if err := json.Unmarshal([]byte(e.ok(t, "task", "get", "web", "-o", "json")), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	created := revOf("create", e.ok(t, "task", "create", "-f", e.file(t, "web.yaml", taskYAML("web", tg.url, "1h"))))
	if v := get(); fmt.Sprint(v.SpecRevision) != created || v.Spec.ID != "web" {
		t.Fatalf("task get -o json: specRevision %d, spec %+v; want revision %s, as create printed", v.SpecRevision, v.Spec, created)
	}
	if out := e.ok(t, "task", "get", "web", "-o", "table"); !regexp.MustCompile(`(?m)^revision +` + created + `$`).MatchString(out) {
		t.Fatalf("task get -o table:\n%s\nwant a revision row with %s", out, created)
	}

	// An update made from the revision stored applies, and says the new one.
	out := e.ok(t, "task", "update", "-f", e.file(t, "web2.yaml", taskYAML("web", tg.url, "2h")), "--if-revision", created)
	if !strings.HasPrefix(out, "updated web: next run ") {
		t.Fatalf("update --if-revision printed %q", out)
	}
	updated := revOf("update", out)
	if updated == created {
		t.Fatalf("update printed revision %s, the one it replaced", updated)
	}
	var u events.TaskUpdate
	natstest.LastData(t, e.srv.JS, streams.StreamTasks, events.TaskSubject(events.VerbUpdated, "web"), &u)
	if fmt.Sprint(u.IfRevision) != created {
		t.Fatalf("task.updated carried ifRevision %d, want %s", u.IfRevision, created)
	}

	// One made from the revision before is refused, in one line, and the
	// spec stays as the update in between left it.
	stale := []string{
		fmt.Sprintf("the task changed since revision %s: it is at revision %s now", created, updated),
		"flyball task get web",
	}
	r := e.fails(t, []string{"task", "update", "-f", e.file(t, "web3.yaml", taskYAML("web", tg.url, "3h")), "--if-revision", created},
		append(stale, `task.updated for "web" rejected by the governor`)...)
	if strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("stale update: stderr %q, want one line", r.stderr)
	}
	if v := get(); v.Spec.Schedule.Interval.D() != 2*time.Hour || fmt.Sprint(v.SpecRevision) != updated {
		t.Fatalf("after a stale update: interval %s at revision %d, want 2h at %s", v.Spec.Schedule.Interval, v.SpecRevision, updated)
	}

	// A delete decided on the revision before is refused too; the task stays.
	r = e.fails(t, []string{"task", "delete", "web", "--if-revision", created}, append(stale, `task.deleted for "web" rejected by the governor`)...)
	if strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("stale delete: stderr %q, want one line", r.stderr)
	}
	var d events.TaskDelete
	natstest.LastData(t, e.srv.JS, streams.StreamTasks, events.TaskSubject(events.VerbDeleted, "web"), &d)
	if fmt.Sprint(d.IfRevision) != created || d.ID != "web" {
		t.Fatalf("task.deleted carried %+v, want ifRevision %s", d, created)
	}
	if v := get(); fmt.Sprint(v.SpecRevision) != updated {
		t.Fatalf("after a stale delete: revision %d, want the task still at %s", v.SpecRevision, updated)
	}
	// The first update run again from the same file, whose exact spec is
	// the one stored, is applied whatever its stale --if-revision says: it
	// undoes nothing (docs/operations.md, Update a task). It is not
	// written again: it prints the revision the spec is at, which a
	// colleague's --if-revision read before it still matches (written
	// again, at a new revision, it made theirs stale).
	again := revOf("the same update again", e.ok(t, "task", "update", "-f", e.file(t, "web2.yaml", taskYAML("web", tg.url, "2h")), "--if-revision", created))
	if again != updated {
		t.Fatalf("the same update again printed revision %s, want the one the spec is at, %s", again, updated)
	}
	if v := get(); v.Spec.Schedule.Interval.D() != 2*time.Hour || fmt.Sprint(v.SpecRevision) != updated {
		t.Fatalf("after the same update again: interval %s at revision %d, want 2h at %s", v.Spec.Schedule.Interval, v.SpecRevision, updated)
	}
	if out := e.ok(t, "task", "delete", "web", "--if-revision", again); out != "deleted web\n" {
		t.Fatalf("delete --if-revision printed %q", out)
	}
	e.fails(t, []string{"task", "get", "web"}, `no task "web"`)
}

// revisionSuffix is the spec revision a create or an update prints last.
var revisionSuffix = regexp.MustCompile(` \(revision (\d+)\)\n$`)

// lastHint is the last task.hinted of task id stored on TASKS.
func lastHint(t *testing.T, e *cliEnv, id string) events.TaskHint {
	t.Helper()
	var h events.TaskHint
	natstest.LastData(t, e.srv.JS, streams.StreamTasks, events.TaskSubject(events.VerbHinted, id), &h)
	return h
}
