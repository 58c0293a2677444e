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
