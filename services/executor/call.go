package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/bufpool"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/ssrf"
)

// result is the classified outcome of one call.
type result struct {
	status      int
	body        string
	truncated   bool
	fingerprint string
	err         error
	// permanent marks failures that retrying cannot fix.
	permanent bool
	// retryAfter is the target's own Retry-After, if it sent one.
	retryAfter time.Duration
	request    *events.RequestRecord
	// infra marks a call that failed on the executor's own NATS
	// connection (callNATS), not on its target: it is tried again in place
	// (retryInfra), neither an attempt nor a breaker failure.
	infra bool
	// sent marks an infra call whose request was sent, or may have been:
	// the target may have processed it, so its delivery is never marked
	// handed back (mayHaveCalled).
	sent bool
}

func (r *result) ok() bool { return r.err == nil }

// newHTTPClient keeps up to perHost idle connections per host: calls in
// flight to one host never exceed perHost, so a burst reuses connections
// instead of dialing (and later closing) the excess. redact holds the
// operator's secret header names, lower-cased (Config.RedactHeaders).
func newHTTPClient(g *Guard, perHost, concurrency int, redact []string) *http.Client {
	dial := &guardedDialer{guard: g, dialer: net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}}
	tr := &http.Transport{
		Proxy:                 nil, // a proxy would bypass the SSRF guard
		DialContext:           dial.DialContext,
		MaxIdleConns:          max(1024, concurrency),
		MaxIdleConnsPerHost:   perHost,
		MaxConnsPerHost:       0,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ResponseHeaderTimeout: 0, // bounded by the per-call context
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{
		Transport: checkedRedirects{tr},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			// A task that lists the redirect's status in expectStatus
			// wants to see the redirect itself (callHTTP).
			if c, ok := req.Context().Value(expectRedirect{}).(*checkedRedirect); ok && c.t.StatusExpected(req.Response.StatusCode) {
				return http.ErrUseLastResponse
			}
			if len(via) >= 5 {
				return errors.New("stopped after 5 redirects")
			}
			// Only http(s) with a host can be called: any other fails
			// the same way on every attempt. The URL is not quoted.
			if s := req.URL.Scheme; s != "http" && s != "https" {
				return fmt.Errorf("%w: %d to a %q URL, not http or https", ErrUnfollowableRedirect, req.Response.StatusCode, capText(s, 32))
			}
			if req.URL.Host == "" {
				return fmt.Errorf("%w: %d to a URL with no host", ErrUnfollowableRedirect, req.Response.StatusCode)
			}
			// net/http drops Authorization and Cookie (and their
			// like) on a redirect to another host, but sends every
			// other header on: a task's X-Api-Key or session token
			// would go to whatever host the Location names. The
			// Referer net/http adds is the previous URL, query (and its
			// ?api_key=) included; a task's own Referer is kept.
			// net/http copies the task's headers again on every hop,
			// so once the chain has left the task's host they stay
			// dropped, as net/http keeps Authorization dropped: a
			// redirect back (https://A → http://B → http://A) gets
			// none of them either.
			// A 307 or 308 sends the body again (net/http gives this hop
			// the first request's body; a 301, 302 or 303 is followed
			// with no body). The body may be a credential (an OAuth
			// client_secret), and unlike a header it cannot be left out:
			// such a hop to another host or to plain http is refused.
			if req.ContentLength > 0 {
				if leftHost(req, via) {
					return fmt.Errorf("%w: %d to %s, another host than the task's", ErrBodyRedirect, req.Response.StatusCode, req.URL.Host)
				}
				if downgraded(req, via) {
					return fmt.Errorf("%w: %d from https to http (%s)", ErrBodyRedirect, req.Response.StatusCode, req.URL.Host)
				}
			}
			if leftHost(req, via) {
				for k := range req.Header {
					if isSecretHeader(k, redact) {
						delete(req.Header, k)
					}
				}
				if via[0].Header.Get("Referer") == "" {
					req.Header.Del("Referer")
				}
			}
			// And it follows https to http on the same host with every
			// header: a bearer token or API key would cross the network
			// unencrypted. Any earlier https hop counts, not only the
			// last one.
			if downgraded(req, via) {
				for k := range req.Header {
					if isSecretHeader(k, redact) {
						return fmt.Errorf("%w (%s would be sent unencrypted to %s)", ErrInsecureRedirect, k, req.URL.Host)
					}
				}
			}
			return nil
		},
	}
}

