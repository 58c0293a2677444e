package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/flyballhq/flyball/services/embedded"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/stack"
	"github.com/flyballhq/flyball/streams"
)

func newDevCmd() *cobra.Command {
	var (
		rf       runFlags
		listen   string
		insecure bool
		dataDir  string
		debug    bool
		async    bool
		sync     string
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run every service and an embedded NATS server in this process",
		Long: `dev starts an embedded nats-server with JetStream (file store under --data-dir),
creates flyball's streams, consumers and KV buckets, and runs every service
in-process. The NATS port stays open so the nats CLI can publish tasks and
watch runs. Ctrl-C stops everything in order (the executor gives calls in
flight up to 10 s); a second Ctrl-C exits at once, without a clean stop.

The embedded NATS server has no authentication, and dev lets tasks call
loopback addresses (--allow-loopback), so whoever can reach --listen can
make this machine call its own loopback services and read the answers,
or delete the streams. --listen therefore takes a loopback address or
localhost; any other host (0.0.0.0, a LAN address) is refused unless
--listen-insecure is also given (docs/security.md). Port 0 picks a free
port, which the banner prints.

dev locks --data-dir while it runs (a file flyball.lock in its store):
a second dev on the same directory is refused, as it would run every task
a second time and could damage the store.

While JetStream recovers its store (longer the larger the store, and
after an unclean shutdown), dev waits without a deadline and logs every
5 s that the server is still starting; Ctrl-C stops the wait.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := rf.logger()
			if err != nil {
				return err
			}
			guard, err := rf.guard()
			if err != nil {
				return err
			}
			srvCfg, err := devServerConfig(listen, insecure, dataDir, sync, debug)
			if err != nil {
				return err
			}
			srvCfg.Log = log
			storeDir := srvCfg.StoreDir
			// nats-server does not fail on a port in use: it logs (nothing,
			// without --nats-debug) and never gets ready, so dev waited 30 s
			// and guessed. Found here, the error names the flag at once.
			// The probe is closed before the server binds the port again.
			if err := probeListen(listen, srvCfg); err != nil {
				return err
			}
			tokens, generated, err := rf.tokens(true)
			if err != nil {
				return err
			}
			ln, err := rf.listenMetrics()
			if err != nil {
				return err
			}
			if ln != nil {
				defer ln.Close() // served, the server's stop closes it first
			}
			apiLn, err := rf.listenAPI()
			if err != nil {
				return err
			}
			defer apiLn.Close() // served, the API's stop closes it first
			if insecure && !isLoopbackHost(srvCfg.Host) {
				log.Warn("the embedded NATS server listens beyond loopback without authentication (--listen-insecure)", "listen", listen)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()

			srv, err := embedded.StartContext(ctx, srvCfg)
			var inUse *embedded.StoreInUseError
			switch {
			case errors.As(err, &inUse):
				// A second dev on the store ran every task a second time.
				return fmt.Errorf("--data-dir %s is in use by another flyball dev%s", dataDir, pidSuffix(inUse.PID))
			case errors.Is(err, embedded.ErrStoreDir):
				return fmt.Errorf("--data-dir %s: %w", dataDir, err)
			case err != nil:
				return err
			}
			natsAddr := listenedAddr(srvCfg.Host, srv)
			defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
			nc, err := nats.Connect("", nats.InProcessServer(srv), nats.Name("flyball-dev"))
			if err != nil {
				return fmt.Errorf("connect to embedded server: %w", err)
			}
			defer nc.Close()
			js, err := jsutil.New(nc)
			if err != nil {
				return err
			}
			ensureCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			var diffs []streams.Difference
			err = streams.Ensure(ensureCtx, js, streams.WithAsyncPersist(async),
				streams.WithReport(func(d streams.Difference) { diffs = append(diffs, d) }))
			cancel()
			logDifferences(log, diffs) // a failed ensure may have set one back
			if err != nil {
				return err
			}
			m := metrics.New()
			cfg := rf.stackConfig(js, log, m, guard, tokens)
			cfg.Version, cfg.APIListener = version, apiLn
			st, err := stack.Start(ctx, cfg)
			if err != nil {
				return err
			}
			stopMetrics := serveMetrics(ctx, ln, m, rf.pprof, log)
			stopTokens := rf.tokenFile.start(ctx, tokenFilePoll, st.API, log)
			// The addresses listened on: --metrics-addr's port 0 is a random
			// port, and a host left out is every interface.
			metricsAddr := ""
			if ln != nil {
				metricsAddr = ln.Addr().String()
			}
			printDevBanner(cmd, natsAddr, st.API.Addr(), metricsAddr, storeDir, tokens[0], generated)
			untilSignalled(ctx, stop, log)
			log.Info("shutting down: api and timer first, then in-flight runs, then result consumers")
			stopTokens()
			stopMetrics()
			st.Stop()
			drainAndClose(nc, drainTimeout, log)
			log.Info("stopped")
			return nil
		},
	}
	rf.register(cmd.Flags(), true)
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:4222", "embedded NATS listen address: a loopback address or localhost (the server has no authentication); port 0 picks a free one")
	cmd.Flags().BoolVar(&insecure, "listen-insecure", false, "let --listen take a host beyond loopback, such as 0.0.0.0: anyone who can reach it can publish tasks that call this machine's loopback services, read their answers, and delete streams (docs/security.md)")
	cmd.Flags().StringVar(&dataDir, "data-dir", ".flyball", "directory for the JetStream file store")
	markNonEmpty(cmd.Flags(), "data-dir") // given empty, the store went to a temporary directory
	cmd.Flags().BoolVar(&debug, "nats-debug", false, "log the embedded nats-server's own messages")
	cmd.Flags().BoolVar(&async, "async-persist", false, asyncPersistUsage)
	cmd.Flags().StringVar(&sync, "nats-sync", embedded.RecommendedSync.String(), natsSyncUsage)
	return cmd
}

// pidSuffix is " (pid N)", or "" for an unknown pid (0).
func pidSuffix(pid int) string {
	if pid <= 0 {
		return ""
	}
	return fmt.Sprintf(" (pid %d)", pid)
}

// printDevBanner prints where dev serves: apiAddr and metricsAddr ("":
// off) are the listeners' addresses, printed as a client calls them
// (dialable).
func printDevBanner(cmd *cobra.Command, natsAddr, apiAddr, metricsAddr, storeDir, token string, generated bool) {
	w := cmd.OutOrStdout()
	apiAddr = dialable(apiAddr)
	metricsAt := "off (--metrics-addr is empty)"
	if metricsAddr != "" {
		metricsAt = "http://" + dialable(metricsAddr) + "/metrics"
	}
	tokenAt := "(bearer token: the one you set)"
	if generated {
		tokenAt = "(bearer token below)"
	}
	fmt.Fprintf(w, `
flyball dev is running.
  NATS (JetStream)  nats://%s   store %s
  HTTP API          http://%s   %s
  Metrics           %s
`, natsAddr, storeDir, apiAddr, tokenAt, metricsAt)
	if generated {
		fmt.Fprintf(w, "  API token         %s   (generated; set FLYBALL_API_TOKENS to fix one)\n", token)
	}
	fmt.Fprintf(w, `
Create a task that GETs the API's /healthz every 10s (one "id" is one
command: publish another with a new id; the same id again changes nothing):
  nats --server nats://%[1]s pub flyball.task.created.hello-dev \
    '{"specversion":"1.0","type":"io.flyball.task.created","source":"cli/me","id":"hello-dev-1","subject":"hello-dev","datacontenttype":"application/json","data":{"id":"hello-dev","target":{"http":{"url":"http://%[2]s/healthz"}},"schedule":{"interval":"10s"}}}'
Watch runs and dead letters:
  nats --server nats://%[1]s sub 'flyball.run.>'
  nats --server nats://%[1]s sub 'flyball.deadletter.>'
Press Ctrl-C to stop.
`, natsAddr, apiAddr)
}

// dialable is a listen address as a client calls it: an unspecified host
// ("", 0.0.0.0, ::) becomes 127.0.0.1.
func dialable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// listenedAddr is the address srv listens on, as host (--listen's) and
// the port it got, which --listen's port 0 leaves to the server.
func listenedAddr(host string, srv interface{ Addr() net.Addr }) string {
	tcp, ok := srv.Addr().(*net.TCPAddr)
	if !ok {
		return net.JoinHostPort(host, "?")
	}
	return net.JoinHostPort(host, strconv.Itoa(tcp.Port))
}

// isLoopbackHost reports whether a --listen host is localhost or a
// loopback address (devServerConfig has made "" 127.0.0.1 already).
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// probeListen checks that the address the embedded server will listen on
// (cfg's, with embedded.Start's defaults) can be bound, and frees it
// again; an error names --listen, which gave it. A random port (-1) is
// probed as port 0, which checks the host alone.
func probeListen(listen string, cfg embedded.Config) error {
	host, port := cfg.Host, cfg.Port
	if host == "" {
		host = "127.0.0.1"
	}
	switch {
	case port == 0:
		port = 4222
	case port < 0:
		port = 0
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("--listen %s: %w", listen, err)
	}
	return ln.Close()
}

// devServerConfig is the embedded nats-server dev starts, from its
// --listen, --listen-insecure, --data-dir, --nats-sync and --nats-debug
// flags; an error names the flag. A host beyond loopback needs insecure;
// port 0 is a random free port.
func devServerConfig(listen string, insecure bool, dataDir, sync string, debug bool) (embedded.Config, error) {
	host, port, err := embedded.ParseListen(listen)
	if err != nil {
		return embedded.Config{}, fmt.Errorf("--listen: %w", err)
	}
	if host == "" {
		// ":4223" listened on 127.0.0.1 (embedded.Config's default) and
		// still does: it is loopback, and the banner names the address.
		host = "127.0.0.1"
	}
	if !insecure && !isLoopbackHost(host) {
		return embedded.Config{}, fmt.Errorf("--listen %s: not a loopback address, and the embedded NATS server has no authentication "+
			"while dev lets tasks call loopback addresses, so anyone who can reach it could make this machine call its own services and read the answers; "+
			"listen on 127.0.0.1 or localhost, or add --listen-insecure to accept that", listen)
	}
	if port == 0 {
		port = -1 // embedded.Config's 0 is 4222
	}
	fsync, err := embedded.ParseSync(sync)
	if err != nil {
		return embedded.Config{}, fmt.Errorf("--nats-sync: %w", err)
	}
	storeDir, err := filepath.Abs(filepath.Join(dataDir, "jetstream"))
	if err != nil {
		return embedded.Config{}, fmt.Errorf("--data-dir: %w", err)
	}
	return embedded.Config{Host: host, Port: port, StoreDir: storeDir, Debug: debug, Sync: fsync}, nil
}

// asyncPersistUsage is the help of --async-persist, on dev and serve.
const asyncPersistUsage = "create DISPATCH and RUNS with nats-server's async persist mode (replicas 1 only): a write system call per batch instead of per message, " +
	"but a nats-server killed without a clean shutdown forgets its last milliseconds of them (docs/operations.md, \"Async persist\"); fixed when a stream is created"

// natsSyncUsage is the help of dev's --nats-sync.
const natsSyncUsage = "when the embedded nats-server forces JetStream writes to disk: an interval (a power loss or kernel crash can take up to that much acknowledged work, a killed process none; nats-server's own default is 2m) " +
	"or always (an fsync per write, so a power loss takes nothing acknowledged, but it needs a fast disk; --async-persist streams are not synced per write) (docs/operations.md, \"Durability\")"
