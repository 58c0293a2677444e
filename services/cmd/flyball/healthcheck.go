package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

// newHealthcheckCmd is a shell-free container healthcheck: FROM-scratch
// images have no curl or wget, so every flyball container (and the NATS
// image, which carries the flyball binary too) probes itself with it.
func newHealthcheckCmd() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "healthcheck <url>",
		Short: "GET a URL; exit 0 on a 2xx answer, 1 otherwise (for container healthchecks)",
		Long: `healthcheck sends one GET to the URL and exits 0 if the answer is 2xx, 1 on
any other status, a connection error or a timeout. It follows no redirects
and uses no proxy. Docker and compose use it as a healthcheck in images that
have no shell:

  healthcheck: {test: ["CMD", "/flyball", "healthcheck", "http://localhost:9090/healthz"]}`,
		Example: `  flyball healthcheck http://localhost:9090/healthz
  flyball healthcheck --timeout 1s 'http://localhost:8222/healthz?js-enabled-only=true'`,
		Args: oneArg("URL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 {
				return fmt.Errorf("--timeout: must be positive, got %s", timeout)
			}
			return healthcheck(cmd.Context(), args[0], timeout)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "give up after this long")
	return cmd
}

func healthcheck(ctx context.Context, url string, timeout time.Duration) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	client := &http.Client{
		Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("healthcheck: %s answered %s: %s", url, resp.Status, body)
	}
	return nil
}
