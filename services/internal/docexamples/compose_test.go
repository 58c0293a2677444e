package docexamples

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// composeFile is the part of a compose file the test reads: each
// service's command and the names of its environment variables (merge
// keys resolved).
type composeFile struct {
	Services map[string]struct {
		Image       string            `json:"image"`
		Command     []string          `json:"command"`
		Environment map[string]string `json:"environment"`
		Healthcheck *struct {
			Test    []string `json:"test"`
			Disable bool     `json:"disable"`
		} `json:"healthcheck"`
		// A list of names, or a map keyed by them; none is the default
		// network.
		Networks any `json:"networks"`
	} `json:"services"`
}

// networks are the networks service name of c is on.
func (c composeFile) networks(t *testing.T, name string) []string {
	t.Helper()
	svc, ok := c.Services[name]
	if !ok {
		t.Fatalf("no service %s", name)
	}
	switch n := svc.Networks.(type) {
	case nil:
		return []string{"default"}
	case []any:
		var names []string
		for _, v := range n {
			s, ok := v.(string)
			if !ok {
				t.Fatalf("service %s: networks entry %v is not a name", name, v)
			}
			names = append(names, s)
		}
		return names
	case map[string]any:
		return slices.Sorted(maps.Keys(n))
	default:
		t.Fatalf("service %s: networks %v is neither a list nor a map", name, n)
		return nil
	}
}

func readCompose(t *testing.T, name string) composeFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Root(t), "deploy", "compose", name))
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return c
}

// TestSingleNodeComposeMatchesTheCluster holds docker-compose.single.yml
// to what its header promises: the settings of docker-compose.yml, but for
// the NATS servers (NATS_URL). Each flyball service runs the same command
// with the same variables and values. A variable one file passes to a flyball service and
// the other does not is a setting an operator sets and one of the stacks
// silently ignores (as FLYBALL_REDACT_HEADERS was for the single node's
// executors, whose run records then kept the header values).
func TestSingleNodeComposeMatchesTheCluster(t *testing.T) {
	cluster, single := readCompose(t, "docker-compose.yml"), readCompose(t, "docker-compose.single.yml")
	flyball := 0
	for name, c := range cluster.Services {
		if !slices.Contains(c.Command, "serve") {
			continue // NATS nodes, Prometheus, Grafana, the target
		}
		flyball++
		s, ok := single.Services[name]
		if !ok {
			t.Errorf("service %s: in docker-compose.yml, not in docker-compose.single.yml", name)
			continue
		}
		if !slices.Equal(c.Command, s.Command) {
			t.Errorf("service %s: command %q in docker-compose.yml, %q in docker-compose.single.yml", name, c.Command, s.Command)
		}
		// NATS_URL names the nodes, which is the difference the files are
		// for.
		keys := func(env map[string]string) []string {
			env = maps.Clone(env)
			delete(env, "NATS_URL")
			return slices.Sorted(maps.Keys(env))
		}
		if a, b := keys(c.Environment), keys(s.Environment); !slices.Equal(a, b) {
			t.Errorf("service %s: environment\n  docker-compose.yml:        %s\n  docker-compose.single.yml: %s", name, strings.Join(a, " "), strings.Join(b, " "))
			continue
		}
		for k, v := range c.Environment {
			if k != "NATS_URL" && s.Environment[k] != v {
				t.Errorf("service %s: %s is %q in docker-compose.yml, %q in docker-compose.single.yml", name, k, v, s.Environment[k])
			}
		}
	}
	if flyball < 8 {
		t.Fatalf("docker-compose.yml has %d flyball services (serve commands), want every service: the file did not parse as expected", flyball)
	}
}

