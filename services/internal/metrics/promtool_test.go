package metrics

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/flyballhq/flyball/services/internal/promtest"
)

const (
	alertsFile      = "../../../deploy/compose/prometheus/alerts.yml"
	alertsTestsFile = "../../../deploy/compose/prometheus/alerts_test.yml"
	dashboardFile   = "../../../deploy/compose/grafana/dashboards/flyball.json"
)

// runPromtool runs promtool with args in dir and fails the test with its
// output if it fails.
func runPromtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(promtest.Path(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestAlertRulesPromtool: promtool parses alerts.yml (PromQL, templates,
// durations) and every unit test of alerts_test.yml passes: each alert
// fires with its labels and annotations when its condition holds for its
// `for`, and stays silent just below its threshold and before then.
func TestAlertRulesPromtool(t *testing.T) {
	dir := filepath.Dir(alertsFile)
	runPromtool(t, dir, "check", "rules", filepath.Base(alertsFile))
	runPromtool(t, dir, "test", "rules", filepath.Base(alertsTestsFile))
}

// promtoolTests is the part of a promtool rule test file the test reads.
type promtoolTests struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			EvalTime  string `json:"eval_time"`
			Alertname string `json:"alertname"`
			ExpAlerts []struct {
				ExpLabels      map[string]string `json:"exp_labels"`
				ExpAnnotations map[string]string `json:"exp_annotations"`
			} `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestEveryAlertHasPromtoolTests: alerts_test.yml tests alerts.yml, and
// every alert in it has a case where it fires, with its severity and every
// annotation it writes, and a case where it stays silent (two when it has
// a `for`: below the threshold, and before the `for` elapses). A new
// alert without them fails here.
func TestEveryAlertHasPromtoolTests(t *testing.T) {
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules alertRules
	if err := yaml.UnmarshalStrict(raw, &rules); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	raw, err = os.ReadFile(alertsTestsFile)
	if err != nil {
		t.Fatal(err)
	}
	var tests promtoolTests
	if err := yaml.Unmarshal(raw, &tests); err != nil {
		t.Fatalf("alerts_test.yml: %v", err)
	}
	if len(tests.RuleFiles) != 1 || tests.RuleFiles[0] != filepath.Base(alertsFile) {
		t.Errorf("alerts_test.yml's rule_files is %v, want [alerts.yml]", tests.RuleFiles)
	}
	firing, silent := map[string]int{}, map[string]int{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) == 0 {
				silent[a.Alertname]++
			}
			for _, e := range a.ExpAlerts {
				if e.ExpLabels["severity"] != "" && len(e.ExpAnnotations) > 0 {
					firing[a.Alertname]++
				}
			}
		}
	}
	known := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			known[r.Alert] = true
			if firing[r.Alert] == 0 {
				t.Errorf("%s: alerts_test.yml has no case where it fires (exp_alerts with its severity label and annotations)", r.Alert)
			}
			want := 1
			if r.For != "" {
				want = 2
			}
			if silent[r.Alert] < want {
				t.Errorf("%s: alerts_test.yml has %d case(s) where it stays silent (exp_alerts: []), want %d: below its threshold%s",
					r.Alert, silent[r.Alert], want, map[bool]string{true: ", and before its for: " + r.For + " elapses"}[r.For != ""])
			}
		}
	}
	for name := range firing {
		if !known[name] {
			t.Errorf("alerts_test.yml tests %s, which alerts.yml does not define", name)
		}
	}
	if len(known) < 10 {
		t.Fatalf("alerts.yml has %d alerts, want the full set", len(known))
	}
}

// grafanaVariable is a Grafana template variable in a query: $name,
// ${name} or ${name:format}.
var grafanaVariable = regexp.MustCompile(`\$(\{[A-Za-z0-9_]+(:[a-z]+)?\}|[A-Za-z0-9_]+)`)

// grafanaDurations are Grafana's built-in variables that stand for a
// duration; they become 5m. grafanaNumbers stand for a number; they
// become 300. Every other variable becomes "flyball", which is valid as
// a label value in a matcher.
var (
	grafanaDurations = map[string]bool{"__interval": true, "__rate_interval": true, "__range": true, "interval": true}
	grafanaNumbers   = map[string]bool{"__interval_ms": true, "__rate_interval_ms": true, "__range_s": true, "__range_ms": true}
)

// promQL turns a panel target's expression into plain PromQL by giving
// its Grafana template variables values.
func promQL(expr string) string {
	return grafanaVariable.ReplaceAllStringFunc(expr, func(v string) string {
		name := strings.Trim(v, "${}")
		name, _, _ = strings.Cut(name, ":")
		switch {
		case grafanaDurations[name]:
			return "5m"
		case grafanaNumbers[name]:
			return "300"
		}
		return "flyball"
	})
}

// dashboardPanel is the part of a Grafana panel the test reads.
type dashboardPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"`
}

// TestDashboardQueriesParse: promtool parses every PromQL expression of
// the compose Grafana dashboard, each as a recording rule in a group
// named after its panel, so a broken query names its panel.
func TestDashboardQueriesParse(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []dashboardPanel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	type group struct {
		Name  string              `json:"name"`
		Rules []map[string]string `json:"rules"`
	}
	var groups []group
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			g := group{Name: fmt.Sprintf("panel %d: %s", len(groups)+1, p.Title)}
			for i, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("panel %q: target %d has no expr", p.Title, i+1)
					continue
				}
				g.Rules = append(g.Rules, map[string]string{
					"record": fmt.Sprintf("dashboard:panel%d:target%d", len(groups)+1, i+1),
					"expr":   promQL(tg.Expr),
				})
			}
			if len(g.Rules) > 0 {
				groups = append(groups, g)
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	if len(groups) < 20 {
		t.Fatalf("found %d panels with queries in the dashboard, want the full set", len(groups))
	}
	out, err := yaml.Marshal(map[string][]group{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard-rules.yml"), out, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtest.Path(t), "check", "rules", "dashboard-rules.yml")
	cmd.Dir = dir
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("a dashboard query does not parse (the group names its panel): %v\n%s", err, msg)
	}
}

func TestPromQLSubstitutesGrafanaVariables(t *testing.T) {
	got := promQL(`sum(rate(flyball_runs_total{instance=~"$instance",service="${service:regex}"}[$__rate_interval])) / $__range_s`)
	want := `sum(rate(flyball_runs_total{instance=~"flyball",service="flyball"}[5m])) / 300`
	if got != want {
		t.Errorf("promQL:\n got %s\nwant %s", got, want)
	}
}
