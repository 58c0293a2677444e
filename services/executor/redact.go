package executor

import (
	"net/url"
	"slices"
	"strings"
)

// Redacted replaces secret header values and query parameter values in
// run records.
const Redacted = "[REDACTED]"

// DefaultRedactHeaders are header names (case-insensitive) whose values
// never reach a run record. Names containing one of secretFragments are
// redacted too, and so are query parameters named like either.
var DefaultRedactHeaders = []string{"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key"}

// secretFragments mark a header or query parameter name as secret when
// the lower-cased name contains one. "sig" alone is matched exactly (an
// Azure SAS signature), as a fragment it would catch "signal".
var secretFragments = []string{"token", "secret", "password", "passwd", "key", "auth", "session", "signature", "credential"}

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
	if n == "sig" {
		return true
	}
	if slices.Contains(DefaultRedactHeaders, n) || slices.Contains(extra, n) {
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
// parameter (?api_key=…, ?access_token=…, a presigned URL's signature)
// and its user info (user:pass@, token@) replaced by Redacted. The rest
// of the URL, parameter order included, is kept byte for byte, and raw
// itself is returned when nothing is secret. The task spec refuses user
// info, but a redirect's Location may carry it, and net/http quotes that
// URL in the error with only a password masked.
func redactURL(raw string, extra []string) string {
	raw = redactUserinfo(raw)
	q := strings.IndexByte(raw, '?')
	if q < 0 {
		return raw
	}
	query, fragment := raw[q+1:], ""
	if i := strings.IndexByte(query, '#'); i >= 0 {
		query, fragment = query[:i], query[i:]
	}
	params := strings.Split(query, "&")
	changed := false
	for i, p := range params {
		rawName, _, hasValue := strings.Cut(p, "=")
		name, err := url.QueryUnescape(rawName)
		if err != nil {
			name = rawName
		}
		if hasValue && isSecretName(name, extra) {
			params[i] = rawName + "=" + Redacted
			changed = true
		}
	}
	if !changed {
		return raw
	}
	return raw[:q+1] + strings.Join(params, "&") + fragment
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
// secret query parameter into the run record's error. Only an outermost
// *url.Error can be rewritten (a wrapper has its message already), and
// that is how http.Client.Do and url.Parse return theirs.
func redactError(err error, extra []string) error {
	ue, ok := err.(*url.Error) //nolint:errorlint // see above: a wrapped one cannot be rewritten
	if !ok {
		return err
	}
	c := *ue
	c.URL = redactURL(ue.URL, extra)
	return &c
}
