package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/stack"
	"github.com/flyballhq/flyball/streams"
)

// natsFlags are the connection flags every NATS-speaking command takes.
type natsFlags struct {
	url      string
	creds    string
	nkey     string
	tlsCA    string
	tlsCert  string
	tlsKey   string
	name     string
	replicas int
	// log, when set, receives the connection's asynchronous errors (a
	// watch's consumer gone, a slow consumer, a permission violation) and
	// its disconnects and reconnects. Without it nats.go prints the errors
	// to stderr as bare lines, outside --log-format.
	log *slog.Logger
	// fs names, in errors, the variable a flag's value came from.
	fs *pflag.FlagSet
}

func (f *natsFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	f.fs = fs
	fs.StringVar(&f.url, "nats-url", envOr("NATS_URL", nats.DefaultURL), "NATS server URL(s), comma-separated (env NATS_URL)")
	// --help shows the default, which NATS_URL may give with a password.
	fs.Lookup("nats-url").DefValue = redactURLs(f.url)
	// It may carry a password or a token: no error quotes it.
	markSecret(fs, "nats-url", "want NATS URLs, comma-separated")
	fs.StringVar(&f.creds, "creds", os.Getenv("NATS_CREDS"), "NATS user credentials file (env NATS_CREDS)")
	fs.StringVar(&f.nkey, "nkey", os.Getenv("NATS_NKEY"), "NATS nkey seed file (env NATS_NKEY)")
	fs.StringVar(&f.tlsCA, "tls-ca", os.Getenv("NATS_CA"), "CA certificate for NATS TLS (env NATS_CA)")
	fs.StringVar(&f.tlsCert, "tls-cert", os.Getenv("NATS_CERT"), "client certificate for NATS TLS (env NATS_CERT)")
	fs.StringVar(&f.tlsKey, "tls-key", os.Getenv("NATS_KEY"), "client key for NATS TLS (env NATS_KEY)")
}

// ensureTimeout bounds serve's --ensure-streams, and ensureTryTimeout
// each of its tries (provision has --timeout and --try-timeout).
const (
	ensureTimeout    = time.Minute
	ensureTryTimeout = 10 * time.Second
)

// checkReplicas refuses a --replicas that no stream can have.
func (f *natsFlags) checkReplicas() error {
	if f.replicas < 1 || f.replicas > 5 {
		return fmt.Errorf("--replicas: want 1 to 5 (3 on a 3-node cluster), got %d", f.replicas)
	}
	return nil
}

// ensureOptions gives streams.Ensure --replicas only when it was given:
// its default, 1, moved a cluster's R3 streams down to one copy whenever
// a serve or provision ran without it. Without it, existing streams keep
// their replica count and new ones take the highest among them (1 with
// none: streams.WithReplicas).
func (f *natsFlags) ensureOptions(cmd *cobra.Command, async bool) []streams.Option {
	opts := []streams.Option{streams.WithAsyncPersist(async)}
	if cmd.Flags().Changed("replicas") {
		opts = append(opts, streams.WithReplicas(f.replicas))
	}
	return opts
}

