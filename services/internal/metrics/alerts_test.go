package metrics

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"
)

// alertRules is the part of a Prometheus rules file the test reads.
type alertRules struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// labelNames returns the variable label names of every collector field of
// s, by metric name.
func labelNames(t *testing.T, s *Set) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, c := range []prometheus.Collector{s.Registry} {
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			name := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String())
			labels := regexp.MustCompile(`variableLabels: \{([^}]*)\}`).FindStringSubmatch(d.String())
			if name == nil || labels == nil {
				t.Fatalf("cannot read the name and labels of %s", d)
			}
			out[name[1]] = strings.FieldsFunc(labels[1], func(r rune) bool { return r == ',' || r == ' ' })
		}
	}
	return out
}

// TestAlertRulesAreSound: every rule in the compose Prometheus's
// alerts.yml queries series and labels flyball exports (a renamed metric
// or label would leave an alert that can never fire), has a severity, a
// summary and a runbook that is a section of docs/operations.md, and the
// compose stack loads the file.
func TestAlertRulesAreSound(t *testing.T) {
	raw, err := os.ReadFile("../../../deploy/compose/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules alertRules
	if err := yaml.UnmarshalStrict(raw, &rules); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	set := New()
	set.Registry.MustRegister(set.TaskStaleness)
	exported := labelNames(t, set)
	ops, err := os.ReadFile("../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, h := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(ops), -1) {
		anchors[strings.ToLower(strings.ReplaceAll(strings.TrimSpace(h[1]), " ", "-"))] = true
	}
	if !anchors["alerts"] {
		t.Error("docs/operations.md has no Alerts section")
	}
	series := regexp.MustCompile(`(flyball_[a-z_]+[a-z])(\{[^}]*\})?`)
	matcher := regexp.MustCompile(`([a-z_]+)\s*(=~|!~|!=|=)\s*"`)
	seen := map[string]bool{}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			where := r.Alert
			if !regexp.MustCompile(`^Flyball[A-Z][A-Za-z]+$`).MatchString(r.Alert) || seen[r.Alert] {
				t.Errorf("alert %q: want a unique name Flyball<What>", r.Alert)
			}
			seen[r.Alert] = true
			if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
				t.Errorf("%s: severity %q, want critical, warning or info", where, r.Labels["severity"])
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s: no %s annotation", where, a)
				}
			}
			// The Alerts table is the index an operator reads first.
			if row := "| [" + r.Alert + "](#" + strings.ToLower(r.Alert) + ") | " + r.Labels["severity"] + " |"; !strings.Contains(string(ops), row) {
				t.Errorf("%s: docs/operations.md's alerts table has no row %q", where, row)
			} else if err := rowStatesFor(string(ops), row, r.For); err != nil {
				t.Errorf("%s: docs/operations.md's alerts table: %v", where, err)
			}
			if want := "docs/operations.md#" + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", where, r.Annotations["runbook_url"], want)
			} else if !anchors[strings.ToLower(r.Alert)] {
				t.Errorf("%s: docs/operations.md has no section %q", where, r.Alert)
			}
			if !balanced(r.Expr) {
				t.Errorf("%s: unbalanced brackets or quotes in %q", where, r.Expr)
			}
			for _, m := range series.FindAllStringSubmatch(r.Expr, -1) {
				base := m[1]
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					base = strings.TrimSuffix(base, suffix)
				}
				labels, ok := exported[base]
				if !ok {
					t.Errorf("%s queries %s, which flyball does not export", where, m[1])
					continue
				}
				if strings.HasSuffix(m[1], "_bucket") {
					labels = append(labels, "le")
				}
				for _, lm := range matcher.FindAllStringSubmatch(m[2], -1) {
					if !slices.Contains(labels, lm[1]) {
						t.Errorf("%s matches label %q of %s, which has %v", where, lm[1], base, labels)
					}
				}
			}
		}
	}
	if n < 10 {
		t.Fatalf("alerts.yml has %d rules, want the full set", n)
	}
	prom, err := os.ReadFile("../../../deploy/compose/prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^rule_files:\n\s+- alerts\.yml$`).Match(prom) {
		t.Error("prometheus.yml does not load alerts.yml")
	}
	for _, f := range []string{"docker-compose.yml", "docker-compose.single.yml"} {
		compose, err := os.ReadFile("../../../deploy/compose/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(compose), "./prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro") {
			t.Errorf("%s does not mount alerts.yml into Prometheus", f)
		}
	}
}

// holdRE is a table row's hold: "for <n> min".
var holdRE = regexp.MustCompile(`\bfor (\d+) min\b`)

// rowStatesFor checks that the alerts table's row (its start, row) says how
// long the condition must hold before the alert fires: "for <n> min" with
// a rule's `for`, and no such hold without one (a window instead). The
// FlyballInstanceOffline row left out its `for: 1m`, and read as if the
// alert fired at the sweeper's mark.
func rowStatesFor(ops, row, forDur string) error {
	line, _, _ := strings.Cut(ops[strings.Index(ops, row)+len(row):], "\n")
	hold := holdRE.FindStringSubmatch(line)
	if forDur == "" {
		if hold != nil {
			return fmt.Errorf("the rule has no `for`, but its row says %q", hold[0])
		}
		return nil
	}
	d, err := time.ParseDuration(forDur)
	if err != nil || d%time.Minute != 0 {
		return fmt.Errorf("`for: %s` is not whole minutes, which the row says as \"for <n> min\"", forDur)
	}
	if want := fmt.Sprintf("for %d min", d/time.Minute); hold == nil || hold[0] != want {
		return fmt.Errorf("the rule has `for: %s`, but its row does not say %q:%s", forDur, want, line)
	}
	return nil
}

// balanced reports whether the brackets of a PromQL expression pair up
// outside its double-quoted strings, and every string is closed.
func balanced(expr string) bool {
	var stack []rune
	pair := map[rune]rune{')': '(', ']': '[', '}': '{'}
	quoted := false
	for _, r := range expr {
		switch {
		case r == '"':
			quoted = !quoted
		case quoted:
		case r == '(' || r == '[' || r == '{':
			stack = append(stack, r)
		case pair[r] != 0:
			if len(stack) == 0 || stack[len(stack)-1] != pair[r] {
				return false
			}
			stack = stack[:len(stack)-1]
		}
	}
	return !quoted && len(stack) == 0
}
