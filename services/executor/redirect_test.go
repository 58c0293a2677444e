package executor

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
)

// httpTransport is the *http.Transport under newHTTPClient's
// checkedRedirects.
func httpTransport(client *http.Client) *http.Transport {
	return client.Transport.(checkedRedirects).Transport
}

// headerSink records the request headers it receives.
type headerSink struct {
	mu  sync.Mutex
	got []http.Header
}

func (h *headerSink) ServeHTTP(_ http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.got = append(h.got, r.Header.Clone())
	h.mu.Unlock()
}

func (h *headerSink) last(t *testing.T) http.Header {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.got) == 0 {
		t.Fatal("the redirect target was not called")
	}
	return h.got[len(h.got)-1]
}

// TestRedirectToAnotherHostDropsSecretHeaders: net/http drops only
// Authorization, Cookie and their like when a redirect leaves the
// original host. A task's other secret headers (X-Api-Key, a
// session token, a name the operator added), which run records redact,
// were sent on to whatever host the target (or an open redirect on it)
// named, and net/http's Referer carried the task URL, secret query
// parameters included. They go only to the original host and its
// subdomains now; every other header still follows.
func TestRedirectToAnotherHostDropsSecretHeaders(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	s, err := New(Config{JS: srv.JS, Guard: Guard{AllowLoopback: true}, RedactHeaders: []string{"X-Tenant"}})
	if err != nil {
		t.Fatal(err)
	}
	sink := &headerSink{}
	other := httptest.NewServer(sink)
	t.Cleanup(other.Close)
	ou, err := url.Parse(other.URL)
	if err != nil {
		t.Fatal(err)
	}
	// The same server under another name: "localhost" is not 127.0.0.1.
	elsewhere := "http://localhost:" + ou.Port() + "/landing"
	first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/same" {
			sink.ServeHTTP(w, r)
			return
		}
		to := elsewhere
		if r.URL.Query().Get("to") == "same" {
			to = "/same"
		}
		http.Redirect(w, r, to, http.StatusFound)
	}))
	t.Cleanup(first.Close)
	headers := map[string]string{
		"Authorization": "Bearer a", "X-Api-Key": "k", "X-Session-Token": "s", "X-Tenant": "acme", "X-Custom": "kept",
	}
	d := &events.Dispatch{DispatchID: "x:1", TaskID: "x", ScheduledAt: time.Now()}
	call := func(u string) {
		t.Helper()
		tg := &events.HTTPTarget{Method: "GET", URL: u, Headers: headers, Timeout: events.Duration(5 * time.Second), MaxResponseBytes: 100, ExpectStatus: []string{"2xx"}}
		if res := s.callHTTP(t.Context(), tg, nil, d, 1); !res.ok() {
			t.Fatalf("call to %s: %v", u, res.err)
		}
	}
	call(first.URL + "?api_key=hunter2")
	got := sink.last(t)
	if ref := got.Get("Referer"); strings.Contains(ref, "hunter2") {
		t.Errorf("a redirect to another host received the task URL's secret query in Referer: %q", ref)
	}
	for _, k := range []string{"Authorization", "X-Api-Key", "X-Session-Token", "X-Tenant"} {
		if v := got.Get(k); v != "" {
			t.Errorf("a redirect to another host received the secret header %s: %q", k, v)
		}
	}
	if got.Get("X-Custom") != "kept" || got.Get("Idempotency-Key") != "x:1" {
		t.Errorf("a redirect to another host lost a header that is not secret: %v", got)
	}
	call(first.URL + "?to=same")
	got = sink.last(t)
	for k, v := range headers {
		if got.Get(k) != v {
			t.Errorf("a redirect on the same host lost %s (got %q)", k, got.Get(k))
		}
	}
}

