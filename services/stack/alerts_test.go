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

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/yaml"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/promtest"
	"github.com/flyballhq/flyball/services/stack"
	"github.com/flyballhq/flyball/streams"
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

	checkAlertsOver(t, [][]scraped{scrapeSeries(t, m)}, []expectedAlert{
		{"FlyballDeadLetters", "10m", map[string]string{"severity": "warning", "reason": "permanent"}},
		{"FlyballRejectedEvents", "10m", map[string]string{"severity": "info", "reason": "invalid"}},
		{"FlyballBreakerOpen", "25m", map[string]string{"severity": "warning"}},
		{"FlyballTaskStale", "25m", map[string]string{"severity": "warning"}},
	})
}

// TestRepairAlertsFireOnARealStack: a sweeper finds a run that fell due
// 10 minutes ago and never ran (a lost dispatch), a task with no
// schedule (a lost schedule write) and one whose schedule is unreadable;
// it re-nudges the first and publishes the others' task.created again.
// Prometheus scraped the sweeper before (its counters at 0) and after:
// FlyballZombieRuns and FlyballSchedulesRepaired (reasons "missing" and
// "unreadable") must fire.
func TestRepairAlertsFireOnARealStack(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	_, js := srv.Connect(t)
	st, err := stack.Start(context.Background(), stack.Config{
		JS: js, Services: []string{"sweeper"},
		SweepInterval: 50 * time.Millisecond, ZombieAfter: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(st.Stop)
	m := st.Metrics()
	before := scrapeSeries(t, m)

	now := time.Now().UTC()
	putMinuteTask(t, srv, gov.State{
		TaskID: "zombie", NextRunAt: now.Add(-10 * time.Minute), Source: gov.SourceBaselineInterval,
		LastScheduledAt: now.Add(-11 * time.Minute), LastSuccessAt: now.Add(-11 * time.Minute),
	})
	for _, id := range []string{"unscheduled", "garbled"} {
		natstest.PutJSON(t, srv.JS, streams.BucketTasks, id,
			events.TaskSpec{ID: id, Target: events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/"}}, Schedule: events.Schedule{Interval: events.Duration(time.Minute)}})
	}
	schedules, err := srv.JS.KeyValue(t.Context(), streams.BucketSchedules)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schedules.PutString(t.Context(), "garbled", "not json"); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "a zombie re-nudged, a missing and an unreadable schedule repaired", func() bool {
		return testutil.ToFloat64(m.ZombiesRenudged) >= 1 &&
			testutil.ToFloat64(m.SchedulesRepaired.WithLabelValues("missing")) >= 1 &&
			testutil.ToFloat64(m.SchedulesRepaired.WithLabelValues("unreadable")) >= 1
	})

	checkAlertsOver(t, [][]scraped{before, scrapeSeries(t, m)}, []expectedAlert{
		{"FlyballZombieRuns", "10m", map[string]string{"severity": "warning"}},
		{"FlyballSchedulesRepaired", "10m", map[string]string{"severity": "warning", "reason": "missing"}},
		{"FlyballSchedulesRepaired", "10m", map[string]string{"severity": "warning", "reason": "unreadable"}},
	})
}

// TestDispatchFailingFiresOnARealStack: DISPATCH is gone (deleted, as a
// stream lost with its node, or never provisioned), and the timer retries
// a due slot's publish again and again. Prometheus scrapes the timer once
// before and then once a minute while each scrape finds more failures:
// FlyballDispatchFailing must fire once the rate has lasted its 5 minutes.
func TestDispatchFailingFiresOnARealStack(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	_, js := srv.Connect(t)
	st, err := stack.Start(context.Background(), stack.Config{JS: js, Services: []string{"timer"}})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(st.Stop)
	m := st.Metrics()
	scrapes := [][]scraped{scrapeSeries(t, m)}

	if err := srv.JS.DeleteStream(t.Context(), streams.StreamDispatch); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	putMinuteTask(t, srv, gov.State{TaskID: "due", NextRunAt: now, Source: gov.SourceBaselineInterval, LastScheduledAt: now.Add(-time.Minute)})
	failed := m.DispatchTotal.WithLabelValues("error")
	for i := range 8 {
		last := testutil.ToFloat64(failed)
		natstest.Eventually(t, 10*time.Second, fmt.Sprintf("failed dispatch publish %d counted", i+1), func() bool {
			return testutil.ToFloat64(failed) > last
		})
		scrapes = append(scrapes, scrapeSeries(t, m))
	}

	checkAlertsOver(t, scrapes, []expectedAlert{
		{"FlyballDispatchFailing", "12m", map[string]string{"severity": "critical", "instance": "stack:9090"}},
	})
}

// TestGovernorRetryingFiresOnARealStack: flyball-schedules is at its
// limit (its Maximum Bytes set below what a schedule needs, as by a hand
// edit of the bucket's stream), so every schedule write the governor makes
// fails with "maximum bytes exceeded", and it retries each task.created in
// place. Several tasks keep several of its TASKS workers retrying at once.
// Prometheus scrapes the governor once before and then once a minute while
// each scrape finds at least 12 more retries (what one message retried
// every 5 s, the longest pause between tries, makes in a minute; the
// series only appears at the first retry, so its first minute must carry
// the rate alone): FlyballGovernorRetrying must fire, for stream TASKS,
// once the rate has lasted its 5 minutes.
func TestGovernorRetryingFiresOnARealStack(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	_, js := srv.Connect(t)
	ctx := t.Context()
	kv, err := srv.JS.Stream(ctx, "KV_"+streams.BucketSchedules)
	if err != nil {
		t.Fatal(err)
	}
	cfg := kv.CachedInfo().Config
	cfg.MaxBytes = 64
	if _, err := srv.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	st, err := stack.Start(context.Background(), stack.Config{JS: js, Services: []string{"governor"}})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(st.Stop)
	m := st.Metrics()
	scrapes := [][]scraped{scrapeSeries(t, m)}

	for i := range 24 {
		id := fmt.Sprintf("full-%d", i)
		data := fmt.Sprintf(`{"id":%q,"target":{"http":{"url":"https://example.com/"}},"schedule":{"interval":"1m"}}`, id)
		if err := srv.NC.Publish("flyball.task.created."+id, createdEvent(id, data)); err != nil {
			t.Fatal(err)
		}
	}
	retries := m.GovernorRetries.WithLabelValues(streams.StreamTasks)
	for i := range 8 {
		last := testutil.ToFloat64(retries)
		natstest.Eventually(t, 30*time.Second, fmt.Sprintf("scrape %d: 12 more governor retries", i+1), func() bool {
			return testutil.ToFloat64(retries) >= last+12
		})
		scrapes = append(scrapes, scrapeSeries(t, m))
	}

	checkAlertsOver(t, scrapes, []expectedAlert{
		{"FlyballGovernorRetrying", "12m", map[string]string{"severity": "critical", "instance": "stack:9090", "stream": "TASKS"}},
	})
}

// TestOutcomeAlertsFireOnARealStack: while an executor calls a target,
// RUNS and the executor's durable on DISPATCH are deleted (a stream or a
// consumer lost, as by an operator's mistake or a failed restore). The
// call ends; RUNS never confirms its run event, and the executor gives it
// up after the outbox's 15 s, keeping the dispatch to publish the event
// again. RUNS is then created again, while the executor's durable on
// DISPATCH stays deleted: the event is stored, and the dispatch's ack is
// confirmed by no consumer. (A nak no consumer confirms is checked by
// the unit tests of the settler, not here.) Prometheus scraped
// the executor during the call and after: FlyballRunEventsAbandoned and
// FlyballAcksUnconfirmed must fire. It takes about 20 s, the outbox's
// budget, and the ack's confirmation tries.
func TestOutcomeAlertsFireOnARealStack(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	_, js := srv.Connect(t)
	st, err := stack.Start(context.Background(), stack.Config{
		JS: js, Guard: executor.Guard{AllowLoopback: true}, APIAddr: "127.0.0.1:0", APITokens: []string{"test-token-0123456789"},
	})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(st.Stop)

	arrived, release := make(chan struct{}, 8), make(chan struct{})
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		arrived <- struct{}{}
		<-release
	}))
	t.Cleanup(target.Close)
	data := fmt.Sprintf(`{"id":"held","target":{"http":{"url":%q}},"schedule":{"interval":"1h"}}`, target.URL)
	if err := srv.NC.Publish("flyball.task.created.held", createdEvent("held", data)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-arrived:
	case <-time.After(20 * time.Second):
		t.Fatal("the target was not called")
	}
	m := st.Metrics()
	before := scrapeSeries(t, m)
	ctx := t.Context()
	if err := srv.JS.DeleteConsumer(ctx, streams.StreamDispatch, streams.ConsumerExecutor); err != nil {
		t.Fatal(err)
	}
	if err := srv.JS.DeleteStream(ctx, streams.StreamRuns); err != nil {
		t.Fatal(err)
	}
	close(release)
	natstest.Eventually(t, 45*time.Second, "a run event abandoned", func() bool {
		return testutil.ToFloat64(m.OutboxAbandoned) >= 1
	})
	restoreStream(t, srv.JS, streams.StreamRuns)
	natstest.Eventually(t, 45*time.Second, "a settle unconfirmed", func() bool {
		return testutil.CollectAndCount(m.SettlesUnconfirmed) > 0
	})

	checkAlertsOver(t, [][]scraped{before, scrapeSeries(t, m)}, []expectedAlert{
		{"FlyballRunEventsAbandoned", "7m", map[string]string{"severity": "warning", "instance": "stack:9090"}},
		{"FlyballAcksUnconfirmed", "7m", map[string]string{"severity": "warning", "instance": "stack:9090", "kind": "ack"}},
	})
}

