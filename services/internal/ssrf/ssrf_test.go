package ssrf

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/flyballhq/flyball/pkg/events"
)

// TestCheckHost: a literal address is judged as the dialer judges it, a
// well-known metadata hostname as the address it stands for (so the
// allow-list opens it), and any other hostname is left to dial time.
func TestCheckHost(t *testing.T) {
	t.Parallel()
	def := &Guard{}
	allowIMDS := &Guard{Allow: []netip.Prefix{netip.MustParsePrefix("169.254.169.254/32")}}
	loop := &Guard{AllowLoopback: true}
	deny := &Guard{Deny: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}}
	for _, c := range []struct {
		g       *Guard
		host    string
		blocked bool
	}{
		{def, "169.254.169.254", true},
		{def, "fd00:ec2::254", true},
		{def, "100.100.100.200", true},
		{def, "fe80::1%eth0", true},
		{def, "64:ff9b::a9fe:a9fe", true},
		{def, "127.0.0.1", true},
		{def, "::1", true},
		{def, "0.0.0.0", true},
		{def, "224.0.0.1", true},
		{def, "metadata.google.internal", true},
		{def, "METADATA.GOOGLE.INTERNAL.", true},
		{def, "metadata.goog", true},
		{def, "instance-data.ec2.internal", true},
		{def, "10.0.0.1", false},
		{def, "example.com", false},
		{def, "localhost", false}, // a name: checked when DNS has answered
		{def, "metadata", false},  // may be a service of the operator's own
		{def, "metadata.google.internal.example.com", false},
		{allowIMDS, "169.254.169.254", false},
		{allowIMDS, "metadata.google.internal", false},
		{allowIMDS, "169.254.1.1", true},
		{loop, "127.0.0.1", false},
		{loop, "::1", false},
		{deny, "10.1.2.3", true},
		{deny, "10.2.0.1", false},
	} {
		err := c.g.CheckHost(c.host)
		if (err != nil) != c.blocked || (err != nil && !errors.Is(err, ErrBlocked)) {
			t.Errorf("%+v CheckHost(%q) = %v, want blocked %v", *c.g, c.host, err, c.blocked)
		}
	}
}

// TestCheckTarget names target.http.url and the rule, and passes a NATS
// target and a hostname.
func TestCheckTarget(t *testing.T) {
	t.Parallel()
	g := &Guard{}
	spec := func(u string) *events.TaskSpec {
		return &events.TaskSpec{ID: "x", Target: events.Target{HTTP: &events.HTTPTarget{URL: u}}}
	}
	err := g.CheckTarget(spec("http://169.254.169.254:80/latest/meta-data/"))
	r := events.Reasons(err)
	if len(r) != 1 || r[0].Field != "target.http.url" || !strings.Contains(r[0].Rule, "SSRF guard") ||
		!strings.Contains(r[0].Rule, "169.254.169.254 is link-local or a cloud metadata address") || !strings.Contains(r[0].Rule, "--allow-cidr") {
		t.Errorf("CheckTarget(metadata address) = %v", err)
	}
	if err := g.CheckTarget(spec("https://example.com/")); err != nil {
		t.Errorf("CheckTarget(hostname) = %v", err)
	}
	if err := g.CheckTarget(&events.TaskSpec{ID: "x", Target: events.Target{NATS: &events.NATSTarget{Subject: "a.b"}}}); err != nil {
		t.Errorf("CheckTarget(NATS target) = %v", err)
	}
}
