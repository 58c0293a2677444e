package docexamples_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/flyballhq/flyball/services/internal/docexamples"
)

// passwordUsers are the users of accounts.conf whose password comes from
// FLYBALL_NATS_<USER>_PASSWORD.
var passwordUsers = []string{"SYS", "ADMIN", "PROVISIONER", "GOVERNOR", "TIMER", "EXECUTOR", "BREAKER", "DEADLETTER", "SWEEPER", "API", "CLI"}

// allowedPunct is the punctuation check-passwords.sh allows after the
// leading letter.
const allowedPunct = "_.~+/=@%^*!-"

// TestComposePasswordsParseAsGiven: nats-server parses the value of each
// $FLYBALL_NATS_…_PASSWORD in accounts.conf as config syntax, so a
// password such as 12345678, 2GB, true or one with a space stopped every
// node with an error naming neither the variable nor the password
// (accounts.conf:L:C: interface conversion: interface {} is int64, not
// string), and make up timed out. make up now runs
// deploy/compose/check-passwords.sh first. This runs nats-server's own
// config processing (server.ProcessConfigFile) on accounts.conf with the
// password in the environment: every value the script allows is read
// back as the same string (over each printable character in each
// place, and random values of the allowed alphabet), and every value of
// the failing kinds is refused by the script, naming the variable and not
// the value.
func TestComposePasswordsParseAsGiven(t *testing.T) {
	root := docexamples.Root(t)
	script := filepath.Join(root, "deploy", "compose", "check-passwords.sh")
	conf := filepath.Join(root, "deploy", "compose", "nats", "accounts.conf")
	for _, u := range passwordUsers {
		t.Setenv("FLYBALL_NATS_"+u+"_PASSWORD", "dev-"+strings.ToLower(u))
	}
	// Not refused for dev defaults or an unread FLYBALL_API_TOKENS
	// (TestCheckPasswordsWarnsOfDevDefaults).
	t.Setenv("FLYBALL_REQUIRE_SECRETS", "")
	t.Setenv("FLYBALL_API_TOKENS", "")
	// parses reports whether nats-server reads v back as cli's password.
	parses := func(v string) (bool, error) {
		t.Setenv("FLYBALL_NATS_CLI_PASSWORD", v)
		opts, err := server.ProcessConfigFile(conf)
		if err != nil {
			return false, err
		}
		for _, u := range opts.Users {
			if u.Username == "cli" {
				return u.Password == v, nil
			}
		}
		t.Fatal("accounts.conf has no user cli")
		return false, nil
	}
	// allows runs the script as make up does, the value set in the
	// environment (or, with envFile, only there).
	allows := func(v string, envFile bool) (bool, string) {
		cmd := exec.Command("bash", script)
		cmd.Env = append(os.Environ(), "FLYBALL_NATS_CLI_PASSWORD="+v)
		if envFile {
			f := filepath.Join(t.TempDir(), ".env")
			if err := os.WriteFile(f, []byte("# comment\nFLYBALL_NATS_CLI_PASSWORD="+v+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			// Unset in the environment: set there, even to nothing, it
			// would win over the file, as in compose.
			cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "FLYBALL_NATS_CLI_PASSWORD=") })
			cmd.Args = append(cmd.Args, f)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		if exit := (*exec.ExitError)(nil); err != nil && !errors.As(err, &exit) {
			t.Fatalf("%s: %v", script, err)
		}
		return err == nil, stderr.String()
	}

	// The allowed set parses.
	var candidates []string
	for c := byte(0x21); c < 0x7f; c++ {
		s := string(c)
		candidates = append(candidates, s+"bc", "a"+s+"b", "ab"+s, "a"+s+s)
	}
	alphabet := "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789" + allowedPunct
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100 {
		b := []byte{alphabet[rng.IntN(52)]}
		for range 8 + rng.IntN(40) {
			b = append(b, alphabet[rng.IntN(len(alphabet))])
		}
		candidates = append(candidates, string(b))
	}
	allowed := 0
	for _, v := range candidates {
		if ok, _ := allows(v, false); !ok {
			continue
		}
		allowed++
		if ok, err := parses(v); !ok {
			t.Errorf("check-passwords.sh allows %q, which nats-server does not read back as given (%v)", v, err)
		}
	}
	if allowed < 100 {
		t.Errorf("check-passwords.sh allowed only %d of %d candidates", allowed, len(candidates))
	}

	// The failing kinds are refused, by name.
	for _, v := range []string{
		"12345678", "-12", "1.5", "2GB", "12k", "2006-01-02T15:04:05Z", // numbers, sizes, a date
		"true", "yes", "off", "NO", "On", // booleans
		"with space", "a,b", "a;b", "a}b", "a]b", "a'b", `a\b`, "a\tb", "-abc", "1-2", "$abc", // parse errors
	} {
		if ok, _ := parses(v); ok {
			t.Errorf("nats-server reads %q back as given: not a failing value", v)
		}
		for _, envFile := range []bool{false, true} {
			ok, msg := allows(v, envFile)
			if ok {
				t.Errorf("check-passwords.sh allows %q (in .env: %v), which nats-server does not read back as given", v, envFile)
				continue
			}
			if !strings.Contains(msg, "FLYBALL_NATS_CLI_PASSWORD") || !strings.Contains(msg, "letters, digits and "+strings.Join(strings.Split(allowedPunct, ""), " ")) {
				t.Errorf("check-passwords.sh refuses %q without naming the variable and the allowed characters: %s", v, msg)
			}
			if !slices.Contains([]string{"true", "yes", "off", "no", "on"}, strings.ToLower(v)) && strings.Contains(msg, v) { // the booleans are in the rule it prints
				t.Errorf("check-passwords.sh refuses %q and prints it: %s", v, msg)
			}
		}
	}
}

