package docexamples_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/flyballhq/flyball/services/internal/docexamples"
)

// TestSecurityDocNamesEveryComposeUser: every `{ user: X, password: $VAR }`
// of deploy/compose/nats/accounts.conf is in docs/security.md's tables: X in
// the Accounts table (in its account's row) and in the per-user table,
// and $VAR in "Passwords and tokens" with the default docker-compose.yml
// gives it and X among the users it is for. The provisioner, the one user
// that may update streams (and so drop stored messages by lowering their
// limits), was in neither the Accounts table nor the passwords table, so an
// operator following the page left FLYBALL_NATS_PROVISIONER_PASSWORD at
// its dev default.
func TestSecurityDocNamesEveryComposeUser(t *testing.T) {
	t.Parallel()
	root := docexamples.Root(t)
	conf, err := os.ReadFile(filepath.Join(root, "deploy", "compose", "nats", "accounts.conf"))
	if err != nil {
		t.Fatal(err)
	}
	compose, err := os.ReadFile(filepath.Join(root, "deploy", "compose", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := docexamples.Tables(root, "docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	table := func(header string) [][]string {
		rows, err := docexamples.FindTable(tables, "docs/security.md", header)
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	accounts, perUser, passwords := table("| account | users"), table("| user | publishes"), table("| variable | default")

	accountRE := regexp.MustCompile(`^\s*([A-Z][A-Z0-9_]*):\s*\{`)
	userRE := regexp.MustCompile(`\{\s*user:\s*([a-z0-9_-]+)\s*,\s*password:\s*\$([A-Z0-9_]+)`)
	inAccounts, account, n := false, "", 0
	for line := range strings.SplitSeq(string(conf), "\n") {
		if strings.HasPrefix(line, "accounts {") {
			inAccounts = true
		}
		if !inAccounts {
			continue
		}
		if m := accountRE.FindStringSubmatch(line); m != nil {
			account = m[1]
		}
		m := userRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n++
		user, variable := m[1], m[2]
		code := "`" + user + "`"
		if !slicesAny(accounts, func(r []string) bool { return r[0] == "`"+account+"`" && strings.Contains(r[1], code) }) {
			t.Errorf("user %s (account %s in accounts.conf) is not in the row of %s in docs/security.md's Accounts table", user, account, account)
		}
		if !slicesAny(perUser, func(r []string) bool { return r[0] == code }) {
			t.Errorf("user %s (accounts.conf) has no row in docs/security.md's per-user table", user)
		}
		def := regexp.MustCompile(`\$\{` + variable + `:-([^}]*)\}`).FindSubmatch(compose)
		if def == nil {
			t.Errorf("%s (user %s in accounts.conf) has no default in docker-compose.yml", variable, user)
			continue
		}
		if !slicesAny(passwords, func(r []string) bool {
			return passwordRow(r, variable, user, string(def[1]))
		}) {
			t.Errorf("%s (user %s in accounts.conf, default %s) is not in docs/security.md's \"Passwords and tokens\" table with that default and user", variable, user, def[1])
		}
	}
	if n < 10 {
		t.Fatalf("found %d users in accounts.conf, want at least 10", n)
	}
}

// passwordRow reports whether the "Passwords and tokens" row r gives
// variable, with default def, for user: by name, or by the pattern
// FLYBALL_NATS_<SERVICE>_PASSWORD with default dev-<service> when its
// "used by" cell names the user.
func passwordRow(r []string, variable, user, def string) bool {
	if len(r) < 3 || !strings.Contains(r[2], "`"+user+"`") {
		return false
	}
	v, d := strings.Trim(r[0], "`"), strings.Trim(r[1], "`")
	if strings.Contains(v, "<SERVICE>") {
		v = strings.ReplaceAll(v, "<SERVICE>", strings.ToUpper(user))
		d = strings.ReplaceAll(d, "<service>", user)
	}
	return v == variable && d == def
}

func slicesAny(rows [][]string, f func([]string) bool) bool {
	for _, r := range rows {
		if len(r) >= 2 && f(r) {
			return true
		}
	}
	return false
}