// identity returns the connection's identity and TLS options, refusing
// NATS credentials that contradict each other and an nkey seed that does
// not read. serve calls it before it binds its listeners, so such a
// mistake is what it reports even when a port is taken.
func (f *natsFlags) identity() ([]nats.Option, error) {
	// nats.go sends a user and password next to a JWT or an nkey, and
	// the server authenticates with the one and ignores the other: which
	// identity the connection has was the server's choice.
	for _, id := range []struct{ flag, env, v string }{{"creds", "NATS_CREDS", f.creds}, {"nkey", "NATS_NKEY", f.nkey}} {
		if id.v != "" && os.Getenv("NATS_USER") != "" {
			return nil, fmt.Errorf("NATS_USER and %s both name a NATS identity: give one of them", origin(f.fs, id.flag, id.env))
		}
	}
	var opts []nats.Option
	if u, p := os.Getenv("NATS_USER"), os.Getenv("NATS_PASSWORD"); u != "" {
		opts = append(opts, nats.UserInfo(u, p))
	} else if p != "" {
		// The password alone was dropped: the connection went without
		// it, as a server's no_auth_user if it has one.
		return nil, errors.New("NATS_PASSWORD is set but NATS_USER is not: give both, or neither")
	}
	// One without the other was passed on as it was, and the connect
	// failed with "open : no such file or directory", naming neither.
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return nil, errors.New("--tls-cert/--tls-key (NATS_CERT/NATS_KEY): give both")
	}
	// nats.go reads each file only as it connects, and its error was
	// "connect to NATS at …: nats: open /x.creds: …", naming neither the
	// flag nor the variable that gave the file: each is opened here first.
	for _, file := range []struct{ flag, env, path string }{
		{"creds", "NATS_CREDS", f.creds},
		{"nkey", "NATS_NKEY", f.nkey},
		{"tls-ca", "NATS_CA", f.tlsCA},
		{"tls-cert", "NATS_CERT", f.tlsCert},
		{"tls-key", "NATS_KEY", f.tlsKey},
	} {
		path := file.path
		if file.flag == "creds" {
			// nats.go expands the creds path (UserCredentials: $VAR,
			// a leading ~), and an env file's NATS_CREDS=~/… worked.
			path = expandCredsPath(path)
		}
		if err := readable(path); err != nil {
			return nil, fmt.Errorf("--%s (%s): %w", file.flag, file.env, err)
		}
	}
	if f.creds != "" {
		opts = append(opts, nats.UserCredentials(f.creds))
	}
	if f.nkey != "" {
		o, err := nats.NkeyOptionFromSeed(f.nkey)
		if err != nil {
			return nil, fmt.Errorf("--nkey (NATS_NKEY): %w", err)
		}
		opts = append(opts, o)
	}
	if f.tlsCA != "" {
		// A file with no certificate in it failed at the connect too.
		pem, err := os.ReadFile(f.tlsCA)
		if err == nil && !x509.NewCertPool().AppendCertsFromPEM(pem) {
			err = fmt.Errorf("no PEM certificate in %s", f.tlsCA)
		}
		if err != nil {
			return nil, fmt.Errorf("--tls-ca (NATS_CA): %w", err)
		}
		opts = append(opts, nats.RootCAs(f.tlsCA))
	}
	if f.tlsCert != "" {
		if _, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey); err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key (NATS_CERT/NATS_KEY): %w", err)
		}
		opts = append(opts, nats.ClientCert(f.tlsCert, f.tlsKey))
	}
	return opts, nil
}

// expandCredsPath expands path as nats.go does a credentials file's:
// environment variables, then a leading ~ to the home directory.
func expandCredsPath(path string) string {
	path = os.ExpandEnv(path)
	if !strings.HasPrefix(path, "~") {
		return path
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return path
	}
	return filepath.Join(home, path[1:])
}

// readable reports why the file at path cannot be read, if it cannot; an
// empty path (not given) is fine.
func readable(path string) error {
	if path == "" {
		return nil
	}
	r, err := os.Open(path)
	if err != nil {
		return err
	}
	return r.Close()
}

// connect connects with the flags' identity (identity).
func (f *natsFlags) connect() (*nats.Conn, jetstream.JetStream, error) {
	id, err := f.identity()
	if err != nil {
		return nil, nil, err
	}
	return f.connectAs(id)
}