func TestSameHostOrSubdomain(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		dest, initial string
		want          bool
	}{
		{"https://example.com/a", "https://example.com/", true},
		{"http://EXAMPLE.com:8080/", "https://example.com/", true}, // as net/http: the port and scheme do not count
		{"https://api.example.com/", "https://example.com/", true},
		{"https://evilexample.com/", "https://example.com/", false},
		{"https://example.com.evil.io/", "https://example.com/", false},
		{"https://example.com/", "https://api.example.com/", false},
		{"http://10.0.0.1/", "http://10.0.0.1:81/", true},
		{"http://10.0.0.2/", "http://10.0.0.1/", false},
		{"http://[::1]/", "http://1/", false},
		// An IP address has no subdomains: x.10.0.0.1 is a name,
		// resolved wherever a resolver says.
		{"http://x.10.0.0.1/", "http://10.0.0.1/", false},
		// Hosts compare in their IDNA ASCII form, as net/http compares
		// them: bücher.example is xn--bcher-kva.example.
		{"https://xn--bcher-kva.example/y", "https://bücher.example/x", true},
		{"https://bücher.example/y", "https://xn--bcher-kva.example/x", true},
		{"https://api.xn--bcher-kva.example/", "https://BÜCHER.example/", true},
		{"https://ｅｘａｍｐｌｅ.com/", "https://example.com/", true},
		{"https://xn--bcher-kva.example/", "https://bucher.example/", false},
	} {
		d, _ := url.Parse(c.dest)
		i, _ := url.Parse(c.initial)
		if got := sameHostOrSubdomain(d, i); got != c.want {
			t.Errorf("sameHostOrSubdomain(%s, %s) = %v, want %v", c.dest, c.initial, got, c.want)
		}
	}
}

// TestRedirectFromHTTPSToHTTPKeepsSecretsEncrypted: net/http follows a
// redirect from https to http on the same host with Authorization and
// every other header, so a task's bearer token or API key crossed the
// network in clear text. Such a redirect is refused now, permanently and
// with the reason, before anything is sent; one that carries no secret
// is followed.
func TestRedirectFromHTTPSToHTTPKeepsSecretsEncrypted(t *testing.T) {
	t.Parallel()
	s := loopbackCaller(t)
	sink := &headerSink{}
	plain := httptest.NewServer(sink)
	t.Cleanup(plain.Close)
	secure := httptest.NewTLSServer(http.RedirectHandler(plain.URL+"/landing", http.StatusFound))
	t.Cleanup(secure.Close)
	httpTransport(s.client).TLSClientConfig = secure.Client().Transport.(*http.Transport).TLSClientConfig.Clone()

	d := &events.Dispatch{DispatchID: "x:1", TaskID: "x", ScheduledAt: time.Now()}
	call := func(headers map[string]string) *result {
		tg := &events.HTTPTarget{Method: "GET", URL: secure.URL, Headers: headers, Timeout: events.Duration(5 * time.Second), MaxResponseBytes: 100, ExpectStatus: []string{"2xx"}}
		return s.callHTTP(t.Context(), tg, nil, d, 1)
	}
	for _, h := range []map[string]string{{"Authorization": "Bearer a"}, {"X-Api-Key": "k"}, {"Cookie": "session=s"}} {
		res := call(h)
		if res.ok() || !res.permanent || !strings.Contains(res.err.Error(), "https to http") {
			t.Errorf("headers %v: a redirect from https to http gave ok=%v permanent=%v err=%v, want a permanent refusal naming https to http", h, res.ok(), res.permanent, res.err)
		}
	}
	sink.mu.Lock()
	leaked := len(sink.got)
	sink.mu.Unlock()
	if leaked != 0 {
		t.Fatalf("the plain-http target was called %d time(s) with secret headers", leaked)
	}
	if res := call(map[string]string{"X-Custom": "fine"}); !res.ok() {
		t.Fatalf("a redirect from https to http with no secret header was refused: %v", res.err)
	}
	if got := sink.last(t); got.Get("X-Custom") != "fine" {
		t.Errorf("the followed redirect lost its header: %v", got)
	}
}

