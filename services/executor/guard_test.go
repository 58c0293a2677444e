package executor

import (
	"errors"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/streams"
)

func TestGuardCheck(t *testing.T) {
	t.Parallel()
	p := netip.MustParsePrefix
	cases := []struct {
		name  string
		guard Guard
		addr  string
		block bool
	}{
		{"public v4", Guard{}, "93.184.216.34", false},
		{"private v4 allowed by default", Guard{}, "10.1.2.3", false},
		{"loopback v4", Guard{}, "127.0.0.1", true},
		{"loopback v6", Guard{}, "::1", true},
		{"loopback allowed", Guard{AllowLoopback: true}, "127.0.0.1", false},
		{"v4-mapped loopback", Guard{}, "::ffff:127.0.0.1", true},
		{"aws/gcp/azure metadata", Guard{}, "169.254.169.254", true},
		{"link-local v4", Guard{}, "169.254.10.10", true},
		{"link-local v6", Guard{}, "fe80::1", true},
		{"aws imds v6", Guard{}, "fd00:ec2::254", true},
		{"alibaba metadata", Guard{}, "100.100.100.200", true},
		{"azure wireserver", Guard{}, "168.63.129.16", true},
		{"azure wireserver v4-mapped", Guard{}, "::ffff:168.63.129.16", true},
		{"azure wireserver nat64", Guard{}, "64:ff9b::a83f:8110", true},
		{"azure wireserver neighbour", Guard{}, "168.63.129.17", false},
		{"allow-list opens azure wireserver", Guard{Allow: []netip.Prefix{p("168.63.129.16/32")}}, "168.63.129.16", false},
		{"akamai metadata v6", Guard{}, "fd00:a9fe:a9fe::1", true},
		{"unspecified", Guard{}, "0.0.0.0", true},
		{"multicast", Guard{}, "224.0.0.1", true},
		{"allow-list opens metadata", Guard{Allow: []netip.Prefix{p("169.254.169.254/32")}}, "169.254.169.254", false},
		{"deny-list", Guard{Deny: []netip.Prefix{p("10.0.0.0/8")}}, "10.9.9.9", true},
		{"nat64 metadata", Guard{}, "64:ff9b::a9fe:a9fe", true},
		{"nat64 loopback", Guard{}, "64:ff9b::127.0.0.1", true},
		{"nat64 public", Guard{}, "64:ff9b::93.184.216.34", false},
		{"nat64 deny-listed v4", Guard{Deny: []netip.Prefix{p("10.0.0.0/8")}}, "64:ff9b::10.1.1.1", true},
		{"nat64 allow-listed v4", Guard{Allow: []netip.Prefix{p("169.254.169.254/32")}}, "64:ff9b::a9fe:a9fe", false},
		{"local-use nat64 /96 metadata", Guard{}, "64:ff9b:1::a9fe:a9fe", true},
		{"local-use nat64 /64 metadata", Guard{}, "64:ff9b:1:0:a9:fea9:fe00:0", true},
		{"local-use nat64 /56 metadata", Guard{}, "64:ff9b:1:a9:fe:a9fe::", true},
		{"local-use nat64 /48 metadata", Guard{}, "64:ff9b:1:a9fe:a9:fe00::", true},
		{"local-use nat64 /96 loopback", Guard{}, "64:ff9b:1::7f00:1", true},
		{"local-use nat64 /96 public", Guard{}, "64:ff9b:1::5db8:d822", false},
		{"local-use nat64 /48 public", Guard{}, "64:ff9b:1:5db8:d8:2200::", false},
		{"local-use nat64 allow-listed v4", Guard{Allow: []netip.Prefix{p("169.254.169.254/32")}}, "64:ff9b:1::a9fe:a9fe", false},
		{"local-use nat64 allow-listed v6 prefix", Guard{Allow: []netip.Prefix{p("64:ff9b:1:7f00::/96")}}, "64:ff9b:1:7f00::5db8:d822", false},
		{"6to4 metadata", Guard{}, "2002:a9fe:a9fe::1", true},
		{"6to4 public", Guard{}, "2002:5db8:d822::1", false},
		{"v4-translated metadata", Guard{}, "::ffff:0:169.254.169.254", true},
		{"v4-compatible loopback", Guard{}, "::127.0.0.1", true},
		{"public v6", Guard{}, "2606:2800:220:1:248:1893:25c8:1946", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := c.guard.Check(netip.MustParseAddr(c.addr))
			if got := err != nil; got != c.block {
				t.Fatalf("Check(%s) = %v, want blocked=%v", c.addr, err, c.block)
			}
			if err != nil && !errors.Is(err, ErrBlocked) {
				t.Fatalf("error %v does not wrap ErrBlocked", err)
			}
		})
	}
}

