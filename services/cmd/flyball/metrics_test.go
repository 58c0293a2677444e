package main

import (
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/services/internal/metrics"
)

// TestServeMetricsProfilesOnlyWhenAsked checks that /debug/pprof/ is
// served on the metrics listener with --pprof and is absent without it
// (and the command line never), while /metrics and /healthz are served
// either way.
func TestServeMetricsProfilesOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	for _, withPprof := range []bool{false, true} {
		addr := freeLoopback(t)
		ln, err := (&runFlags{metricsAddr: addr}).listenMetrics()
		if err != nil {
			t.Fatal(err)
		}
		stop := serveMetrics(t.Context(), ln, metrics.New(), withPprof, slog.New(slog.DiscardHandler))
		get := func(path string) (int, string) {
			t.Helper()
			resp, err := http.Get("http://" + addr + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "go_gc_heap_allocs_objects_total") {
			t.Errorf("pprof=%v: /metrics = %d, want 200 with the allocation counters", withPprof, code)
		}
		if code, _ := get("/healthz"); code != http.StatusOK {
			t.Errorf("pprof=%v: /healthz = %d, want 200", withPprof, code)
		}
		code, body := get("/debug/pprof/heap?debug=1")
		switch {
		case withPprof && (code != http.StatusOK || !strings.Contains(body, "heap profile")):
			t.Errorf("--pprof: /debug/pprof/heap = %d, want 200 and a heap profile", code)
		case !withPprof && code != http.StatusNotFound:
			t.Errorf("without --pprof: /debug/pprof/heap = %d, want 404", code)
		}
		// The command line may carry --api-token: never served.
		if code, body := get("/debug/pprof/cmdline"); code == http.StatusOK {
			t.Errorf("pprof=%v: /debug/pprof/cmdline = 200 %q, want it refused", withPprof, body)
		}
		stop()
	}
}

// TestMetricsServerClosesIdleConnections: the metrics listener (all
// interfaces by default, no token) drops an idle keep-alive connection
// and a slow request instead of keeping them for ever, and sets no write
// timeout, which would cut /debug/pprof/profile?seconds=N short.
func TestMetricsServerClosesIdleConnections(t *testing.T) {
	t.Parallel()
	srv := newMetricsServer(http.NewServeMux())
	if srv.IdleTimeout <= 0 || srv.IdleTimeout > 5*time.Minute || srv.ReadTimeout <= 0 || srv.ReadHeaderTimeout <= 0 || srv.WriteTimeout != 0 {
		t.Fatalf("metrics server: idle %s, read %s, read header %s, write %s; want bounded idle and read timeouts and no write timeout",
			srv.IdleTimeout, srv.ReadTimeout, srv.ReadHeaderTimeout, srv.WriteTimeout)
	}
}

func freeLoopback(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// TestMetricsAddrInUseFailsBeforeAnythingStarts: a --metrics-addr (or
// FLYBALL_METRICS_ADDR) already in use is refused at once, in one line
// that names where the address came from, before serve connects to NATS
// (here nothing listens at NATS_URL: the error is the metrics address's,
// not the connection's) and before dev starts its server (its store is
// not created). It was found by the listen after the connection, and for
// dev after the whole stack started.
func TestMetricsAddrInUseFailsBeforeAnythingStarts(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	for _, c := range []struct {
		env  string
		args []string
		from string
	}{
		{"", []string{"serve", "governor", "--metrics-addr", addr}, "--metrics-addr"},
		{"FLYBALL_METRICS_ADDR=" + addr, []string{"serve", "governor"}, "FLYBALL_METRICS_ADDR"},
		{"", []string{"dev", "--metrics-addr", addr}, "--metrics-addr"},
		{"FLYBALL_METRICS_ADDR=" + addr, []string{"dev"}, "FLYBALL_METRICS_ADDR"},
	} {
		e := &cliEnv{url: "nats://127.0.0.1:1", dir: t.TempDir()} // nothing listens there
		if c.env != "" {
			e.env = []string{c.env}
		}
		args := c.args
		if args[0] == "dev" {
			args = append(args, "--listen", freeLoopback(t), "--api-addr", freeLoopback(t), "--data-dir", "store")
		}
		r := e.run(t, args...)
		want := "flyball: " + c.from + " " + addr + ": listen tcp " + addr + ": "
		if r.code != 1 || !strings.HasPrefix(r.stderr, want) || strings.Count(r.stderr, "\n") != 1 || strings.Contains(r.stderr, "NATS") {
			t.Errorf("%s flyball %s with the metrics address in use: exit %d, stderr %q; want exit 1 and one line starting %q, before any connection",
				c.env, strings.Join(args, " "), r.code, r.stderr, want)
		}
		if _, err := os.Stat(filepath.Join(e.dir, "store")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s flyball %s with the metrics address in use: its store exists (stat: %v), want nothing started", c.env, strings.Join(args, " "), err)
		}
	}
}

// TestListenAndAPIAddrInUseFailBeforeAnythingStarts: dev's --listen and
// the --api-addr (or FLYBALL_API_ADDR) of dev and serve api, already in
// use, are refused at once in one line naming where the address came
// from, before serve connects (nothing listens at NATS_URL) and before
// dev starts its server (its store is not created). dev waited 30 s for
// an embedded server that never got ready, then said "(is the port in
// use?)" without naming --listen; the API's address was found in use
// only after the connection and the services before it had started.
func TestListenAndAPIAddrInUseFailBeforeAnythingStarts(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	const token = "a-token-of-sixteen-chars"
	for _, c := range []struct {
		env  string
		args []string
		from string
	}{
		{"", []string{"dev", "--listen", addr, "--api-addr", freeLoopback(t)}, "--listen"},
		{"", []string{"dev", "--listen", freeLoopback(t), "--api-addr", addr}, "--api-addr"},
		{"FLYBALL_API_ADDR=" + addr, []string{"dev", "--listen", freeLoopback(t)}, "FLYBALL_API_ADDR"},
		{"", []string{"serve", "api", "--api-token", token, "--api-addr", addr}, "--api-addr"},
		{"FLYBALL_API_ADDR=" + addr, []string{"serve", "governor", "api", "--api-token", token}, "FLYBALL_API_ADDR"},
	} {
		e := &cliEnv{url: "nats://127.0.0.1:1", dir: t.TempDir()} // nothing listens there
		if c.env != "" {
			e.env = []string{c.env}
		}
		args := append(slices.Clone(c.args), "--metrics-addr", "")
		if args[0] == "dev" {
			args = append(args, "--data-dir", "store")
		}
		start := time.Now()
		r := e.run(t, args...)
		want := "flyball: " + c.from + " " + addr + ": listen tcp " + addr + ": "
		if r.code != 1 || !strings.HasPrefix(r.stderr, want) || strings.Count(r.stderr, "\n") != 1 || strings.Contains(r.stderr, "NATS") {
			t.Errorf("%s flyball %s with the address in use: exit %d after %s, stderr %q; want exit 1 and one line starting %q, before any connection",
				c.env, strings.Join(args, " "), r.code, time.Since(start).Round(time.Second), r.stderr, want)
		}
		if _, err := os.Stat(filepath.Join(e.dir, "store")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s flyball %s with the address in use: its store exists (stat: %v), want nothing started", c.env, strings.Join(args, " "), err)
		}
	}
}
