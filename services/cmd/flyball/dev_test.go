package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flyballhq/flyball/services/embedded"
)

// TestDevNATSSyncReachesTheServer: dev's --nats-sync, parsed from its
// command line (and its default, 1s), is the Sync of the config dev
// starts its embedded nats-server with (devServerConfig, then
// embedded.Start). That a config's Sync is what the running server uses
// is embedded's TestStartAppliesSync, against a real server.
func TestDevNATSSyncReachesTheServer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want embedded.Sync
	}{
		{nil, embedded.Sync{Interval: time.Second}},
		{[]string{"--nats-sync", "5s"}, embedded.Sync{Interval: 5 * time.Second}},
		{[]string{"--nats-sync", "always"}, embedded.Sync{Always: true}},
	} {
		cmd := newDevCmd()
		args := append([]string{"--listen", "127.0.0.1:14222", "--data-dir", t.TempDir()}, tc.args...)
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		get := func(name string) string {
			v, err := cmd.Flags().GetString(name)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		cfg, err := devServerConfig(get("listen"), false, get("data-dir"), get("nats-sync"), false)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if cfg.Sync != tc.want {
			t.Errorf("flyball dev %v: the server's Sync is %+v, want %+v", tc.args, cfg.Sync, tc.want)
		}
	}
}

// TestDevRefusesANonLoopbackListenWithoutOptIn: the embedded nats-server
// has no authentication, and dev lets tasks call loopback addresses, so
// a --listen reachable from the network let anyone there run requests
// against this machine's loopback services and read their responses.
// dev refuses it in one line naming --listen, before it starts anything
// (its store is not created), unless --listen-insecure is given.
func TestDevRefusesANonLoopbackListenWithoutOptIn(t *testing.T) {
	t.Parallel()
	_, port, err := net.SplitHostPort(freeLoopback(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, listen := range []string{"0.0.0.0:" + port, "[::]:" + port} {
		e := &cliEnv{url: "nats://127.0.0.1:1", dir: t.TempDir()}
		args := []string{"dev", "--listen", listen, "--api-addr", freeLoopback(t), "--metrics-addr", "", "--data-dir", "store"}
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		var stderr bytes.Buffer
		cmd := e.command(ctx, args...)
		cmd.Stderr = &stderr
		start := time.Now()
		err := cmd.Run()
		cancel()
		code := -1
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			code = ee.ExitCode()
		case err == nil:
			code = 0
		}
		want := "flyball: --listen " + listen + ": "
		if code != 1 || !strings.HasPrefix(stderr.String(), want) || !strings.Contains(stderr.String(), "--listen-insecure") || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("flyball %s: exit %d after %s, stderr %q; want exit 1 and one line starting %q naming --listen-insecure",
				strings.Join(args, " "), code, time.Since(start).Round(time.Second), stderr.String(), want)
		}
		if _, err := os.Stat(filepath.Join(e.dir, "store")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("flyball %s: its store exists (stat: %v), want nothing started", strings.Join(args, " "), err)
		}
	}
}

// TestDevListenHostsNeedingNoOptIn: loopback hosts pass as they are; any
// other host passes only with --listen-insecure.
func TestDevListenHostsNeedingNoOptIn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, listen := range []string{"127.0.0.1:4222", "127.0.0.2:4222", "localhost:4222", "[::1]:4222"} {
		if _, err := devServerConfig(listen, false, dir, "1s", false); err != nil {
			t.Errorf("--listen %s: %v, want it accepted", listen, err)
		}
	}
	// A port alone listened on 127.0.0.1 before --listen took loopback
	// only, and still does: a script that changes the port keeps working.
	if cfg, err := devServerConfig(":4223", false, dir, "1s", false); err != nil || cfg.Host != "127.0.0.1" {
		t.Errorf("--listen :4223: host %q, %v; want 127.0.0.1, accepted", cfg.Host, err)
	}
	for _, listen := range []string{"0.0.0.0:4222", "[::]:4222", "192.0.2.1:4222", "example.com:4222"} {
		if _, err := devServerConfig(listen, false, dir, "1s", false); err == nil || !strings.Contains(err.Error(), "--listen-insecure") {
			t.Errorf("--listen %s without --listen-insecure: %v, want a refusal naming --listen-insecure", listen, err)
		}
		if _, err := devServerConfig(listen, true, dir, "1s", false); err != nil {
			t.Errorf("--listen %s --listen-insecure: %v, want it accepted", listen, err)
		}
	}
}

// TestDevListenOnPortZeroPrintsThePortItGot: --listen 127.0.0.1:0 picks
// a free port, and the banner names it, so the nats CLI lines it prints
// reach the server. Port 0 became 4222 while the banner said
// nats://127.0.0.1:0.
func TestDevListenOnPortZeroPrintsThePortItGot(t *testing.T) {
	t.Parallel()
	e := &cliEnv{dir: t.TempDir(), env: []string{"FLYBALL_API_TOKENS=", "FLYBALL_API_TOKEN_FILE="}}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := e.command(ctx, "dev", "--listen", "127.0.0.1:0", "--api-addr", freeLoopback(t), "--metrics-addr", "",
		"--data-dir", filepath.Join(e.dir, "store"), "--log-format", "json")
	stdout, lines, raw := startJSONLogged(t, cmd, true)
	var natsURL string
	sc := bufio.NewScanner(stdout)
	for natsURL == "" && sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "NATS" && f[1] == "(JetStream)" {
			natsURL = f[2]
		}
	}
	stdoutDone := make(chan struct{})
	go func() { defer close(stdoutDone); _, _ = io.Copy(io.Discard, stdout) }()
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		for range lines { // drain until dev exits
		}
		<-stdoutDone
		_ = cmd.Wait()
	}()
	if natsURL == "" {
		t.Fatalf("dev printed no NATS address:\n%s", raw.String())
	}
	if strings.HasSuffix(natsURL, ":0") {
		t.Fatalf("dev's banner names %s, want the port the server listens on", natsURL)
	}
	nc, err := nats.Connect(natsURL, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("connecting to the banner's %s: %v", natsURL, err)
	}
	nc.Close()
}

