package executor

import (
	"crypto/sha256"
	"encoding/hex"
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
	if got := BreakerKey(spec("api.example.com:8443")); got != "host_api_example_com_P8443" {
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
// port left out; another port is still another host. A port was compared
// as written, so https://api.example.com:0443 (which dials 443) had
// host_api_example_com_P0443, and a name's trailing dot kept its own key
// (api.example.com. and api.example.com): a port's leading zeros and one
// trailing dot are now left out.
func TestHostBreakerKeyIsPerCanonicalHost(t *testing.T) {
	key := func(url string) string {
		return BreakerKey(&events.TaskSpec{
			ID: "t", Target: events.Target{HTTP: &events.HTTPTarget{URL: url}},
			Breaker: &events.BreakerPolicy{Scope: "host"},
		})
	}
	for _, u := range []string{
		"https://api.example.com/a", "https://API.example.com/b", "https://api.example.com:443/c", "http://Api.Example.com:80/d",
		"https://api.example.com:0443/e", "https://api.example.com./f", "http://API.example.com.:080/g",
	} {
		if got := key(u); got != "host_api_example_com" {
			t.Errorf("%s: breaker key %q, want host_api_example_com (one host)", u, got)
		}
	}
	for _, u := range []string{"https://api.example.com:8443/", "https://api.example.com:08443/", "https://api.example.com.:8443/"} {
		if got := key(u); got != "host_api_example_com_P8443" {
			t.Errorf("%s: breaker key %q, want host_api_example_com_P8443", u, got)
		}
	}
	if a, b := key("https://[2001:DB8::1]/"), key("https://[2001:db8::1]:443/"); a != b {
		t.Errorf("one IPv6 host, two keys: %q and %q", a, b)
	}
}

// TestHostBreakerKeyIsPerIDNAHost: canonicalHost lower-cased an
// internationalized host name but left it in Unicode, and hostKey turned
// each of its non-ASCII bytes into '_'. So https://bücher.example and
// https://xn--bcher-kva.example, one host, kept two breakers, while
// bücher.example and bächer.example, two hosts, shared
// host_b__cher_example: one's failures opened the other's breaker. The
// key now names the host's IDNA ASCII form, as net/http dials it; a name
// IDNA refuses keeps its key apart with a hash of the host.
func TestHostBreakerKeyIsPerIDNAHost(t *testing.T) {
	key := func(url string) string {
		return BreakerKey(&events.TaskSpec{
			ID: "t", Target: events.Target{HTTP: &events.HTTPTarget{URL: url}},
			Breaker: &events.BreakerPolicy{Scope: "host"},
		})
	}
	const want = "host_xn--bcher-kva_example"
	for _, u := range []string{"https://bücher.example/a", "https://xn--bcher-kva.example/b", "https://BÜCHER.example:443/c", "http://XN--BCHER-KVA.example/d"} {
		if got := key(u); got != want {
			t.Errorf("%s: breaker key %q, want %s (one host)", u, got, want)
		}
	}
	if a, b := key("https://bücher.example/"), key("https://bächer.example/"); a == b {
		t.Errorf("bücher.example and bächer.example, two hosts, share the breaker key %q", a)
	}
	// IDNA refuses "_": the name stays as written, and its key is hashed.
	refused := []string{key("https://bü_cher.example/"), key("https://bä_cher.example/"), key("https://b___cher.example/")}
	for i, k := range refused {
		if !events.ValidToken(k) || !strings.HasPrefix(k, events.HostKeyPrefix) {
			t.Errorf("host %d: key %q is not a token starting with %s", i, k, events.HostKeyPrefix)
		}
		for _, other := range refused[:i] {
			if k == other {
				t.Errorf("two hosts IDNA refuses, or one and an ASCII host, share the breaker key %q", k)
			}
		}
	}
	if a, b := key("https://bü_cher.example/"), key("https://BÜ_CHER.example:443/"); a != b {
		t.Errorf("one host IDNA refuses, spelled twice: keys %q and %q, want one", a, b)
	}
}

// TestHostBreakerKeyIsPerHost: the host key replaced every character
// outside a token's with '_', and a hashed key's "-<16 hex>" looked like
// the end of a host name, so two hosts could share one breaker, and a
// task owner could pick a host whose failures open another host's:
// a_b.example.com and a.b.example.com, a.b:8080 and a.b.8080,
// [::1]:8080 and ___1__8080, and a host named after another's hashed
// key. Each host now has its own key;
// a plain lower-case name with no port keeps the key it had.
func TestHostBreakerKeyIsPerHost(t *testing.T) {
	key := func(host string) string {
		return BreakerKey(&events.TaskSpec{
			ID: "t", Target: events.Target{HTTP: &events.HTTPTarget{URL: "https://" + host + "/x"}},
			Breaker: &events.BreakerPolicy{Scope: "host"},
		})
	}
	hash := func(host string) string {
		sum := sha256.Sum256([]byte(host))
		return hex.EncodeToString(sum[:8])
	}
	long := strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + ".example.com"
	// Each pair but the last shared a key on the old code; the last is a
	// host named after the other's hashed key (the URL lower-cases its H).
	for _, pair := range [][2]string{
		{"a_b.example.com", "a.b.example.com"},
		{"a.b:8080", "a.b.8080"},
		{"[::1]:8080", "___1__8080"},
		{long, long[:106] + "-" + hash(long)},
		{"bü_cher.example", "b___cher.example-" + hash("bü_cher.example")},
		{"a_b.example.com", "a.b.example.com-H" + hash("a_b.example.com")},
	} {
		if a, b := key(pair[0]), key(pair[1]); a == b {
			t.Errorf("%s and %s, two hosts, share the breaker key %q", pair[0], pair[1], a)
		}
	}
	for host, want := range map[string]string{
		"api.example.com":       "host_api_example_com",
		"10.0.0.7":              "host_10_0_0_7",
		"xn--bcher-kva.example": "host_xn--bcher-kva_example",
		"api.example.com:8443":  "host_api_example_com_P8443",
	} {
		if got := key(host); got != want {
			t.Errorf("%s: breaker key %q, want %s", host, got, want)
		}
	}
}

// FuzzHostKeyInjective: two different hosts never share a key (but by a
// 64-bit collision of SHA-256), every key is a token of at most
// events.MaxIDLength characters starting with host_, and a plain
// lower-case name with no port keeps host_<name with '_' for '.'>.
func FuzzHostKeyInjective(f *testing.F) {
	for _, pair := range [][2]string{
		{"a_b.example.com", "a.b.example.com"},
		{"a.b:8080", "a.b.8080"},
		{"a.b:8080", "a.b_P8080"},
		{"[2001:db8::1]:8443", "[2001:db8::1]"},
		{"[fe80::1%eth0]", "[fe80::1%ETH0]"},
		{"bü_cher.example", "bä_cher.example"},
		{"a.example-0123456789abcdef", "a_example-0123456789abcdef"},
		{strings.Repeat("a.", 70) + "com", strings.Repeat("a.", 70) + "co"},
		{"", "_"},
	} {
		f.Add(pair[0], pair[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, kb := hostKey(a), hostKey(b)
		if a != b && ka == kb {
			t.Fatalf("hosts %q and %q share the key %q", a, b, ka)
		}
		for _, k := range []string{ka, kb} {
			if !events.ValidToken(k) || !strings.HasPrefix(k, events.HostKeyPrefix) {
				t.Fatalf("key %q (%d characters) is not a token starting with %s", k, len(k), events.HostKeyPrefix)
			}
		}
		plain := a != "" && len(a) <= events.MaxIDLength-len(events.HostKeyPrefix) &&
			strings.Trim(a, "abcdefghijklmnopqrstuvwxyz0123456789.-") == ""
		if want := events.HostKeyPrefix + strings.ReplaceAll(a, ".", "_"); plain && ka != want {
			t.Fatalf("plain host %q: key %q, want %q as before", a, ka, want)
		}
	})
}
