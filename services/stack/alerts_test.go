package stack_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/yaml"

	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/stack"
)

const alertsFile = "../../deploy/compose/prometheus/alerts.yml"

// TestAlertsFireOnARealStack: alerts_test.yml proves each alert on
// series written by hand; this proves that a real stack, in the situation
// an alert is for, exports the series and labels that alert reads. A
// task whose target answers 404 is dead-lettered (permanent), opens its
// breaker and goes stale, and a command that is not JSON is rejected.
// The stack's registry, as Prometheus would scrape it, becomes promtool's
// input, and promtool evaluates alerts.yml over it: FlyballDeadLetters,
// FlyballRejectedEvents, FlyballBreakerOpen and FlyballTaskStale must fire
// with their labels. A series or label renamed in the code, or in an
// alert's expression, fails here.
func TestAlertsFireOnARealStack(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	_, js := srv.Connect(t)
	st, err := stack.Start(context.Background(), stack.Config{
		JS:            js,
		Guard:         executor.Guard{AllowLoopback: true},
		APIAddr:       "127.0.0.1:0",
		APITokens:     []string{"test-token-0123456789"},
		SweepInterval: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(st.Stop)

	gone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "gone", http.StatusNotFound)
	}))
	t.Cleanup(gone.Close)
	data := fmt.Sprintf(`{"id":"gone","target":{"http":{"url":%q}},"schedule":{"interval":"1s"},`+
		`"breaker":{"failureThreshold":1,"openDelay":"1h"}}`, gone.URL)
	if err := srv.NC.Publish("flyball.task.created.gone", createdEvent("gone", data)); err != nil {
		t.Fatal(err)
	}
	if err := srv.NC.Publish("flyball.task.created.garbled", []byte("not json")); err != nil {
		t.Fatal(err)
	}

	m := st.Metrics()
	natstest.Eventually(t, 20*time.Second, "a dead letter, a rejected command, an open breaker and a stale task", func() bool {
		return testutil.CollectAndCount(m.DeadLetterTotal) > 0 && testutil.CollectAndCount(m.RejectedEvents) > 0 &&
			testutil.ToFloat64(m.BreakersOpen) >= 1 && testutil.ToFloat64(m.StalenessMax) >= 1
	})

	checkAlerts(t, m, []expectedAlert{
		{"FlyballDeadLetters", "10m", map[string]string{"severity": "warning", "reason": "permanent"}},
		{"FlyballRejectedEvents", "10m", map[string]string{"severity": "info", "reason": "invalid"}},
		{"FlyballBreakerOpen", "25m", map[string]string{"severity": "warning"}},
		{"FlyballTaskStale", "25m", map[string]string{"severity": "warning"}},
	})
}

type expectedAlert struct {
	name, at string
	labels   map[string]string
}

// checkAlerts runs promtool's rule tests on alerts.yml, its annotations
// left out (they are alerts_test.yml's to check), over m's series as
// Prometheus would scrape them from one process: absent for the first 5
// minutes (so a counter's first series counts as new), then at their
// value for 30. Each alert in want must fire at its time with exactly its
// labels.
func checkAlerts(t *testing.T, m *metrics.Set, want []expectedAlert) {
	t.Helper()
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string           `json:"name"`
			Rules []map[string]any `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			delete(r, "annotations")
		}
	}
	series := scrapeSeries(t, m)
	type exp struct {
		ExpLabels map[string]string `json:"exp_labels"`
	}
	type ruleTest struct {
		EvalTime  string `json:"eval_time"`
		Alertname string `json:"alertname"`
		ExpAlerts []exp  `json:"exp_alerts"`
	}
	var tests []ruleTest
	for _, w := range want {
		tests = append(tests, ruleTest{EvalTime: w.at, Alertname: w.name, ExpAlerts: []exp{{ExpLabels: w.labels}}})
	}
	var input []map[string]string
	for _, s := range series {
		input = append(input, map[string]string{"series": s.selector, "values": fmt.Sprintf("_x5 %sx30", s.value)})
	}
	dir := t.TempDir()
	write := func(name string, v any) {
		b, err := yaml.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("alerts.yml", rules)
	write("test.yml", map[string]any{
		"rule_files":          []string{"alerts.yml"},
		"evaluation_interval": "1m",
		"tests":               []map[string]any{{"interval": "1m", "input_series": input, "alert_rule_test": tests}},
	})
	cmd := exec.Command(promtool(t), "test", "rules", "test.yml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("alerts.yml over the stack's real series: promtool: %v\n%s\nseries:\n%s", err, out, seriesList(series))
	}
}

type scraped struct{ selector, value string }

// scrapeSeries is every flyball_* series m's registry exports, with the
// labels the scrape config adds (job, instance, service).
func scrapeSeries(t *testing.T, m *metrics.Set) []scraped {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []scraped
	add := func(name string, labels []*dto.LabelPair, extra map[string]string, v float64) {
		pairs := []string{`job="flyball"`, `instance="stack:9090"`, `service="stack"`}
		for _, l := range labels {
			pairs = append(pairs, fmt.Sprintf("%s=%s", l.GetName(), strconv.Quote(l.GetValue())))
		}
		for k, val := range extra {
			pairs = append(pairs, fmt.Sprintf("%s=%s", k, strconv.Quote(val)))
		}
		out = append(out, scraped{name + "{" + strings.Join(pairs, ",") + "}", strconv.FormatFloat(v, 'g', -1, 64)})
	}
	for _, f := range families {
		name := f.GetName()
		if !strings.HasPrefix(name, "flyball_") {
			continue
		}
		for _, s := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				add(name, s.GetLabel(), nil, s.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add(name, s.GetLabel(), nil, s.GetGauge().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := s.GetHistogram()
				for _, b := range h.GetBucket() {
					add(name+"_bucket", s.GetLabel(), map[string]string{"le": strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)}, float64(b.GetCumulativeCount()))
				}
				add(name+"_bucket", s.GetLabel(), map[string]string{"le": "+Inf"}, float64(h.GetSampleCount()))
				add(name+"_sum", s.GetLabel(), nil, h.GetSampleSum())
				add(name+"_count", s.GetLabel(), nil, float64(h.GetSampleCount()))
			default:
				t.Fatalf("%s: a %s; scrapeSeries reads counters, gauges and histograms", name, f.GetType())
			}
		}
	}
	for _, s := range out {
		if v, err := strconv.ParseFloat(s.value, 64); err != nil || math.IsNaN(v) {
			t.Fatalf("%s: value %s", s.selector, s.value)
		}
	}
	return out
}

func seriesList(s []scraped) string {
	lines := make([]string, len(s))
	for i, x := range s {
		lines[i] = "  " + x.selector + " " + x.value
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// promtool is the promtool make test installs (FLYBALL_TEST_PROMTOOL),
// else bin/promtool, else one on PATH. Without one the test fails, as the
// alert rule tests of services/internal/metrics do: it is never skipped.
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FLYBALL_TEST_PROMTOOL"); p != "" {
		return p
	}
	if p, err := filepath.Abs("../../bin/promtool"); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	t.Fatal("promtool not found: run `make promtool-install` (installs bin/promtool), or set FLYBALL_TEST_PROMTOOL")
	return ""
}
