package main

import (
	"bytes"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/flyballhq/flyball/services/internal/metrics"
)

// TestStackConfigCarriesTheRunFlags: every run flag that configures a
// service reaches the stack.Config that dev and serve both start.
func TestStackConfigCarriesTheRunFlags(t *testing.T) {
	t.Parallel()
	var rf runFlags
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	rf.register(fs, false)
	err := fs.Parse([]string{
		"--concurrency", "32", "--per-host", "4", "--governor-workers", "3", "--timer-lead", "500ms", "--timer-lease", "5s", "--zombie-after", "10m",
		"--redact-header", "X-Tenant", "--redact-header", "account", "--api-addr", "127.0.0.1:0", "--per-task-metrics",
		"--api-tls-cert", "/etc/flyball/api.pem", "--api-tls-key", "/etc/flyball/api-key.pem",
	})
	if err != nil {
		t.Fatal(err)
	}
	guard, err := rf.guard()
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	cfg := rf.stackConfig(nil, slog.New(slog.DiscardHandler), m, guard, []string{"token-0123456789abcdef"})
	switch {
	case cfg.Concurrency != 32 || cfg.PerHost != 4 || cfg.GovernorWorkers != 3:
		t.Errorf("limits %d/%d/%d, want 32/4/3", cfg.Concurrency, cfg.PerHost, cfg.GovernorWorkers)
	case cfg.TimerLead != 500*time.Millisecond || cfg.TimerLease != 5*time.Second || cfg.ZombieAfter != 10*time.Minute:
		t.Errorf("timer lead %s, lease %s, zombie after %s; want 500ms, 5s, 10m", cfg.TimerLead, cfg.TimerLease, cfg.ZombieAfter)
	case !slices.Equal(cfg.RedactHeaders, []string{"X-Tenant", "account"}):
		t.Errorf("redact names %q, want the two given", cfg.RedactHeaders)
	case cfg.APIAddr != "127.0.0.1:0" || len(cfg.APITokens) != 1 || !cfg.PerTaskMetrics:
		t.Errorf("api %q tokens %d per-task %v", cfg.APIAddr, len(cfg.APITokens), cfg.PerTaskMetrics)
	case cfg.APITLSCertFile != "/etc/flyball/api.pem" || cfg.APITLSKeyFile != "/etc/flyball/api-key.pem":
		t.Errorf("api TLS certificate %q and key %q, want the files given", cfg.APITLSCertFile, cfg.APITLSKeyFile)
	case cfg.Metrics != m || cfg.Guard.AllowLoopback:
		t.Errorf("metrics not passed through, or serve's guard allows loopback: %+v", cfg.Guard)
	}
}

