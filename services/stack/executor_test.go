package stack_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/stack"
	"github.com/flyballhq/flyball/streams"
)

func runsOf(t *testing.T, evs []events.Event) []events.Run {
	t.Helper()
	out := make([]events.Run, 0, len(evs))
	for _, ev := range evs {
		var r events.Run
		if err := events.DecodeData(ev, &r); err != nil {
			t.Fatalf("run event does not decode: %v", err)
		}
		out = append(out, r)
	}
	return out
}

func TestNATSRequestReplyTarget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	keys := make(chan string, 4)
	natstest.Subscribe(t, e.srv.NC, "orders.health", func(m *nats.Msg) {
		keys <- m.Header.Get("Idempotency-Key")
		_ = m.Respond([]byte("healthy: " + string(m.Data)))
	})
	succeeded := e.collect("flyball.run.succeeded.natsy")
	e.create("natsy", `{"id":"natsy","target":{"nats":{"subject":"orders.health","payload":"ping","timeout":"2s"}},"schedule":{"interval":"1h"}}`)
	natstest.Eventually(t, 10*time.Second, "a NATS request/reply run succeeds", func() bool { return len(succeeded()) == 1 })
	r := runsOf(t, succeeded())[0]
	if r.Body != "healthy: ping" || r.Request == nil || r.Request.Subject != "orders.health" {
		t.Fatalf("run = %+v, want the reply body and the request subject", r)
	}
	if k := <-keys; k != r.DispatchID {
		t.Fatalf("Idempotency-Key header = %q, want the dispatch ID %q", k, r.DispatchID)
	}
}

// TestSSRFGuardBlocksLoopbackByDefault: a hostname is accepted at create
// time (what it resolves to is not known then), and the executor refuses
// the loopback address DNS gives for it when it dials.
func TestSSRFGuardBlocksLoopbackByDefault(t *testing.T) {
	t.Parallel()
	e := &env{t: t, srv: natstest.StartWithStreams(t)}
	e.st = e.startWith(func(c *stack.Config) { c.Guard = executor.Guard{} }) // production default
	tg := newScripted(t, 200)
	failed := e.collect("flyball.run.failed.ssrf")
	dls := e.collect("flyball.deadletter.ssrf")
	e.create("ssrf", spec("ssrf", strings.Replace(tg.srv.URL, "127.0.0.1", "localhost", 1), 3, "5s"))
	natstest.Eventually(t, 10*time.Second, "a final run.failed", func() bool { return len(failed()) == 1 })
	r := runsOf(t, failed())[0]
	if !r.Final || r.ErrorKind != events.ErrorPermanent || !strings.Contains(r.Error, "blocked by SSRF guard") || !strings.Contains(r.Error, "loopback") {
		t.Fatalf("run = final %v kind %q error %q; want a permanent failure naming the SSRF guard and loopback", r.Final, r.ErrorKind, r.Error)
	}
	if n := len(tg.Calls()); n != 0 {
		t.Fatalf("the blocked target was called %d times", n)
	}
	natstest.Eventually(t, 5*time.Second, "the blocked run is dead-lettered as permanent", func() bool {
		d := dls()
		return len(d) == 1 && deadLetters(t, d)[0].Reason == events.DeadLetterPermanent
	})
}

// startLooserThanTheExecutor starts every service but the executor with
// a guard that allows the prefixes, and an executor with the production
// guard: the executor then meets tasks that create accepted (as it does
// a task stored before create checked targets, or by a governor given
// other settings), and its dial-time check is the one that refuses them.
func (e *env) startLooserThanTheExecutor(allow ...string) {
	e.t.Helper()
	g := executor.Guard{}
	for _, p := range allow {
		g.Allow = append(g.Allow, netip.MustParsePrefix(p))
	}
	e.st = e.startWith(func(c *stack.Config) { c.Guard = g }, "governor", "breaker", "deadletter", "sweeper", "timer")
	e.startWith(func(c *stack.Config) { c.Guard = executor.Guard{} }, "executor") // production default
}

