package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/query"
	"github.com/flyballhq/flyball/services/stack"
)

// TestCLIUnderItsComposeUser runs every command an operator runs with the
// CLI as the compose stack's `cli` user (NATS_URL with its credentials),
// against every service running under its own user, as in
// deploy/compose. Each command must succeed, and a permission violation
// anywhere (the CLI, or a service it sets to work) fails the test
// (natstest.StartCompose).
func TestCLIUnderItsComposeUser(t *testing.T) {
	t.Parallel()
	srv := natstest.StartCompose(t)
	srv.Each(t, stack.All, func(name string, js jetstream.JetStream) {
		st, err := stack.Start(context.Background(), stack.Config{
			JS: js, Services: []string{name}, Instance: name + "1", Guard: executor.Guard{AllowLoopback: true},
			APIAddr: "127.0.0.1:0", APITokens: []string{"test-token-0123456789"},
		})
		if err != nil {
			t.Fatalf("start %s as its compose user: %v", name, err)
		}
		t.Cleanup(st.Stop)
	})
	e := &cliEnv{url: srv.URL("cli"), srv: srv.Server, dir: t.TempDir()}
	web, broken := newCLITarget(t, http.StatusOK), newCLITarget(t, http.StatusNotFound)
	ran := make(chan *nats.Msg, 64)
	natstest.ChanSubscribe(t, srv.NC, "flyball.run.succeeded.web1", ran)

	tail, tailDone := e.startCLI(t, "listening on", "dlq", "tail", "--count", "1")
	spec := e.file(t, "web1.yaml", taskYAML("web1", web.url, "1s"))
	e.ok(t, "task", "create", "-f", spec)
	e.ok(t, "task", "create", "-f", e.file(t, "gone.yaml", taskYAML("gone", broken.url, "1h")))
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("no run of web1 within 10s")
	}
	nextLine(t, tail, "dlq tail header")
	if row := nextLine(t, tail, "dlq tail row"); !strings.Contains(row, " gone ") {
		t.Fatalf("dlq tail row %q, want task gone", row)
	}
	if err := <-tailDone; err != nil {
		t.Fatalf("dlq tail: %v", err)
	}

	for _, args := range [][]string{
		{"task", "get", "web1"},
		{"task", "list"},
		{"task", "update", "-f", e.file(t, "web1b.yaml", taskYAML("web1", web.url, "2s"))},
		{"task", "pause", "web1", "--reason", "maintenance"},
		{"task", "resume", "web1"},
		{"task", "hint", "web1", "--interval", "2s", "--ttl", "1m"},
		{"task", "run-now", "web1"},
		{"runs", "web1"},
		{"explain", "web1"},
		{"status"},
		{"runtime"},
		{"replay", "--stream", "TASKS"},
		{"replay", "--stream", "RUNS", "--since", "1h"},
		{"replay", "--stream", "DISPATCH"},
		{"replay", "--stream", "HEALTH"},
		{"replay", "--stream", "DEADLETTER"},
	} {
		e.ok(t, args...)
	}

	var list []query.DeadLetterRecord
	if err := json.Unmarshal([]byte(e.ok(t, "dlq", "list", "-o", "json")), &list); err != nil || len(list) != 1 {
		t.Fatalf("dlq list: %+v, %v", list, err)
	}
	seq := fmt.Sprint(list[0].Seq)
	e.ok(t, "dlq", "show", seq)
	e.ok(t, "dlq", "retry", seq)
	e.ok(t, "dlq", "purge", "--task", "gone", "--yes")
	e.ok(t, "task", "delete", "gone")
}

// TestReplayToARefusedSubjectFails: the server refuses the compose cli
// user's publishes to a --to subject (only admin may republish). Core
// publishes are not acknowledged, so replay must notice the permission
// violation the server reports and fail, rather than print "republished
// N message(s)" and exit 0 having sent nothing.
func TestReplayToARefusedSubjectFails(t *testing.T) {
	t.Parallel()
	srv := natstest.StartCompose(t)
	srv.ExpectViolation("debug.refused")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := srv.JS.Publish(ctx, "flyball.task.created.refused", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	e := &cliEnv{url: srv.URL("cli"), srv: srv.Server, dir: t.TempDir()}
	r := e.run(t, "replay", "--stream", "TASKS", "--to", "debug.refused")
	if r.code != 1 || !strings.Contains(r.stderr, "flyball: --to debug.refused: ") || !strings.Contains(r.stderr, "permissions violation") || strings.Contains(r.stderr, "republished ") {
		t.Fatalf("replay --to a refused subject: exit %d, stderr:\n%s\nwant exit 1 and a 'flyball: --to debug.refused: ' error naming the permissions violation", r.code, r.stderr)
	}
}

// TestNatsAccountInfoAsTheComposeCLIUser: docs/security.md gives the
// compose `cli` user $JS.API.INFO for `nats account info` from the host,
// but the nats CLI first asks $SYS.REQ.USER.INFO who it is: the command
// printed the info after "Unexpected NATS error: Permissions Violation
// for Publish to "$SYS.REQ.USER.INFO"", and nats-server logged a
// Violation, which the audit in security.md greps for. StartCompose fails
// the test on any violation.
func TestNatsAccountInfoAsTheComposeCLIUser(t *testing.T) {
	natsCLI := natsCLIPath(t)
	t.Parallel()
	srv := natstest.StartCompose(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, natsCLI, "account", "info")
	cmd.Env = append(os.Environ(), "NATS_URL="+srv.URL("cli"), "HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nats account info as cli: %v\n%s", err, out)
	}
	if s := string(out); strings.Contains(s, "Permissions Violation") || !strings.Contains(s, "JetStream") {
		t.Fatalf("nats account info as cli printed:\n%s\nwant the account's JetStream info and no permissions violation", s)
	}
}

// TestNatsServerReportsAsTheComposeSysUser: docs/security.md and
// operations.md give the compose `sys` user for the nats CLI's server
// reports. Its permissions are now the monitoring requests only
// (accounts.conf, SYS_MONITOR; TestSysUserCannotPurgeFlyball): each
// report the docs name still runs as sys, with no permissions violation.
func TestNatsServerReportsAsTheComposeSysUser(t *testing.T) {
	natsCLI := natsCLIPath(t)
	t.Parallel()
	srv := natstest.StartCompose(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"server", "report", "jetstream"}, "JetStream Summary"},
		{[]string{"server", "report", "connections"}, "admin"},
		{[]string{"server", "list"}, srv.Server.Server.Name()},
		{[]string{"server", "info"}, "Server information"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, natsCLI, c.args...)
		cmd.Env = append(os.Environ(), "NATS_URL="+srv.URL("sys"), "HOME="+t.TempDir())
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("nats %s as sys: %v\n%s", strings.Join(c.args, " "), err, out)
			continue
		}
		if s := string(out); strings.Contains(s, "Permissions Violation") || !strings.Contains(s, c.want) {
			t.Errorf("nats %s as sys printed:\n%s\nwant %q and no permissions violation", strings.Join(c.args, " "), s, c.want)
		}
	}
}