// TestRedirectWithCredentialsInItsURLIsNotRecorded: the task spec refuses
// user:pass@ in a task URL, but a redirect's Location may carry it, and a
// call that then fails before a response (here the SSRF guard refuses the
// address) quoted that URL in the run's error: net/http masks a password
// ("user:***@"), never a user name alone, which is where many APIs take a
// token (https://<api key>@host/).
func TestRedirectWithCredentialsInItsURLIsNotRecorded(t *testing.T) {
	t.Parallel()
	s := loopbackCaller(t)
	first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://"+r.URL.Query().Get("userinfo")+"@169.254.169.254/latest", http.StatusFound)
	}))
	t.Cleanup(first.Close)
	d := &events.Dispatch{DispatchID: "x:1", TaskID: "x", ScheduledAt: time.Now()}
	for _, userinfo := range []string{"sk_live_hunter2", "admin:hunter2"} {
		tg := &events.HTTPTarget{Method: "GET", URL: first.URL + "?userinfo=" + url.QueryEscape(userinfo), Timeout: events.Duration(5 * time.Second), MaxResponseBytes: 100, ExpectStatus: []string{"2xx"}}
		res := s.callHTTP(t.Context(), tg, nil, d, 1)
		if res.ok() || !res.permanent {
			t.Fatalf("redirect to 169.254.169.254: %+v, want a permanent failure", res)
		}
		if msg := res.err.Error(); strings.Contains(msg, "hunter2") || strings.Contains(msg, "sk_live") || !strings.Contains(msg, "http://"+Redacted+"@169.254.169.254/latest") {
			t.Errorf("user info %q: the error quotes it: %s", userinfo, msg)
		}
	}
}

// TestExpectedRedirectIsNotFollowed: a task that lists a redirect's
// status in expectStatus (checking that an old URL still redirects) gets
// that response as its success. The redirect was followed whatever the
// task expected, so such a task failed for good on every run with "HTTP
// 200 is not an expected status (301)". A redirect the task does not
// expect is still followed.
func TestExpectedRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	s := loopbackCaller(t)
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/old" {
			http.Redirect(w, r, "/new", http.StatusMovedPermanently)
		}
	}))
	t.Cleanup(tg.Close)
	d := &events.Dispatch{DispatchID: "x:1", TaskID: "x", ScheduledAt: time.Now()}
	for _, c := range []struct {
		expect []string
		status int
	}{
		{[]string{"301"}, http.StatusMovedPermanently},
		{[]string{"3xx"}, http.StatusMovedPermanently},
		{[]string{"2xx"}, http.StatusOK},
		{[]string{"302", "2xx"}, http.StatusOK},
	} {
		h := &events.HTTPTarget{Method: "GET", URL: tg.URL + "/old", Timeout: events.Duration(5 * time.Second), MaxResponseBytes: 1000, ExpectStatus: c.expect}
		res := s.callHTTP(t.Context(), h, nil, d, 1)
		if !res.ok() || res.status != c.status {
			t.Errorf("expectStatus %v: status %d, err %v; want a success with status %d", c.expect, res.status, res.err, c.status)
		}
	}
}

// TestCheckedRedirectFingerprintIsOfItsLocation: a task that checks a
// redirect (expectStatus "301") gets the redirect as its result, and what
// it points to is the response: its body is mostly empty. The fingerprint
// hashed the body alone, so every run had the empty body's hash, change
// mode relaxed to bounds.max, and a redirect that moved was never seen.
// A response whose status is not 2xx hashes its status and Location with
// its body (a HEAD its Location with the validators); a 2xx keeps the
// body's hash, and a 200 and a 404 with the same body differ.
func TestCheckedRedirectFingerprintIsOfItsLocation(t *testing.T) {
	t.Parallel()
	s := loopbackCaller(t)
	var (
		mu       sync.Mutex
		location = "/a"
	)
	moveTo := func(l string) {
		mu.Lock()
		defer mu.Unlock()
		location = l
	}
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case "/old":
			w.Header().Set("Location", location)
			w.WriteHeader(http.StatusMovedPermanently)
		case "/missing":
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(tg.Close)
	d := &events.Dispatch{DispatchID: "x:1", TaskID: "x", ScheduledAt: time.Now()}
	call := func(method, path string, expect ...string) string {
		t.Helper()
		h := &events.HTTPTarget{Method: method, URL: tg.URL + path, Timeout: events.Duration(5 * time.Second), MaxResponseBytes: 1000, ExpectStatus: expect}
		res := s.callHTTP(t.Context(), h, nil, d, 1)
		if !res.ok() {
			t.Fatalf("%s %s, expectStatus %v: %v", method, path, expect, res.err)
		}
		return res.fingerprint
	}
	const emptyBody = "e3b0c44298fc1c149afbf4c8996fb924"
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		moveTo("/a")
		a, again := call(method, "/old", "301"), call(method, "/old", "301")
		moveTo("/b")
		b := call(method, "/old", "301")
		if a == "" || a == emptyBody || a != again || a == b {
			t.Errorf("%s 301 to /a, /a, then /b: fingerprints %q, %q, %q; want one for /a (not the empty body's) and another for /b", method, a, again, b)
		}
	}
	if ok, missing := call(http.MethodGet, "/", "200", "404"), call(http.MethodGet, "/missing", "200", "404"); ok != emptyBody || missing == ok {
		t.Errorf("expectStatus 200, 404: an empty 200 has %q, an empty 404 %q; want the empty body's hash, then another", ok, missing)
	}
}

