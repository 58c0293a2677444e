package executor

import (
	"errors"
	"net/http"
	"net/netip"
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
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		if !errors.Is(err, ErrBlocked) {
			t.Errorf("GET %s: err = %v, want ErrBlocked", u, err)
		}
	}
	allow := &Guard{Allow: []netip.Prefix{netip.MustParsePrefix("169.254.169.254/32")}}
	if err := allow.CheckHost("metadata.google.internal"); err != nil {
		t.Errorf("with 169.254.169.254 allowed, CheckHost(metadata.google.internal) = %v, want nil", err)
	}
}
