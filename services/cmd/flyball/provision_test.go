package main

import (
	"encoding/json"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestProvisionCreatesEverythingAndChangesNothingTheSecondTime runs
// `flyball provision` on an empty server, as the compose stack's
// provision container does: every stream, KV bucket and durable consumer
// exists afterwards, and a second run succeeds without storing or
// dropping a message.
func TestProvisionCreatesEverythingAndChangesNothingTheSecondTime(t *testing.T) {
	t.Parallel()
	srv, url := natstest.StartListeningEmpty(t)
	e := &cliEnv{url: url, srv: srv, dir: t.TempDir()}
	if out := e.ok(t, "provision"); !strings.Contains(out, "provisioned:") {
		t.Fatalf("provision printed %q, want a line starting with provisioned:", out)
	}
	cfgs, err := streams.StreamConfigs()
	if err != nil {
		t.Fatal(err)
	}
	seqs := map[string]uint64{}
	for _, cfg := range cfgs {
		st, err := srv.JS.Stream(t.Context(), cfg.Name)
		if err != nil {
			t.Fatalf("stream %s after provision: %v", cfg.Name, err)
		}
		seqs[cfg.Name] = st.CachedInfo().State.LastSeq
	}
	durables, err := streams.ConsumerConfigs()
	if err != nil {
		t.Fatal(err)
	}
	for stream, cs := range durables {
		for _, c := range cs {
			if _, err := srv.JS.Consumer(t.Context(), stream, c.Durable); err != nil {
				t.Fatalf("durable %s on %s after provision: %v", c.Durable, stream, err)
			}
		}
	}
	e.ok(t, "provision")
	for _, cfg := range cfgs {
		st, err := srv.JS.Stream(t.Context(), cfg.Name)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().State.LastSeq; got != seqs[cfg.Name] {
			t.Fatalf("stream %s: last sequence %d after the second provision, want %d", cfg.Name, got, seqs[cfg.Name])
		}
	}
}

// TestProvisionReportsAKeptRetentionLimit: an operator shortens RUNS's
// max_age with `nats stream edit` (the FlyballJetStreamStorageHigh
// runbook); the next provision keeps it and says so, where it wrote the
// definition's 7 days back and printed that everything matched.
func TestProvisionReportsAKeptRetentionLimit(t *testing.T) {
	t.Parallel()
	e := provisionedThenEditRuns(t, func(cfg *jetstream.StreamConfig) { cfg.MaxAge = 72 * time.Hour })
	srv := e.srv
	out := e.ok(t, "provision")
	if want := "provision: RUNS: max_age 72h kept (flyball's default is 168h)\n"; !strings.Contains(out, want) {
		t.Errorf("provision printed %q, want the line %q", out, want)
	}
	if !strings.Contains(out, "but for the 1 retention limit above") {
		t.Errorf("provision printed %q, want its summary to name the kept limit", out)
	}
	st, err := srv.JS.Stream(t.Context(), streams.StreamRuns)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.MaxAge; got != 72*time.Hour {
		t.Errorf("RUNS max_age %v after provision, want the operator's 72h", got)
	}
}

// TestProvisionWithoutReplicasKeepsAClustersReplicas: on a 3-node cluster
// provisioned with --replicas 3, a provision or a serve --ensure-streams
// that does not give --replicas (the upgrade steps in docs/operations.md)
// keeps every stream at 3. It moved every stream and KV bucket to 1
// replica, the default of --replicas, and a node's loss then lost data.
func TestProvisionWithoutReplicasKeepsAClustersReplicas(t *testing.T) {
	t.Parallel()
	e, js := provisionedAtR3(t)
	e.ok(t, "provision")
	cfgs, err := streams.StreamConfigs()
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range cfgs {
		st, err := js.Stream(t.Context(), cfg.Name)
		if err != nil {
			t.Fatalf("stream %s: %v", cfg.Name, err)
		}
		if got := st.CachedInfo().Config.Replicas; got != 3 {
			t.Errorf("stream %s: %d replicas after a provision without --replicas, want the 3 it had", cfg.Name, got)
		}
	}
}

// TestProvisionWithoutReplicasCreatesAtTheClustersReplicas: on a 3-node
// cluster provisioned with --replicas 3, a stream created again by a
// provision without --replicas (DISPATCH deleted, as the cure of a
// drifted retention says; a bucket a new version adds) takes the 3 of
// the existing streams, and the summary names it. It came back at the
// definition's 1 replica, one node's loss from losing its data.
func TestProvisionWithoutReplicasCreatesAtTheClustersReplicas(t *testing.T) {
	t.Parallel()
	e, js := provisionedAtR3(t)
	probes := "KV_" + streams.BucketProbes
	for _, name := range []string{streams.StreamDispatch, probes} {
		if err := js.DeleteStream(t.Context(), name); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
	}
	out := e.ok(t, "provision")
	for _, name := range []string{streams.StreamDispatch, probes} {
		st, err := js.Stream(t.Context(), name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		if got := st.CachedInfo().Config.Replicas; got != 3 {
			t.Errorf("stream %s: created with %d replicas by a provision without --replicas, want the 3 of the existing streams", name, got)
		}
	}
	for _, w := range []string{
		"provision: DISPATCH: created with 3 replicas",
		"created DISPATCH with 3, " + probes + " with 3;",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("provision's output lacks %q:\n%s", w, out)
		}
	}
}

// TestServeLogsStreamsCreatedAtTheClustersReplicas: serve with
// --ensure-streams (its default) on a 3-node cluster provisioned with
// --replicas 3 creates a deleted DISPATCH with the 3 replicas of the
// existing streams, as provision does, and logs it at info, naming the
// stream and the count.
func TestServeLogsStreamsCreatedAtTheClustersReplicas(t *testing.T) {
	t.Parallel()
	e, js := provisionedAtR3(t)
	if err := js.DeleteStream(t.Context(), streams.StreamDispatch); err != nil {
		t.Fatalf("delete %s: %v", streams.StreamDispatch, err)
	}
	_, raw := serveUntilServing(t, e, "governor")
	st, err := js.Stream(t.Context(), streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.Replicas; got != 3 {
		t.Errorf("DISPATCH created with %d replicas by serve, want the 3 of the existing streams", got)
	}
	var logged []map[string]any
	for line := range strings.SplitSeq(raw, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "--ensure-streams: new stream created with the replicas of the existing ones" {
			logged = append(logged, m)
		}
	}
	if len(logged) != 1 || logged[0]["level"] != "INFO" || logged[0]["stream"] != streams.StreamDispatch || logged[0]["replicas"] != "3" {
		t.Errorf("serve logged %v for the streams it created, want one info line for DISPATCH with replicas 3:\n%s", logged, raw)
	}
}

// provisionedAtR3 starts a 3-node cluster, provisions it with
// --replicas 3, and returns the CLI's environment on it and a JetStream
// client of it, closed in t.Cleanup.
func provisionedAtR3(t *testing.T) (*cliEnv, jetstream.JetStream) {
	t.Helper()
	cl := natstest.StartCluster(t, 3)
	urls := make([]string, len(cl.Servers))
	for i, s := range cl.Servers {
		urls[i] = s.ClientURL()
	}
	url := strings.Join(urls, ",")
	e := &cliEnv{url: url, dir: t.TempDir()}
	e.ok(t, "provision", "--replicas", "3")
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return e, js
}

// TestServeWithoutStreamsSaysWhatIsMissing: a service started with
// --ensure-streams=false where flyball's streams or buckets are missing
// exits 1 with one line that names what is missing and how it is made.
// deadletter said "stream not found" and the sweeper the same without a
// stream's name, and the timer named its bucket but not the cure.
func TestServeWithoutStreamsSaysWhatIsMissing(t *testing.T) {
	t.Parallel()
	const hint = "(run flyball provision, or flyball serve with --ensure-streams)"
	_, empty := natstest.StartListeningEmpty(t)
	for _, svc := range []string{"governor", "timer", "executor", "breaker", "deadletter", "sweeper"} {
		e := &cliEnv{url: empty, dir: t.TempDir()}
		r := e.run(t, "serve", svc, "--ensure-streams=false", "--metrics-addr", "")
		if r.code != 1 || !strings.HasPrefix(r.stderr, "flyball: start "+svc+": ") || !strings.Contains(r.stderr, hint) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("serve %s on a server without flyball's streams: exit %d, stderr %q; want exit 1 and one line with %q", svc, r.code, r.stderr, hint)
		}
	}

	// Every bucket is there, and DISPATCH is not.
	srv, url := natstest.StartListening(t)
	if err := srv.JS.DeleteStream(t.Context(), streams.StreamDispatch); err != nil {
		t.Fatal(err)
	}
	for _, svc := range []string{"deadletter", "sweeper"} {
		e := &cliEnv{url: url, dir: t.TempDir()}
		r := e.run(t, "serve", svc, "--ensure-streams=false", "--metrics-addr", "")
		if want := "stream DISPATCH: "; r.code != 1 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, hint) {
			t.Errorf("serve %s without DISPATCH: exit %d, stderr %q; want exit 1 naming %q with %q", svc, r.code, r.stderr, want, hint)
		}
	}
}