// TestCheckedRedirectFingerprintIsOfWhereItPoints: a checked redirect's
// fingerprint hashed its whole Location, and one that carries a
// per-request token (an OAuth state, a ;jsessionid=, a presigned URL's
// X-Amz-Date and Signature) changed every run: adaptive change mode held
// the task at bounds.min for good. Only the Location's scheme, host and
// path count now, without the path's ;parameters: another query,
// fragment or session ID is the same redirect, another path another.
func TestCheckedRedirectFingerprintIsOfWhereItPoints(t *testing.T) {
	t.Parallel()
	s := loopbackCaller(t)
	url, moveTo := redirector(t, http.StatusFound, "")
	d := &events.Dispatch{DispatchID: "x:1", TaskID: "x", ScheduledAt: time.Now()}
	fingerprint := func(method, loc string) string {
		t.Helper()
		moveTo(loc)
		h := &events.HTTPTarget{Method: method, URL: url, Timeout: events.Duration(5 * time.Second), MaxResponseBytes: 1000, ExpectStatus: []string{"302"}}
		res := s.callHTTP(t.Context(), h, nil, d, 1)
		if !res.ok() || res.fingerprint == "" {
			t.Fatalf("%s, a 302 to %s: err %v, fingerprint %q; want a success with a fingerprint", method, loc, res.err, res.fingerprint)
		}
		return res.fingerprint
	}
	const base = "https://sso.example.com/authorize"
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		want := fingerprint(method, base+"?state=1")
		for _, same := range []string{
			base + "?state=2",
			base + "?state=3#frag",
			base + ";jsessionid=F00D?state=4",
			base + "?X-Amz-Date=20261202T144000Z&X-Amz-Signature=abc",
		} {
			if got := fingerprint(method, same); got != want {
				t.Errorf("%s, a 302 to %s: fingerprint %q, want %q as for %s?state=1", method, same, got, want, base)
			}
		}
		for _, other := range []string{"https://sso.example.com/login?state=1", "https://other.example.com/authorize?state=1", "http://sso.example.com/authorize?state=1"} {
			if got := fingerprint(method, other); got == want {
				t.Errorf("%s, a 302 to %s: fingerprint %q, the same as for %s?state=1; want another", method, other, got, base)
			}
		}
	}
}

