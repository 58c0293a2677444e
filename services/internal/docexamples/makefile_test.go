package docexamples_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flyballhq/flyball/services/internal/docexamples"
)

// fakeGo stands in for the go command in `make fuzz`: one package with two
// fuzz targets, FuzzA and FuzzB, whose runs end as FAKE_FUZZ says.
const fakeGo = `#!/usr/bin/env bash
case "$1 $2" in
"list -f"*) echo example.com/p ;;
"test -list") printf 'FuzzA\nFuzzB\nok  \texample.com/p\t0.01s\n' ;;
"test -run="*)
  name=${3#-fuzz=^}; name=${name%\$}
  echo "fuzz: elapsed: 1s, execs: 10 (10/sec), new interesting: 0 (total: 0)"
  case "$FAKE_FUZZ:$name" in
  spurious:*|spuriousA:FuzzA) # golang/go#75804, byte for byte
    printf -- '--- FAIL: %s (1.00s)\n    context deadline exceeded\nFAIL\nexit status 1\nFAIL\texample.com/p\t1.01s\n' "$name"
    exit 1 ;;
  crash:FuzzA) # a real finding: a failing input, which also ends in a deadline line
    printf -- '--- FAIL: %s (1.00s)\n    context deadline exceeded\nFAIL\n    Failing input written to testdata/fuzz/%s/0a1b\nexit status 1\n' "$name" "$name"
    exit 1 ;;
  panic:FuzzA)
    printf -- '--- FAIL: %s (1.00s)\n    --- FAIL: %s (0.00s)\n        testing.go:1: panic: boom\nFAIL\nexit status 1\n' "$name" "$name"
    exit 1 ;;
  more:FuzzA) # the deadline and something else
    printf -- '--- FAIL: %s (1.00s)\n    context deadline exceeded\n    decode: mismatch\nFAIL\nexit status 1\n' "$name"
    exit 1 ;;
  esac
  printf 'PASS\nok  \texample.com/p\t1.01s\n' ;;
*) echo "fake go: unexpected: $*" >&2; exit 2 ;;
esac
`

// TestMakeFuzzPassesOverGo126sSpuriousDeadlineOnly runs `make fuzz` with a
// fake go command. Go 1.26's fuzz coordinator can fail a target that found
// nothing with a bare "context deadline exceeded" (golang/go#75804); make
// fuzz says so and fuzzes the other targets. Any other failure, a failing
// input above all, still stops it.
func TestMakeFuzzPassesOverGo126sSpuriousDeadlineOnly(t *testing.T) {
	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Fatalf("make is required (README): %v", err)
	}
	root := docexamples.Root(t)
	goBin := filepath.Join(t.TempDir(), "go")
	if err := os.WriteFile(goBin, []byte(fakeGo), 0o755); err != nil {
		t.Fatal(err)
	}
	const note = "golang/go#75804"
	for _, c := range []struct {
		scenario string
		ok       bool   // make succeeds, having fuzzed both; else it stops after FuzzA
		spurious string // the closing line's list, if any
	}{
		{scenario: "pass", ok: true},
		{scenario: "spuriousA", ok: true, spurious: "ended: FuzzA\n"},
		{scenario: "spurious", ok: true, spurious: "ended: FuzzA FuzzB\n"},
		{scenario: "crash"},
		{scenario: "panic"},
		{scenario: "more"},
	} {
		t.Run(c.scenario, func(t *testing.T) {
			cmd := exec.Command(makeBin, "-s", "-C", root, "fuzz", "GO="+goBin, "MODULES="+filepath.Join(root, "pkg"), "FUZZTIME=1s")
			// Not the jobserver or flags of a make that runs this test.
			cmd.Env = append(os.Environ(), "FAKE_FUZZ="+c.scenario, "MAKEFLAGS=", "MFLAGS=", "MAKELEVEL=")
			out, err := cmd.CombinedOutput()
			if (err == nil) != c.ok {
				t.Fatalf("make fuzz: err %v, want ok %v; output:\n%s", err, c.ok, out)
			}
			for _, name := range []string{"FuzzA", "FuzzB"} {
				started := strings.Contains(string(out), "--> example.com/p "+name+" (1s)")
				if want := c.ok || name == "FuzzA"; started != want {
					t.Errorf("%s started: %v, want %v; output:\n%s", name, started, want, out)
				}
			}
			if got := strings.Contains(string(out), note); got != (c.spurious != "") {
				t.Errorf("output names %s: %v, want %v; output:\n%s", note, got, c.spurious != "", out)
			}
			if c.spurious != "" && !strings.HasSuffix(string(out), c.spurious) {
				t.Errorf("output does not end with %q; output:\n%s", c.spurious, out)
			}
		})
	}
}

