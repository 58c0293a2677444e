// Package apitest calls flyball's HTTP API from tests of other packages
// (the stack, the CLI's backup procedure): an authenticated request with
// a JSON body, and its status and body.
package apitest

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// Client calls the API at Base ("http://127.0.0.1:8080") with Token,
// through HTTP (http.DefaultClient when nil: TLSClient for an https Base).
type Client struct {
	Base  string
	Token string
	HTTP  *http.Client
}

// Do sends method path with body, as JSON, and the headers given as
// name, value pairs, authenticated with c.Token, and returns the
// response's status and body. A request that gets no response fails t.
func (c Client) Do(t testing.TB, method, path, body string, header ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, c.Base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read the body: %v", method, path, err)
	}
	return resp.StatusCode, out
}
