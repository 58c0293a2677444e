package api_test

import (
	"crypto/tls"
	"net/http"
	"strings"
	"testing"

	"github.com/flyballhq/flyball/services/api"
	"github.com/flyballhq/flyball/services/internal/apitest"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/svcconf"
)

// TestAPIServesTLS: the API spoke plain HTTP only, so its bearer tokens
// crossed the network in the clear. Given a certificate and its key it
// serves HTTPS, TLS 1.2 or later: an authenticated request works over
// https, a plain http request to the port gets no answer from the API,
// and a TLS 1.1 client is refused.
func TestAPIServesTLS(t *testing.T) {
	t.Parallel()
	_, js := natstest.StartWithStreams(t).Connect(t)
	certFile, keyFile, roots := apitest.SelfSigned(t)
	s := startAPI(t, api.Config{
		Common: svcconf.Common{JS: js}, Addr: "127.0.0.1:0", Tokens: []string{token},
		TLSCertFile: certFile, TLSKeyFile: keyFile,
	})
	hc := apitest.TLSClient(t, roots)
	c := apitest.Client{Base: "https://" + s.Addr(), Token: token, HTTP: hc}
	if code, body := c.Do(t, http.MethodGet, "/api/v1/tasks", ""); code != http.StatusOK || !strings.Contains(string(body), `"tasks"`) {
		t.Fatalf("GET /api/v1/tasks over https: %d %s, want 200 and the tasks", code, body)
	}
	if code, _ := (apitest.Client{Base: c.Base, Token: "not-the-token-0123456789", HTTP: hc}).Do(t, http.MethodGet, "/api/v1/tasks", ""); code != http.StatusUnauthorized {
		t.Fatalf("GET /api/v1/tasks over https with another token: %d, want 401", code)
	}
	resp, err := hc.Get(c.Base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 || resp.Proto != "HTTP/1.1" {
		t.Fatalf("GET /healthz over https: TLS %+v, protocol %s; want TLS 1.2 or later, HTTP/1.1", resp.TLS, resp.Proto)
	}

	// Plain HTTP to the TLS port: Go's TLS server answers a bare 400 of
	// its own, and the API never sees the request.
	if code, body := (apitest.Client{Base: "http://" + s.Addr(), Token: token}).Do(t, http.MethodGet, "/api/v1/tasks", ""); code == http.StatusOK || strings.Contains(string(body), `"tasks"`) {
		t.Fatalf("GET /api/v1/tasks over plain http to the TLS port: %d %s, want it refused", code, body)
	}

	old := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}}} //nolint:gosec // the client a TLS 1.2 floor refuses
	if resp, err := old.Get(c.Base + "/healthz"); err == nil {
		_ = resp.Body.Close()
		t.Fatalf("a TLS 1.1 client got %s, want the handshake refused", resp.Status)
	}
}

// TestAPITLSNeedsTheCertificateAndItsKey: one without the other, or
// files that do not hold a certificate and its key, are refused by New,
// naming the field, before anything listens.
func TestAPITLSNeedsTheCertificateAndItsKey(t *testing.T) {
	t.Parallel()
	_, js := natstest.Start(t).Connect(t)
	certFile, keyFile, _ := apitest.SelfSigned(t)
	for _, c := range []struct {
		cert, key, want string
	}{
		{certFile, "", "api: Config.TLSCertFile is set but Config.TLSKeyFile is not: give both, or neither"},
		{"", keyFile, "api: Config.TLSKeyFile is set but Config.TLSCertFile is not: give both, or neither"},
		{keyFile, certFile, "api: Config.TLSCertFile/TLSKeyFile: "},
		{certFile + ".missing", keyFile, "api: Config.TLSCertFile/TLSKeyFile: open "},
	} {
		_, err := api.New(api.Config{Common: svcconf.Common{JS: js}, Tokens: []string{token}, TLSCertFile: c.cert, TLSKeyFile: c.key})
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("New with TLSCertFile %q, TLSKeyFile %q: %v, want an error starting %q", c.cert, c.key, err, c.want)
		}
	}
}
