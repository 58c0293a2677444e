package events_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestValidatedHeadersReachHTTP1AndHTTP2Targets sends every header set
// that Validate accepts to an HTTP/1.1 and an HTTP/2 target, the way the
// executor builds its request (the task's headers set one by one, a Host
// moved to req.Host): each call must go through. Validate accepted
// {"Upgrade":"websocket"}, and Go's HTTP/2 transport refused every call
// with it ("http2: invalid Upgrade request header"): the task failed
// transiently on every attempt, opened its breaker and dead-lettered.
func TestValidatedHeadersReachHTTP1AndHTTP2Targets(t *testing.T) {
	h1 := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer h1.Close()
	h2 := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			w.WriteHeader(http.StatusHTTPVersionNotSupported)
		}
	}))
	h2.EnableHTTP2 = true
	h2.StartTLS()
	defer h2.Close()

	for _, headers := range []map[string]string{
		{"Upgrade": "websocket"},
		{"Upgrade": "h2c", "Connection": "Upgrade"},
		{"Connection": "Upgrade"},
		{"Connection": "close"},
		{"Connection": "keep-alive"},
		{"Transfer-Encoding": "gzip"},
		{"Transfer-Encoding": "chunked"},
		{"TE": "gzip"},
		{"TE": "trailers"},
		{"Keep-Alive": "timeout=5"},
		{"Proxy-Connection": "keep-alive"},
		{"Content-Length": "5"},
		{"Trailer": "X-Sum"},
		{"Host": "a b"},
		{"Host": "bücher.example"},
		{"Host": "example.com"},
		{"X-Token": "abc", "Accept": "application/json"},
	} {
		spec := minimalSpec(t)
		spec.Target.HTTP.Headers = headers
		if err := spec.Validate(); err != nil {
			continue // refused when the task is created: never sent
		}
		for _, srv := range []*httptest.Server{h1, h2} {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range headers {
				req.Header.Set(k, v)
			}
			if host := req.Header.Get("Host"); host != "" {
				req.Host = host
				req.Header.Del("Host")
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Errorf("Validate accepted headers %v, and the call to an HTTP/%d target failed: %v", headers, map[*httptest.Server]int{h1: 1, h2: 2}[srv], err)
				continue
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("Validate accepted headers %v, and the HTTP/%d target answered %s", headers, map[*httptest.Server]int{h1: 1, h2: 2}[srv], resp.Status)
			}
		}
	}
}