// TestRedirectBackToTheTaskHostGetsNoSecrets: net/http copies the task's
// headers again on every hop, and secret headers were dropped only for a
// hop to a host other than the task's, and https to http refused only
// between the last two hops. A chain https://127.0.0.1 → http://localhost
// → http://127.0.0.1 sent X-Api-Key to the task's own host in clear text.
// Once the chain has left the task's host its secret headers stay
// dropped, as net/http keeps Authorization dropped, and the call goes on
// without them.
func TestRedirectBackToTheTaskHostGetsNoSecrets(t *testing.T) {
	t.Parallel()
	s := loopbackCaller(t)
	sink := &headerSink{}
	landing := httptest.NewServer(sink) // plain http on 127.0.0.1, the task's host
	t.Cleanup(landing.Close)
	lu, err := url.Parse(landing.URL)
	if err != nil {
		t.Fatal(err)
	}
	bounces := &headerSink{}
	// Plain http on "localhost", another host name, back to 127.0.0.1.
	bounce := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bounces.ServeHTTP(w, r)
		http.Redirect(w, r, "http://127.0.0.1:"+lu.Port()+"/landing", http.StatusFound)
	}))
	t.Cleanup(bounce.Close)
	bu, err := url.Parse(bounce.URL)
	if err != nil {
		t.Fatal(err)
	}
	secure := httptest.NewTLSServer(http.RedirectHandler("http://localhost:"+bu.Port()+"/bounce", http.StatusFound))
	t.Cleanup(secure.Close)
	if !strings.HasPrefix(secure.URL, "https://127.0.0.1:") {
		t.Fatalf("the https server is at %s, want 127.0.0.1", secure.URL)
	}
	httpTransport(s.client).TLSClientConfig = secure.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	d := &events.Dispatch{DispatchID: "x:1", TaskID: "x", ScheduledAt: time.Now()}
	tg := &events.HTTPTarget{
		Method: "GET", URL: secure.URL, Headers: map[string]string{"X-Api-Key": "hunter2", "Authorization": "Bearer hunter3", "X-Custom": "kept"},
		Timeout: events.Duration(5 * time.Second), MaxResponseBytes: 100, ExpectStatus: []string{"2xx"},
	}
	if res := s.callHTTP(t.Context(), tg, nil, d, 1); !res.ok() {
		t.Fatalf("the call failed: %v", res.err)
	}
	for name, h := range map[string]http.Header{"the other host": bounces.last(t), "the task's host over http": sink.last(t)} {
		for _, k := range []string{"X-Api-Key", "Authorization"} {
			if v := h.Get(k); v != "" {
				t.Errorf("%s received the secret header %s: %q over plain http", name, k, v)
			}
		}
		if h.Get("X-Custom") != "kept" {
			t.Errorf("%s lost a header that is not secret: %v", name, h)
		}
	}
}

// TestRedirectToHTTPAfterAnyHTTPSHopIsRefused: the refusal of a redirect
// to http that would carry a secret header looks at every earlier hop,
// not only the last: an https hop anywhere before counts.
func TestRedirectToHTTPAfterAnyHTTPSHopIsRefused(t *testing.T) {
	t.Parallel()
	client := newHTTPClient(&Guard{}, 1, 1, nil)
	hop := func(u string) *http.Request {
		r, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("X-Api-Key", "k")
		return r
	}
	for _, c := range []struct {
		chain   []string
		refused bool
	}{
		{[]string{"https://a.example/", "http://a.example/1", "http://a.example/2"}, true},
		{[]string{"https://a.example/", "https://a.example/1", "http://a.example/2"}, true},
		{[]string{"http://a.example/", "http://a.example/1", "http://a.example/2"}, false},
		{[]string{"http://a.example/", "https://a.example/1", "https://a.example/2"}, false},
	} {
		var via []*http.Request
		for _, u := range c.chain[:len(c.chain)-1] {
			via = append(via, hop(u))
		}
		err := client.CheckRedirect(hop(c.chain[len(c.chain)-1]), via)
		if got := errors.Is(err, ErrInsecureRedirect); got != c.refused {
			t.Errorf("chain %v: CheckRedirect = %v, want refused %v", c.chain, err, c.refused)
		}
	}
}