// TestProvisionTriesAgainWhenARequestIsNeverAnswered: a JetStream request
// nobody answers (a stream still electing its leader, as just after the
// whole 3-node compose stack restarted with its volumes) ends the try
// after --try-timeout, and provision tries again. One try waited out all of
// --timeout (2m in the compose file) and `up` stopped with "not done
// within --timeout 2m0s (1 tries)", though the leader was elected a
// second later. The server here has no JetStream; a subscriber takes every
// JetStream API request and never answers.
func TestProvisionTriesAgainWhenARequestIsNeverAnswered(t *testing.T) {
	t.Parallel()
	url, requests := unansweredJetStream(t)
	e := &cliEnv{url: url, dir: t.TempDir()}
	r := e.run(t, "provision", "--replicas", "3", "--timeout", "4s", "--try-timeout", "500ms")
	last := r.stderr[strings.LastIndex(strings.TrimSuffix(r.stderr, "\n"), "\n")+1:]
	if r.code != 1 || !strings.HasPrefix(last, "flyball: provision: not done within --timeout 4s") ||
		!strings.Contains(r.stderr, "provision: try 2: no answer within --try-timeout 500ms") {
		t.Fatalf("exit %d, stderr %q: want exit 1, a second try after the first went unanswered for --try-timeout, and a last line saying --timeout ended", r.code, r.stderr)
	}
	if n := requests.Load(); n < 2 {
		t.Fatalf("%d JetStream API requests reached the server, want one per try (>= 2)", n)
	}
}