// TestMakeUpPrintsWhatTheStackNeeds: the quickstart `make up` prints
// works for the stack it started. With docker-compose.tls.yml the NATS
// port speaks TLS only, and the printed nats:// URL without the dev CA
// failed (x509: certificate is valid for 127.0.0.1, not 172.21.0.3); and
// `make down` without the project and files `make up` got would remove a
// different stack, or none.
func TestMakeUpPrintsWhatTheStackNeeds(t *testing.T) {
	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Fatalf("make is required (README): %v", err)
	}
	root := docexamples.Root(t)
	for _, c := range []struct {
		args []string
		want []string
		not  []string
	}{
		{
			want: []string{"NATS_URL=nats://127.0.0.1:4222 ", "make down\n"},
			not:  []string{"NATS_CA", "COMPOSE_FILES="},
		},
		{
			args: []string{"COMPOSE_FILES=docker-compose.yml docker-compose.tls.yml", "COMPOSE_PROJECT=drill"},
			want: []string{
				"NATS_URL=tls://127.0.0.1:4222 ", " NATS_CA=deploy/compose/tls/ca.pem\n",
				`make down COMPOSE_PROJECT=drill COMPOSE_FILES="docker-compose.yml docker-compose.tls.yml"` + "\n",
			},
		},
		{
			args: []string{"COMPOSE_FILES=docker-compose.single.yml"},
			want: []string{"NATS_URL=nats://127.0.0.1:4222 ", `make down COMPOSE_FILES="docker-compose.single.yml"` + "\n", "-p flyball -f deploy/compose/docker-compose.single.yml run"},
			not:  []string{"NATS_CA"},
		},
	} {
		// Not a deploy/compose/.env of the checkout's own.
		args := append([]string{"-s", "-C", root, "up-info", "COMPOSE_ENV=" + filepath.Join(t.TempDir(), ".env")}, c.args...)
		cmd := exec.Command(makeBin, args...)
		cmd.Env = append(os.Environ(), "MAKEFLAGS=", "MFLAGS=", "MAKELEVEL=",
			"FLYBALL_NATS_PORT=", "FLYBALL_API_PORT=", "FLYBALL_TARGET_PORT=", "FLYBALL_NATS_MONITOR_PORT=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make up-info %q: %v\n%s", c.args, err, out)
		}
		for _, w := range c.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("make up-info %q: output does not contain %q:\n%s", c.args, w, out)
			}
		}
		for _, n := range c.not {
			if strings.Contains(string(out), n) {
				t.Errorf("make up-info %q: output contains %q:\n%s", c.args, n, out)
			}
		}
	}
}

// TestMakeUpInfoReadsTheEnvFileAndPrintsNoSecret: compose reads
// deploy/compose/.env (docs/security.md recommends it for the secrets),
// but `make up` printed its addresses and quickstart from the shell's
// environment only: the dev token, password and ports while the stack
// ran on the file's. And a token or password set in the shell was
// printed in clear, into the terminal's scrollback and CI logs. make
// up-info now reads the file as compose does (the shell's value wins) and
// prints a secret that is set as the variable to use, never its value;
// one at its published dev default is printed as such.
func TestMakeUpInfoReadsTheEnvFileAndPrintsNoSecret(t *testing.T) {
	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Fatalf("make is required (README): %v", err)
	}
	root := docexamples.Root(t)
	const (
		fileToken, filePassword   = "file-token-0123456789abcdef", "pFileCliPassword42"
		shellToken, shellPassword = "shell-token-0123456789abcdef", "pShellCliPassword42"
	)
	upInfo := func(envFile string, env ...string) string {
		t.Helper()
		cmd := exec.Command(makeBin, "-s", "-C", root, "up-info", "COMPOSE_ENV="+envFile)
		// No FLYBALL_ variable but env's: one set in the shell, even to
		// nothing, wins over the file.
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "FLYBALL_") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, "MAKEFLAGS=", "MFLAGS=", "MAKELEVEL=")
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make up-info: %v\n%s", err, out)
		}
		return string(out)
	}
	check := func(name, out string, want, not []string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: make up-info does not print %q:\n%s", name, w, out)
			}
		}
		for _, n := range not {
			if strings.Contains(out, n) {
				t.Errorf("%s: make up-info prints %q:\n%s", name, n, out)
			}
		}
	}
	envFile := filepath.Join(t.TempDir(), ".env")
	if err := os.WriteFile(envFile, []byte(strings.Join([]string{
		"# the deployment's settings",
		"FLYBALL_API_PORT=18080",
		"FLYBALL_NATS_PORT=14222",
		`FLYBALL_API_TOKEN="` + fileToken + `"`,
		"export FLYBALL_NATS_CLI_PASSWORD=" + filePassword,
	}, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	load := "set -a; . " + envFile + "; set +a"
	const tokenRef, passwordRef = `-H "Authorization: Bearer $FLYBALL_API_TOKEN"`, `NATS_PASSWORD="$FLYBALL_NATS_CLI_PASSWORD"`

	// The file's settings, but the shell's NATS port.
	check("settings in the env file", upInfo(envFile, "FLYBALL_NATS_PORT=24222"),
		[]string{"http://127.0.0.1:18080", "nats://127.0.0.1:24222", tokenRef, passwordRef, load},
		[]string{fileToken, filePassword, "flyball-dev-token", "dev-cli", ":8080", "14222"})
	// A token set but empty in the shell: compose gives the API the dev
	// default, not the file's token.
	check("token empty in the shell", upInfo(envFile, "FLYBALL_API_TOKEN="),
		[]string{`-H "Authorization: Bearer flyball-dev-token"`, "the dev default", passwordRef, load},
		[]string{tokenRef, fileToken, filePassword})
	// Secrets in the shell: named, not printed, and nothing to load.
	none := filepath.Join(t.TempDir(), ".env")
	check("secrets in the shell", upInfo(none, "FLYBALL_API_TOKEN="+shellToken, "FLYBALL_NATS_CLI_PASSWORD="+shellPassword),
		[]string{tokenRef, passwordRef, "http://127.0.0.1:8080"},
		[]string{shellToken, shellPassword, "flyball-dev-token", "dev-cli", "set -a"})
	// Nothing set: the published dev defaults, as they are.
	check("dev defaults", upInfo(none),
		[]string{"flyball-dev-token", "NATS_PASSWORD=dev-cli", "http://127.0.0.1:8080"},
		[]string{"$FLYBALL_API_TOKEN", "$FLYBALL_NATS_CLI_PASSWORD", "set -a"})
}
