package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"time"
)

// profiler takes a measurement window's profiles: of this process, or,
// with StackProcess, of the flyball dev child through its /debug/pprof/.
type profiler interface {
	// startCPU starts a CPU profile into path for the window (d long);
	// stop ends it and reports a failure. "" does nothing.
	startCPU(path string, d time.Duration) (stop func() error, err error)
	// writeHeap writes a heap profile to path; "" does nothing.
	writeHeap(path string) error
}

// selfProfiler profiles this process.
type selfProfiler struct{}

func (selfProfiler) startCPU(path string, _ time.Duration) (func() error, error) {
	stop, err := startProfile(path)
	if err != nil {
		return nil, err
	}
	return func() error { stop(); return nil }, nil
}

func (selfProfiler) writeHeap(path string) error { return writeHeapProfile(path) }

// pprofClient profiles a flyball process started with --pprof, whose
// metrics listener serves net/http/pprof under base (http://host:port).
type pprofClient struct {
	ctx  context.Context
	base string
}

func (p pprofClient) startCPU(path string, d time.Duration) (func() error, error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	// The server profiles whole seconds and answers at their end.
	secs := int(math.Ceil(d.Seconds()))
	done := make(chan error, 1)
	go func() {
		done <- p.fetch(path, "/debug/pprof/profile?seconds="+strconv.Itoa(secs), time.Duration(secs)*time.Second+time.Minute)
	}()
	return func() error { return <-done }, nil
}

func (p pprofClient) writeHeap(path string) error {
	if path == "" {
		return nil
	}
	return p.fetch(path, "/debug/pprof/heap", time.Minute)
}

// fetch saves the profile at base+uri to path.
func (p pprofClient) fetch(path, uri string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(p.ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+uri, http.NoBody)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile of the stack process: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return fmt.Errorf("profile of the stack process: GET %s: %s: %s", uri, resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("profile of the stack process: %w", err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return fmt.Errorf("profile of the stack process: %w", err)
	}
	return f.Close()
}
