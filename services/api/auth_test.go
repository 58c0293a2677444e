package api_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestTwoAuthorizationHeadersAreRefused: Authorization takes one value. A
// request with two was judged by the first alone, so a second header (from
// a proxy, or a client's mistake) was ignored whatever it said.
func TestTwoAuthorizationHeadersAreRefused(t *testing.T) {
	t.Parallel()
	b, _ := apiOnly(t)
	for _, second := range []string{"Bearer wrong-token-0123456789", "Bearer " + token} {
		h := http.Header{}
		h.Add("Authorization", "Bearer "+token)
		h.Add("Authorization", second)
		r := b.send(t, http.MethodGet, "/api/v1/runtime", h, "")
		expect(t, "two Authorization headers ("+second+")", r, http.StatusUnauthorized, "Authorization")
		if strings.Contains(string(r.raw), token) {
			t.Fatalf("the answer quotes the token: %s", r.raw)
		}
	}
}