func TestRedactHeaders(t *testing.T) {
	t.Parallel()
	got := redactHeaders(map[string]string{
		"Authorization": "Bearer s3cret", "X-Api-Key": "k", "X-Session-Token": "t", "Cookie": "c",
		"Accept": "application/json", "X-Custom": "v", "Cookie2": "c2", "X-Upstream-Cookie": "u",
	}, []string{"x-custom"}) // Config.setDefaults lower-cases the extra names
	for _, k := range []string{"Authorization", "X-Api-Key", "X-Session-Token", "Cookie", "X-Custom", "Cookie2", "X-Upstream-Cookie"} {
		if got[k] != Redacted {
			t.Errorf("%s = %q, want redacted", k, got[k])
		}
	}
	if got["Accept"] != "application/json" {
		t.Errorf("Accept = %q, want kept", got["Accept"])
	}
	// The documented defaults are redacted by secretFragments (isSecretName
	// checks no list of whole header names): one added to the list that
	// no fragment catches fails here.
	for _, name := range DefaultRedactHeaders {
		if !isSecretName(name, nil) || !isSecretName(http.CanonicalHeaderKey(name), nil) {
			t.Errorf("default redact header %q is not redacted", name)
		}
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	zero := 0.0
	r := &events.Retry{InitialDelay: events.Duration(5 * time.Second), Multiplier: 2, MaxDelay: events.Duration(5 * time.Minute), Jitter: &zero}
	want := []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 5 * time.Minute, 5 * time.Minute}
	for i, w := range want {
		if got := Backoff(r, i+1, "t:1"); got != w {
			t.Errorf("attempt %d: %s, want %s", i+1, got, w)
		}
	}
	j := 0.2
	r.Jitter = &j
	seen := map[time.Duration]bool{}
	for i := range 50 {
		d := Backoff(r, 1, "t:"+string(rune('a'+i)))
		if d < 4*time.Second || d > 6*time.Second {
			t.Fatalf("jittered delay %s outside 5s ± 20%%", d)
		}
		seen[d] = true
		if d != Backoff(r, 1, "t:"+string(rune('a'+i))) {
			t.Fatal("jitter is not deterministic for the same dispatch and attempt")
		}
	}
	if len(seen) < 10 {
		t.Fatalf("jitter spread only %d distinct delays over 50 dispatches", len(seen))
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"": 0, "7": 7 * time.Second, " 3 ": 3 * time.Second, "-1": 0, "soon": 0,
		"Thu, 01 Jan 2026 00:00:30 GMT": 30 * time.Second, "Wed, 31 Dec 2025 00:00:00 GMT": 0,
		// Longer than any retry.maxDelay: the cap, never an overflow
		// (9223372037 s is past time.Duration's range) or "absent".
		"86400": maxRetryAfter, "86401": maxRetryAfter, "9223372037": maxRetryAfter,
		"99999999999999999999": maxRetryAfter, "-99999999999999999999": 0,
		"Fri, 01 Jan 2300 00:00:00 GMT": maxRetryAfter,
	} {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestGuardBlocksZonedAddresses: an IPv6 literal with a zone
// ("http://[fe80::1%25eth0]/", RFC 6874, which url.Parse and the task
// spec accept) reaches the dial hook as "fe80::1%eth0". Every rule judges
// the address without its zone (netip.Prefix.Contains is false for any
// zoned address), so link-local, metadata, NAT64 and deny-list addresses
// stay blocked, and an allowed prefix still allows.
func TestGuardBlocksZonedAddresses(t *testing.T) {
	t.Parallel()
	g := Guard{Deny: []netip.Prefix{netip.MustParsePrefix("2001:db8::/32")}}
	for _, addr := range []string{
		"[fe80::1%1]:80",              // IPv6 link-local, zone by index
		"[fe80::a9fe:a9fe%eth0]:80",   // IPv6 link-local, zone by name
		"[64:ff9b::a9fe:a9fe%1]:80",   // 169.254.169.254 behind NAT64
		"[64:ff9b:1::a9fe:a9fe%1]:80", // the same behind a local-use NAT64 prefix (RFC 8215)
		"[fd00:ec2::254%1]:80",        // AWS IMDS over IPv6
		"[2001:db8::1%1]:80",          // the operator's deny list
	} {
		if err := g.Control("tcp6", addr, nil); !errors.Is(err, ErrBlocked) {
			t.Errorf("Control(%s) = %v, want ErrBlocked", addr, err)
		}
	}
	allow := Guard{Allow: []netip.Prefix{netip.MustParsePrefix("fe80::/10")}}
	if err := allow.Control("tcp6", "[fe80::1%eth0]:80", nil); err != nil {
		t.Errorf("an allowed link-local prefix refused a zoned address: %v", err)
	}
}

// TestPrefixInIPv4MappedForm: the guard judges a mapped address as IPv4,
// so a deny prefix written in the mapped form (::ffff:10.0.0.0/104)
// matched nothing and blocked no address; an allow prefix in that form
// opened nothing.
func TestPrefixInIPv4MappedForm(t *testing.T) {
	mapped := netip.MustParsePrefix("::ffff:10.0.0.0/104")
	deny := Guard{Deny: []netip.Prefix{mapped}}
	for _, a := range []string{"10.1.2.3", "::ffff:10.1.2.3", "64:ff9b::a01:203"} {
		if err := deny.Check(netip.MustParseAddr(a)); !errors.Is(err, ErrBlocked) {
			t.Errorf("Check(%s) = %v, want blocked by the deny prefix %s", a, err, mapped)
		}
	}
	if err := deny.Check(netip.MustParseAddr("11.0.0.1")); err != nil {
		t.Errorf("Check(11.0.0.1) = %v, want allowed", err)
	}
	allow := Guard{Allow: []netip.Prefix{netip.MustParsePrefix("::ffff:169.254.169.254/128")}}
	if err := allow.Check(netip.MustParseAddr("169.254.169.254")); err != nil {
		t.Errorf("Check(169.254.169.254) = %v, want allowed by %s", err, allow.Allow[0])
	}
}

// TestRetryAfterNeverShortensTheBackoff: a Retry-After lengthens the
// delay up to maxDelay, and never makes it shorter than the backoff
// alone. At the cap, the backoff's jitter can take it above maxDelay
// (5 min + 20 %); a 429 asking for 1 s then cut the delay to maxDelay.
func TestRetryAfterNeverShortensTheBackoff(t *testing.T) {
	t.Parallel()
	j := 0.2
	r := &events.Retry{InitialDelay: events.Duration(5 * time.Second), Multiplier: 2, MaxDelay: events.Duration(5 * time.Minute), Jitter: &j}
	for i := range 50 {
		id := "t:" + strconv.Itoa(i)
		for attempt := 1; attempt <= 10; attempt++ {
			backoff := Backoff(r, attempt, id)
			for _, ra := range []time.Duration{time.Second, backoff, 4 * time.Minute, 10 * time.Minute, 24 * time.Hour} {
				got := retryDelay(r, attempt, id, ra)
				if got < backoff {
					t.Fatalf("%s attempt %d: Retry-After %s gives %s, shorter than the backoff %s", id, attempt, ra, got, backoff)
				}
				if want := max(backoff, min(ra, r.MaxDelay.D())); got != want {
					t.Fatalf("%s attempt %d: Retry-After %s gives %s, want %s", id, attempt, ra, got, want)
				}
			}
		}
	}
}

// TestAttemptRecordsOutliveTheLongestRetryDelay: an attempt record is
// written just before the nak that delays the next attempt, and the next
// delivery reads it. A record that expires first (KV flyball-attempts'
// max age) is read as missing: the retry is attempt 1 again, its
// run.failed a duplicate of the first one's, and the run never reaches
// retry.maxAttempts. A valid spec can ask for 24h × (1 + jitter) with
// jitter just under 1 (initialDelay = maxDelay = 24h; a 24h Retry-After
// is capped at maxDelay): with the bucket's 24h max age, a task retrying
// daily (initialDelay 24h, the default jitter 0.2: 19.2h to 28.8h) lost
// its count on most retries and was called every day until MaxDeliver.
func TestAttemptRecordsOutliveTheLongestRetryDelay(t *testing.T) {
	t.Parallel()
	cfgs, err := streams.StreamConfigs()
	if err != nil {
		t.Fatal(err)
	}
	var ttl time.Duration
	for _, c := range cfgs {
		if c.Name == "KV_"+streams.BucketAttempts {
			ttl = c.MaxAge
		}
	}
	if ttl <= 0 {
		t.Fatalf("KV_%s has no max age", streams.BucketAttempts)
	}
	jitter := math.Nextafter(1, 0) // the largest the spec accepts
	r := &events.Retry{MaxAttempts: 20, InitialDelay: events.Duration(24 * time.Hour), Multiplier: 10, MaxDelay: events.Duration(24 * time.Hour), Jitter: &jitter}
	if err := (&events.TaskSpec{ID: "t", Target: events.Target{HTTP: &events.HTTPTarget{URL: "https://example.com/"}}, Schedule: events.Schedule{Interval: events.Duration(time.Hour)}, Retry: r}).Validate(); err != nil {
		t.Fatalf("the longest retry is not a valid spec: %v", err)
	}
	var longest time.Duration
	for i := range 1000 {
		for attempt := 1; attempt < r.MaxAttempts; attempt++ {
			longest = max(longest, retryDelay(r, attempt, "t:"+strconv.Itoa(i), 24*time.Hour))
		}
	}
	// The nak leaves after the record is written, held in the outbox up
	// to a second and retried by the settler for seconds more.
	if margin := time.Hour; longest+margin > ttl {
		t.Fatalf("a retry can come %s after its attempt record is written (plus %s for the outbox and the nak), but KV %s keeps a record %s: the retry would find none and start over at attempt 1",
			longest.Round(time.Minute), margin, streams.BucketAttempts, ttl)
	}
}