// TestListEnvAndTokensAreTrimmed: the comma-separated environment lists
// are written as people write lists, "a, b": each element is trimmed and
// empty ones are dropped, or the token " b" could never match (the API
// trims the token it is sent), " 10.0.0.0/8" and " X-Tenant" would be
// refused. --api-token values are trimmed the same way.
func TestListEnvAndTokensAreTrimmed(t *testing.T) {
	t.Setenv("FLYBALL_API_TOKENS", "tok-aaaaaaaaaaaaaaaa, tok-bbbbbbbbbbbbbbbb,")
	t.Setenv("FLYBALL_ALLOW_CIDRS", "10.0.0.0/8, 192.168.0.0/16")
	t.Setenv("FLYBALL_DENY_CIDRS", " 203.0.113.0/24 ,")
	t.Setenv("FLYBALL_REDACT_HEADERS", "X-Tenant, account")
	var rf runFlags
	rf.register(pflag.NewFlagSet("x", pflag.ContinueOnError), false)
	toks, _, err := rf.tokens(false)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"tok-aaaaaaaaaaaaaaaa", "tok-bbbbbbbbbbbbbbbb"}; !slices.Equal(toks, want) {
		t.Errorf("FLYBALL_API_TOKENS: tokens %q, want %q", toks, want)
	}
	guard, err := rf.guard()
	if err != nil {
		t.Fatalf("the lists with spaces are refused: %v", err)
	}
	if len(guard.Allow) != 2 || len(guard.Deny) != 1 || guard.Deny[0].String() != "203.0.113.0/24" {
		t.Errorf("allow %v deny %v, want 2 and 203.0.113.0/24", guard.Allow, guard.Deny)
	}
	if want := []string{"X-Tenant", "account"}; !slices.Equal(rf.redact, want) {
		t.Errorf("FLYBALL_REDACT_HEADERS: %q, want %q", rf.redact, want)
	}

	var flags runFlags
	fs := pflag.NewFlagSet("y", pflag.ContinueOnError)
	t.Setenv("FLYBALL_API_TOKENS", "")
	flags.register(fs, false)
	if err := fs.Parse([]string{"--api-token", "tok-cccccccccccccccc, tok-dddddddddddddddd, "}); err != nil {
		t.Fatal(err)
	}
	if toks, _, _ := flags.tokens(false); !slices.Equal(toks, []string{"tok-cccccccccccccccc", "tok-dddddddddddddddd"}) {
		t.Errorf("--api-token 'c, d, ': tokens %q, want the two, trimmed", toks)
	}
	// A value with no token in it is refused, not dropped (it was, so
	// "--api-token=" replaced FLYBALL_API_TOKENS with no token).
	if err := fs.Parse([]string{"--api-token", " "}); !errors.Is(err, errEmptyValue) {
		t.Errorf("--api-token ' ': %v, want it refused as empty", err)
	}
}

// TestAllowLoopbackFromTheEnvironment: --allow-loopback alone of the SSRF
// guard's settings had no variable, so FLYBALL_ALLOW_LOOPBACK was ignored
// and a compose file or unit that set the others had to change the
// command for it. It is read as FLYBALL_PPROF is: strconv.ParseBool's
// values, empty is unset, and the flag wins.
func TestAllowLoopbackFromTheEnvironment(t *testing.T) {
	for _, c := range []struct {
		name string
		env  string
		dev  bool
		args []string
		want bool
	}{
		{"serve, unset", "", false, nil, false},
		{"serve, true", "true", false, nil, true},
		{"serve, 1", "1", false, nil, true},
		{"dev, unset", "", true, nil, true},
		{"dev, false", "false", true, nil, false},
		{"serve, the flag wins", "true", false, []string{"--allow-loopback=false"}, false},
		{"serve, the flag wins over a bad value", "yes", false, []string{"--allow-loopback"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("FLYBALL_ALLOW_LOOPBACK", c.env)
			var rf runFlags
			fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
			rf.register(fs, c.dev)
			if err := fs.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			g, err := rf.guard()
			if err != nil {
				t.Fatal(err)
			}
			if g.AllowLoopback != c.want {
				t.Errorf("FLYBALL_ALLOW_LOOPBACK=%q %q: AllowLoopback %v, want %v", c.env, c.args, g.AllowLoopback, c.want)
			}
		})
	}
}

// TestDevBannerTaskCallsThisStack: the banner's example task GETs the
// /healthz of this dev stack's API (which needs no token and is always
// on), at the address it listens on, whatever --metrics-addr and
// --api-addr say; an unspecified listen host is called on 127.0.0.1.
func TestDevBannerTaskCallsThisStack(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ api, metrics, want string }{
		{"127.0.0.1:38080", "127.0.0.1:39090", `"url":"http://127.0.0.1:38080/healthz"`},
		{"127.0.0.1:8080", "", `"url":"http://127.0.0.1:8080/healthz"`},
		{"[::]:8081", "127.0.0.1:9090", `"url":"http://127.0.0.1:8081/healthz"`},
		{"0.0.0.0:8082", "127.0.0.1:9090", `"url":"http://127.0.0.1:8082/healthz"`},
		{"[::1]:8083", "127.0.0.1:9090", `"url":"http://[::1]:8083/healthz"`},
	} {
		var out bytes.Buffer
		cmd := &cobra.Command{}
		cmd.SetOut(&out)
		printDevBanner(cmd, "127.0.0.1:4222", c.api, c.metrics, ".flyball", "tok", false)
		if !strings.Contains(out.String(), c.want) {
			t.Errorf("API on %q, metrics on %q: banner\n%s\nwant the example task to contain %s", c.api, c.metrics, out.String(), c.want)
		}
	}
}