// TestRedirectToALocationThatDoesNotParseIsNotQuoted: a redirect whose
// Location does not parse fails the call before a response, and net/http
// quotes that Location in full (user info and query included) inside the
// *url.Error's cause, which only the error's own URL was redacted of: the
// run's error carried the password and signature into RUNS.
func TestRedirectToALocationThatDoesNotParseIsNotQuoted(t *testing.T) {
	t.Parallel()
	s := loopbackCaller(t)
	locations := map[string]string{
		"/escape": "https://admin:hunter2@files.example.com/%zz?X-Amz-Signature=sig_hunter3&access_token=hunter4",
		"/port":   "https://admin:hunter2/Zm9v@files.example.com/", // url.Parse quotes ":hunter2" as a port
	}
	first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", locations[r.URL.Path])
		w.WriteHeader(http.StatusFound)
	}))
	t.Cleanup(first.Close)
	d := &events.Dispatch{DispatchID: "x:1", TaskID: "x", ScheduledAt: time.Now()}
	for path, loc := range locations {
		tg := &events.HTTPTarget{Method: "GET", URL: first.URL + path, Timeout: events.Duration(5 * time.Second), MaxResponseBytes: 100, ExpectStatus: []string{"2xx"}}
		res := s.callHTTP(t.Context(), tg, nil, d, 1)
		if res.ok() {
			t.Fatalf("Location %s: the call succeeded", loc)
		}
		if msg := res.err.Error(); strings.Contains(msg, "hunter") || !strings.Contains(msg, "Location header is not a valid URL") {
			t.Errorf("Location %s: the run's error is %q, want it to say the Location does not parse without quoting it", loc, msg)
		}
	}
}

// TestCheckedRedirectToALocationThatDoesNotParseIsTheResponse: a task
// whose expectStatus lists the redirect's status gets the redirect as its
// result, not followed. net/http parses Location before CheckRedirect
// runs, so one that does not parse failed the call, permanently, and
// dead-lettered the task at once. It is the response now, a success
// whose fingerprint holds the Location as it came; a status the task
// does not expect still fails permanently, the Location not quoted.
func TestCheckedRedirectToALocationThatDoesNotParseIsTheResponse(t *testing.T) {
	t.Parallel()
	s := loopbackCaller(t)
	url, moveTo := redirector(t, http.StatusMovedPermanently, "http://exa mple.com/moved")
	d := &events.Dispatch{DispatchID: "x:1", TaskID: "x", ScheduledAt: time.Now()}
	call := func(method string, expect ...string) *result {
		h := &events.HTTPTarget{Method: method, URL: url, Timeout: events.Duration(5 * time.Second), MaxResponseBytes: 1000, ExpectStatus: expect}
		return s.callHTTP(t.Context(), h, nil, d, 1)
	}
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		moveTo("http://exa mple.com/moved")
		a := call(method, "301")
		moveTo("http://exa mple.com/elsewhere")
		b := call(method, "301")
		if !a.ok() || a.status != http.StatusMovedPermanently || a.fingerprint == "" || a.fingerprint == b.fingerprint {
			t.Errorf("%s, expectStatus 301, a 301 to a Location that does not parse: status %d, err %v (permanent %v), fingerprints %q then %q for another; want the 301 as a success, fingerprinted by its Location", method, a.status, a.err, a.permanent, a.fingerprint, b.fingerprint)
		}
	}
	if res := call(http.MethodGet, "302"); res.ok() || !res.permanent || !strings.Contains(res.err.Error(), "Location header is not a valid URL") {
		t.Errorf("expectStatus 302, a 301 to a Location that does not parse: ok=%v permanent=%v err=%v; want a permanent failure, the Location not quoted", res.ok(), res.permanent, res.err)
	}
}

// TestUnfollowableRedirectIsPermanent: a redirect to a Location that is
// not an http(s) URL with a host (ftp://, file://, gopher://), or that
// does not parse, fails the same way on every attempt. It was a
// transient failure (net/http's `unsupported protocol scheme "ftp"`):
// retried up to retry.maxAttempts, each attempt counted by the breaker,
// then dead-lettered. It is permanent now, and the error names the
// scheme, never the Location itself (it may hold credentials).
func TestUnfollowableRedirectIsPermanent(t *testing.T) {
	t.Parallel()
	s := loopbackCaller(t)
	locations := map[string]string{
		"/ftp":     "ftp://admin:hunter2@files.example.com/report.csv?token=hunter3",
		"/file":    "file:///etc/passwd",
		"/gopher":  "gopher://example.com/1",
		"/nohost":  "http:///hunter2",
		"/noparse": "https://admin:hunter2@files.example.com/%zz",
	}
	want := map[string]string{
		"/ftp":     `refused a redirect that cannot be followed: 302 to a "ftp" URL, not http or https`,
		"/file":    `refused a redirect that cannot be followed: 302 to a "file" URL, not http or https`,
		"/gopher":  `refused a redirect that cannot be followed: 302 to a "gopher" URL, not http or https`,
		"/nohost":  `refused a redirect that cannot be followed: 302 to a URL with no host`,
		"/noparse": `the redirect's Location header is not a valid URL`,
	}
	first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", locations[r.URL.Path])
		w.WriteHeader(http.StatusFound)
	}))
	t.Cleanup(first.Close)
	d := &events.Dispatch{DispatchID: "x:1", TaskID: "x", ScheduledAt: time.Now()}
	for path, loc := range locations {
		tg := &events.HTTPTarget{Method: "GET", URL: first.URL + path, Timeout: events.Duration(5 * time.Second), MaxResponseBytes: 100, ExpectStatus: []string{"2xx"}}
		res := s.callHTTP(t.Context(), tg, nil, d, 1)
		if res.ok() || !res.permanent || !strings.Contains(res.err.Error(), want[path]) || strings.Contains(res.err.Error(), "hunter") {
			t.Errorf("Location %s: ok=%v permanent=%v err=%v; want a permanent failure saying %q, the Location not quoted", loc, res.ok(), res.permanent, res.err, want[path])
		}
	}
}

