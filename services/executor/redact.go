package executor

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Redacted replaces secret header values and query parameter values in
// run records.
const Redacted = "[REDACTED]"

// DefaultRedactHeaders are header names (case-insensitive) whose values
// never reach a run record, as docs/security.md lists them. Each contains
// one of secretFragments ("auth", "cookie", "key"), which is what redacts
// it, and every other header or query parameter named like one
// (TestRedactHeaders keeps the list covered).
var DefaultRedactHeaders = []string{"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key"}

// secretFragments mark a header or query parameter name as secret when
// the lower-cased name contains one: "pwd" and "passphrase" besides
// "password", "sessid" for PHP's PHPSESSID, which holds no "session",
// "hmac" for a signature named after its algorithm (Shopify's ?hmac=),
// and "cookie" for Cookie2 and the X-…-Cookie headers proxies forward.
var secretFragments = []string{"token", "secret", "password", "passwd", "pwd", "passphrase", "key", "auth", "session", "sessid", "signature", "hmac", "credential", "jwt", "cookie"}

// secretNames are secret only as the whole name: as fragments "sig" (an
// Azure SAS signature) would catch "signal", and "pass" "compass".
var secretNames = []string{"sig", "pass"}

func redactHeaders(h map[string]string, extra []string) map[string]string {
	if len(h) == 0 {
		return nil
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		if isSecretName(k, extra) {
			v = Redacted
		}
		out[k] = v
	}
	return out
}

// isSecretName reports whether a header or query parameter name is
// secret-looking; extra holds the operator's names, lower-cased
// (Config.setDefaults does that).
func isSecretName(name string, extra []string) bool {
	n := strings.ToLower(name)
	if slices.Contains(secretNames, n) || slices.Contains(extra, n) {
		return true
	}
	for _, frag := range secretFragments {
		if strings.Contains(n, frag) {
			return true
		}
	}
	return false
}

// redactURL returns raw with the value of every secret-looking query
// parameter (?api_key=…, ?access_token=…, a presigned URL's signature),
// of every such parameter in the fragment (an OAuth implicit grant's
// #access_token=…) and its user info (user:pass@, token@) replaced by
// Redacted. Parameters are separated by "&" or ";", as some servers read
// them. The rest of the URL, parameter order included, is kept byte for
// byte, and raw itself is returned when nothing is secret. The task spec
// refuses user info, but a redirect's Location may carry it, and net/http
// quotes that URL in the error with only a password masked.
func redactURL(raw string, extra []string) string {
	raw = redactUserinfo(raw)
	end := len(raw)
	if h := strings.IndexByte(raw, '#'); h >= 0 {
		raw = raw[:h+1] + redactParams(raw[h+1:], extra)
		end = h
	}
	if q := strings.IndexByte(raw[:end], '?'); q >= 0 {
		raw = raw[:q+1] + redactParams(raw[q+1:end], extra) + raw[end:]
	}
	return raw
}

// redactParams returns s, parameters separated by "&" or ";", with the
// value of every secret-looking one replaced by Redacted; s itself when
// none is.
func redactParams(s string, extra []string) string {
	var b []byte // nil until a value is replaced
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != '&' && s[i] != ';' {
			continue
		}
		p := s[start:i]
		rawName, _, hasValue := strings.Cut(p, "=")
		name, err := url.QueryUnescape(rawName)
		if err != nil {
			name = rawName
		}
		switch {
		case hasValue && isSecretName(name, extra):
			if b == nil {
				b = append(make([]byte, 0, len(s)), s[:start]...)
			}
			b = append(append(append(b, rawName...), '='), Redacted...)
		case b != nil:
			b = append(b, p...)
		}
		if b != nil && i < len(s) {
			b = append(b, s[i])
		}
		start = i + 1
	}
	if b == nil {
		return s
	}
	return string(b)
}

