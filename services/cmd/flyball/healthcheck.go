package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
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

// healthBodyPreview is how many characters of an unhealthy answer's body
// the error shows.
const healthBodyPreview = 120

// healthcheck GETs rawURL. Its errors never show the URL's password: a
// URL is shown redacted, and one that does not parse is not quoted (the
// parser's message quotes it whole). The answer's body is shown flattened
// to one line and cut short.
func healthcheck(ctx context.Context, rawURL string, timeout time.Duration) error {
	if ctx == nil {
		ctx = context.Background()
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return errors.New("healthcheck: the URL does not parse (the parser's message is not shown: it quotes the URL, password included); " +
			"percent-encode reserved characters such as % / ? # @ and spaces")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, http.NoBody)
	if err != nil {
		return fmt.Errorf("healthcheck: %s: %w", u.Redacted(), err)
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
		return fmt.Errorf("healthcheck: %s answered %s: %s", u.Redacted(), resp.Status, preview(string(body), healthBodyPreview))
	}
	return nil
}