// restoreStream creates the stream name from flyball's definitions, and
// none of its consumers.
func restoreStream(t *testing.T, js jetstream.JetStream, name string) {
	t.Helper()
	cfgs, err := streams.StreamConfigs()
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range cfgs {
		if cfg.Name == name {
			if _, err := js.CreateStream(t.Context(), cfg); err != nil {
				t.Fatalf("restore %s: %v", name, err)
			}
			return
		}
	}
	t.Fatalf("no definition of stream %s", name)
}

type expectedAlert struct {
	name, at string
	labels   map[string]string
}

// checkAlertsOver runs promtool's rule tests on alerts.yml, its
// annotations left out (they are alerts_test.yml's to check), over the
// flyball series of several scrapes of one process (scrapeSeries), a
// minute apart: every series is absent for the first 5 minutes, then
// at its value in scrapes[i] at minute 5+i (absent if that scrape has
// none), and the last scrape's value holds for 30 minutes. A scrape taken
// before the situation (its counters at 0) lets increase() and rate()
// see a counter that existed from the start grow, as Prometheus does; a
// scrape for each time the failure recurred keeps a rate up for as long
// as an alert's "for". Each alert in want must fire at its time with
// exactly its labels.
func checkAlertsOver(t *testing.T, scrapes [][]scraped, want []expectedAlert) {
	t.Helper()
	if len(scrapes) == 0 {
		t.Fatal("checkAlertsOver: no scrape")
	}
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
	values := map[string][]string{} // selector -> value at each scrape, "_" where absent
	for i, sc := range scrapes {
		for _, x := range sc {
			if values[x.selector] == nil {
				values[x.selector] = make([]string, len(scrapes))
				for j := range values[x.selector] {
					values[x.selector][j] = "_"
				}
			}
			values[x.selector][i] = x.value
		}
	}
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
		// Entries in a row for one alert at one time are one test:
		// promtool expects every alert of the name firing then.
		if n := len(tests); n > 0 && tests[n-1].Alertname == w.name && tests[n-1].EvalTime == w.at {
			tests[n-1].ExpAlerts = append(tests[n-1].ExpAlerts, exp{ExpLabels: w.labels})
			continue
		}
		tests = append(tests, ruleTest{EvalTime: w.at, Alertname: w.name, ExpAlerts: []exp{{ExpLabels: w.labels}}})
	}
	var input []map[string]string
	for sel, vs := range values {
		held := append(append([]string{"_x5"}, vs[:len(vs)-1]...), vs[len(vs)-1]+"x30")
		input = append(input, map[string]string{"series": sel, "values": strings.Join(held, " ")})
	}
	sort.Slice(input, func(i, j int) bool { return input[i]["series"] < input[j]["series"] })
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
	cmd := exec.Command(promtest.Path(t), "test", "rules", "test.yml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("alerts.yml over the stack's real series: promtool: %v\n%s\nseries (last scrape):\n%s", err, out, seriesList(scrapes[len(scrapes)-1]))
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
		if math.IsNaN(v) {
			t.Fatalf("%s: value NaN", name)
		}
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