// guardedDialer dials the executor's HTTP connections. The host is
// checked by name before DNS is asked (a cloud metadata hostname is
// refused whatever it resolves to), and every address DNS gives is
// checked by the dialer's Control.
type guardedDialer struct {
	guard  *Guard
	dialer net.Dialer // its Control is the guard's
}

func (d *guardedDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		if err := d.guard.CheckHost(host); err != nil {
			return nil, err
		}
	}
	// When no address connects, the dialer returns the first one's
	// error: a refused address first made the call fail for good though
	// another was only unreachable. The call is blocked only if the guard
	// refused every address the dial tried (counted in Control, which
	// Happy Eyeballs may run for both families at once).
	var tried, refused atomic.Int32
	dialer := d.dialer
	dialer.Control = func(network, address string, c syscall.RawConn) error {
		tried.Add(1)
		err := d.guard.Control(network, address, c)
		if err != nil {
			refused.Add(1)
		}
		return err
	}
	conn, err := dialer.DialContext(ctx, network, addr)
	if err != nil && errors.Is(err, ErrBlocked) && refused.Load() < tried.Load() {
		// Not wrapped: an ordinary, transient connection failure.
		return nil, fmt.Errorf("dial %s %s: no address connected; the SSRF guard refused %d of the %d tried (%s), the others failed",
			network, addr, refused.Load(), tried.Load(), err.Error())
	}
	return conn, err
}

// expectRedirect is the context key under which callHTTP passes a
// *checkedRedirect, for a target whose expectStatus lists a 3xx status,
// to CheckRedirect and checkedRedirects.
type expectRedirect struct{}

// checkedRedirect is a call whose target expects a 3xx status.
type checkedRedirect struct {
	t *events.HTTPTarget
	// location is the Location of a redirect the target expects that
	// does not parse, taken out of the response (checkedRedirects).
	location []string
}

// checkedRedirects is the executor's transport. net/http parses a
// redirect's Location before it asks CheckRedirect, and fails the call
// when it does not parse: a task that expects the redirect's status,
// which is its response, not followed, failed permanently (redactError).
// For such a response the Location is taken out, so net/http returns it
// as a redirect with none, and callHTTP puts it back.
type checkedRedirects struct{ *http.Transport }

func (c checkedRedirects) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.Transport.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if cr, ok := req.Context().Value(expectRedirect{}).(*checkedRedirect); ok && resp.StatusCode >= 300 && resp.StatusCode <= 399 && cr.t.StatusExpected(resp.StatusCode) {
		if loc := resp.Header.Get("Location"); loc != "" {
			if _, perr := req.URL.Parse(loc); perr != nil {
				cr.location = resp.Header.Values("Location")
				resp.Header.Del("Location")
			}
		}
	}
	return resp, nil
}

// expectsRedirect reports whether an expectStatus entry is a 3xx status or
// the 3xx class.
func expectsRedirect(t *events.HTTPTarget) bool {
	for _, p := range t.ExpectStatus {
		if p != "" && p[0] == '3' {
			return true
		}
	}
	return false
}

// downgraded reports whether a redirect goes to plain http after an https
// hop anywhere in its chain.
func downgraded(req *http.Request, via []*http.Request) bool {
	return req.URL.Scheme == "http" && slices.ContainsFunc(via, func(r *http.Request) bool { return r.URL.Scheme == "https" })
}

// ErrBodyRedirect is the permanent error of a call whose target answered
// 307 or 308, which sends the request body again, to another host or from
// https to http.
var ErrBodyRedirect = errors.New("refused a redirect that would send the request body on")

// ErrUnfollowableRedirect is the permanent error of a call whose target
// redirected to a Location that is not an http(s) URL with a host
// (ftp://, file://), or that does not parse (redactError).
var ErrUnfollowableRedirect = errors.New("refused a redirect that cannot be followed")

// ErrInsecureRedirect is the permanent error of a call whose target
// redirected from https to http while the request carried a secret
// header (Authorization, Cookie, an API key, a name in --redact-header).
var ErrInsecureRedirect = errors.New("refused a redirect from https to http")

// isSecretHeader reports whether a request header is a secret that must
// not follow a redirect to another host or to plain http. flyball's own
// Idempotency-Key, named like a secret, is not one.
func isSecretHeader(k string, redact []string) bool {
	return k != "Idempotency-Key" && isSecretName(k, redact)
}

// leftHost reports whether req, or an earlier hop of its redirect chain,
// goes to a host other than the task URL's (via[0]) and its subdomains.
func leftHost(req *http.Request, via []*http.Request) bool {
	if !sameHostOrSubdomain(req.URL, via[0].URL) {
		return true
	}
	return slices.ContainsFunc(via[1:], func(r *http.Request) bool { return !sameHostOrSubdomain(r.URL, via[0].URL) })
}

