package executor

import "strings"

// Redacted replaces secret header values in run records.
const Redacted = "[REDACTED]"

// DefaultRedactHeaders are header names (case-insensitive) whose values
// never reach a run record. Names containing "token", "secret", "password"
// or "key" are redacted too.
var DefaultRedactHeaders = []string{"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key"}

func redactHeaders(h map[string]string, extra []string) map[string]string {
	if len(h) == 0 {
		return nil
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		if isSecretHeader(k, extra) {
			v = Redacted
		}
		out[k] = v
	}
	return out
}

func isSecretHeader(name string, extra []string) bool {
	n := strings.ToLower(name)
	for _, s := range DefaultRedactHeaders {
		if n == s {
			return true
		}
	}
	for _, s := range extra {
		if n == strings.ToLower(s) {
			return true
		}
	}
	for _, frag := range []string{"token", "secret", "password", "passwd", "key", "auth", "session"} {
		if strings.Contains(n, frag) {
			return true
		}
	}
	return false
}