// TestSSRFGuardBlocksMetadataBehindNAT64: an IPv6 address that a NAT64
// gateway turns into 169.254.169.254 is refused at dial time, like the
// IPv4 address itself, and the run fails for good naming both.
func TestSSRFGuardBlocksMetadataBehindNAT64(t *testing.T) {
	t.Parallel()
	e := &env{t: t, srv: natstest.StartWithStreams(t)}
	e.startLooserThanTheExecutor("64:ff9b::/96")
	failed := e.collect("flyball.run.failed.nat64")
	e.create("nat64", spec("nat64", "http://[64:ff9b::a9fe:a9fe]/latest/meta-data/", 3, "5s"))
	natstest.Eventually(t, 10*time.Second, "a final run.failed", func() bool { return len(failed()) == 1 })
	r := runsOf(t, failed())[0]
	if !r.Final || r.ErrorKind != events.ErrorPermanent || !strings.Contains(r.Error, "169.254.169.254 is link-local or a cloud metadata address") ||
		!strings.Contains(r.Error, "NAT64 address 64:ff9b::a9fe:a9fe") {
		t.Fatalf("run = final %v kind %q error %q; want a permanent failure naming the metadata address and the NAT64 address", r.Final, r.ErrorKind, r.Error)
	}
}

// TestSSRFGuardBlocksZonedLinkLocal: a URL with a zoned IPv6 literal
// (http://[fe80::a9fe:a9fe%251]/) fails for good at dial time, naming the
// guard, on a real stack whose executor has the production guard (create
// now refuses such a target too: the governor here allows it, as one given
// looser settings, or a task stored before create checked, would); the zone used to hide
// the address from every rule, and the dial was attempted.
func TestSSRFGuardBlocksZonedLinkLocal(t *testing.T) {
	t.Parallel()
	e := &env{t: t, srv: natstest.StartWithStreams(t)}
	e.startLooserThanTheExecutor("fe80::/10")
	failed := e.collect("flyball.run.failed.zoned")
	e.create("zoned", spec("zoned", "http://[fe80::a9fe:a9fe%251]:9/latest/meta-data/", 3, "5s"))
	natstest.Eventually(t, 10*time.Second, "a run.failed", func() bool { return len(failed()) >= 1 })
	r := runsOf(t, failed())[0]
	if !r.Final || r.ErrorKind != events.ErrorPermanent || !strings.Contains(r.Error, "blocked by SSRF guard") {
		t.Fatalf("run = final %v kind %q error %q; want a permanent failure naming the SSRF guard", r.Final, r.ErrorKind, r.Error)
	}
}

func TestRunRecordRedactsSecretsAndBoundsBody(t *testing.T) {
	t.Parallel()
	e := &env{t: t, srv: natstest.StartWithStreams(t)}
	// The operator's extra names (--redact-header), in any case.
	e.st = e.startWith(func(c *stack.Config) { c.RedactHeaders = []string{"x-tenant", "Account"} })
	var mu sync.Mutex
	var gotAuth, gotQuery string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		gotAuth, gotQuery = r.Header.Get("Authorization"), r.URL.RawQuery
		mu.Unlock()
		_, _ = w.Write([]byte(strings.Repeat("x", 5000)))
	}))
	t.Cleanup(srv.Close)
	succeeded := e.collect("flyball.run.succeeded.secret")
	e.create("secret", fmt.Sprintf(`{"id":"secret","target":{"http":{"url":%q,"maxResponseBytes":100,
		"headers":{"Authorization":"Bearer hunter2-hunter2","X-Trace":"abc","X-Tenant":"hunter2-tenant"}}},"schedule":{"interval":"1h"}}`,
		srv.URL+"/hook?page=2&access_token=hunter2-query&account=hunter2-account"))
	natstest.Eventually(t, 10*time.Second, "a run", func() bool { return len(succeeded()) == 1 })
	r := runsOf(t, succeeded())[0]
	mu.Lock()
	defer mu.Unlock()
	if gotAuth != "Bearer hunter2-hunter2" {
		t.Fatalf("target got Authorization %q, want the real header", gotAuth)
	}
	if gotQuery != "page=2&access_token=hunter2-query&account=hunter2-account" {
		t.Fatalf("target got query %q, want the real one", gotQuery)
	}
	if h := r.Request.Headers; h["Authorization"] != executor.Redacted || h["X-Tenant"] != executor.Redacted || h["X-Trace"] != "abc" {
		t.Fatalf("recorded headers %v: want Authorization and X-Tenant redacted, X-Trace kept", h)
	}
	if want := srv.URL + "/hook?page=2&access_token=" + executor.Redacted + "&account=" + executor.Redacted; r.Request.URL != want {
		t.Fatalf("recorded URL %q, want %q", r.Request.URL, want)
	}
	raw, _ := events.Encode(succeeded()[0])
	if strings.Contains(string(raw), "hunter2") {
		t.Fatal("the secret reached the RUNS stream")
	}
	if len(r.Body) != 100 || !r.BodyTruncated || r.Fingerprint == "" {
		t.Fatalf("body %d bytes truncated=%v fingerprint=%q; want 100, true, set", len(r.Body), r.BodyTruncated, r.Fingerprint)
	}
}