// sameHostOrSubdomain reports whether dest's host is initial's or a
// subdomain of it, where net/http keeps sending Authorization on a
// redirect. An IP address matches only itself: net/http takes
// x.10.0.0.1 for a subdomain of 10.0.0.1, but it is a name that any
// resolver may point anywhere. Hosts compare in their IDNA ASCII form,
// as net/http compares them: bücher.example is xn--bcher-kva.example.
func sameHostOrSubdomain(dest, initial *url.URL) bool {
	d, i := strings.ToLower(ssrf.ASCIIHost(dest.Hostname())), strings.ToLower(ssrf.ASCIIHost(initial.Hostname()))
	if d == i {
		return true
	}
	if _, err := netip.ParseAddr(i); err == nil {
		return false
	}
	return !strings.ContainsAny(d, ":%") && strings.HasSuffix(d, "."+i)
}

// callHeader is an attempt's request header: the task's headers, then
// flyball's own, which a task cannot override. It is built in one sized
// map with the five values in one backing array (a Set per header cost
// a slice each and grew the map).
func callHeader(task map[string]string, userAgent string, d *events.Dispatch, attempt int) http.Header {
	h := make(http.Header, len(task)+5)
	for k, v := range task {
		h.Set(k, v)
	}
	v := [...]string{d.DispatchID, userAgent, d.TaskID, d.ScheduledAt.UTC().Format(time.RFC3339Nano), strconv.Itoa(attempt)}
	// The keys are in canonical form, as Set would write them. Each value
	// slice is capped so that an append by the transport cannot run into
	// the next.
	h["Idempotency-Key"] = v[0:1:1]
	h["User-Agent"] = v[1:2:2]
	h["Flyball-Task"] = v[2:3:3]
	h["Flyball-Scheduled-At"] = v[3:4:4]
	h["Flyball-Attempt"] = v[4:5:5]
	return h
}

// bodyBufs hold a response body while it is read, hashed and copied into
// the run record: io.ReadAll grew a fresh one from 512 bytes per call. A
// buffer grown past 64 KB (a task may keep up to 10 MiB of its responses)
// is not kept.
var bodyBufs = bufpool.New(4<<10, 64<<10)

