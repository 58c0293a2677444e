package metrics

import (
	"os"
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
