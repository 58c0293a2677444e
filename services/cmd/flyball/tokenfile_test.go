package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/flyballhq/flyball/services/api"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/stack"
)

const (
	fixedToken = "fixed-token-0123456789"
	oldToken   = "old-token-0123456789ab"
	newToken   = "new-token-0123456789ab"
)

// tokenBundle is an API started from a token file and --api-token, as
// serve starts it, with the file's watch.
type tokenBundle struct {
	file string
	base string
	api  *api.Service
	tf   *tokenFile
	log  *syncBuffer
}

func startTokenBundle(t *testing.T) *tokenBundle {
	t.Helper()
	b := &tokenBundle{file: filepath.Join(t.TempDir(), "tokens"), log: &syncBuffer{}}
	writeFile(t, b.file, "# rotated monthly\n"+oldToken+"\n")
	var rf runFlags
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	rf.register(fs, false)
	if err := fs.Parse([]string{"--api-token-file", b.file, "--api-token", fixedToken}); err != nil {
		t.Fatal(err)
	}
	toks, _, err := rf.tokens(false)
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.StartWithStreams(t)
	_, js := srv.Connect(t)
	st, err := stack.Start(context.Background(), stack.Config{JS: js, Services: []string{"api"}, APIAddr: "127.0.0.1:0", APITokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	b.base, b.api, b.tf = "http://"+st.API.Addr(), st.API, rf.tokenFile
	if b.tf == nil {
		t.Fatal("--api-token-file given: no token file to watch")
	}
	b.tf.set, b.tf.log = st.API.SetTokens, slog.New(slog.NewTextHandler(b.log, nil))
	return b
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// status is the API's answer to an authenticated request with tok.
func (b *tokenBundle) status(t *testing.T, tok string) int {
	t.Helper()
	return bearerStatus(t, b.base, tok)
}

func bearerStatus(t *testing.T, base, tok string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/api/v1/openapi.json", http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// expectTokens fails unless each token gets its status.
func (b *tokenBundle) expectTokens(t *testing.T, when string, want map[string]int) {
	t.Helper()
	for tok, status := range want {
		if got := b.status(t, tok); got != status {
			t.Errorf("%s: token %s: status %d, want %d", when, tok[:3], got, status)
		}
	}
}

// TestTokenFileReloadRotatesTokens: the API read its tokens once, so a
// rotation needed a restart. A changed --api-token-file is read again:
// a token added is accepted, one removed is refused, and --api-token's
// stay, as at start. A file that is unreadable, empty or has a short
// token is refused with one error naming the file and the line, and the
// tokens the API had keep working.
func TestTokenFileReloadRotatesTokens(t *testing.T) {
	t.Parallel()
	b := startTokenBundle(t)
	b.expectTokens(t, "at start", map[string]int{fixedToken: 200, oldToken: 200, newToken: 401})

	writeFile(t, b.file, oldToken+"\n"+newToken+"\n")
	b.tf.reload(false)
	b.expectTokens(t, "new token added", map[string]int{fixedToken: 200, oldToken: 200, newToken: 200})
	writeFile(t, b.file, newToken+"\n")
	b.tf.reload(false)
	b.expectTokens(t, "old token removed", map[string]int{fixedToken: 200, oldToken: 401, newToken: 200})
	if out := b.log.String(); strings.Count(out, `msg="api tokens reloaded"`) != 2 || !strings.Contains(out, "tokens=2") ||
		strings.Contains(out, "token-0123") {
		t.Fatalf("log after two reloads:\n%s\nwant two info lines with the count and no token", out)
	}

	for _, bad := range []struct{ name, content, want string }{
		{"short token", newToken + "\n\nshort\n", b.file + ": line 3 has 5 characters, want at least 16"},
		{"empty", "# nothing yet\n", b.file + ": no tokens in the file"},
		{"unreadable", "", b.file + ": no such file"},
	} {
		b.log.Reset()
		if bad.name == "unreadable" {
			if err := os.Remove(b.file); err != nil {
				t.Fatal(err)
			}
		} else {
			writeFile(t, b.file, bad.content)
		}
		b.tf.reload(false)
		b.tf.reload(false) // unchanged since: not logged again
		out := b.log.String()
		if strings.Count(out, "level=ERROR") != 1 || !strings.Contains(out, bad.want) || strings.Contains(out, "short\n") {
			t.Errorf("%s file: log\n%s\nwant one error with %q", bad.name, out, bad.want)
		}
		b.expectTokens(t, bad.name+" file refused", map[string]int{fixedToken: 200, oldToken: 401, newToken: 200})
	}

	writeFile(t, b.file, oldToken+"\n")
	b.tf.reload(false)
	b.expectTokens(t, "a good file after a bad one", map[string]int{fixedToken: 200, oldToken: 200, newToken: 401})
}

// TestTokenFileWatchFollowsASymlinkSwap: a mounted Kubernetes secret
// changes by swapping a symlink to a new directory, whose file may carry
// any modification time: the poll compares the content. SIGHUP reads the
// file at once.
func TestTokenFileWatchFollowsASymlinkSwap(t *testing.T) {
	t.Parallel()
	b := startTokenBundle(t)
	dir := t.TempDir()
	for _, d := range []string{"v1", "v2"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(dir, "v1", "tokens"), oldToken+"\n")
	writeFile(t, filepath.Join(dir, "v2", "tokens"), newToken+"\n")
	when := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, d := range []string{"v1", "v2"} {
		if err := os.Chtimes(filepath.Join(dir, d, "tokens"), when, when); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("v1", filepath.Join(dir, "data")); err != nil {
		t.Fatal(err)
	}
	b.tf.path = filepath.Join(dir, "data", "tokens")

	ctx, cancel := context.WithCancel(t.Context())
	hup := make(chan os.Signal)
	done := make(chan struct{})
	go func() { defer close(done); b.tf.watch(ctx, time.Millisecond, hup) }()
	t.Cleanup(func() { cancel(); <-done })

	if err := os.Symlink("v2", filepath.Join(dir, "data.new")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "data.new"), filepath.Join(dir, "data")); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "the swapped file's token accepted", func() bool { return b.status(t, newToken) == http.StatusOK })
	b.expectTokens(t, "after the swap", map[string]int{fixedToken: 200, oldToken: 401})

	cancel()
	<-done
	b.log.Reset()
	done = make(chan struct{})
	go func() { defer close(done); b.tf.watch(t.Context(), time.Hour, hup) }()
	hup <- syscall.SIGHUP
	natstest.Eventually(t, 10*time.Second, "SIGHUP's log line", func() bool { return strings.Contains(b.log.String(), "tokens unchanged") })
}

// TestServeReloadsTheTokenFileOnSIGHUP: the built binary, serving the
// API from --api-token-file, reads the file again on SIGHUP (it stopped:
// SIGHUP's default) and accepts the token added.
func TestServeReloadsTheTokenFileOnSIGHUP(t *testing.T) {
	t.Parallel()
	_, url := natstest.StartListening(t)
	e := &cliEnv{url: url, dir: t.TempDir()}
	file := filepath.Join(e.dir, "tokens")
	writeFile(t, file, oldToken+"\n")
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := e.command(ctx, "serve", "api", "--api-addr", "127.0.0.1:0", "--api-token-file", file, "--metrics-addr", "", "--log-format", "json")
	_, lines, raw := startJSONLogged(t, cmd, false)
	await := func(msg string) map[string]any {
		t.Helper()
		for m := range lines {
			if m["msg"] == msg {
				return m
			}
		}
		t.Fatalf("serve ended before logging %q", msg)
		return nil
	}
	addr, _ := await("serving")["api"].(string)
	if addr == "" {
		t.Fatalf("serve's \"serving\" line names no api address:\n%s", raw.String())
	}
	base := "http://" + addr
	if got := bearerStatus(t, base, newToken); got != http.StatusUnauthorized {
		t.Fatalf("a token not in the file: status %d, want 401", got)
	}
	writeFile(t, file, oldToken+"\n"+newToken+"\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if m := await("api tokens reloaded"); m["tokens"] != float64(2) {
		t.Errorf("reload logged %v, want tokens 2", m)
	}
	if got := bearerStatus(t, base, newToken); got != http.StatusOK {
		t.Errorf("the added token after SIGHUP: status %d, want 200", got)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	for range lines { // drain until serve exits
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve after SIGHUP and interrupt: %v\n%s", err, raw.String())
	}
}

func (s *syncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

// TestDevKeepsItsGeneratedTokenAcrossATokenFileReload: dev, given an
// --api-token-file with no token yet, generates one and prints it for
// the CLI and curl to use. A reload of the file gave the API the file's
// tokens alone, so the token dev had printed was refused from then on.
// The file's tokens replace only the file's: the generated token stays.
func TestDevKeepsItsGeneratedTokenAcrossATokenFileReload(t *testing.T) {
	t.Parallel()
	e := &cliEnv{dir: t.TempDir(), env: []string{"FLYBALL_API_TOKENS=", "FLYBALL_API_TOKEN_FILE="}}
	file := filepath.Join(e.dir, "tokens")
	writeFile(t, file, "# no token yet\n")
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := e.command(ctx, "dev", "--listen", freeLoopback(t), "--api-addr", freeLoopback(t), "--metrics-addr", "",
		"--data-dir", filepath.Join(e.dir, "store"), "--api-token-file", file, "--log-format", "json")
	stdout, lines, raw := startJSONLogged(t, cmd, true)
	// The banner, printed once the API and the file's watch run.
	var base, generated string
	sc := bufio.NewScanner(stdout)
	for (base == "" || generated == "") && sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[0] == "HTTP" && f[1] == "API":
			base = f[2]
		case len(f) >= 4 && f[0] == "API" && f[1] == "token" && f[3] == "(generated;":
			generated = f[2]
		}
	}
	stdoutDone := make(chan struct{})
	go func() { defer close(stdoutDone); _, _ = io.Copy(io.Discard, stdout) }()
	if base == "" || generated == "" {
		_ = cmd.Process.Kill()
		<-stdoutDone
		_ = cmd.Wait()
		t.Fatalf("dev's banner gave API %q and generated token %q", base, generated)
	}
	if got := bearerStatus(t, base, generated); got != http.StatusOK {
		t.Fatalf("the generated token at start: status %d, want 200", got)
	}

	writeFile(t, file, newToken+"\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	reloaded := false
	for m := range lines {
		if reloaded = m["msg"] == "api tokens reloaded"; reloaded {
			if m["tokens"] != float64(2) {
				t.Errorf("reload logged %v, want tokens 2 (the file's and the generated one)", m)
			}
			break
		}
	}
	if !reloaded {
		t.Fatalf("dev ended before logging the reload:\n%s", raw.String())
	}
	if got := bearerStatus(t, base, newToken); got != http.StatusOK {
		t.Errorf("the file's token after SIGHUP: status %d, want 200", got)
	}
	if got := bearerStatus(t, base, generated); got != http.StatusOK {
		t.Errorf("the token dev generated and printed, after the file's reload: status %d, want 200", got)
	}
	if strings.Contains(raw.String(), generated) || strings.Contains(raw.String(), newToken) {
		t.Errorf("dev's log quotes a token:\n%s", raw.String())
	}

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	for range lines { // drain until dev exits
	}
	<-stdoutDone
	if err := cmd.Wait(); err != nil {
		t.Fatalf("dev after SIGHUP and interrupt: %v\n%s", err, raw.String())
	}
}

// startJSONLogged starts cmd, a flyball logging JSON to stderr, and
// returns its stdout when asked for, its log lines decoded (closed at
// stderr's end) and every stderr line as written.
func startJSONLogged(t *testing.T, cmd *exec.Cmd, withStdout bool) (io.ReadCloser, <-chan map[string]any, *syncBuffer) {
	t.Helper()
	var stdout io.ReadCloser
	if withStdout {
		var err error
		if stdout, err = cmd.StdoutPipe(); err != nil {
			t.Fatal(err)
		}
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan map[string]any, 100)
	raw := &syncBuffer{}
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			fmt.Fprintln(raw, sc.Text())
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
	}()
	return stdout, lines, raw
}
