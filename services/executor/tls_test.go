package executor

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
)

// tlsChildURL is set, in the process TestPrivateCAIsTrustedThroughSSLCertFile
// starts, to the HTTPS target that process calls.
const tlsChildURL = "FLYBALL_TEST_TLS_URL"

// TestPrivateCAIsTrustedThroughSSLCertFile checks what docs/security.md
// tells an operator whose targets use a private CA: a certificate the
// system roots do not know fails the attempt as transient, naming the
// cause, and SSL_CERT_FILE pointing at a bundle with that CA makes it
// pass. Go reads the roots once per process, so the call with the
// variable set runs in a child process (this test binary again).
func TestPrivateCAIsTrustedThroughSSLCertFile(t *testing.T) {
	if u := os.Getenv(tlsChildURL); u != "" {
		if res := callOnce(t, u); !res.ok() {
			t.Fatalf("with SSL_CERT_FILE=%s: %v", os.Getenv("SSL_CERT_FILE"), res.err)
		}
		return
	}
	t.Parallel()
	tg := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(tg.Close)
	res := callOnce(t, tg.URL)
	if res.ok() || res.permanent || !strings.Contains(res.err.Error(), "x509: certificate signed by unknown authority") {
		t.Fatalf("a certificate of an unknown CA: err %v, permanent %v; want a transient x509 error", res.err, res.permanent)
	}
	bundle := filepath.Join(t.TempDir(), "bundle.pem")
	if err := os.WriteFile(bundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tg.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestPrivateCAIsTrustedThroughSSLCertFile$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SSL_CERT_FILE="+bundle, tlsChildURL+"="+tg.URL)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the call with SSL_CERT_FILE failed: %v\n%s", err, out)
	}
}

// callOnce makes one GET attempt to url with a fresh executor. Its
// timeout is not what the test is about: 5 s was outlasted by a TLS
// handshake in a freshly started -race child on a loaded machine.
func callOnce(t *testing.T, url string) *result {
	t.Helper()
	s := loopbackCaller(t)
	d := &events.Dispatch{DispatchID: "x:1", TaskID: "x", ScheduledAt: time.Now()}
	h := &events.HTTPTarget{Method: "GET", URL: url, Timeout: events.Duration(60 * time.Second), MaxResponseBytes: 100, ExpectStatus: []string{"2xx"}}
	return s.callHTTP(t.Context(), h, nil, d, 1)
}