// TestDevBannerSaysWhenMetricsAreOff: with --metrics-addr "" nothing serves
// /metrics, and the banner says so instead of printing http:///metrics.
func TestDevBannerSaysWhenMetricsAreOff(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"127.0.0.1:9090": "Metrics           http://127.0.0.1:9090/metrics\n",
		"":               "Metrics           off (--metrics-addr is empty)\n",
	} {
		var out bytes.Buffer
		cmd := &cobra.Command{}
		cmd.SetOut(&out)
		printDevBanner(cmd, "127.0.0.1:4222", "127.0.0.1:8080", addr, ".flyball", "tok", false)
		if !strings.Contains(out.String(), want) || strings.Contains(out.String(), "http:///") {
			t.Errorf("--metrics-addr %q: banner\n%s\nwant the line %q", addr, out.String(), want)
		}
	}
}

// TestDevBannerPointsAtTheToken: the banner says the token is below only
// when it prints one (a generated token); a token the operator set is
// never printed, and the banner says so.
func TestDevBannerPointsAtTheToken(t *testing.T) {
	t.Parallel()
	for _, generated := range []bool{true, false} {
		var out bytes.Buffer
		cmd := &cobra.Command{}
		cmd.SetOut(&out)
		printDevBanner(cmd, "127.0.0.1:4222", "127.0.0.1:8080", "", ".flyball", "tok-0123456789abcdef", generated)
		below := strings.Contains(out.String(), "(bearer token below)")
		printed := strings.Contains(out.String(), "tok-0123456789abcdef")
		if below != generated || printed != generated {
			t.Errorf("generated=%v: banner\n%s\nsays the token is below: %v, prints it: %v", generated, out.String(), below, printed)
		}
	}
}

// TestAPITokenCommasAndQuotes pins how --api-token reads a comma, as
// docs/security.md says: it separates two tokens, and a token that holds
// a comma or a double quote is given in double quotes (encoding/csv, ""
// for a quote inside). FLYBALL_API_TOKENS splits at every comma, and a
// quote is an ordinary character there.
func TestAPITokenCommasAndQuotes(t *testing.T) {
	t.Setenv("FLYBALL_API_TOKENS", "")
	var flags runFlags
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	flags.register(fs, false)
	if err := fs.Parse([]string{"--api-token", `tok-aaaaaaaaaaaaaaaa,"tok,bbbbbbbbbbbbbbbb","tok ""c"" cccccccccccccc"`}); err != nil {
		t.Fatal(err)
	}
	want := []string{"tok-aaaaaaaaaaaaaaaa", "tok,bbbbbbbbbbbbbbbb", `tok "c" cccccccccccccc`}
	if toks, _, err := flags.tokens(false); err != nil || !slices.Equal(toks, want) {
		t.Errorf("--api-token: tokens %q (%v), want %q", toks, err, want)
	}

	t.Setenv("FLYBALL_API_TOKENS", `tok"dddddddddddddddd,tok-eeeeeeeeeeeeeeee`)
	var env runFlags
	env.register(pflag.NewFlagSet("y", pflag.ContinueOnError), false)
	want = []string{`tok"dddddddddddddddd`, "tok-eeeeeeeeeeeeeeee"}
	if toks, _, err := env.tokens(false); err != nil || !slices.Equal(toks, want) {
		t.Errorf("FLYBALL_API_TOKENS: tokens %q (%v), want %q", toks, err, want)
	}
}