// readBody appends at most n bytes of r to buf, as io.ReadAll of an
// io.LimitReader does, and returns buf and the first error other than
// io.EOF.
func readBody(r io.Reader, buf []byte, n int64) ([]byte, error) {
	for int64(len(buf)) < n {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // let append pick the growth
		}
		room := buf[len(buf):cap(buf)]
		if rest := n - int64(len(buf)); int64(len(room)) > rest {
			room = room[:rest]
		}
		k, err := r.Read(room)
		buf = buf[:len(buf)+k]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// callHTTP performs one HTTP attempt; rec is the task's redacted request
// record, shared by its runs. Errors name the URL as rec does.
func (s *Service) callHTTP(ctx context.Context, t *events.HTTPTarget, rec *events.RequestRecord, d *events.Dispatch, attempt int) *result {
	res := &result{request: rec}
	ctx, cancel := context.WithTimeout(ctx, t.Timeout.D())
	defer cancel()
	var checked *checkedRedirect
	if expectsRedirect(t) {
		checked = &checkedRedirect{t: t}
		ctx = context.WithValue(ctx, expectRedirect{}, checked)
	}
	var body io.Reader
	if t.Body != "" {
		body = strings.NewReader(t.Body)
	}
	req, err := http.NewRequestWithContext(ctx, t.Method, t.URL, body)
	if err != nil {
		res.err, res.permanent = fmt.Errorf("invalid request: %w", redactError(err, s.cfg.RedactHeaders)), true
		return res
	}
	req.Header = callHeader(t.Headers, s.userAgent, d, attempt)
	if len(t.Headers) > 0 {
		// net/http sends req.Host and ignores a Host in the header: a
		// task's Host names the virtual host, and the connection still
		// goes to the URL's host.
		if host := req.Header.Get("Host"); host != "" {
			req.Host = host
			req.Header.Del("Host")
		}
	}
	resp, err := s.client.Do(req)
	if err != nil {
		err = redactError(err, s.cfg.RedactHeaders)
		res.err = err
		res.permanent = errors.Is(err, ErrBlocked) || errors.Is(err, ErrInsecureRedirect) || errors.Is(err, ErrBodyRedirect) || errors.Is(err, ErrUnfollowableRedirect)
		if ctx.Err() != nil && !res.permanent {
			res.err = fmt.Errorf("timed out after %s: %w", t.Timeout, err)
		}
		return res
	}
	defer resp.Body.Close()
	if checked != nil && checked.location != nil && resp.Header.Get("Location") == "" {
		resp.Header["Location"] = checked.location // the response, as it came
	}
	res.status = resp.StatusCode
	limit := t.MaxResponseBytes
	bp := bodyBufs.Get()
	buf, rerr := readBody(resp.Body, *bp, limit+1)
	if int64(len(buf)) > limit {
		buf, res.truncated = buf[:limit], true
	}
	res.body = string(buf)
	if req.Method == http.MethodHead {
		res.fingerprint = validatorsFingerprint(resp)
	} else {
		res.fingerprint = bodyFingerprint(resp, buf)
	}
	bodyBufs.Put(bp, buf)
	if res.truncated {
		// Drain a little more so the connection can be reused, but not
		// for long: the rest of a streaming body (server-sent events, a
		// long poll) or of a slow one held the call until its timeout.
		// Cancelling the call closes the connection instead.
		stop := time.AfterFunc(drainWait, cancel)
		_, _ = io.CopyN(io.Discard, resp.Body, 256<<10)
		stop.Stop()
	}
	switch {
	case t.StatusExpected(resp.StatusCode):
		switch {
		case rerr != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
			res.err = fmt.Errorf("timed out after %s reading the body: %w", t.Timeout, rerr)
		case rerr != nil:
			res.err = fmt.Errorf("reading body: %w", rerr)
		}
	case resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests || (resp.StatusCode >= 500 && resp.StatusCode <= 599):
		res.err = fmt.Errorf("HTTP %d", resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
			res.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
		}
	default:
		res.err, res.permanent = fmt.Errorf("HTTP %d is not an expected status (%s)", resp.StatusCode, strings.Join(t.ExpectStatus, ", ")), true
	}
	return res
}

// bodyFingerprint is the fingerprint of a response with its body (cut at
// maxResponseBytes): the body's hash for a 2xx; for any other status (one
// expectStatus lists, a checked redirect above all) of the status, where
// the Location header points (locationTarget) and the body. A checked
// redirect's result is where it points, and its body is mostly empty:
// hashed alone, every 301 had the empty body's hash, change mode relaxed
// to bounds.max, and a redirect that moved was never seen. A 2xx keeps
// the hash it always had.
func bodyFingerprint(resp *http.Response, body []byte) string {
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		sum := sha256.Sum256(body)
		return hex.EncodeToString(sum[:16])
	}
	h := sha256.New()
	_, _ = io.WriteString(h, strconv.Itoa(resp.StatusCode)+"\n"+locationTarget(resp.Header.Get("Location"))+"\n")
	_, _ = h.Write(body)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// validatorsFingerprint is the fingerprint of a response with no body by
// method (HEAD): of its status, ETag and Last-Modified, and where a 3xx's
// Location points (a checked redirect's result, locationTarget), or empty
// when it has none of
// them, so that the run holds the adaptive cadence instead of reporting
// the hash of an empty body every time (which relaxed change mode to
// bounds.max for good). A GET's empty body is a real result and keeps its
// hash.
func validatorsFingerprint(resp *http.Response) string {
	etag, lm := resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
	var loc string
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
		loc = locationTarget(resp.Header.Get("Location"))
	}
	if etag == "" && lm == "" && loc == "" {
		return ""
	}
	v := strconv.Itoa(resp.StatusCode) + "\n" + etag + "\n" + lm
	if loc != "" {
		v += "\n" + loc // only then: the fingerprint of a response without one stays as it was
	}
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:16])
}

// locationTarget is what of a Location a fingerprint hashes: its scheme,
// host and path, without the path's ;parameters, its query or fragment.
// Those often carry a token made for each request (an OAuth state, a
// ;jsessionid=, a presigned URL's X-Amz-Date and Signature), and a
// checked redirect to the same place read as changed on every run, which
// held adaptive change mode at bounds.min. A Location that does not parse
// counts whole.
func locationTarget(loc string) string {
	u, err := url.Parse(loc)
	if err != nil {
		return loc
	}
	segs := strings.Split(u.EscapedPath(), "/")
	for i, seg := range segs {
		segs[i], _, _ = strings.Cut(seg, ";")
	}
	return (&url.URL{Scheme: u.Scheme, Opaque: u.Opaque, Host: u.Host}).String() + strings.Join(segs, "/")
}

// drainWait bounds the drain of a body cut at maxResponseBytes (callHTTP).
const drainWait = 250 * time.Millisecond