// TestRunRecordRedactsAbbreviatedSecretNames: a password given as pwd or
// pass, a passphrase, a PHP session ID (PHPSESSID, which holds no
// "session") and an HMAC signature (Shopify's ?hmac=) were recorded as
// written, on RUNS and in every dead letter.
func TestRunRecordRedactsAbbreviatedSecretNames(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(srv.Close)
	succeeded := e.collect("flyball.run.succeeded.abbrev")
	e.create("abbrev", fmt.Sprintf(`{"id":"abbrev","target":{"http":{"url":%q,
		"headers":{"X-Pwd":"hunter2-h1","X-Passphrase":"hunter2-h2","X-Shopify-Hmac-Sha256":"hunter2-h3","X-Trace":"abc"}}},
		"schedule":{"interval":"1h"}}`,
		srv.URL+"/hook?user=ops&pwd=hunter2-q1&pass=hunter2-q2&passphrase=hunter2-q3&PHPSESSID=hunter2-q4&hmac=hunter2-q5&compass=n"))
	natstest.Eventually(t, 10*time.Second, "a run", func() bool { return len(succeeded()) == 1 })
	r := runsOf(t, succeeded())[0]
	if h := r.Request.Headers; h["X-Trace"] != "abc" {
		t.Fatalf("recorded headers %v: want X-Trace kept", h)
	}
	want := srv.URL + "/hook?user=ops&pwd=" + executor.Redacted + "&pass=" + executor.Redacted + "&passphrase=" + executor.Redacted +
		"&PHPSESSID=" + executor.Redacted + "&hmac=" + executor.Redacted + "&compass=n"
	if r.Request.URL != want {
		t.Errorf("recorded URL %q, want %q", r.Request.URL, want)
	}
	if raw, _ := events.Encode(succeeded()[0]); strings.Contains(string(raw), "hunter2") {
		t.Fatalf("a secret reached the RUNS stream: %s", raw)
	}
}