// redactUserinfo replaces the user info of raw, between "scheme://" and
// the last "@" of the authority, with Redacted.
func redactUserinfo(raw string) string {
	i := strings.Index(raw, "://")
	if i < 0 || strings.ContainsAny(raw[:i], "/?#") {
		return raw
	}
	rest := raw[i+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndexByte(rest[:end], '@')
	if at < 0 || rest[:at] == Redacted {
		return raw
	}
	return raw[:i+3] + Redacted + rest[at:]
}

// redactError rewrites the URL of net/http's *url.Error ("Get
// \"https://…?token=…\": dial tcp …"), which would otherwise carry a
// secret query parameter into the run record's error, and every URL its
// cause quotes. Only an outermost *url.Error can be rewritten (a wrapper
// has its message already), and that is how http.Client.Do and url.Parse
// return theirs.
//
// A URL that does not parse, or is not an http(s) URL with a host, is
// replaced whole: its user info cannot be told from the rest
// ("https://admin:pass/word@host" does not parse). net/http quotes a
// redirect's Location that does not parse in the cause ("failed to parse
// Location header \"https://user:pass@…\": parse …"), where the
// Location is dropped, and with it url.Parse's reason, which may quote
// part of it (`invalid port ":pass" after host`); that error is an
// ErrUnfollowableRedirect, permanent, as every attempt fails alike (but
// for a task that expects the redirect's status: checkedRedirects).
func redactError(err error, extra []string) error {
	ue, ok := err.(*url.Error) //nolint:errorlint // see above: a wrapped one cannot be rewritten
	if !ok {
		return err
	}
	c := *ue
	c.URL = redactErrorURL(ue.URL, extra)
	if len(c.URL) > maxErrorURL {
		// Cut before url.Error quotes it: a redirect's Location may be
		// megabytes, and the cause after the URL is what an operator needs.
		c.URL = runePrefix(c.URL, maxErrorURL-len(runTextCut)) + runTextCut
	}
	if ue.Err != nil {
		switch msg := ue.Err.Error(); {
		case strings.HasPrefix(msg, locationParseError):
			c.Err = &redactedError{msg: "the redirect's Location header is not a valid URL (not quoted: it may hold credentials)", err: fmt.Errorf("%w: %w", ErrUnfollowableRedirect, ue.Err)}
		case strings.Contains(msg, "://"):
			c.Err = &redactedError{msg: redactURLsIn(msg, extra), err: ue.Err}
		}
	}
	return &c
}

// maxErrorURL caps the URL quoted in a call's error, cut after redaction
// (a cut first could leave part of the user info looking like a host).
const maxErrorURL = 1 << 10

// locationParseError starts net/http's error for a redirect whose
// Location does not parse (net/http/client.go).
const locationParseError = "failed to parse Location header "

// redactedError stands for err in an error message, with msg as its
// text; errors.Is and errors.As still reach err.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// Timeout keeps url.Error.Timeout working through the replacement.
func (e *redactedError) Timeout() bool {
	var t interface{ Timeout() bool }
	return errors.As(e.err, &t) && t.Timeout()
}

// redactErrorURL is redactURL for a URL quoted in an error, where it may
// be a redirect's that does not parse: a URL that does not parse as
// http(s) with a host is replaced by Redacted whole.
func redactErrorURL(raw string, extra []string) string {
	if raw == "" {
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Redacted
	}
	return redactURL(raw, extra)
}

// redactURLsIn returns msg with every URL in it ("scheme://" up to the
// next space or unescaped double quote) passed through redactErrorURL.
func redactURLsIn(msg string, extra []string) string {
	var b strings.Builder
	for {
		i := strings.Index(msg, "://")
		if i < 0 {
			b.WriteString(msg)
			return b.String()
		}
		start := i
		for start > 0 && isSchemeByte(msg[start-1]) {
			start--
		}
		end := i + len("://")
		for end < len(msg) && msg[end] != ' ' && msg[end] != '\t' && msg[end] != '\n' && (msg[end] != '"' || msg[end-1] == '\\') {
			end++
		}
		b.WriteString(msg[:start])
		b.WriteString(redactErrorURL(msg[start:end], extra))
		msg = msg[end:]
	}
}

// isSchemeByte reports whether c may appear in a URL scheme.
func isSchemeByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'
}