// connectAs connects to f.url with id, identity's options.
func (f *natsFlags) connectAs(id []nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	opts := []nats.Option{
		nats.Name(f.name), nats.MaxReconnects(-1), nats.ReconnectWait(500 * time.Millisecond),
		// No reconnect buffer: a publish while disconnected fails at once,
		// and its caller retries it with what is true then. Buffered, it
		// was sent as it was when the connection came back, possibly
		// minutes later: a timer's dispatch of a slot that another timer
		// had dispatched and the executor had run meanwhile was stored
		// again once DISPATCH's duplicate window had passed, with its old
		// firedAt, and the target was called twice.
		nats.ReconnectBufSize(-1),
	}
	if log := f.log; log != nil {
		opts = append(opts,
			nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
				if sub != nil {
					log.Warn("nats: asynchronous error", "err", err, "subject", sub.Subject)
					return
				}
				log.Warn("nats: asynchronous error", "err", err)
			}),
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
				if err == nil { // this process closed its own connection: a clean stop
					log.Debug("nats: connection closed")
					return
				}
				log.Warn("nats: disconnected", "err", err)
			}),
			nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("nats: reconnected", "server", redactURLs(nc.ConnectedUrlRedacted())) }),
		)
	}
	nc, err := nats.Connect(f.url, append(opts, id...)...)
	if err != nil {
		return nil, nil, connectError(f.url, err)
	}
	js, err := jsutil.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// noJetStream adds to err, when a JetStream request of it had no
// responders, what that means: nats.go's "no responders available for
// request" named neither JetStream nor the server's setting.
func noJetStream(err error) error {
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("%w (no JetStream answered: is JetStream enabled on the server, and for this user's account?)", err)
	}
	return err
}

// connectError says why nats.Connect refused url, never quoting a
// credential: a URL that does not parse is quoted whole by url.Parse's
// error, password included, so for a list that carries credentials that
// error is replaced by a fixed reason.
func connectError(list string, err error) error {
	shown := redactURLs(list)
	var ue *url.Error
	if shown != list && errors.As(err, &ue) {
		return fmt.Errorf("connect to NATS at %s: a URL does not parse (the parser's message is not shown: it quotes the credentials); "+
			"percent-encode reserved characters such as %% / ? # @ , in the user name and password", shown)
	}
	return fmt.Errorf("connect to NATS at %s: %w", shown, err)
}

// redactURLs hides the credentials a NATS URL list may carry
// (nats://user:password@host, or nats://token@host) before it is logged
// or printed: the password or the token becomes "REDACTED", the rest
// stays. Every URL of the list that it changes loses its blanks.
//
// The list is split at every comma, as nats.go splits it, so a password
// holding one is cut: nats://u:s3cr,et@host is nats://u:s3cr, which has
// no "@" of its own, and et@host. In a list with an "@", a piece without
// one is therefore unparsableWithCredentials when it does not parse, or
// when the pieces after it, up to and including the next with an "@",
// have no scheme (the rest of such a password: nats://u:2024,x@host
// parses as host u, port 2024). Such a rest may hold a ":" (s3cr,e:t),
// so a schemeless piece with an "@" after the first has no user name
// shown either: all its user info is REDACTED.
func redactURLs(list string) string {
	urls := strings.Split(list, ",")
	withCredentials := strings.Contains(list, "@")
	beforeRest := false // the pieces after this one may be a password's rest
	for i := len(urls) - 1; i >= 0; i-- {
		raw := strings.TrimSpace(urls[i])
		schemeless, at := !strings.Contains(raw, "://"), strings.Contains(raw, "@")
		mayBeRest := i > 0 && schemeless && at
		shown, changed := redactURL(raw, mayBeRest)
		switch {
		case changed:
			urls[i] = shown
		case withCredentials && (beforeRest || !parsesAsNATS(raw)):
			urls[i] = unparsableWithCredentials
		}
		beforeRest = schemeless && (at || beforeRest)
	}
	return strings.Join(urls, ",")
}

// parsesAsNATS reports whether url.Parse reads s as nats.go gives it
// (with nats:// in front when it has no "://").
func parsesAsNATS(s string) bool {
	if !strings.Contains(s, "://") {
		s = "nats://" + s
	}
	_, err := url.Parse(s)
	return err == nil
}

// unparsableWithCredentials stands for a URL whose credentials redactURL
// cannot tell from the rest.
const unparsableWithCredentials = "(unparsable URL with credentials)"