// TestDevBannerNamesTheAddressesListenedOn: the banner's metrics URL is
// the listener's address, called on 127.0.0.1 when its host is
// unspecified, as the API's is. It printed --metrics-addr as given:
// http://:0/metrics for a random port, http://:9090/metrics for
// FLYBALL_METRICS_ADDR=:9090.
func TestDevBannerNamesTheAddressesListenedOn(t *testing.T) {
	t.Parallel()
	e := &cliEnv{dir: t.TempDir(), env: []string{"FLYBALL_API_TOKENS=", "FLYBALL_API_TOKEN_FILE=", "FLYBALL_METRICS_ADDR=:0"}}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := e.command(ctx, "dev", "--listen", "127.0.0.1:0", "--api-addr", ":0",
		"--data-dir", filepath.Join(e.dir, "store"), "--log-format", "json")
	stdout, lines, raw := startJSONLogged(t, cmd, true)
	var apiURL, metricsURL string
	sc := bufio.NewScanner(stdout)
	for metricsURL == "" && sc.Scan() {
		switch f := strings.Fields(sc.Text()); {
		case len(f) >= 3 && f[0] == "HTTP" && f[1] == "API":
			apiURL = f[2]
		case len(f) >= 2 && f[0] == "Metrics":
			metricsURL = f[1]
		}
	}
	stdoutDone := make(chan struct{})
	go func() { defer close(stdoutDone); _, _ = io.Copy(io.Discard, stdout) }()
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		for range lines { // drain until dev exits
		}
		<-stdoutDone
		_ = cmd.Wait()
	}()
	if metricsURL == "" {
		t.Fatalf("dev printed no metrics address:\n%s", raw.String())
	}
	for _, u := range []string{apiURL, metricsURL} {
		if !strings.HasPrefix(u, "http://127.0.0.1:") || strings.HasPrefix(u, "http://127.0.0.1:0/") {
			t.Errorf("dev's banner names %q, want http://127.0.0.1:<the port it got>", u)
		}
	}
	for _, u := range []string{apiURL + "/healthz", metricsURL} {
		resp, err := http.Get(u)
		if err != nil {
			t.Errorf("GET the banner's %s: %v", u, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET the banner's %s: %s", u, resp.Status)
		}
	}
}

// TestDevNamesDataDirForAnUnusableStore: a --data-dir where the store
// cannot be created stops dev at once, in one line naming the flag (the
// embedded server's own check, ErrStoreDir; dev checked it a second time
// before).
func TestDevNamesDataDirForAnUnusableStore(t *testing.T) {
	t.Parallel()
	e := &cliEnv{url: "nats://127.0.0.1:1", dir: t.TempDir()}
	if err := os.WriteFile(filepath.Join(e.dir, "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := e.command(ctx, "dev", "--listen", "127.0.0.1:0", "--api-addr", freeLoopback(t), "--metrics-addr", "", "--data-dir", filepath.Join("file", "sub"))
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.HasPrefix(stderr.String(), "flyball: --data-dir file/sub: ") || strings.Count(stderr.String(), "\n") != 1 {
		t.Fatalf("dev with a store under a file: %v, stderr %q; want exit 1 and one line naming --data-dir", err, stderr.String())
	}
}

// TestDevRefusesADataDirInUse: a second dev on the --data-dir of one
// running is refused at once, in one line naming --data-dir and the
// running one's pid. It started on the same JetStream store: both ran
// every task (the target called twice a run), and the store could be
// damaged.
func TestDevRefusesADataDirInUse(t *testing.T) {
	t.Parallel()
	e := &cliEnv{dir: t.TempDir(), env: []string{"FLYBALL_API_TOKENS=", "FLYBALL_API_TOKEN_FILE="}}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	first := e.command(ctx, "dev", "--listen", "127.0.0.1:0", "--api-addr", freeLoopback(t), "--metrics-addr", "",
		"--data-dir", "store", "--log-format", "json")
	stdout, lines, raw := startJSONLogged(t, first, true)
	running := false
	sc := bufio.NewScanner(stdout)
	for !running && sc.Scan() {
		running = strings.HasPrefix(sc.Text(), "flyball dev is running.")
	}
	stdoutDone := make(chan struct{})
	go func() { defer close(stdoutDone); _, _ = io.Copy(io.Discard, stdout) }()
	defer func() {
		_ = first.Process.Signal(os.Interrupt)
		for range lines { // drain until dev exits
		}
		<-stdoutDone
		_ = first.Wait()
	}()
	if !running {
		t.Fatalf("the first dev printed no banner:\n%s", raw.String())
	}

	args := []string{"dev", "--listen", "127.0.0.1:0", "--api-addr", freeLoopback(t), "--metrics-addr", "", "--data-dir", "store"}
	secondCtx, cancelSecond := context.WithTimeout(ctx, 20*time.Second)
	defer cancelSecond()
	var stderr bytes.Buffer
	second := e.command(secondCtx, args...)
	second.Stderr = &stderr
	err := second.Run()
	var ee *exec.ExitError
	want := fmt.Sprintf("flyball: --data-dir store is in use by another flyball dev (pid %d)\n", first.Process.Pid)
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || stderr.String() != want {
		t.Fatalf("flyball %s while another dev runs on it: %v, stderr %q; want exit 1 and %q", strings.Join(args, " "), err, stderr.String(), want)
	}
}
