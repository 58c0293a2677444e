package executor

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
)

// TestHostLimitIsPerCanonicalHost: the PerHost limit counts a host
// however its tasks spell it. It was keyed by the URL's raw host, so
// https://API.example.com and https://api.example.com:443 each had
// their own 16 calls, and so did every other spelling of one host.
func TestHostLimitIsPerCanonicalHost(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	for _, c := range []struct {
		a, b   string
		shared bool
	}{
		{"https://API.example.com/a", "https://api.example.com:443/b", true},
		{"HTTPS://api.example.com/", "https://api.example.com:443/", true},
		{"http://api.example.com/", "https://api.example.com/", true},
		{"http://Example.COM/", "http://example.com:80/x", true},
		{"https://api.example.com:/", "https://api.example.com/", true},
		{"http://[2001:DB8::1]/", "http://[2001:db8::1]:80/", true},
		{"https://[2001:db8::1]:8443/", "https://[2001:DB8::1]:8443/", true},
		{"https://api.example.com/", "https://api.example.com:8443/", false},
		{"https://api.example.com/", "https://other.example.com/", false},
		{"http://[2001:db8::1]/", "http://[2001:db8::2]/", false},
	} {
		s, err := New(Config{JS: srv.JS, PerHost: 1, Logger: quietLog()})
		if err != nil {
			t.Fatal(err)
		}
		hostOf := func(raw string) string {
			t.Helper()
			spec := events.TaskSpec{ID: "x", Target: events.Target{HTTP: &events.HTTPTarget{URL: raw}}, Schedule: events.Schedule{Interval: events.Duration(time.Hour)}}
			b, err := json.Marshal(spec)
			if err != nil {
				t.Fatal(err)
			}
			task, err := s.decodeTask("x", b)
			if err != nil {
				t.Fatalf("%s: %v", raw, err)
			}
			return task.host
		}
		ha, hb := hostOf(c.a), hostOf(c.b)
		if _, ok := s.tryHost(ha); !ok {
			t.Fatalf("%s: the first call of an idle host found it at its limit", c.a)
		}
		_, ok := s.tryHost(hb)
		switch {
		case ok && c.shared:
			t.Errorf("%s (host %q) took a slot while a call of %s (host %q) holds the one slot (PerHost 1): one host, want it at its limit", c.b, hb, c.a, ha)
		case !ok && !c.shared:
			t.Errorf("%s (host %q) found no slot while a call of %s (host %q) runs: another host, want a slot of its own", c.b, hb, c.a, ha)
		}
	}
}