// TestUnfollowableRedirectIsCalledOnce: a task whose target redirects
// to ftp:// is called once, its run failed for good at attempt 1, not
// retried up to retry.maxAttempts.
func TestUnfollowableRedirectIsCalledOnce(t *testing.T) {
	t.Parallel()
	target := newAttemptTarget(t, http.StatusFound)
	target.mu.Lock()
	target.location = "ftp://files.example.com/report.csv"
	target.mu.Unlock()
	f := newAttemptsFixture(t, target, 3, 0, 0)
	f.dispatch(t)
	natstest.Eventually(t, 10*time.Second, "a final run.failed", func() bool {
		got := f.stored(t)
		return len(got) > 0 && got[len(got)-1].run.Final
	})
	got := f.stored(t)
	if calls := target.attempts(); fmt.Sprint(calls) != "[1]" || fmt.Sprint(got) != "[failed(attempt 1, final true)]" || got[0].run.ErrorKind != "permanent" {
		t.Fatalf("target called with attempts %v, RUNS holds %v (%+v); want one call, its run failed for good (permanent)", calls, got, got[len(got)-1].run)
	}
}

// bodySink records the request bodies it receives.
type bodySink struct {
	mu  sync.Mutex
	got []string
}

func (b *bodySink) ServeHTTP(_ http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	b.mu.Lock()
	b.got = append(b.got, r.Method+" "+string(body))
	b.mu.Unlock()
}

func (b *bodySink) calls() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.got...)
}

