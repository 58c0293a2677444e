package metrics

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// names returns the metric names of every collector field of s.
func names(t *testing.T, s *Set) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	v := reflect.ValueOf(s).Elem()
	for i := range v.NumField() {
		c, ok := v.Field(i).Interface().(prometheus.Collector)
		if !ok || v.Field(i).IsNil() {
			continue
		}
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("no name in %s", d)
			}
			out[m[1]] = true
		}
	}
	return out
}

// TestDashboardUsesExportedMetrics: every flyball_* series the compose
// Grafana dashboard queries is one this package exports, so a renamed
// metric cannot leave an empty panel behind.
func TestDashboardUsesExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile("../../../deploy/compose/grafana/dashboards/flyball.json")
	if err != nil {
		t.Fatal(err)
	}
	have := names(t, New())
	used := regexp.MustCompile(`flyball_[a-z_]+`).FindAllString(string(raw), -1)
	if len(used) < 20 {
		t.Fatalf("found only %d metric references in the dashboard", len(used))
	}
	for _, n := range used {
		base := n
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			base = strings.TrimSuffix(base, suffix)
		}
		if !have[base] {
			t.Errorf("the dashboard queries %s, which flyball does not export", n)
		}
	}
}

// TestMetricsAreDocumented: every flyball_* metric is in the metrics table
// of docs/architecture.md, and every flyball_* name the README and docs/
// mention is one flyball exports.
func TestMetricsAreDocumented(t *testing.T) {
	have := map[string]bool{"flyball_task_staleness_score": true} // registered only with --per-task-metrics
	for n := range names(t, New()) {
		if strings.HasPrefix(n, "flyball_") {
			have[n] = true
		}
	}
	arch, err := os.ReadFile("../../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	for n := range have {
		if !regexp.MustCompile("(?m)^\\|[^\n]*`" + n + "[`{]").Match(arch) {
			t.Errorf("%s is not in the metrics table of docs/architecture.md", n)
		}
	}
	docs, err := filepath.Glob("../../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	mentioned := 0
	for _, f := range append(docs, "../../../README.md") {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range regexp.MustCompile(`flyball_[a-z_]+[a-z]`).FindAllString(string(raw), -1) {
			mentioned++
			base := n
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				base = strings.TrimSuffix(base, suffix)
			}
			if !have[base] {
				t.Errorf("%s mentions %s, which flyball does not export", filepath.Base(f), n)
			}
		}
	}
	if mentioned < len(have) {
		t.Fatalf("found %d metric mentions in the docs, fewer than the %d metrics", mentioned, len(have))
	}
}