// redactURL reads s as nats.go does (a URL without "://" gets nats://
// in front: cli:pass@host is user cli, not the scheme cli url.Parse
// reads) and hides its user info. An "@" that is not the end of the user
// info url.Parse found makes the whole URL unparsableWithCredentials: a
// URL that does not parse, or one where the user info was not found
// (nats://svc:2024/Xy+z@host reads as host svc, port 2024 and a path),
// or an "@" left in the host, path, query or fragment, may hold a
// password anywhere. With hideUser, the user name goes too (REDACTED@host).
// changed is false if s is shown as it is.
func redactURL(s string, hideUser bool) (shown string, changed bool) {
	full, added := s, false
	if !strings.Contains(s, "://") {
		full, added = "nats://"+s, true
	}
	u, err := url.Parse(full)
	if err != nil || u.User == nil {
		if strings.Contains(s, "@") {
			return unparsableWithCredentials, true
		}
		return s, false
	}
	if strings.Contains(u.Host+u.Path+u.RawPath+u.RawQuery+u.Fragment+u.Opaque, "@") {
		return unparsableWithCredentials, true
	}
	if _, hasPassword := u.User.Password(); hasPassword && !hideUser {
		u.User = url.UserPassword(u.User.Username(), "REDACTED")
	} else {
		u.User = url.User("REDACTED")
	}
	shown = u.String()
	if added {
		shown = strings.TrimPrefix(shown, "nats://")
	}
	return shown, true
}