// A call that fails before any response reports net/http's error, which
// quotes the URL: its secret query parameter is redacted there too.
func TestFailedRunErrorRedactsTheURL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	_ = ln.Close() // nothing listens there now: the call is refused
	failed := e.collect("flyball.run.failed.refused")
	dls := e.collect("flyball.deadletter.refused")
	e.create("refused", fmt.Sprintf(`{"id":"refused","target":{"http":{"url":"http://%s/hook?token=hunter2-err&page=1"}},
		"retry":{"maxAttempts":1},"schedule":{"interval":"1h"}}`, closed))
	natstest.Eventually(t, 10*time.Second, "a failed run", func() bool { return len(failed()) == 1 })
	r := runsOf(t, failed())[0]
	if !strings.Contains(r.Error, "token="+executor.Redacted+"&page=1") {
		t.Fatalf("run error %q: want the URL with its token redacted", r.Error)
	}
	raw, _ := events.Encode(failed()[0])
	if strings.Contains(string(raw), "hunter2") {
		t.Fatalf("the secret reached the RUNS stream: %s", raw)
	}
	// The final failure is dead-lettered with its attempts' errors.
	natstest.Eventually(t, 10*time.Second, "the dead letter", func() bool { return len(dls()) == 1 })
	dl := deadLetters(t, dls())[0]
	if len(dl.Errors) != 1 || !strings.Contains(dl.Errors[0].Error, "token="+executor.Redacted) {
		t.Fatalf("dead letter errors %+v: want the one attempt with its token redacted", dl.Errors)
	}
	if raw, _ := events.Encode(dls()[0]); strings.Contains(string(raw), "hunter2") {
		t.Fatalf("the secret reached the DEADLETTER stream: %s", raw)
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mu sync.Mutex
	var calls []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		calls = append(calls, time.Now())
		n := len(calls)
		mu.Unlock()
		if n == 1 {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	succeeded := e.collect("flyball.run.succeeded.polite")
	e.create("polite", spec("polite", srv.URL, 3, "5s")) // backoff alone would retry after 200ms
	natstest.Eventually(t, 10*time.Second, "the retry succeeds", func() bool { return len(succeeded()) == 1 })
	mu.Lock()
	defer mu.Unlock()
	if gap := calls[1].Sub(calls[0]); gap < 2*time.Second {
		t.Fatalf("retried after %s, before the target's Retry-After of 2s", gap)
	}
}

func TestDeadLetterCatchesUpAfterDowntime(t *testing.T) {
	t.Parallel()
	e := &env{t: t, srv: natstest.StartWithStreams(t)}
	e.st = e.start("governor", "breaker", "executor", "timer") // no dead-letter service
	tg := newScripted(t, 404)
	failed := e.collect("flyball.run.failed.late")
	dls := e.collect("flyball.deadletter.late")
	e.create("late", spec("late", tg.srv.URL, 3, "5s"))
	natstest.Eventually(t, 10*time.Second, "the final failure", func() bool { return len(failed()) == 1 })
	if len(dls()) != 0 {
		t.Fatal("dead-lettered with no dead-letter service running")
	}
	e.start("deadletter") // comes back and reads what it missed
	natstest.Eventually(t, 10*time.Second, "the missed failure is dead-lettered", func() bool { return len(dls()) == 1 })
}

// TestRunEventWaitsForItsHoldWhileOtherCallsRun: with another call in
// flight, a run event of a 1h task waits in the executor's outbox for its
// task's hold (1s: an eighth of the tightest gap its cadence can take,
// capped), not the 100ms linger, and then goes out although that other
// call is still running.
func TestRunEventWaitsForItsHoldWhileOtherCallsRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	slow := newScripted(t, 200)
	slow.hang = make(chan struct{}) // released at cleanup
	fast := newScripted(t, 200)
	type seen struct {
		at  time.Time
		run events.Run
	}
	succeeded := record(t, e.srv.NC, "flyball.run.succeeded.fast", func(m *nats.Msg) (seen, bool) {
		ev, err := events.Decode(m.Header, m.Data)
		if err != nil {
			t.Errorf("undecodable run event: %v", err)
			return seen{}, false
		}
		return seen{time.Now(), runsOf(t, []events.Event{ev})[0]}, true
	})
	e.create("slow", fmt.Sprintf(`{"id":"slow","target":{"http":{"url":%q,"timeout":"1m"}},"schedule":{"interval":"1h"}}`, slow.srv.URL))
	slow.awaitCall(t, "the slow target's call")
	e.create("fast", fmt.Sprintf(`{"id":"fast","target":{"http":{"url":%q}},"schedule":{"interval":"1h"}}`, fast.srv.URL))
	natstest.Eventually(t, 10*time.Second, "fast's run.succeeded", func() bool { return len(succeeded()) == 1 })
	s := succeeded()[0]
	if s.run.Source != "baseline-interval" {
		t.Fatalf("fast's first run has source %q, want baseline-interval (a cadence slot)", s.run.Source)
	}
	// The event is published at FinishedAt + the hold; allow the linger's
	// 100 ms to be told apart with room for a slow machine.
	if waited := s.at.Sub(s.run.FinishedAt); waited < 900*time.Millisecond || waited > 5*time.Second {
		t.Fatalf("run.succeeded arrived %s after its call finished; want its 1s hold while the slow call runs", waited)
	}
	if n := len(slow.Calls()); n != 1 {
		t.Fatalf("slow target called %d times, want 1 call still in flight", n)
	}
}

// TestLargeBodyWithinMaxResponseBytesRunsOnce: a response body under the
// task's maxResponseBytes (which may be up to 10 MiB) but over the NATS
// server's max_payload (1 MiB by default) is cut to fit: the target is
// called once and its run.succeeded is stored with bodyTruncated set.
// Before the cut, the run event could never be stored, so the dispatch was
// nakked and the target called again every second, up to MaxDeliver.
func TestLargeBodyWithinMaxResponseBytesRunsOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "executor")
	var calls atomic.Int32
	big := strings.Repeat("a", 2<<20) // 2 MiB: under maxResponseBytes, over max_payload
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		_, _ = w.Write([]byte(big))
	}))
	t.Cleanup(tg.Close)
	succeeded := e.collect("flyball.run.succeeded.bigbody")
	natstest.PutJSON(t, e.srv.JS, streams.BucketTasks, "bigbody", events.TaskSpec{
		ID:       "bigbody",
		Target:   events.Target{HTTP: &events.HTTPTarget{URL: tg.URL, MaxResponseBytes: 4 << 20}},
		Schedule: events.Schedule{Interval: events.Duration(time.Hour)},
	})
	dispatchAt(t, e.srv.JS, "bigbody", time.Now().UTC())
	// An outcome, or a second call (the dispatch nakked for a retry).
	natstest.Eventually(t, 10*time.Second, "a run.succeeded or a second call", func() bool {
		return len(succeeded()) > 0 || calls.Load() >= 2
	})
	if n := calls.Load(); n != 1 || len(succeeded()) == 0 {
		t.Fatalf("target called %d times and %d run.succeeded stored for one dispatch of a healthy target; want 1 call and its outcome", n, len(succeeded()))
	}
	r := runsOf(t, succeeded())[0]
	limit := int(e.srv.NC.MaxPayload())
	if !r.BodyTruncated || len(r.Body) < limit/2 || len(r.Body) >= limit || strings.Trim(r.Body, "a") != "" {
		t.Fatalf("stored body: %d bytes, truncated=%v; want as much of the response as fits in max_payload (%d bytes), truncated", len(r.Body), r.BodyTruncated, limit)
	}
}