// TestRedirectDoesNotCarryTheBodyElsewhere: net/http follows a 307 or
// 308 with the same method and the body sent again. The secret headers
// stayed on the task's host and off plain http, but the body did not: a
// POST of client_secret=… (an OAuth token request) went on to whatever
// host the Location named, or unencrypted from https to http. Such a
// redirect is now refused, permanently, without a call; a 307 on the same
// host, or a 302 (which net/http follows with a GET and no body), is
// followed as before.
func TestRedirectDoesNotCarryTheBodyElsewhere(t *testing.T) {
	t.Parallel()
	s := loopbackCaller(t)
	sink := &bodySink{}
	other := httptest.NewServer(sink)
	t.Cleanup(other.Close)
	ou, err := url.Parse(other.URL)
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := "http://localhost:" + ou.Port() + "/landing" // another host name
	first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/same" {
			sink.ServeHTTP(w, r)
			return
		}
		code, _ := strconv.Atoi(r.URL.Query().Get("code"))
		to := elsewhere
		if r.URL.Query().Get("to") == "same" {
			to = "/same"
		}
		http.Redirect(w, r, to, code)
	}))
	t.Cleanup(first.Close)
	plain := httptest.NewServer(sink)
	t.Cleanup(plain.Close)
	secure := httptest.NewTLSServer(http.RedirectHandler(plain.URL+"/landing", http.StatusTemporaryRedirect))
	t.Cleanup(secure.Close)
	httpTransport(s.client).TLSClientConfig = secure.Client().Transport.(*http.Transport).TLSClientConfig.Clone()

	d := &events.Dispatch{DispatchID: "x:1", TaskID: "x", ScheduledAt: time.Now()}
	call := func(u string) *result {
		t.Helper()
		tg := &events.HTTPTarget{
			Method: "POST", URL: u, Body: "grant_type=client_credentials&client_secret=hunter2",
			Timeout: events.Duration(5 * time.Second), MaxResponseBytes: 100, ExpectStatus: []string{"2xx"},
		}
		return s.callHTTP(t.Context(), tg, nil, d, 1)
	}
	for _, u := range []string{first.URL + "?code=307", first.URL + "?code=308", secure.URL} {
		res := call(u)
		if res.ok() || !res.permanent || !strings.Contains(res.err.Error(), "body") {
			t.Errorf("%s: a redirect that sends the body elsewhere gave ok=%v permanent=%v err=%v, want a permanent refusal naming the body", u, res.ok(), res.permanent, res.err)
		}
	}
	if got := sink.calls(); len(got) != 0 {
		t.Fatalf("the body went on to another host or over plain http: %q", got)
	}
	if res := call(first.URL + "?code=307&to=same"); !res.ok() {
		t.Fatalf("a 307 on the task's host was refused: %v", res.err)
	}
	if res := call(first.URL + "?code=302"); !res.ok() {
		t.Fatalf("a 302 to another host (followed with a GET, no body) was refused: %v", res.err)
	}
	want := []string{"POST grant_type=client_credentials&client_secret=hunter2", "GET "}
	if got := sink.calls(); !slices.Equal(got, want) {
		t.Fatalf("calls followed %q, want %q", got, want)
	}
}

// TestRedirectToTheSameHostInASCIIKeepsSecretHeaders: a redirect from
// http://bücher.example/ to http://xn--bcher-kva.example/, the same host
// as net/http dials and compares it, lost the task's secret headers: the
// hosts were compared as written.
func TestRedirectToTheSameHostInASCIIKeepsSecretHeaders(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	s, err := New(Config{JS: srv.JS, Guard: Guard{AllowLoopback: true}})
	if err != nil {
		t.Fatal(err)
	}
	httpTransport(s.client).DialContext = (&guardedDialer{
		guard: &s.cfg.Guard, dialer: net.Dialer{Timeout: 5 * time.Second, Resolver: fakeResolver(netip.MustParseAddr("127.0.0.1"))},
	}).DialContext
	sink := &headerSink{}
	var port string // set before the call
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/y" {
			sink.ServeHTTP(w, r)
			return
		}
		http.Redirect(w, r, "http://xn--bcher-kva.example:"+port+"/y", http.StatusFound)
	}))
	t.Cleanup(target.Close)
	port = strconv.Itoa(target.Listener.Addr().(*net.TCPAddr).Port)
	headers := map[string]string{"Authorization": "Bearer a", "X-Api-Key": "k"}
	tg := &events.HTTPTarget{
		Method: "GET", URL: "http://bücher.example:" + port + "/x", Headers: headers,
		Timeout: events.Duration(5 * time.Second), MaxResponseBytes: 100, ExpectStatus: []string{"2xx"},
	}
	d := &events.Dispatch{DispatchID: "x:1", TaskID: "x", ScheduledAt: time.Now()}
	if res := s.callHTTP(t.Context(), tg, nil, d, 1); !res.ok() {
		t.Fatalf("call: %v", res.err)
	}
	got := sink.last(t)
	for k, v := range headers {
		if got.Get(k) != v {
			t.Errorf("a redirect to the same host in its ASCII form lost %s (got %q)", k, got.Get(k))
		}
	}
}

// redirector serves status with the Location location, as it is (one
// that does not parse included), until moveTo sets another.
func redirector(t *testing.T, status int, location string) (url string, moveTo func(string)) {
	t.Helper()
	var mu sync.Mutex
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header()["Location"] = []string{location}
		w.WriteHeader(status)
	}))
	t.Cleanup(tg.Close)
	return tg.URL, func(l string) {
		mu.Lock()
		defer mu.Unlock()
		location = l
	}
}
