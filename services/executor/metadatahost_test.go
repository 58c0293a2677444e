package executor

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

// TestMetadataHostnamesAreBlockedBeforeDNS: a call (or a redirect) to a
// well-known cloud metadata hostname is refused by name, before DNS is
// asked: what the name resolves to (a split-horizon DNS, a hosts file)
// does not matter. It used to go to DNS, and only the address that came
// back was checked. An operator who allows the address the name stands
// for (169.254.169.254) allows the name too.
func TestMetadataHostnamesAreBlockedBeforeDNS(t *testing.T) {
	t.Parallel()
	client := newHTTPClient(&Guard{AllowLoopback: true}, 1, 1, nil)
	for _, u := range []string{"http://metadata.google.internal/computeMetadata/v1/", "http://METADATA.goog./", "http://instance-data.ec2.internal/latest/meta-data/"} {
		if err := get(t, client, u); !errors.Is(err, ErrBlocked) {
			t.Errorf("GET %s: err = %v, want ErrBlocked", u, err)
		}
	}
	allow := &Guard{Allow: []netip.Prefix{netip.MustParsePrefix("169.254.169.254/32")}}
	if err := allow.CheckHost("metadata.google.internal"); err != nil {
		t.Errorf("with 169.254.169.254 allowed, CheckHost(metadata.google.internal) = %v, want nil", err)
	}
}

// TestNumericHostsAreRefusedAtDialTime: a task stored before the
// create-time check refused them may still name a host that is an IPv4
// address in a non-canonical numeric form (0x7f.1, 0177.0.0.1,
// 2852039166). The call is refused before DNS is asked, with ErrBlocked
// (a permanent failure), even where the address is allowed (loopback
// here): Go's resolver would ask DNS for the name, and a cgo resolver
// (getaddrinfo) would read it as the address. It used to go to whichever
// resolver the build had.
func TestNumericHostsAreRefusedAtDialTime(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	client := newHTTPClient(&Guard{AllowLoopback: true}, 1, 1, nil)
	for _, host := range []string{"0x7f.1", "0177.0.0.1", "2130706433", "127.1", "127.0.0.1.", "2852039166"} {
		u := "http://" + net.JoinHostPort(host, port) + "/"
		if err := get(t, client, u); !errors.Is(err, ErrBlocked) || !strings.Contains(err.Error(), "dotted-decimal") {
			t.Errorf("GET %s: err = %v, want ErrBlocked saying to write the address in dotted-decimal form", u, err)
		}
	}
}

// get calls GET u with client and returns the call's error.
func get(t *testing.T, client *http.Client, u string) error {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err == nil {
		_ = resp.Body.Close()
	}
	return err
}
