package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"https://api.example.com/v1/items", "https://api.example.com/v1/items"},
		{"https://api.example.com/v1?page=2&limit=10", "https://api.example.com/v1?page=2&limit=10"},
		{"https://h/p?api_key=abc&page=2", "https://h/p?api_key=[REDACTED]&page=2"},
		{"https://h/p?page=2&access_token=abc", "https://h/p?page=2&access_token=[REDACTED]"},
		{"https://h/p?Session=abc#top", "https://h/p?Session=[REDACTED]#top"},
		{"https://h/p?sv=2024&sig=abc%2Fdef&se=x", "https://h/p?sv=2024&sig=[REDACTED]&se=x"},
		{"https://h/p?X-Amz-Credential=a&X-Amz-Signature=b&X-Amz-Expires=60", "https://h/p?X-Amz-Credential=[REDACTED]&X-Amz-Signature=[REDACTED]&X-Amz-Expires=60"},
		{"https://h/p?my%5Ftoken=abc", "https://h/p?my%5Ftoken=[REDACTED]"}, // an escaped name is still recognised
		{"https://h/p?signal=on&token", "https://h/p?signal=on&token"},      // a bare name has no value to hide
		{"https://h/p?tenant=acme", "https://h/p?tenant=acme"},
		{"https://h/p?nocookie=1&page=2", "https://h/p?nocookie=[REDACTED]&page=2"},         // named like cookie, as docs/security.md says
		{"https://h/p?partner=x&X-Custom=abc", "https://h/p?partner=x&X-Custom=[REDACTED]"}, // the extra list
		// User info, as a redirect's Location may carry it (net/http
		// masks only a password); a query or path "@" is no user info.
		{"http://sk_live_abc@h/p", "http://[REDACTED]@h/p"},
		{"http://admin:***@h:8080/p?token=abc", "http://[REDACTED]@h:8080/p?token=[REDACTED]"},
		{"https://a:b@h", "https://[REDACTED]@h"},
		{"https://h/p/user@example.com?to=a@b#x@y", "https://h/p/user@example.com?to=a@b#x@y"},
		// A fragment's parameters (an OAuth implicit grant's redirect), a
		// ";" separator, which some servers read as "&", and a JWT.
		{"https://h/cb#access_token=abc&state=s", "https://h/cb#access_token=[REDACTED]&state=s"},
		{"https://h/cb?page=2#id_token=abc", "https://h/cb?page=2#id_token=[REDACTED]"},
		{"https://h/#/cb?access_token=abc", "https://h/#/cb?access_token=[REDACTED]"},
		{"https://h/p#top", "https://h/p#top"},
		{"https://h/p#a=1;b=2", "https://h/p#a=1;b=2"},
		{"https://h/p?a=1;token=abc&b=2", "https://h/p?a=1;token=[REDACTED]&b=2"},
		{"https://h/p?jwt=abc", "https://h/p?jwt=[REDACTED]"},
	} {
		if got := redactURL(c.in, []string{"x-custom"}); got != c.want {
			t.Errorf("redactURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestRedactErrorRewritesTheURLAndKeepsTheCause(t *testing.T) {
	t.Parallel()
	cause := io.ErrUnexpectedEOF
	orig := &url.Error{Op: "Get", URL: "https://h/p?token=hunter2&page=1", Err: cause}
	got := redactError(orig, nil)
	if strings.Contains(got.Error(), "hunter2") || !strings.Contains(got.Error(), "token=[REDACTED]&page=1") {
		t.Fatalf("redactError = %q, want the token redacted and the rest kept", got)
	}
	if !errors.Is(got, cause) {
		t.Fatalf("redactError lost the cause: %v", got)
	}
	if !strings.Contains(orig.Error(), "hunter2") {
		t.Fatal("redactError changed the original error in place")
	}
	// As net/http/client.go writes it, with %v.
	parseErr := &url.Error{Op: "parse", URL: "https://admin:hunter2/x@h/%zz?sig=hunter3", Err: errors.New(`invalid port ":hunter2" after host`)}
	locationError := fmt.Errorf("failed to parse Location header %q: %v", parseErr.URL, parseErr) //nolint:errorlint // net/http does not wrap it
	// A URL inside the cause, one that does not parse (its user info
	// cannot be told from the rest) and a redirect's Location that does
	// not parse, which net/http quotes in full.
	for _, c := range []struct {
		name string
		err  *url.Error
		want string
	}{
		{
			"a URL in the cause",
			&url.Error{Op: "Get", URL: "https://h/p", Err: fmt.Errorf("went to https://u:hunter2@h/q?token=hunter3&page=1 and then: %w", cause)},
			`Get "https://h/p": went to https://[REDACTED]@h/q?token=[REDACTED]&page=1 and then: unexpected EOF`,
		},
		{
			"a quoted URL in the cause",
			&url.Error{Op: "Get", URL: "https://h/p", Err: fmt.Errorf("bad %q: %w", "https://h/q?a=\"x&token=hunter2", cause)},
			`Get "https://h/p": bad "https://h/q?a=\"x&token=[REDACTED]": unexpected EOF`,
		},
		{
			"a URL that does not parse",
			&url.Error{Op: "Get", URL: "https://admin:hunter2/Zm9v@h/p", Err: cause},
			`Get "[REDACTED]": unexpected EOF`,
		},
		{
			"a URL with no authority",
			&url.Error{Op: "Get", URL: "admin:hunter2@h/p", Err: cause},
			`Get "[REDACTED]": unexpected EOF`,
		},
		{
			"a Location that does not parse",
			&url.Error{Op: "Get", URL: "https://h/p", Err: locationError},
			`Get "https://h/p": the redirect's Location header is not a valid URL (not quoted: it may hold credentials)`,
		},
	} {
		got := redactError(c.err, nil)
		if got.Error() != c.want {
			t.Errorf("%s: redactError = %q, want %q", c.name, got, c.want)
		}
		if !errors.Is(got, c.err.Err) {
			t.Errorf("%s: redactError lost the cause: %v", c.name, got)
		}
	}
	var timeout interface{ Timeout() bool }
	if got := redactError(&url.Error{Op: "Get", URL: "https://h/", Err: fmt.Errorf("to https://h/x: %w", context.DeadlineExceeded)}, nil); !errors.As(got, &timeout) || !timeout.Timeout() {
		t.Errorf("redactError(a timeout) = %v, no longer a timeout", got)
	}
	plain := fmt.Errorf("no URL here: %w", cause)
	if redactError(plain, nil) != plain { //nolint:errorlint // the very same error value is wanted back
		t.Fatal("an error that is not a *url.Error must come back unchanged")
	}
}

// FuzzRedactURL: redaction never panics, is idempotent, keeps a URL
// without secret parameters or user info byte for byte, changes nothing
// but the user info, the query and the fragment, and never lets the value
// of a secret parameter through.
func FuzzRedactURL(f *testing.F) {
	for _, s := range []string{
		"https://h/p?api_key=abc&page=2", "http://h/?a=1&token=%zz#f", "?", "?&&=", "https://h/p?sig=1&sig=2",
		"https://h/cb#access_token=a;b=2", "https://h/p?a=1;jwt=x#/r?token=y",
	} {
		f.Add(s)
	}
	// split returns u up to its query and the parameters of its query and
	// fragment.
	split := func(u string) (string, []string) {
		beforeFragment, fragment, hasFragment := strings.Cut(u, "#")
		rest, query, _ := strings.Cut(beforeFragment, "?")
		sep := func(r rune) bool { return r == '&' || r == ';' }
		params := strings.FieldsFunc(query, sep)
		if hasFragment {
			params = append(params, strings.FieldsFunc(fragment, sep)...)
		}
		return rest, params
	}
	secret := func(p string) (string, bool) {
		name, value, hasValue := strings.Cut(p, "=")
		if n, err := url.QueryUnescape(name); err == nil {
			name = n
		}
		return value, hasValue && isSecretName(name, nil)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got := redactURL(raw, nil)
		if again := redactURL(got, nil); again != got {
			t.Fatalf("not idempotent: %q → %q → %q", raw, got, again)
		}
		raw = redactUserinfo(raw)
		rawRest, rawParams := split(raw)
		gotRest, gotParams := split(got)
		if gotRest != rawRest {
			t.Fatalf("%q became %q: more changed than the user info, query and fragment", raw, got)
		}
		if !slices.ContainsFunc(rawParams, func(p string) bool { _, s := secret(p); return s }) && got != raw {
			t.Fatalf("nothing secret in %q, but it became %q", raw, got)
		}
		for _, p := range gotParams {
			if value, s := secret(p); s && value != Redacted {
				t.Fatalf("%q kept the secret parameter %q", got, p)
			}
		}
	})
}

// hugeURLError is a redirect's failure as net/http returns it when the
// Location is about 1.1 MB (net/http takes headers up to 10 MB): the URL
// percent-escaped, 3.3 MB, and the cause after it.
func hugeURLError() *url.Error {
	u := "http://127.0.0.1:1/" + url.PathEscape(strings.Repeat("é", 1100<<10/2)) + "?token=hunter2"
	return &url.Error{Op: "Get", URL: u, Err: errors.New("dial tcp 127.0.0.1:1: connect: connection refused")}
}

// TestHugeURLInAnErrorIsCutAndTheCauseKept: a URL in an error is cut to
// maxErrorURL before the error is quoted, so the cause that follows it
// reaches run.error, and the executor does not quote megabytes only to
// keep the first maxRunText.
func TestHugeURLInAnErrorIsCutAndTheCauseKept(t *testing.T) {
	t.Parallel()
	got := redactError(hugeURLError(), nil).Error()
	if len(got) > maxRunText || !strings.HasSuffix(got, "connection refused") || !strings.Contains(got, runTextCut) || strings.Contains(got, "hunter2") {
		t.Fatalf("redactError of a 3.3 MB URL: %d bytes, ends %q; want at most %d bytes with the URL cut (%q) and the cause kept",
			len(got), got[max(len(got)-60, 0):], maxRunText, runTextCut)
	}
}

// BenchmarkHugeURLError: what an attempt that meets a 1.1 MB redirect
// spends in the executor on the error, from redaction to run.error.
func BenchmarkHugeURLError(b *testing.B) {
	err := hugeURLError()
	for b.Loop() {
		_ = capText(redactError(err, nil).Error(), maxRunText)
	}
}