// checkPasswords runs deploy/compose/check-passwords.sh for the tests of
// its secrets checks. secrets are docker-compose.yml's secrets, in the
// order the file names them first, defaults their published dev defaults
// and strong a strong value for each.
type checkPasswords struct {
	t                *testing.T
	script           string
	secrets          []string
	defaults, strong map[string]string
}

func newCheckPasswords(t *testing.T) *checkPasswords {
	t.Helper()
	root := docexamples.Root(t)
	compose, err := os.ReadFile(filepath.Join(root, "deploy", "compose", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	c := &checkPasswords{
		t:        t,
		script:   filepath.Join(root, "deploy", "compose", "check-passwords.sh"),
		defaults: map[string]string{},
		strong:   map[string]string{},
	}
	for _, m := range regexp.MustCompile(`\$\{(FLYBALL_[A-Z0-9_]*_(?:PASSWORD|TOKEN)):-([^}]*)\}`).FindAllStringSubmatch(string(compose), -1) {
		if _, ok := c.defaults[m[1]]; !ok {
			c.secrets = append(c.secrets, m[1])
			c.defaults[m[1]] = m[2]
			c.strong[m[1]] = "p" + strings.Repeat(fmt.Sprintf("%02x", len(c.secrets)), 12)
		}
	}
	for _, s := range []string{"FLYBALL_NATS_SYS_PASSWORD", "FLYBALL_NATS_CLI_PASSWORD", "FLYBALL_API_TOKEN", "FLYBALL_GRAFANA_PASSWORD"} {
		if _, ok := c.defaults[s]; !ok {
			t.Fatalf("docker-compose.yml gives %s no dev default: the file did not parse as expected (found %v)", s, c.secrets)
		}
	}
	return c
}

// run runs the script with env and, if not empty, an env file of
// fileLines, and no other FLYBALL_ variable.
func (c *checkPasswords) run(env map[string]string, fileLines ...string) (ok bool, lines []string) {
	t := c.t
	t.Helper()
	cmd := exec.Command("bash", c.script)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLYBALL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if len(fileLines) > 0 {
		f := filepath.Join(t.TempDir(), ".env")
		if err := os.WriteFile(f, []byte(strings.Join(fileLines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd.Args = append(cmd.Args, f)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if exit := (*exec.ExitError)(nil); err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s: %v", c.script, err)
	}
	if stdout.Len() > 0 {
		t.Errorf("check-passwords.sh wrote to stdout: %s", stdout.String())
	}
	out := strings.TrimSuffix(stderr.String(), "\n")
	for _, v := range c.strong {
		if strings.Contains(out, v) {
			t.Errorf("check-passwords.sh printed a secret's value: %s", out)
		}
	}
	if out == "" {
		return err == nil, nil
	}
	return err == nil, strings.Split(out, "\n")
}

// allSet is every secret at its strong value but except.
func (c *checkPasswords) allSet(except ...string) map[string]string {
	env := maps.Clone(c.strong)
	for _, e := range except {
		delete(env, e)
	}
	return env
}

// named reports which of the secrets each line names, in order.
func (c *checkPasswords) named(lines []string) []string {
	var got []string
	for _, l := range lines {
		for _, s := range c.secrets {
			if strings.Contains(l, s+" ") || strings.Contains(l, s+".") {
				got = append(got, s)
			}
		}
	}
	return got
}

// TestCheckPasswordsWarnsOfDevDefaults: docker-compose.yml gives every
// secret a published dev default (dev-<user> for the NATS users,
// flyball-dev-token for the API, admin for Grafana), and make up started
// on them without a word; an operator who set FLYBALL_API_TOKENS, the
// name the binary documents, got the dev token, since the compose files
// read FLYBALL_API_TOKEN. check-passwords.sh (make up) now warns once,
// naming every secret left at its default, refuses them one line each
// with FLYBALL_REQUIRE_SECRETS=1, says nothing once all are set, and
// refuses FLYBALL_API_TOKENS without FLYBALL_API_TOKEN. It never prints a
// value.
func TestCheckPasswordsWarnsOfDevDefaults(t *testing.T) {
	t.Parallel()
	c := newCheckPasswords(t)

	// Defaults: one warning naming every secret, exit 0.
	ok, lines := c.run(nil)
	if !ok || len(lines) != 1 || !strings.Contains(lines[0], "warning") || !slices.Equal(c.named(lines), c.secrets) {
		t.Errorf("defaults: ok %v, stderr:\n%s\nwant exit 0 and one warning naming %v", ok, strings.Join(lines, "\n"), c.secrets)
	}
	// FLYBALL_REQUIRE_SECRETS=1 with the defaults: refused, one line each.
	ok, lines = c.run(map[string]string{"FLYBALL_REQUIRE_SECRETS": "1"})
	if ok || len(lines) != len(c.secrets) || !slices.Equal(c.named(lines), c.secrets) {
		t.Errorf("FLYBALL_REQUIRE_SECRETS=1, defaults: ok %v, stderr:\n%s\nwant a refusal, one line for each of %v", ok, strings.Join(lines, "\n"), c.secrets)
	}
	// All set: silent, exit 0, with or without the switch.
	for _, req := range []string{"", "1"} {
		env := c.allSet()
		env["FLYBALL_REQUIRE_SECRETS"] = req
		if ok, lines := c.run(env); !ok || len(lines) != 0 {
			t.Errorf("all set (FLYBALL_REQUIRE_SECRETS=%q): ok %v, stderr:\n%s\nwant exit 0 and nothing", req, ok, strings.Join(lines, "\n"))
		}
	}
	// A secret set to its dev default counts as one, and the switch and
	// the secrets may come from the env file.
	ok, lines = c.run(c.allSet("FLYBALL_NATS_CLI_PASSWORD", "FLYBALL_GRAFANA_PASSWORD"),
		"FLYBALL_REQUIRE_SECRETS=1", "FLYBALL_NATS_CLI_PASSWORD="+c.defaults["FLYBALL_NATS_CLI_PASSWORD"],
		"FLYBALL_GRAFANA_PASSWORD="+c.strong["FLYBALL_GRAFANA_PASSWORD"])
	if want := []string{"FLYBALL_NATS_CLI_PASSWORD"}; ok || !slices.Equal(c.named(lines), want) || len(lines) != 1 {
		t.Errorf("FLYBALL_NATS_CLI_PASSWORD at its default in .env, FLYBALL_REQUIRE_SECRETS=1 there: ok %v, stderr:\n%s\nwant a refusal naming %v only", ok, strings.Join(lines, "\n"), want)
	}
	// FLYBALL_API_TOKENS, which compose does not read, without
	// FLYBALL_API_TOKEN: refused, in the environment or the file; with it,
	// nothing to say.
	for _, inFile := range []bool{false, true} {
		env, file := c.allSet("FLYBALL_API_TOKEN"), []string{"# other settings"}
		if inFile {
			file = append(file, "FLYBALL_API_TOKENS="+c.strong["FLYBALL_API_TOKEN"])
		} else {
			env["FLYBALL_API_TOKENS"] = c.strong["FLYBALL_API_TOKEN"]
		}
		ok, lines := c.run(env, file...)
		if ok || len(lines) < 1 || !strings.Contains(lines[0], "FLYBALL_API_TOKENS (from ") || !strings.Contains(lines[0], "set FLYBALL_API_TOKEN instead") {
			t.Errorf("FLYBALL_API_TOKENS without FLYBALL_API_TOKEN (in the env file: %v): ok %v, stderr:\n%s\nwant a refusal that names both", inFile, ok, strings.Join(lines, "\n"))
		}
	}
	env := c.allSet()
	env["FLYBALL_API_TOKENS"] = c.strong["FLYBALL_API_TOKEN"]
	if ok, lines := c.run(env); !ok || len(lines) != 0 {
		t.Errorf("FLYBALL_API_TOKENS and FLYBALL_API_TOKEN: ok %v, stderr:\n%s\nwant exit 0 and nothing", ok, strings.Join(lines, "\n"))
	}
}

// TestCheckPasswordsJudgesAnEmptySecretAsComposeDoes: a variable set in
// the shell wins over deploy/compose/.env in docker-compose even when it
// is empty, and ${FLYBALL_API_TOKEN:-flyball-dev-token} then gives the
// dev default. check-passwords.sh read an empty one from the file
// instead, so a deploy shell exporting FLYBALL_API_TOKEN= (a missing CI
// secret) passed FLYBALL_REQUIRE_SECRETS=1 on the file's strong secrets
// while the API accepted flyball-dev-token. It now judges the empty
// value compose uses: refused with the switch, warned of without. An
// empty switch in the shell does not turn off the file's (compose does
// not read it).
func TestCheckPasswordsJudgesAnEmptySecretAsComposeDoes(t *testing.T) {
	t.Parallel()
	c := newCheckPasswords(t)

	var file []string
	for _, s := range c.secrets {
		file = append(file, s+"="+c.strong[s])
	}
	want := []string{"FLYBALL_API_TOKEN"}
	for _, env := range []map[string]string{
		{"FLYBALL_API_TOKEN": ""},
		{"FLYBALL_API_TOKEN": "", "FLYBALL_REQUIRE_SECRETS": ""},
	} {
		ok, lines := c.run(env, append(slices.Clone(file), "FLYBALL_REQUIRE_SECRETS=1")...)
		if ok || len(lines) != 1 || !slices.Equal(c.named(lines), want) {
			t.Errorf("every secret and FLYBALL_REQUIRE_SECRETS=1 in .env, %v in the shell: ok %v, stderr:\n%s\nwant a refusal naming %v only",
				env, ok, strings.Join(lines, "\n"), want)
		}
	}
	ok, lines := c.run(map[string]string{"FLYBALL_API_TOKEN": ""}, file...)
	if !ok || len(lines) != 1 || !strings.Contains(lines[0], "warning") || !slices.Equal(c.named(lines), want) {
		t.Errorf("every secret in .env, FLYBALL_API_TOKEN= in the shell: ok %v, stderr:\n%s\nwant exit 0 and a warning naming %v only", ok, strings.Join(lines, "\n"), want)
	}
}