// TestServeEnsureTriesAgainWhenARequestIsNeverAnswered: serve's
// --ensure-streams tries as provision does. Its one try waited out the
// whole minute on a request nobody answered (a stream still electing its
// leader after a whole cluster restarted), and the service then exited.
func TestServeEnsureTriesAgainWhenARequestIsNeverAnswered(t *testing.T) {
	t.Parallel()
	url, _ := unansweredJetStream(t)
	e := &cliEnv{url: url, dir: t.TempDir()}
	// startCLI fails the test unless the line comes within 20 s: the
	// first try ends after 10 s.
	e.startCLI(t, "--ensure-streams: try failed; trying again in 1s", "serve", "governor", "--metrics-addr", "")
}

// unansweredJetStream starts a nats-server without JetStream whose
// JetStream API requests a subscriber takes and never answers, as a
// stream with no leader yet does. It returns the server's URL and the
// count of requests.
func unansweredJetStream(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	s := startWithoutJetStream(t)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	requests := new(atomic.Int64)
	natstest.Subscribe(t, nc, "$JS.API.>", func(*nats.Msg) { requests.Add(1) })
	return s.ClientURL(), requests
}

func TestProvisionTryTimeoutMustBePositive(t *testing.T) {
	t.Parallel()
	e := &cliEnv{url: "nats://127.0.0.1:1", dir: t.TempDir()}
	e.fails(t, []string{"provision", "--try-timeout", "0s"}, "--try-timeout: must be positive, got 0s")
}

