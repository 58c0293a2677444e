package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestHealthcheck(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			w.WriteHeader(http.StatusNoContent)
		case "/down":
			http.Error(w, "jetstream not current", http.StatusServiceUnavailable)
		case "/moved":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/slow":
			select {
			case <-block:
			case <-r.Context().Done():
			}
		}
	}))
	t.Cleanup(srv.Close)

	tests := []struct {
		name    string
		path    string
		wantErr string // "" means healthy
	}{
		{name: "2xx is healthy", path: "/ok"},
		{name: "5xx is unhealthy and says why", path: "/down", wantErr: "503 Service Unavailable: jetstream not current"},
		{name: "redirects are not followed", path: "/moved", wantErr: "302 Found"},
		{name: "a hung endpoint times out", path: "/slow", wantErr: "deadline exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := healthcheck(context.Background(), srv.URL+tt.path, 200*time.Millisecond)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("healthcheck(%s) = %v, want healthy", tt.path, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("healthcheck(%s) = %v, want an error containing %q", tt.path, err, tt.wantErr)
			}
		})
	}
}

func TestHealthcheckUnreachable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	if err := healthcheck(context.Background(), url+"/healthz", time.Second); err == nil {
		t.Fatal("healthcheck of a closed port succeeded")
	}
}

// TestHealthcheckHidesThePasswordAndKeepsOneLine: the error names the URL
// without its password, even one that does not parse, and the answer's
// body in a line of its own. It printed
// "healthcheck: http://u:hunter2@127.0.0.1:…/x answered 404 Not Found: …"
// and a body's newlines broke the error over several lines.
func TestHealthcheckHidesThePasswordAndKeepsOneLine(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte("line one\nline two\r\n" + strings.Repeat("x", 600)))
	}))
	t.Cleanup(srv.Close)
	withPassword := strings.Replace(srv.URL, "http://", "http://u:hunter2@", 1) + "/x"
	for _, c := range []struct {
		url  string
		want string
	}{
		{withPassword, "answered 404 Not Found: line one line two"},
		{"http://u:hunter2@bad host/", "the URL does not parse"},
	} {
		err := healthcheck(context.Background(), c.url, time.Second)
		if err == nil {
			t.Fatalf("healthcheck(%s) succeeded", c.url)
		}
		if msg := err.Error(); strings.Contains(msg, "hunter2") || strings.ContainsAny(msg, "\r\n") || !strings.Contains(msg, c.want) || len(msg) > 300 {
			t.Errorf("healthcheck(%s) = %q; want one line with %q and no password", c.url, msg, c.want)
		}
	}
}