// TestComposeGivesTheGuardAlike: the governor and the api refuse at
// create time what the executors' SSRF guard would refuse at dial time,
// so the three take the same guard settings. In both files each of them
// must pass FLYBALL_ALLOW_LOOPBACK, FLYBALL_ALLOW_CIDRS and
// FLYBALL_DENY_CIDRS, with the same value.
func TestComposeGivesTheGuardAlike(t *testing.T) {
	for _, file := range []string{"docker-compose.yml", "docker-compose.single.yml"} {
		c := readCompose(t, file)
		for _, v := range []string{"FLYBALL_ALLOW_LOOPBACK", "FLYBALL_ALLOW_CIDRS", "FLYBALL_DENY_CIDRS"} {
			want, set := "", false
			for _, name := range []string{"executor1", "executor2", "governor", "api"} {
				svc, ok := c.Services[name]
				if !ok {
					t.Fatalf("%s: no service %s", file, name)
				}
				got, ok := svc.Environment[v]
				if !ok {
					t.Errorf("%s: service %s does not pass %s", file, name, v)
					continue
				}
				if set && got != want {
					t.Errorf("%s: service %s passes %s=%q, the others %q", file, name, v, got, want)
				}
				want, set = got, true
			}
		}
	}
}

// TestComposeFlyballImageHealthchecksProbeAListener: the flyball image's
// HEALTHCHECK probes :9090/healthz, which only `flyball serve` opens. A
// container of that image running anything else (the provision one-shot,
// the cli, the target) must disable it or probe what it does listen on;
// otherwise a provision that takes more than 15 s shows (unhealthy).
func TestComposeFlyballImageHealthchecksProbeAListener(t *testing.T) {
	for _, file := range []string{"docker-compose.yml", "docker-compose.single.yml"} {
		others := 0
		for name, svc := range readCompose(t, file).Services {
			if !strings.HasPrefix(svc.Image, "${FLYBALL_IMAGE") || slices.Contains(svc.Command, "serve") {
				continue
			}
			others++
			if hc := svc.Healthcheck; hc == nil || (!hc.Disable && len(hc.Test) == 0) {
				t.Errorf("%s: service %s (command %q) inherits the image's healthcheck of :9090, which it does not open: give it healthcheck: {disable: true}", file, name, svc.Command)
			}
		}
		if others < 3 {
			t.Fatalf("%s: %d flyball-image services that do not serve, want at least 3 (provision, target, cli): the file did not parse as expected", file, others)
		}
	}
}

// TestComposeTasksCannotReachGrafana: the executors call whatever a task
// names, and the SSRF guard allows private ranges, so every container on
// an executor's network is reachable by anyone who may create a task.
// Grafana was on it, with its admin password at the dev default: a task
// could call http://grafana:3000/api/... as admin, add a data source
// pointing at 169.254.169.254 and read the cloud metadata through
// Grafana, past the guard. Grafana is now on a network of its own with
// Prometheus, which it queries; Prometheus stays on the services'
// network, to scrape every flyball service.
func TestComposeTasksCannotReachGrafana(t *testing.T) {
	for _, file := range []string{"docker-compose.yml", "docker-compose.single.yml"} {
		c := readCompose(t, file)
		grafana, prometheus := c.networks(t, "grafana"), c.networks(t, "prometheus")
		shared := func(a, b []string) []string {
			return slices.DeleteFunc(slices.Clone(a), func(n string) bool { return !slices.Contains(b, n) })
		}
		for _, e := range []string{"executor1", "executor2"} {
			if s := shared(c.networks(t, e), grafana); len(s) > 0 {
				t.Errorf("%s: %s and grafana share the network %v: tasks can call Grafana", file, e, s)
			}
		}
		if len(shared(grafana, prometheus)) == 0 {
			t.Errorf("%s: grafana (%v) and prometheus (%v) share no network: Grafana cannot query Prometheus", file, grafana, prometheus)
		}
		for name, svc := range c.Services {
			if slices.Contains(svc.Command, "serve") && len(shared(c.networks(t, name), prometheus)) == 0 {
				t.Errorf("%s: %s shares no network with prometheus, which scrapes it", file, name)
			}
		}
	}
}