// maxRetryAfter caps a Retry-After: retry.maxDelay, at most 24h, caps the
// delay anyway, and more seconds than that could overflow a Duration.
const maxRetryAfter = 24 * time.Hour

// parseRetryAfter reads delta-seconds or an HTTP date, capped at
// maxRetryAfter; zero means absent.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	// A number too large for int64 is ErrRange with n at the bound.
	if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); (err == nil || errors.Is(err, strconv.ErrRange)) && n >= 0 {
		return time.Duration(min(n, int64(maxRetryAfter/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), maxRetryAfter)
	}
	return 0
}

// callNATS performs one NATS request/reply attempt; rec is the task's
// request record, shared by its runs.
//
// The request goes over the executor's own connection, so its failures
// are not all the target's. A request made while that connection is
// reconnecting fails at once (no reconnect buffer: ErrReconnectBufExceeded,
// or ErrConnectionReconnecting / ErrConnectionClosed), and one in flight
// when it was lost has its reply lost with it and times out. Both were
// transient target failures: they used up retry.maxAttempts, counted
// toward the breaker, and dead-lettered a task of maxAttempts 1 during an
// outage of the executor's own NATS node. They are infra now: tried again
// in place, uncounted (retryInfra). Only a refused publish is known not
// to have been sent; a request whose reply was lost, or whose wait nats.go
// ended when the connection closed or was forced to reconnect
// (ErrConnectionClosed, ErrDisconnected: also a refused publish's, which
// the error cannot tell apart), may have reached the target, and is sent
// (mayHaveCalled). A request the server refuses because
// the executor's user may not publish to its subject (a task aimed
// outside targets.> in the compose stack) reached nobody either: the
// server reports it only as an asynchronous -ERR, and the call timed out
// and was retried maxAttempts times, saying only "no reply". The
// violation now ends the call at once as a permanent failure naming it.
func (s *Service) callNATS(ctx context.Context, t *events.NATSTarget, rec *events.RequestRecord, d *events.Dispatch, attempt int) *result {
	res := &result{request: rec}
	nc := s.cfg.JS.Conn()
	reconnects := nc.Stats().Reconnects
	ctx, cancel := context.WithTimeout(ctx, t.Timeout.D())
	defer cancel()
	ctx, unwatch := s.pubViolations.Watch(ctx, t.Subject)
	defer unwatch()
	m := &nats.Msg{Subject: t.Subject, Data: []byte(t.Payload), Header: nats.Header{}}
	m.Header.Set("Idempotency-Key", d.DispatchID)
	m.Header.Set("Flyball-Task", d.TaskID)
	m.Header.Set("Flyball-Scheduled-At", d.ScheduledAt.UTC().Format(time.RFC3339Nano))
	m.Header.Set("Flyball-Attempt", strconv.Itoa(attempt))
	reply, err := nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		v, refused := jsutil.Refusal(ctx)
		switch {
		case refused:
			res.err, res.permanent = fmt.Errorf("the executor's NATS user may not publish to %s (permissions violation)", v.Subject), true
		case errors.Is(err, nats.ErrReconnectBufExceeded) || errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrConnectionDraining):
			res.err, res.infra = fmt.Errorf("the executor's NATS connection is down, request not sent: %w", err), true
		case errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrDisconnected):
			res.err, res.infra, res.sent = fmt.Errorf("the executor's NATS connection was lost, the request perhaps sent: %w", err), true, true
		case errors.Is(err, context.DeadlineExceeded) && (!nc.IsConnected() || nc.Stats().Reconnects != reconnects):
			res.err, res.infra, res.sent = fmt.Errorf("no reply within %s, and the executor's NATS connection was lost meanwhile: %w", t.Timeout, err), true, true
		case errors.Is(err, context.DeadlineExceeded):
			res.err = fmt.Errorf("no reply within %s: %w", t.Timeout, err)
		default:
			res.err = err
		}
		return res
	}
	buf := reply.Data
	if int64(len(buf)) > events.DefaultMaxResponseBytes {
		buf, res.truncated = buf[:events.DefaultMaxResponseBytes], true
	}
	res.body = string(buf)
	sum := sha256.Sum256(reply.Data)
	res.fingerprint = hex.EncodeToString(sum[:16])
	if code := reply.Header.Get("Nats-Service-Error-Code"); code != "" {
		n, _ := strconv.Atoi(code)
		res.status = n
		res.err = fmt.Errorf("service error %s: %s", code, reply.Header.Get("Nats-Service-Error"))
		res.permanent = n >= 400 && n < 500 && n != 408 && n != 429
	}
	return res
}