// TestInvalidStoredSpecIsSkippedWithItsReason: a flyball-tasks value that
// does not validate (here: no target; written by hand, or by an older or
// newer governor) is never called. Its dispatch is reported as run.skipped
// with the validation error as the reason and counted, and the executor
// goes on running other tasks. Before, the executor dereferenced the
// missing target and panicked, and every replica crashed in turn on the
// redelivery.
func TestInvalidStoredSpecIsSkippedWithItsReason(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "executor")
	natstest.PutJSON(t, e.srv.JS, streams.BucketTasks, "notarget", map[string]any{"id": "notarget", "schedule": map[string]string{"interval": "1h"}})
	skipped := e.collect("flyball.run.skipped.notarget")
	dispatchAt(t, e.srv.JS, "notarget", time.Now().UTC())
	natstest.Eventually(t, 10*time.Second, "a run.skipped for the targetless task", func() bool { return len(skipped()) > 0 })
	r := runsOf(t, skipped())[0]
	if !strings.HasPrefix(r.Reason, "invalid stored spec: ") || !strings.Contains(r.Reason, "target: must set exactly one of http or nats") {
		t.Fatalf("run.skipped reason %q, want the validation error of the stored spec", r.Reason)
	}
	// Counted once the skip's event is stored, an instant after a
	// subscriber may see it.
	natstest.Eventually(t, 10*time.Second, "flyball_runs_total counts the skip", func() bool {
		return counterSum(t, e.st.Metrics().Registry, "flyball_runs_total") == 1
	})
	// The executor is still up: a valid task runs.
	tg := newScripted(t, 200)
	natstest.PutJSON(t, e.srv.JS, streams.BucketTasks, "valid", events.TaskSpec{ID: "valid", Target: events.Target{HTTP: &events.HTTPTarget{URL: tg.srv.URL}}, Schedule: events.Schedule{Interval: events.Duration(time.Hour)}})
	dispatchAt(t, e.srv.JS, "valid", time.Now().UTC())
	natstest.Eventually(t, 10*time.Second, "the valid task is called", func() bool { return len(tg.Calls()) == 1 })
}

// TestTheSameCreationStoredTwiceKeepsTheTaskRunning: a task.created stored
// a second time with the same event id (the README's `nats pub` run
// twice; it sets no Nats-Msg-Id) must change nothing. The governor wrote
// the spec again with the copy's time as createdAt while the schedule
// kept the first one's; the task kept running only because the executor,
// finding the two apart on every dispatch, read the schedule and the spec
// from KV again for each run.
func TestTheSameCreationStoredTwiceKeepsTheTaskRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := newScripted(t, 200)
	data := fmt.Sprintf(`{"id":"twice","target":{"http":{"url":%q}},"schedule":{"interval":"1s"}}`, tg.srv.URL)
	e.create("twice", data)
	natstest.Eventually(t, 15*time.Second, "the task's first run", func() bool { return len(tg.Calls()) >= 1 })
	ack, err := e.srv.JS.Publish(t.Context(), "flyball.task.created.twice", createdEvent("twice", data))
	if err != nil {
		t.Fatal(err)
	}
	natstest.AwaitAcked(t, e.srv.JS, streams.StreamTasks, streams.ConsumerGovernor, ack.Sequence)
	kv, err := e.srv.JS.KeyValue(t.Context(), streams.BucketTasks)
	if err != nil {
		t.Fatal(err)
	}
	ent, err := kv.Get(t.Context(), "twice")
	if err != nil {
		t.Fatal(err)
	}
	var spec gov.StoredSpec
	if err := json.Unmarshal(ent.Value(), &spec); err != nil {
		t.Fatal(err)
	}
	if st := e.storedSchedule("twice"); !spec.CreatedAt.Equal(st.CreatedAt) {
		t.Fatalf("after the copy the spec names createdAt %v and the schedule %v", spec.CreatedAt, st.CreatedAt)
	}
	skipped := e.collect("flyball.run.skipped.twice")
	after := len(tg.Calls())
	natstest.Eventually(t, 15*time.Second, "three runs after the copy", func() bool { return len(tg.Calls()) >= after+3 })
	if s := skipped(); len(s) > 0 {
		t.Fatalf("runs skipped after the copy: %q", runsOf(t, s)[0].Reason)
	}
}
