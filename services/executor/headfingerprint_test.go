package executor

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
)

// TestHeadFingerprintIsOfTheValidators: a HEAD response has no body by
// method, and every HEAD run had the hash of an empty body: adaptive
// change mode never saw a change. The fingerprint is of the status and
// validators (ETag, Last-Modified) now, and empty with none, so the run
// holds the cadence; a GET with an empty body keeps the empty-body hash.
func TestHeadFingerprintIsOfTheValidators(t *testing.T) {
	t.Parallel()
	s := loopbackCaller(t)
	var etag atomic.Value
	etag.Store("")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if e := etag.Load().(string); e != "" {
			w.Header().Set("ETag", e)
		}
	}))
	t.Cleanup(srv.Close)
	call := func(method string) string {
		t.Helper()
		tg := &events.HTTPTarget{Method: method, URL: srv.URL, Timeout: events.Duration(5 * time.Second), MaxResponseBytes: 100, ExpectStatus: []string{"2xx"}}
		res := s.callHTTP(t.Context(), tg, nil, &events.Dispatch{DispatchID: "x:1", TaskID: "x"}, 1)
		if !res.ok() {
			t.Fatalf("%s: %v", method, res.err)
		}
		return res.fingerprint
	}
	if fp := call(http.MethodHead); fp != "" {
		t.Errorf("HEAD with no validators: fingerprint %q, want none", fp)
	}
	if fp := call(http.MethodGet); fp == "" {
		t.Error("GET with an empty body: no fingerprint, want the empty body's")
	}
	etag.Store(`"a"`)
	a := call(http.MethodHead)
	etag.Store(`"b"`)
	b := call(http.MethodHead)
	if a == "" || a == b {
		t.Errorf("HEAD with ETag \"a\" then \"b\": fingerprints %q and %q, want two different ones", a, b)
	}
}
