package docexamples_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
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
			cmd.Env = append(os.Environ(), "FLYBALL_NATS_CLI_PASSWORD=")
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