func newServeCmd() *cobra.Command {
	var (
		rf       runFlags
		nf       natsFlags
		ensure   bool
		async    bool
		instance string
	)
	cmd := &cobra.Command{
		Use:   "serve <service>...",
		Short: "Run chosen services against a NATS cluster",
		Long: "serve runs one or more of: " + strings.Join(stack.All, ", ") + `.
Each service may run in as many replicas as you like: durable consumers share
the work, timers deduplicate dispatches, and KV writes use compare-and-set.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("serve: give one or more services: %s (flyball serve governor timer)", strings.Join(stack.All, ", "))
			}
			return nil
		},
		ValidArgs: stack.All,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := serviceNames(args); err != nil {
				return err
			}
			if async && !ensure {
				return fmt.Errorf("--async-persist applies when the streams are created: it needs --ensure-streams")
			}
			// Without --ensure-streams nothing reads it: "--replicas 3"
			// passed, and the streams stayed as they were.
			if cmd.Flags().Changed("replicas") && !ensure {
				return fmt.Errorf("--replicas applies when the streams are ensured: it needs --ensure-streams (or flyball provision --replicas)")
			}
			if err := nf.checkReplicas(); err != nil {
				return err
			}
			id, err := nf.identity()
			if err != nil {
				return err
			}
			log, err := rf.logger()
			if err != nil {
				return err
			}
			guard, err := rf.guard()
			if err != nil {
				return err
			}
			// Only the API reads its tokens: a shared environment naming a
			// token file that only the API's pod mounts, or a short token,
			// stopped the other services, which crash-looped.
			var tokens []string
			if slices.Contains(args, "api") {
				if tokens, _, err = rf.tokens(false); err != nil {
					return err
				}
				if len(tokens) == 0 {
					return fmt.Errorf("api needs at least one token: --api-token, FLYBALL_API_TOKENS or --api-token-file")
				}
				if err := rf.checkAPITLS(); err != nil {
					return err
				}
			}
			ln, err := rf.listenMetrics()
			if err != nil {
				return err
			}
			if ln != nil {
				defer ln.Close() // served, the server's stop closes it first
			}
			var apiLn net.Listener
			if slices.Contains(args, "api") {
				if apiLn, err = rf.listenAPI(); err != nil {
					return err
				}
				defer apiLn.Close() // served, the API's stop closes it first
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			nf.name, nf.log = "flyball-"+strings.Join(args, "-"), log
			nc, js, err := nf.connectAs(id)
			if err != nil {
				return err
			}
			defer nc.Close()
			if ensure {
				// Tries again as provision does when a try goes unanswered:
				// after a whole cluster restarted, a request to a stream
				// still electing its leader is never answered, and one try
				// waited out the whole minute. Any other error (no
				// JetStream, a permission) ends serve at once, as before.
				ectx, cancel := context.WithTimeout(ctx, ensureTimeout)
				unanswered := func(err error) bool { return errors.Is(err, errUnanswered) }
				tries, diffs, err := ensureTrying(ectx, js, nf.ensureOptions(cmd, async), ensureTryTimeout, ensureTryTimeout.String(), unanswered, func(try int, err error) {
					log.Warn("--ensure-streams: try failed; trying again in 1s", "try", try, "err", err)
				})
				timedOut := ctx.Err() == nil && errors.Is(ectx.Err(), context.DeadlineExceeded)
				cancel()
				logDifferences(log, diffs) // a failed ensure may have set one back
				if err != nil && timedOut {
					return fmt.Errorf("--ensure-streams: not done within %s (%d tries): %w", ensureTimeout, tries, err)
				}
				if err != nil {
					return err
				}
			}
			m := metrics.New()
			cfg := rf.stackConfig(js, log, m, guard, tokens)
			cfg.Services, cfg.Instance, cfg.Version, cfg.APIListener = args, instance, version, apiLn
			st, err := stack.Start(ctx, cfg)
			if err != nil {
				return noJetStream(err)
			}
			stopMetrics := serveMetrics(ctx, ln, m, rf.pprof, log)
			stopTokens := rf.tokenFile.start(ctx, tokenFilePoll, st.API, log)
			attrs := []any{"services", st.Names(), "nats", redactURLs(nf.url)}
			if st.API != nil {
				attrs = append(attrs, "api", st.API.Addr())
			}
			log.Info("serving", attrs...)
			untilSignalled(ctx, stop, log)
			log.Info("shutting down")
			stopTokens()
			stopMetrics()
			st.Stop()
			drainAndClose(nc, drainTimeout, log)
			return nil
		},
	}
	rf.register(cmd.Flags(), false)
	nf.register(cmd)
	cmd.Flags().BoolVar(&ensure, "ensure-streams", true, "create or update streams, consumers and KV buckets at start")
	cmd.Flags().IntVar(&nf.replicas, "replicas", 1, "stream and KV replicas when ensuring (3 on a 3-node cluster); without it, existing streams keep theirs and new ones get the highest of theirs, or 1 with none")
	cmd.Flags().BoolVar(&async, "async-persist", false, asyncPersistUsage)
	cmd.Flags().StringVar(&instance, "instance", envOr("FLYBALL_INSTANCE", ""), "this replica's name in heartbeats and event sources; defaults to host-pid (env FLYBALL_INSTANCE)")
	return cmd
}

// serviceNames is stack.Validate for serve's arguments. An unknown one is
// not quoted (a stray argument is often a secret parted from its flag),
// unless it is within two edits of a service, which no secret is: then it
// is named with the service it is near.
func serviceNames(args []string) error {
	err := stack.Validate(args)
	var unknown *stack.UnknownServiceError
	if !errors.As(err, &unknown) {
		return err
	}
	if near := nearService(unknown.Name); near != "" {
		return fmt.Errorf("unknown service %q (did you mean %s?): want one of %s", unknown.Name, near, strings.Join(stack.All, ", "))
	}
	return fmt.Errorf("%w; %s", err, strayHint)
}

// nearService is the service a is a typo of (at most two edits from it,
// in lower-case letters only), or "".
func nearService(a string) string {
	if len(a) == 0 || len(a) > 16 || strings.Trim(a, "abcdefghijklmnopqrstuvwxyz") != "" {
		return ""
	}
	for _, s := range stack.All {
		if editDistance(a, s) <= 2 {
			return s
		}
	}
	return ""
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
