package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestCreateRefusesATargetTheGuardBlocks: a task whose target.http.url is
// a literal address the executor's SSRF guard refuses, or a well-known
// cloud metadata hostname, is refused up front with a 400 naming the
// field and the rule. It used to be accepted (202), and every run failed
// at the executor: the user heard of it from dead letters. The stack
// allows loopback (as every test stack does), so a loopback target is
// still accepted: the API reads the executor's configuration.
func TestCreateRefusesATargetTheGuardBlocks(t *testing.T) {
	t.Parallel()
	b := setup(t, http.StatusOK)
	for i, c := range []struct{ url, why string }{
		{"http://169.254.169.254/latest/meta-data/", "cloud metadata"},
		{"http://[fd00:ec2::254]/latest/meta-data/", "cloud metadata"},
		{"http://168.63.129.16/machine/?comp=goalstate", "168.63.129.16 is link-local or a cloud metadata address"},
		{"http://metadata.google.internal/computeMetadata/v1/", "metadata hostname"},
		{"http://0.0.0.0:8080/", "unspecified"},
	} {
		id := fmt.Sprintf("blocked%d", i)
		body := fmt.Sprintf(`{"id":%q,"target":{"http":{"url":%q}},"schedule":{"interval":"1m"}}`, id, c.url)
		r := b.call(t, http.MethodPost, "/api/v1/tasks", body)
		expect(t, "create "+c.url, r, http.StatusBadRequest, "target.http.url")
		if d := r.str("detail"); !strings.Contains(d, "SSRF guard") || !strings.Contains(d, c.why) {
			t.Errorf("create %s: detail %q, want it to name the SSRF guard and %q", c.url, d, c.why)
		}
		if r := b.call(t, http.MethodGet, "/api/v1/tasks/"+id, ""); r.status != http.StatusNotFound {
			t.Errorf("create %s: the refused task is readable: status %d", c.url, r.status)
		}
	}
	// An existing task cannot be updated to such a target either.
	expect(t, "create a loopback task (allowed here)", b.call(t, http.MethodPost, "/api/v1/tasks",
		fmt.Sprintf(`{"id":"ok","target":{"http":{"url":%q}},"schedule":{"interval":"1h"}}`, b.url)), http.StatusAccepted, "")
	r := b.call(t, http.MethodPut, "/api/v1/tasks/ok", `{"target":{"http":{"url":"http://169.254.169.254/"}},"schedule":{"interval":"1h"}}`)
	expect(t, "update to a metadata address", r, http.StatusBadRequest, "target.http.url")
}

// TestCreateRefusesANumericHost: a target.http.url whose host is an IPv4
// address in a non-canonical numeric form (one 32-bit number, hex or
// octal parts, a short form) is refused with a 400 naming the field:
// with the guard's reason and the address it stands for if that is
// blocked, and otherwise (loopback, allowed here) with the address to
// write instead, since curl or a proxy reads the host as that address
// and Go's resolver as a DNS name. It used to be accepted (202).
func TestCreateRefusesANumericHost(t *testing.T) {
	t.Parallel()
	b := setup(t, http.StatusOK)
	for i, c := range []struct{ url, why string }{
		{"http://2852039166/latest/meta-data/", "169.254.169.254 is link-local or a cloud metadata address"},
		{"http://0xA9FEA9FE/", "169.254.169.254 is link-local or a cloud metadata address"},
		{"http://0251.0376.0251.0376/", "169.254.169.254 is link-local or a cloud metadata address"},
		{"http://169.254.43518/", "169.254.169.254 is link-local or a cloud metadata address"},
		{"http://0x7f.1:8080/", "write the address in dotted-decimal form: 127.0.0.1"},
		{"http://0177.0.0.1:8080/", "write the address in dotted-decimal form: 127.0.0.1"},
		// Not ASCII: judged by the IDNA ASCII form net/http dials.
		{"http://１６９．２５４．１６９．２５４/latest/meta-data/", "169.254.169.254 is link-local or a cloud metadata address"},
		{"http://169。254。169。254/", "169.254.169.254 is link-local or a cloud metadata address"},
		{"http://ｍｅｔａｄａｔａ.google.internal/", "metadata.google.internal is a cloud metadata hostname"},
		{"http://０ｘ７ｆ．１:8080/", "write the address in dotted-decimal form: 127.0.0.1"},
	} {
		id := fmt.Sprintf("numeric%d", i)
		body := fmt.Sprintf(`{"id":%q,"target":{"http":{"url":%q}},"schedule":{"interval":"1m"}}`, id, c.url)
		r := b.call(t, http.MethodPost, "/api/v1/tasks", body)
		expect(t, "create "+c.url, r, http.StatusBadRequest, "target.http.url")
		if d := r.str("detail"); !strings.Contains(d, c.why) {
			t.Errorf("create %s: detail %q, want it to say %q", c.url, d, c.why)
		}
		if r := b.call(t, http.MethodGet, "/api/v1/tasks/"+id, ""); r.status != http.StatusNotFound {
			t.Errorf("create %s: the refused task is readable: status %d", c.url, r.status)
		}
	}
}