// TestEnsureTriesReportASetBackOfAFailedTry: a try reports every limit it
// finds different before it updates any stream, so it may set one back
// and then fail on a later stream. The next try found that limit as
// defined and reported nothing of it, and an ensure that ended in an
// error reported nothing at all: a set-back, which drops data past the
// limit, went unrecorded. Every try's differences are kept now, on an
// error too.
func TestEnsureTriesReportASetBackOfAFailedTry(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	const attempts = "KV_" + streams.BucketAttempts
	st, err := srv.JS.Stream(ctx, attempts)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxAge = time.Hour // by hand: flyball relies on its definition's 72h
	if _, err := srv.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// A stream updated after it that no update can mend: its storage.
	const tasks = "KV_" + streams.BucketTasks
	st, err = srv.JS.Stream(ctx, tasks)
	if err != nil {
		t.Fatal(err)
	}
	broken := st.CachedInfo().Config
	if err := srv.JS.DeleteStream(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	broken.Storage = jetstream.MemoryStorage
	if _, err := srv.JS.CreateStream(ctx, broken); err != nil {
		t.Fatal(err)
	}
	tried := 0
	tries, diffs, err := ensureTrying(ctx, srv.JS, nil, 10*time.Second, "10s", func(error) bool { tried++; return tried < 2 }, func(int, error) {})
	if err == nil || tries != 2 {
		t.Fatalf("ensure: %d tries, %v; want two failed tries (%s's storage)", tries, err, tasks)
	}
	if !slices.ContainsFunc(diffs, func(d streams.Difference) bool { return d.Stream == attempts && d.Limit == "max_age" && !d.Kept }) {
		t.Fatalf("differences %v: want %s's max_age reported set back, though both tries failed", diffs, attempts)
	}
	st, err = srv.JS.Stream(ctx, attempts)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.MaxAge; got == time.Hour {
		t.Fatalf("%s max_age still %v: the case tests nothing (no try set it back)", attempts, got)
	}
}

// TestProvisionLeavesNewerDefinitions: a rolling upgrade's newer binary
// recorded a newer definitions version on RUNS; an older provision
// leaves the stream as it is, prints it, and its summary says so.
func TestProvisionLeavesNewerDefinitions(t *testing.T) {
	t.Parallel()
	e := provisionedThenEditRuns(t, func(cfg *jetstream.StreamConfig) {
		cfg.Metadata = map[string]string{streams.MetadataVersion: "1000000"}
		cfg.MaxMsgsPerSubject = 5000 // a newer default, not an operator's edit
	})
	out := e.ok(t, "provision")
	if want := "provision: RUNS: newer definitions in place (version 1000000), left as they are\n"; !strings.Contains(out, want) {
		t.Errorf("provision printed %q, want the line %q", out, want)
	}
	if strings.Contains(out, "max_msgs_per_subject") || !strings.Contains(out, "and for the 1 left above under newer definitions") {
		t.Errorf("provision printed %q, want no limit of RUNS and a summary that names the stream left", out)
	}
}

// TestCLIBindErrorSaysWhy: the CLI's readers that cannot bind a bucket say
// why. Only a missing bucket gets the provision hint: every failure got
// it, so a server without JetStream printed "nats: no responders
// available for request (run flyball provision, …)" and a --timeout too
// short for the stack "context deadline exceeded (run flyball provision,
// …)", sending the operator to provision a stack that was there.
func TestCLIBindErrorSaysWhy(t *testing.T) {
	t.Parallel()
	const hint = "run flyball provision"
	_, empty := natstest.StartListeningEmpty(t)
	_, healthy := natstest.StartListening(t)
	for _, c := range []struct {
		name, url string
		args      []string
		want      string
		wantHint  bool
	}{
		{"no JetStream", startWithoutJetStream(t).ClientURL(), nil, "no JetStream answered: is JetStream enabled on the server", false},
		{"too short a timeout", healthy, []string{"--timeout", "1ns"}, "timed out: no answer within --timeout 1ns", false},
		{"no buckets", empty, nil, "bind KV flyball-tasks: ", true},
	} {
		e := &cliEnv{url: c.url, dir: t.TempDir()}
		r := e.run(t, append([]string{"task", "list"}, c.args...)...)
		if r.code != 1 || !strings.HasPrefix(r.stderr, "flyball: ") || !strings.Contains(r.stderr, c.want) ||
			strings.Contains(r.stderr, hint) != c.wantHint || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%s: exit %d, stderr %q; want exit 1 and one line with %q, provision hint %t", c.name, r.code, r.stderr, c.want, c.wantHint)
		}
	}
}

// provisionedThenEditRuns provisions an empty server with the CLI, then
// changes RUNS as an operator (or a newer binary) would with edit.
func provisionedThenEditRuns(t *testing.T, edit func(*jetstream.StreamConfig)) *cliEnv {
	t.Helper()
	srv, url := natstest.StartListeningEmpty(t)
	e := &cliEnv{url: url, srv: srv, dir: t.TempDir()}
	e.ok(t, "provision")
	st, err := srv.JS.Stream(t.Context(), streams.StreamRuns)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	edit(&cfg)
	if _, err := srv.JS.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	return e
}
