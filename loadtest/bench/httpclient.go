package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/flyballhq/flyball/loadtest/target"
)

// newClient returns an HTTP client with the executor's transport settings
// (services/executor/call.go: newHTTPClient), except for the idle
// connections kept per host. The executor keeps up to max(1024,
// Concurrency) idle connections in all and PerHost (default 16) per host,
// with no cap on connections per host in the transport: its own per-host
// semaphore holds calls in flight to one host to PerHost, so a burst never
// opens more connections than it may keep idle. The load generators here
// have no per-host limit, so this client keeps max(64, concurrency) idle
// per host: fewer than its calls at once would close and redial
// connections on every wave and soon exhaust loopback ports.
func newClient(concurrency int) *http.Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{Transport: &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		MaxIdleConns:          max(1024, concurrency),
		MaxIdleConnsPerHost:   max(64, concurrency),
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     true,
	}}
}

// callTimeout is the executor's default per-call timeout.
const callTimeout = 30 * time.Second

// get calls url the way the executor does, with the same headers. A zero
// scheduled time leaves out the headers that name the slot.
func get(ctx context.Context, c *http.Client, url, task string, scheduled time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "flyball-bench")
	req.Header.Set(target.HeaderTask, task)
	if !scheduled.IsZero() {
		req.Header.Set(target.HeaderKey, task+":"+strconv.FormatInt(scheduled.UnixMilli(), 10))
		req.Header.Set(target.HeaderScheduledAt, scheduled.UTC().Format(time.RFC3339Nano))
	}
	req.Header.Set("Flyball-Attempt", "1")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 256<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}
