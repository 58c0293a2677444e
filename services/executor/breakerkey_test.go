package executor

import (
	"strings"
	"testing"

	"github.com/flyballhq/flyball/pkg/events"
)

// TestHostBreakerKeyIsASubjectToken: a host-scoped key is
// host_<sanitized host>, and a host of 124 characters or more made it
// longer than a token may be (128): the breaker's transitions on
// flyball.breaker.<state>.<key> could not be parsed, and the governor
// terminated them, so the task's schedule never learnt of its breaker.
// A long host's key is cut and ends with a hash of the whole host, so two
// long hosts that share their first characters keep two breakers.
func TestHostBreakerKeyIsASubjectToken(t *testing.T) {
	spec := func(host string) *events.TaskSpec {
		s := &events.TaskSpec{
			ID: "t", Target: events.Target{HTTP: &events.HTTPTarget{URL: "https://" + host + "/x"}},
			Breaker: &events.BreakerPolicy{Scope: "host"},
		}
		return s
	}
	if got := BreakerKey(spec("api.example.com:8443")); got != "host_api_example_com_8443" {
		t.Fatalf("short host: key %q", got)
	}
	long := strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + "." + strings.Repeat("c", 40) + ".example.com"
	k1, k2 := BreakerKey(spec(long)), BreakerKey(spec(long+"x"))
	for _, k := range []string{k1, k2} {
		if !events.ValidToken(k) || !strings.HasPrefix(k, events.HostKeyPrefix) {
			t.Errorf("long host: key %q (%d characters) is not a token starting with %s", k, len(k), events.HostKeyPrefix)
		}
		if _, err := events.ParseSubject(events.BreakerSubject(events.BreakerOpen, k)); err != nil {
			t.Errorf("long host: its breaker subject does not parse: %v", err)
		}
	}
	if k1 == k2 {
		t.Errorf("two long hosts that differ at the end share the key %q", k1)
	}
}

// TestHostBreakerKeyIsPerCanonicalHost: the host key was built from the
// raw URL host, so https://api.example.com, https://API.example.com and
// https://api.example.com:443 kept three breakers for one host, while the
// per-host call limit already counted them as one (canonicalHost). The
// key now names the canonical host: lower-cased, the scheme's default
// port left out; another port is still another host.
func TestHostBreakerKeyIsPerCanonicalHost(t *testing.T) {
	key := func(url string) string {
		return BreakerKey(&events.TaskSpec{
			ID: "t", Target: events.Target{HTTP: &events.HTTPTarget{URL: url}},
			Breaker: &events.BreakerPolicy{Scope: "host"},
		})
	}
	for _, u := range []string{"https://api.example.com/a", "https://API.example.com/b", "https://api.example.com:443/c", "http://Api.Example.com:80/d"} {
		if got := key(u); got != "host_api_example_com" {
			t.Errorf("%s: breaker key %q, want host_api_example_com (one host)", u, got)
		}
	}
	if got := key("https://api.example.com:8443/"); got != "host_api_example_com_8443" {
		t.Errorf("another port: breaker key %q, want host_api_example_com_8443", got)
	}
	if a, b := key("https://[2001:DB8::1]/"), key("https://[2001:db8::1]:443/"); a != b {
		t.Errorf("one IPv6 host, two keys: %q and %q", a, b)
	}
}
