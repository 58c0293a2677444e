package stack_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/stack"
	"github.com/flyballhq/flyball/streams"
)

// scripted is a target that answers with a scripted sequence of statuses
// (the last one repeats) and records every call.
type scripted struct {
	mu      sync.Mutex
	script  []int
	calls   []call
	hang    chan struct{} // when non-nil, calls block until it is closed
	srv     *httptest.Server
	arrived chan struct{}
}

type call struct {
	at  time.Time
	key string
}

// awaitCall waits for the target's next call, failing the test after 10s
// rather than hanging until go test's own timeout.
func (s *scripted) awaitCall(t *testing.T, what string) {
	t.Helper()
	select {
	case <-s.arrived:
	case <-time.After(10 * time.Second):
		t.Fatalf("not within 10s: %s", what)
	}
}

func newScripted(t *testing.T, statuses ...int) *scripted {
	s := &scripted{script: statuses, arrived: make(chan struct{}, 100)}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		n := len(s.calls)
		s.calls = append(s.calls, call{at: time.Now(), key: r.Header.Get("Idempotency-Key")})
		status := s.script[min(n, len(s.script)-1)]
		hang := s.hang
		s.mu.Unlock()
		s.arrived <- struct{}{}
		if hang != nil {
			select {
			case <-hang:
			case <-r.Context().Done():
				return
			}
		}
		w.WriteHeader(status)
		_, _ = fmt.Fprintf(w, "status %d", status)
	}))
	t.Cleanup(func() {
		s.mu.Lock()
		if s.hang != nil {
			select {
			case <-s.hang:
			default:
				close(s.hang)
			}
		}
		s.mu.Unlock()
		s.srv.Close()
	})
	return s
}

func (s *scripted) Calls() []call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]call(nil), s.calls...)
}

// env is one test's embedded JetStream plus a subscription log.
type env struct {
	t   *testing.T
	srv *natstest.Server
	st  *stack.Stack
}

func newEnv(t *testing.T, services ...string) *env {
	t.Helper()
	srv := natstest.StartWithStreams(t)
	e := &env{t: t, srv: srv}
	if len(services) > 0 || services == nil {
		e.st = e.start(services...)
	}
	return e
}

func (e *env) start(services ...string) *stack.Stack {
	e.t.Helper()
	return e.startWith(nil, services...)
}

// startWith starts services with the test defaults, adjusted by tweak.
func (e *env) startWith(tweak func(*stack.Config), services ...string) *stack.Stack {
	e.t.Helper()
	_, js := e.srv.Connect(e.t)
	cfg := stack.Config{
		JS: js, Services: services, Guard: executor.Guard{AllowLoopback: true},
		APIAddr: "127.0.0.1:0", APITokens: []string{"test-token-0123456789"},
		HeartbeatInterval: 100 * time.Millisecond, OfflineAfter: 400 * time.Millisecond, SweepInterval: 100 * time.Millisecond,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	st, err := stack.Start(context.Background(), cfg)
	if err != nil {
		e.t.Fatalf("start stack: %v", err)
	}
	e.t.Cleanup(st.Stop)
	return st
}

func (e *env) create(id, data string) {
	e.t.Helper()
	if err := e.srv.NC.Publish("flyball.task.created."+id, createdEvent(id, data)); err != nil {
		e.t.Fatal(err)
	}
}

// deleteTask publishes task.deleted for id, as a user would.
func (e *env) deleteTask(id string) {
	e.t.Helper()
	deleted, err := events.Marshal(events.TypeTaskDeleted, "test/user", id, events.TaskRef{ID: id}, time.Now(), "cmd-delete-"+id)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.srv.NC.Publish(events.TaskSubject(events.VerbDeleted, id), deleted); err != nil {
		e.t.Fatal(err)
	}
}

// collect subscribes to subject and returns a function listing the decoded
// events seen so far.
// watchSchedule records every schedule the governor writes for task id.
// It subscribes to the key's subject, so it also sees a write that KV
// refused (a compare-and-set on a stale revision, which the governor then
// decides again): for the state stored, read the bucket (storedSchedule).
func (e *env) watchSchedule(id string) func() []gov.State {
	e.t.Helper()
	return record(e.t, e.srv.NC, "$KV."+streams.BucketSchedules+"."+id, func(m *nats.Msg) (gov.State, bool) {
		var st gov.State
		if len(m.Data) == 0 {
			return st, false // a delete or purge marker
		}
		if err := json.Unmarshal(m.Data, &st); err != nil {
			e.t.Errorf("unreadable schedule: %v", err)
			return st, false
		}
		return st, true
	})
}

// collect records every event published on subject.
func (e *env) collect(subject string) func() []events.Event {
	e.t.Helper()
	return record(e.t, e.srv.NC, subject, func(m *nats.Msg) (events.Event, bool) {
		ev, err := events.Decode(m.Header, m.Data)
		if err != nil {
			e.t.Errorf("undecodable event on %s: %v", m.Subject, err)
		}
		return ev, err == nil
	})
}

// record subscribes to subject and keeps what decode accepts, each
// Nats-Msg-Id once; the result returns a copy of what arrived so far.
//
// A subscription sees every publish, also a copy of an event its stream
// dropped as a duplicate: a service publishes an event again, under the
// same ID, when it did not learn that the first copy was stored (a
// timeout, a redelivered outcome, a breaker transition whose conditional
// publish lost a race and is tried again). The stream stores it once, and
// so record keeps it once: TestBreakerProbeAtRetryAt saw breaker.closed
// twice in CI, the second a retry of the first.
func record[T any](t *testing.T, nc *nats.Conn, subject string, decode func(*nats.Msg) (T, bool)) func() []T {
	t.Helper()
	return recordBy(t, nc, subject, func(m *nats.Msg) (T, string, bool) {
		v, ok := decode(m)
		return v, m.Header.Get(jetstream.MsgIDHeader), ok
	})
}

// recordBy is record with the key of each message from decode: a
// message whose key was seen before is left out; an empty key is never
// a repeat.
func recordBy[T any](t *testing.T, nc *nats.Conn, subject string, decode func(*nats.Msg) (v T, key string, ok bool)) func() []T {
	t.Helper()
	var mu sync.Mutex
	var got []T
	seen := make(map[string]bool)
	natstest.Subscribe(t, nc, subject, func(m *nats.Msg) {
		v, key, ok := decode(m)
		mu.Lock()
		defer mu.Unlock()
		if key != "" {
			if seen[key] {
				return
			}
			seen[key] = true
		}
		if ok {
			got = append(got, v)
		}
	})
	return func() []T {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// TestRecordKeepsEachEventOnce shows what a core subscription sees on a
// stream's subject, and so what record must leave out: a copy the stream
// dropped as a duplicate arrives too (record keeps it once), and so does a
// publish the stream refused on its expected last sequence (record keeps
// it: only the stream knows it was refused, so a test of a conditional
// publish reads the stream).
func TestRecordKeepsEachEventOnce(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	subject := events.BreakerSubject(events.BreakerOpen, "k")
	seen := record(t, srv.NC, subject, func(m *nats.Msg) (string, bool) { return m.Header.Get(jetstream.MsgIDHeader), true })
	for range 2 {
		if _, err := srv.JS.PublishMsg(t.Context(), jsutil.EventMsg(subject, "first", []byte("{}"))); err != nil {
			t.Fatal(err)
		}
	}
	_, err := srv.JS.PublishMsg(t.Context(), jsutil.EventMsg(subject, "refused", []byte("{}")), jetstream.WithExpectLastSequenceForSubject(0, subject))
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Fatalf("conditional publish: %v, want wrong last sequence", err)
	}
	// A marker, sent last on the same connection, has arrived only after
	// everything before it.
	if _, err := srv.JS.PublishMsg(t.Context(), jsutil.EventMsg(subject, "marker", []byte("{}"))); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, "the marker", func() bool { return slices.Contains(seen(), "marker") })
	if got := strings.Join(seen(), ","); got != "first,refused,marker" {
		t.Fatalf("record kept %s, want first,refused,marker", got)
	}
	if n := len(natstest.Read(t, srv.JS, streams.StreamHealth, subject)); n != 2 {
		t.Fatalf("HEALTH holds %d messages on %s, want 2 (first and marker)", n, subject)
	}
}

func deadLetters(t *testing.T, evs []events.Event) []events.DeadLetter {
	t.Helper()
	var out []events.DeadLetter
	for _, ev := range evs {
		var dl events.DeadLetter
		if err := events.DecodeData(ev, &dl); err != nil {
			t.Fatalf("dead-letter entry does not decode: %v", err)
		}
		out = append(out, dl)
	}
	return out
}

func counterSum(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// spec builds a task spec with fast retry and breaker settings.
func spec(id, url string, threshold int, openDelay string) string {
	return fmt.Sprintf(`{"id":%q,"target":{"http":{"url":%q}},"schedule":{"interval":"1h"},
		"retry":{"maxAttempts":5,"initialDelay":"200ms","multiplier":2,"maxDelay":"5s","jitter":0},
		"breaker":{"failureThreshold":%d,"openDelay":%q,"maxOpenDelay":"10s"}}`, id, url, threshold, openDelay)
}

func TestTransientFailuresThenSuccessFollowBackoff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := newScripted(t, 500, 500, 500, 200)
	succeeded := e.collect("flyball.run.succeeded.>")
	failed := e.collect("flyball.run.failed.flaky")
	dls := e.collect("flyball.deadletter.>")
	e.create("flaky", spec("flaky", tg.srv.URL, 10, "5s")) // breaker threshold above 3
	natstest.Eventually(t, 15*time.Second, "a run.succeeded after three 500s", func() bool { return len(succeeded()) == 1 })
	calls := tg.Calls()
	if len(calls) != 4 {
		t.Fatalf("target got %d calls, want exactly 4", len(calls))
	}
	// The backoff the executor chose is exact (jitter 0): 200 ms doubling.
	// On the wall clock a retry may come late on a loaded machine (timed
	// tests are no benchmark), but never early.
	fails := failed()
	if len(fails) != 3 {
		t.Fatalf("%d run.failed, want 3", len(fails))
	}
	for i, want := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond} {
		var r events.Run
		if err := events.DecodeData(fails[i], &r); err != nil {
			t.Fatal(err)
		}
		if r.Attempt != i+1 || r.Final || r.RetryIn.D() != want {
			t.Errorf("run.failed %d: attempt %d, final %v, retryIn %s; want attempt %d, not final, retryIn %s", i, r.Attempt, r.Final, r.RetryIn.D(), i+1, want)
		}
		if gap := calls[i+1].at.Sub(calls[i].at); gap < want || gap > want+3*time.Second {
			t.Errorf("call %d came %s after call %d, want %s (later under load, never earlier)", i+2, gap, i+1, want)
		}
	}
	for _, c := range calls {
		if c.key != calls[0].key {
			t.Fatalf("Idempotency-Key changed across attempts: %q vs %q", c.key, calls[0].key)
		}
	}
	var r events.Run
	if err := events.DecodeData(succeeded()[0], &r); err != nil || r.Attempt != 4 {
		t.Fatalf("run.succeeded attempt = %d (%v), want 4", r.Attempt, err)
	}
	if n := len(dls()); n != 0 {
		t.Fatalf("%d dead-letter entries, want none", n)
	}
}

func TestBreakerProbeAtRetryAt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := newScripted(t, 500, 500, 500, 200)
	succeeded := e.collect("flyball.run.succeeded.>")
	// Default threshold 3; the open delay (1.5s) outlasts the 3rd backoff
	// (800ms), so the 4th call waits for the breaker: it is the probe.
	e.create("probe", spec("probe", tg.srv.URL, 3, "1500ms"))
	natstest.Eventually(t, 15*time.Second, "run.succeeded after the probe", func() bool { return len(succeeded()) == 1 })
	calls := tg.Calls()
	if len(calls) != 4 {
		t.Fatalf("target got %d calls, want exactly 4", len(calls))
	}
	// Not before the open delay (the 4th backoff alone is 800 ms); later
	// only as far as a loaded machine delays the breaker and the call.
	if gap := calls[3].at.Sub(calls[2].at); gap < 1300*time.Millisecond || gap > 4500*time.Millisecond {
		t.Errorf("gap 3→4 = %s, want the open delay, 1.5s (1.3s to 4.5s)", gap)
	}
	// The breaker opens, and the probe's success closes it. The half-open
	// between them is on HEALTH only if its publish came before the
	// closing: the breaker service writes half-open at retryAt, then
	// publishes it unless a later transition superseded it (breaker's
	// publish; a late half-open after the closing would say the breaker
	// is half-open again). On a loaded machine the probe's success may
	// close the breaker first, or the executor may let the probe through
	// the open breaker past retryAt before the half-open is written. The
	// breaker tests prove that the half-open is published when nothing
	// supersedes it (TestHalfOpenTransitionSurvivesAFailedPublish).
	//
	// The order is HEALTH's, not a subscription's: a superseded
	// half-open's conditional publish is refused by the stream, but a
	// subscription still sees it, after the closing. (And a subscription
	// sees the closing an instant before the stream has stored it.)
	var types []string
	natstest.Eventually(t, 5*time.Second, "breaker closed after the probe, on HEALTH", func() bool {
		types = types[:0]
		for _, ev := range natstest.ReadEvents(t, e.srv.JS, streams.StreamHealth, "flyball.breaker.>") {
			types = append(types, ev.Type())
		}
		return slices.Contains(types, events.TypeBreakerClosed)
	})
	if got := strings.Join(types, ","); got != events.TypeBreakerOpen+","+events.TypeBreakerHalfOpen+","+events.TypeBreakerClosed &&
		got != events.TypeBreakerOpen+","+events.TypeBreakerClosed {
		t.Fatalf("breaker events %s, want open, half-open (unless the closing superseded it), then closed", got)
	}
	// A run is counted once its event is stored, an instant after the
	// breaker may have read it.
	natstest.Eventually(t, 10*time.Second, "flyball_runs_total counts 4 calls and at least one deferral", func() bool {
		return counterSum(t, e.st.Metrics().Registry, "flyball_runs_total") >= 5
	})
}

func TestAlwaysFailingTargetIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := newScripted(t, 500)
	dls := e.collect("flyball.deadletter.>")
	breakers := e.collect("flyball.breaker.open.>")
	schedules := e.watchSchedule("down")
	e.create("down", spec("down", tg.srv.URL, 3, "300ms"))
	natstest.Eventually(t, 20*time.Second, "a dead-letter entry", func() bool { return len(dls()) == 1 })
	if n := len(tg.Calls()); n != 5 {
		t.Fatalf("target got %d calls, want exactly maxAttempts = 5", n)
	}
	// The breaker opened during the first run's retries: the governor kept
	// that slot rather than planning a new one behind it (which the timer
	// would have dispatched the moment the run ended: a 6th call).
	slot := deadLetters(t, dls())[0].Dispatch.ScheduledAt
	kept := 0
	for _, st := range schedules() {
		if st.Input != gov.KindBreaker || !st.LastScheduledAt.IsZero() {
			continue
		}
		if !st.NextRunAt.Equal(slot) || !strings.Contains(strings.Join(st.Trail, "\n"), "in flight") {
			t.Fatalf("a breaker decision during the retries moved the slot to %s (%s): %q", st.NextRunAt, st.Source, st.Trail)
		}
		kept++
	}
	if kept == 0 {
		t.Fatal("no breaker decision while the first run was retrying")
	}
	dl := deadLetters(t, dls())[0]
	if dl.Reason != events.DeadLetterMaxAttempts || dl.Attempts != 5 || len(dl.Errors) != 5 {
		t.Fatalf("entry reason %q attempts %d errors %d, want max-attempts/5/5", dl.Reason, dl.Attempts, len(dl.Errors))
	}
	for i, ae := range dl.Errors {
		if ae.Attempt != i+1 || ae.Status != 500 || !strings.Contains(ae.Error, "HTTP 500") {
			t.Fatalf("error %d = %+v, want attempt %d with HTTP 500", i, ae, i+1)
		}
	}
	if dl.Dispatch.TaskID != "down" || dl.Dispatch.DispatchID == "" {
		t.Fatalf("entry does not carry the original dispatch: %+v", dl.Dispatch)
	}
	if len(breakers()) == 0 {
		t.Fatal("the breaker never opened")
	}
	// Once open, calls wait for the breaker: the gap after the 3rd failure
	// is at least the open delay.
	calls := tg.Calls()
	if gap := calls[3].at.Sub(calls[2].at); gap < 300*time.Millisecond {
		t.Fatalf("call 4 came %s after call 3, before the breaker's retryAt", gap)
	}
}

func TestPermanentFailureDeadLettersAfterOneCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := newScripted(t, 404)
	dls := e.collect("flyball.deadletter.>")
	e.create("gone", spec("gone", tg.srv.URL, 3, "5s"))
	natstest.Eventually(t, 10*time.Second, "a dead-letter entry", func() bool { return len(dls()) == 1 })
	if n := len(tg.Calls()); n != 1 {
		t.Fatalf("target got %d calls, want 1", n)
	}
	if dl := deadLetters(t, dls())[0]; dl.Reason != events.DeadLetterPermanent || dl.Attempts != 1 {
		t.Fatalf("entry = %+v, want reason permanent after 1 attempt", dl)
	}
}

// TestFinalFailureOfARepeatedAttemptEndsTheRun: attempt 1 fails (503)
// and its run.failed is stored, but flyball-attempts refuses its record,
// so the redelivery repeats attempt 1; the target now answers 404, a
// permanent failure. That final run.failed names the same dispatch and
// attempt as the first one, and every consumer must take it as the run's
// end, not as a redelivery of the first: the dead-letter service writes
// an entry with the 404 (the call that ended the run), the governor
// applies the outcome and holds the task for its recheck, and the
// breaker counts both calls. Before, RUNS dropped the final event as a
// duplicate of the first (same Nats-Msg-Id), and the breaker would have
// taken it for the first outcome redelivered.
func TestFinalFailureOfARepeatedAttemptEndsTheRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	attempts, err := e.srv.JS.Stream(t.Context(), "KV_"+streams.BucketAttempts)
	if err != nil {
		t.Fatal(err)
	}
	cfg := attempts.CachedInfo().Config
	cfg.MaxMsgSize = 16 // no attempt record fits
	if _, err := e.srv.JS.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	tg := newScripted(t, http.StatusServiceUnavailable, http.StatusNotFound)
	dls := e.collect("flyball.deadletter.repeat")
	schedules := e.watchSchedule("repeat")
	e.create("repeat", spec("repeat", tg.srv.URL, 3, "5s"))
	natstest.Eventually(t, 20*time.Second, "a dead-letter entry", func() bool { return len(dls()) == 1 })
	calls := tg.Calls()
	if len(calls) != 2 {
		t.Fatalf("target got %d calls, want 2 (attempt 1, then its repeat)", len(calls))
	}
	dl := deadLetters(t, dls())[0]
	if dl.Reason != events.DeadLetterPermanent || dl.Attempts != 1 || len(dl.Errors) != 1 ||
		dl.Errors[0].Attempt != 1 || dl.Errors[0].Status != http.StatusNotFound {
		t.Fatalf("entry reason %q attempts %d errors %+v, want permanent after attempt 1, with the 404 that ended it", dl.Reason, dl.Attempts, dl.Errors)
	}
	natstest.Eventually(t, 10*time.Second, "the governor applies the final failure and holds the task for its recheck", func() bool {
		for _, st := range schedules() {
			if st.LastDispatchID == dl.Dispatch.DispatchID && st.LastOutcome == "failed" && st.DeadLetter != nil &&
				st.Source == gov.SourceDeadLetterRecheck {
				return true
			}
		}
		return false
	})
	e.awaitBreaker("repeat", 10*time.Second, "the breaker counts both failed calls", func(b executor.BreakerRecord) bool { return b.Failures == 2 })
}

// shortenDispatch makes crash tests fast: a 1s AckWait and the given
// MaxDeliver on the executor's consumer.
func shortenDispatch(t *testing.T, js jetstream.JetStream, maxDeliver int) {
	t.Helper()
	shortenDispatchTo(t, js, maxDeliver, time.Second)
}

// shortenDispatchTo is shortenDispatch with an AckWait of ackWait.
func shortenDispatchTo(t *testing.T, js jetstream.JetStream, maxDeliver int, ackWait time.Duration) {
	t.Helper()
	changeDispatch(t, js, func(c *jetstream.ConsumerConfig) { c.AckWait, c.MaxDeliver = ackWait, maxDeliver })
}

// changeDispatch updates the executor's consumer with change (before an
// executor starts: it reads the consumer at Start).
func changeDispatch(t *testing.T, js jetstream.JetStream, change func(*jetstream.ConsumerConfig)) {
	t.Helper()
	ctx := context.Background()
	c, err := js.Consumer(ctx, streams.StreamDispatch, streams.ConsumerExecutor)
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.CachedInfo().Config
	change(&cfg)
	if _, err := js.UpdateConsumer(ctx, streams.StreamDispatch, cfg); err != nil {
		t.Fatal(err)
	}
}

// crashableExecutor runs an executor on its own connection; closing the
// connection is a crash: no ack, no nak, nothing.
func crashableExecutor(t *testing.T, srv *natstest.Server) (crash func()) {
	t.Helper()
	nc, err := nats.Connect("", nats.InProcessServer(srv.Server))
	if err != nil {
		t.Fatal(err)
	}
	return crashableExecutorOn(t, nc)
}

// crashableExecutorOn runs an executor on nc, which it owns.
func crashableExecutorOn(t *testing.T, nc *nats.Conn) (crash func()) {
	t.Helper()
	js, _ := jetstream.New(nc)
	ex, err := executor.New(executor.Config{JS: js, Guard: executor.Guard{AllowLoopback: true}, ShutdownGrace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := ex.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	crash = func() { once.Do(func() { nc.Close(); ex.Stop() }) }
	t.Cleanup(crash)
	return crash
}

func TestExecutorCrashMidCallIsRedelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "governor", "breaker", "deadletter", "timer")
	shortenDispatch(t, e.srv.JS, 20)
	tg := newScripted(t, 200)
	tg.hang = make(chan struct{})
	succeeded := e.collect("flyball.run.succeeded.>")
	crash := crashableExecutor(t, e.srv)
	e.create("crash", spec("crash", tg.srv.URL, 3, "5s"))
	tg.awaitCall(t, "the first executor's call") // the first executor is mid-call
	crash()
	tg.mu.Lock()
	close(tg.hang)
	tg.hang = nil
	tg.mu.Unlock()
	e.start("executor") // a healthy executor takes over after AckWait
	natstest.Eventually(t, 10*time.Second, "the run completes on the second executor", func() bool { return len(succeeded()) == 1 })
	calls := tg.Calls()
	if len(calls) != 2 || calls[0].key != calls[1].key {
		t.Fatalf("calls %+v: want 2 calls of the same dispatch (same Idempotency-Key)", calls)
	}
}

func TestExecutorDeathOnLastDeliveryIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "governor", "breaker", "deadletter", "timer")
	shortenDispatch(t, e.srv.JS, 1)
	tg := newScripted(t, 200)
	tg.hang = make(chan struct{})
	dls := e.collect("flyball.deadletter.>")
	crash := crashableExecutor(t, e.srv)
	e.create("lastgasp", spec("lastgasp", tg.srv.URL, 3, "5s"))
	tg.awaitCall(t, "the call of the only permitted delivery")
	crash() // died on its only permitted delivery
	// A consumer with a pending pull makes JetStream notice MaxDeliver.
	e.start("executor")
	natstest.Eventually(t, 15*time.Second, "a max-deliveries dead-letter entry", func() bool { return len(dls()) == 1 })
	dl := deadLetters(t, dls())[0]
	if dl.Reason != events.DeadLetterMaxDeliveries || dl.TaskID != "lastgasp" {
		t.Fatalf("entry = %+v, want reason max-deliveries for lastgasp", dl)
	}
	// No attempt was recorded (the executor died on the first), and the
	// entry still says so with an empty list: `errors` is documented as an
	// array, and a consumer iterating it must not meet null.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(dls()[0].Data(), &raw); err != nil {
		t.Fatal(err)
	}
	if got := string(raw["errors"]); got != "[]" {
		t.Fatalf("errors = %s, want [] for an entry without a recorded attempt", got)
	}
	dispatch, err := e.srv.JS.Stream(context.Background(), streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	// The dead-lettered dispatch no longer holds the task's one slot: the
	// subject is empty, or holds a newer dispatch the governor scheduled.
	natstest.Eventually(t, 5*time.Second, "the dead-lettered dispatch is removed from DISPATCH", func() bool {
		raw, err := dispatch.GetLastMsgForSubject(context.Background(), events.DispatchSubject("lastgasp"))
		if err != nil {
			return true
		}
		ev, err := events.Decode(raw.Header, raw.Data)
		var d events.Dispatch
		return err == nil && events.DecodeData(ev, &d) == nil && d.DispatchID != dl.Dispatch.DispatchID
	})
}

func TestRequeueRunsTheTaskAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := newScripted(t, 404, 200)
	dls := e.collect("flyball.deadletter.>")
	succeeded := e.collect("flyball.run.succeeded.>")
	e.create("again", spec("again", tg.srv.URL, 3, "5s"))
	natstest.Eventually(t, 10*time.Second, "dead-lettered", func() bool { return len(dls()) == 1 })
	body := `{"specversion":"1.0","type":"io.flyball.task.requeued","source":"test","id":"rq-1","subject":"again","datacontenttype":"application/json","data":{"id":"again","deadLetterSeq":1}}`
	if err := e.srv.NC.Publish("flyball.task.requeued.again", []byte(body)); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "the requeued task runs and succeeds", func() bool { return len(succeeded()) == 1 })
	if n := len(tg.Calls()); n != 2 {
		t.Fatalf("target got %d calls, want 2 (the failure, then the requeued run)", n)
	}
}

// TestARunAskedForDuringARunRunsAfterIt: a run-now hint or a requeue sent
// while a slot's call is running plans a slot that waits behind it, since
// DISPATCH holds one dispatch per task: the timer's publish is refused
// (10077) and retried, backing off to 4 s. The running slot's outcome was
// applied before that retry and planned the next slot after the waiting
// one, which took its place in the timer: the run asked for never ran and
// the hourly task was next called an hour later, without a word. A second
// input during the same run (an interval hint, then, sent while the slot
// asked for waits) planned after the waiting slot in the same way.
func TestARunAskedForDuringARunRunsAfterIt(t *testing.T) {
	t.Parallel()
	const intervalHint = `{"id":"slow","interval":"10m"}`
	for _, tc := range []struct{ name, typ, data, then string }{
		{"run-now", "task.hinted", `{"id":"slow","at":%q}`, ""},
		{"requeue", "task.requeued", `{"id":"slow"}`, ""},
		{"run-now, then an interval hint", "task.hinted", `{"id":"slow","at":%q}`, intervalHint},
		{"requeue, then an interval hint", "task.requeued", `{"id":"slow"}`, intervalHint},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			tg := newScripted(t, 200)
			release := make(chan struct{})
			tg.mu.Lock()
			tg.hang = release
			tg.mu.Unlock()
			e.create("slow", fmt.Sprintf(`{"id":"slow","target":{"http":{"url":%q,"timeout":"60s"}},"schedule":{"interval":"1h"}}`, tg.srv.URL))
			tg.awaitCall(t, "the first run")
			data := tc.data
			if strings.Contains(data, "%q") {
				data = fmt.Sprintf(data, time.Now().UTC().Format(time.RFC3339Nano))
			}
			command := func(typ, id, data string) {
				t.Helper()
				body := fmt.Sprintf(`{"specversion":"1.0","type":"io.flyball.%s","source":"test","id":%q,"subject":"slow","datacontenttype":"application/json","data":%s}`, typ, id, data)
				if err := e.srv.NC.Publish("flyball."+typ+".slow", []byte(body)); err != nil {
					t.Fatal(err)
				}
			}
			command(tc.typ, "cmd-1", data)
			pending := e.st.Metrics().DispatchTotal.WithLabelValues("pending")
			if tc.then != "" {
				// Once its slot is due: still ahead, any hint keeps it.
				natstest.Eventually(t, 15*time.Second, "the slot asked for refused behind the running one, and due", func() bool {
					next := e.storedSchedule("slow").NextRunAt
					return testutil.ToFloat64(pending) >= 1 && !next.IsZero() && time.Now().After(next)
				})
				command("task.hinted", "cmd-2", tc.then)
				natstest.Eventually(t, 10*time.Second, "the interval hint applied while the slot asked for waits", func() bool {
					return e.storedSchedule("slow").IntervalHint != nil
				})
			} else {
				// Five refusals: the timer's next try of the slot asked for
				// is 4 s away, long after the running slot's outcome is
				// applied.
				natstest.Eventually(t, 15*time.Second, "the slot asked for refused 5 times behind the running one", func() bool {
					return testutil.ToFloat64(pending) >= 5
				})
			}
			tg.mu.Lock()
			close(release)
			tg.hang = nil
			tg.mu.Unlock()
			tg.awaitCall(t, "the run asked for during the first run")
			if n := len(tg.Calls()); n != 2 {
				t.Fatalf("target got %d calls, want 2", n)
			}
		})
	}
}

// TestARequeuedRunRunsOnce: a hint during a requeued run plans the slot
// after it, and from then on the schedule no longer named the running
// slot, so a second input during the same run (a spec update) planned the
// requeue again, now, behind it; that run's outcome kept the waiting slot
// (it was planned while the run ran), and the requeued task was called
// twice. The schedule now remembers the running slot (runningSlot) until
// its outcome, and the second input plans after it as the first did. A
// pause and a resume during the run did the same: the pause forgot the
// running slot, and the resume planned the requeue again; the pause now
// keeps it (the run goes on), and the resume plans after it.
func TestARequeuedRunRunsOnce(t *testing.T) {
	t.Parallel()
	type command struct {
		typ, data string
		kind      gov.Kind
	}
	for _, tc := range []struct {
		name   string
		during []command
		next   time.Duration // after the requeued slot
	}{
		{"a hint then a spec update", []command{
			{"task.hinted", `{"id":"rq","interval":"10m"}`, gov.KindHinted},
			{"task.updated", "", gov.KindUpdated},
		}, 10 * time.Minute},
		{"a pause then a resume", []command{
			{"task.paused", `{"id":"rq"}`, gov.KindPaused},
			{"task.resumed", `{"id":"rq"}`, gov.KindResumed},
		}, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			tg := newScripted(t, 200)
			const task = `{"id":"rq","target":{"http":{"url":%q,"timeout":"60s"}},"schedule":{"interval":"1h"}}`
			e.create("rq", fmt.Sprintf(task, tg.srv.URL))
			tg.awaitCall(t, "the first run")
			natstest.Eventually(t, 10*time.Second, "the first run's outcome applied", func() bool { return e.storedSchedule("rq").Runs == 1 })
			release := make(chan struct{})
			tg.mu.Lock()
			tg.hang = release
			tg.mu.Unlock()
			send := func(typ, id, data string) {
				t.Helper()
				body := fmt.Sprintf(`{"specversion":"1.0","type":"io.flyball.%s","source":"test","id":%q,"subject":"rq","datacontenttype":"application/json","data":%s}`, typ, id, data)
				if err := e.srv.NC.Publish("flyball."+typ+".rq", []byte(body)); err != nil {
					t.Fatal(err)
				}
			}
			send("task.requeued", "rq-requeue", `{"id":"rq"}`)
			tg.awaitCall(t, "the requeued run")
			var slot time.Time
			natstest.Eventually(t, 10*time.Second, "the requeued run planned", func() bool {
				st := e.storedSchedule("rq")
				slot = st.NextRunAt
				return st.Source == gov.SourceRequeue
			})
			for i, c := range tc.during {
				data := c.data
				if data == "" {
					data = fmt.Sprintf(task, tg.srv.URL)
				}
				send(c.typ, fmt.Sprintf("rq-%d", i), data)
				natstest.Eventually(t, 10*time.Second, c.typ+" applied during the requeued run", func() bool { return e.storedSchedule("rq").Input == c.kind })
			}
			if st := e.storedSchedule("rq"); !st.NextRunAt.Equal(slot.Add(tc.next)) || !st.RunningSlot.Equal(slot) {
				t.Errorf("after %s during the requeued run of %s: next run %s (%s), running slot %s; want %s after it\ntrail: %q",
					tc.name, slot.Format(time.RFC3339Nano), st.NextRunAt.Format(time.RFC3339Nano), st.Source, st.RunningSlot.Format(time.RFC3339Nano), tc.next, st.Trail)
			}
			tg.mu.Lock()
			close(release)
			tg.hang = nil
			tg.mu.Unlock()
			natstest.Eventually(t, 10*time.Second, "the requeued run's outcome applied", func() bool { return !e.storedSchedule("rq").LastScheduledAt.Before(slot) })
			st := e.storedSchedule("rq")
			if !st.NextRunAt.Equal(slot.Add(tc.next)) || !st.RequeuedAt.IsZero() || !st.RunningSlot.IsZero() {
				t.Fatalf("after the requeued run of %s: next run %s (%s), requeued at %s, running slot %s; want the slot %s after it\ntrail: %q",
					slot.Format(time.RFC3339Nano), st.NextRunAt.Format(time.RFC3339Nano), st.Source, st.RequeuedAt, st.RunningSlot, tc.next, st.Trail)
			}
			if n := len(tg.Calls()); n != 2 {
				t.Fatalf("target got %d calls, want 2 (the first run, the requeued one)", n)
			}
		})
	}
}

// TestARunAskedForSkippedInAPauseRunsAtTheResume: a task requeued (or
// run now, a one-shot hint), then paused before the slot asked for was
// called (here: no executor was running), has that slot skipped
// (run.skipped, task paused). The skip cleared the request as a run at or
// after it would, and the resume planned the next hourly slot: the run
// the operator asked for never came. The request now stays pending until
// a run, and the resume runs it at once.
func TestARunAskedForSkippedInAPauseRunsAtTheResume(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, typ, data string
		source          gov.Source
		pending         func(gov.State) bool
	}{
		{"requeue", "task.requeued", `{"id":"rqp"}`, gov.SourceRequeue, func(st gov.State) bool { return !st.RequeuedAt.IsZero() }},
		{"run-now", "task.hinted", `{"id":"rqp","at":%q}`, gov.SourceHintOneShot, func(st gov.State) bool { return st.OneShotHint != nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "governor", "timer")
			ex := e.start("executor")
			tg := newScripted(t, 200)
			e.create("rqp", fmt.Sprintf(`{"id":"rqp","target":{"http":{"url":%q}},"schedule":{"interval":"1h"}}`, tg.srv.URL))
			tg.awaitCall(t, "the first run")
			natstest.Eventually(t, 10*time.Second, "the first run's outcome applied", func() bool { return e.storedSchedule("rqp").Runs == 1 })
			ex.Stop() // the slot asked for waits in DISPATCH
			send := func(typ, id, data string) {
				t.Helper()
				body := fmt.Sprintf(`{"specversion":"1.0","type":"io.flyball.%s","source":"test","id":%q,"subject":"rqp","datacontenttype":"application/json","data":%s}`, typ, id, data)
				if err := e.srv.NC.Publish("flyball."+typ+".rqp", []byte(body)); err != nil {
					t.Fatal(err)
				}
			}
			dispatch, err := e.srv.JS.Stream(t.Context(), streams.StreamDispatch)
			if err != nil {
				t.Fatal(err)
			}
			data := tc.data
			if strings.Contains(data, "%q") {
				data = fmt.Sprintf(data, time.Now().UTC().Format(time.RFC3339Nano))
			}
			send(tc.typ, "rqp-ask", data)
			var slot time.Time
			natstest.Eventually(t, 10*time.Second, "the slot asked for dispatched", func() bool {
				st := e.storedSchedule("rqp")
				slot = st.NextRunAt
				raw, err := dispatch.GetLastMsgForSubject(t.Context(), events.DispatchSubject("rqp"))
				if err != nil || st.Source != tc.source {
					return false
				}
				ev, err := events.Decode(raw.Header, raw.Data)
				var d events.Dispatch
				return err == nil && events.DecodeData(ev, &d) == nil && d.DispatchID == events.DispatchID("rqp", slot)
			})
			send("task.paused", "rqp-pause", `{"id":"rqp"}`)
			natstest.Eventually(t, 10*time.Second, "the pause applied", func() bool { return e.storedSchedule("rqp").Paused })
			e.start("executor")
			natstest.Eventually(t, 10*time.Second, "the skip of the slot asked for applied", func() bool {
				st := e.storedSchedule("rqp")
				return st.LastScheduledAt.Equal(slot) && st.LastOutcome == "skipped"
			})
			if st := e.storedSchedule("rqp"); !tc.pending(st) {
				t.Errorf("the skip of the slot asked for, %s, cleared the %s\ntrail: %q", slot.Format(time.RFC3339Nano), tc.name, st.Trail)
			}
			send("task.resumed", "rqp-resume", `{"id":"rqp"}`)
			tg.awaitCall(t, "the run asked for, at the resume")
			natstest.Eventually(t, 10*time.Second, "the outcome of the run asked for applied", func() bool { return e.storedSchedule("rqp").Runs == 2 })
			if st := e.storedSchedule("rqp"); tc.pending(st) || st.Source != gov.SourceBaselineInterval {
				t.Fatalf("after the run asked for: pending %v, next run %s (%s); want the %s consumed and the hourly cadence\ntrail: %q",
					tc.pending(st), st.NextRunAt.Format(time.RFC3339Nano), st.Source, tc.name, st.Trail)
			}
			if n := len(tg.Calls()); n != 2 {
				t.Fatalf("target got %d calls, want 2 (the first run, the one asked for)", n)
			}
		})
	}
}

func TestMalformedMessagesAreTerminatedAndCounted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reasons := terminations(t, e.srv.NC)
	ctx := context.Background()
	for _, subj := range []string{"flyball.dispatch.junk", "flyball.run.succeeded.junk", "flyball.run.failed.junk", "flyball.run.recovered.junk"} {
		if _, err := e.srv.JS.Publish(ctx, subj, []byte("definitely not a cloudevent")); err != nil {
			t.Fatal(err)
		}
	}
	// A dead letter that decodes but names another task than its subject.
	now := time.Now().UTC()
	dl, err := events.Marshal(events.TypeDeadLettered, "test", "other", events.DeadLetter{TaskID: "other", Reason: "permanent", DeadLetteredAt: now}, now, "dl-junk")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.JS.Publish(ctx, events.DeadLetterSubject("junk"), dl); err != nil {
		t.Fatal(err)
	}
	// executor (DISPATCH), governor (succeeded, failed and the dead
	// letter), breaker (failed and recovered) and deadletter (failed): 7
	// terminations.
	natstest.Eventually(t, 10*time.Second, "7 terminations", func() bool {
		return counterSum(t, e.st.Metrics().Registry, "flyball_rejected_events_total") >= 7
	})
	natstest.Eventually(t, 5*time.Second, "7 MSG_TERMINATED advisories, each with a reason", func() bool {
		withReason := 0
		for _, r := range reasons() {
			if strings.HasPrefix(r, "malformed event") {
				withReason++
			}
		}
		return withReason >= 7
	})
	for _, r := range reasons() {
		if strings.Count(r, "malformed event") != 1 {
			t.Errorf("terminated with %q: want \"malformed event\" said once", r)
		}
	}
	// Nothing crashed: a real task still runs.
	tg := newScripted(t, 200)
	e.create("alive", spec("alive", tg.srv.URL, 3, "5s"))
	natstest.Eventually(t, 10*time.Second, "a task runs after the junk", func() bool { return len(tg.Calls()) == 1 })
}

// TestTimedPauseResumesWithTheRunAfterItsEnd: no slot inside a pause
// until T is called, and the first run after it is the task's first slot
// at or after T (as a resume at T plans; before, the run was at T itself,
// off the grid, and off the calendar of a cron task). Each call's slot is
// read from its Idempotency-Key ("<task>:<slot Unix ms>").
func TestTimedPauseResumesWithTheRunAfterItsEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := newScripted(t, 200)
	accepted := e.collect("flyball.task.accepted.nap")
	e.create("nap", fmt.Sprintf(`{"id":"nap","target":{"http":{"url":%q}},"schedule":{"interval":"1s"}}`, tg.srv.URL))
	natstest.Eventually(t, 10*time.Second, "two runs", func() bool { return len(tg.Calls()) >= 2 })
	pausedAt := time.Now()
	until := pausedAt.Add(3 * time.Second).UTC().Truncate(time.Millisecond)
	body := fmt.Sprintf(`{"specversion":"1.0","type":"io.flyball.task.paused","source":"test","id":"p-1","subject":"nap","datacontenttype":"application/json","data":{"id":"nap","until":%q}}`, until.Format(time.RFC3339Nano))
	if err := e.srv.NC.Publish("flyball.task.paused.nap", []byte(body)); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 5*time.Second, "the pause is accepted", func() bool { return len(accepted()) == 2 })
	slot := func(c call) time.Time {
		ms, err := strconv.ParseInt(strings.TrimPrefix(c.key, "nap:"), 10, 64)
		if err != nil {
			t.Fatalf("Idempotency-Key %q", c.key)
		}
		return time.UnixMilli(ms).UTC()
	}
	var after time.Time
	natstest.Eventually(t, 10*time.Second, "a run after the pause", func() bool {
		for _, c := range tg.Calls() {
			if s := slot(c); !s.Before(until) {
				after = s
				return true
			}
		}
		return false
	})
	calls := tg.Calls()
	first := slot(calls[0])
	for _, c := range calls {
		// A dispatch already at the executor when the pause arrived may
		// still run: allow its lead and the pause's trip through NATS.
		if s := slot(c); s.After(pausedAt.Add(time.Second)) && s.Before(until) {
			t.Errorf("slot %s, inside the pause until %s, was called", s.Format(time.RFC3339Nano), until.Format(time.RFC3339Nano))
		}
	}
	if after.Sub(until) >= time.Second || after.Sub(first)%time.Second != 0 {
		t.Fatalf("the run after the pause until %s is at %s, want the first 1s slot of the grid from %s at or after the end",
			until.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano), first.Format(time.RFC3339Nano))
	}
}

// TestExecutorSkipsATaskOnlyWhenItsScheduleIsPaused: the executor learns
// of pauses from flyball-pauses, but a hint alone never skips a run: the
// paused schedule does. A dispatch of a paused task becomes run.skipped
// ("task paused") without a call; a stale hint (schedule not paused) and a
// pause that ends at or before the slot both let the call through.
func TestExecutorSkipsATaskOnlyWhenItsScheduleIsPaused(t *testing.T) {
	t.Parallel()
	e := &env{t: t, srv: natstest.StartWithStreams(t)}
	tg := newScripted(t, 200)
	skipped := e.collect("flyball.run.skipped.>")
	succeeded := e.collect("flyball.run.succeeded.>")
	slot := time.Now().UTC().Truncate(time.Millisecond)
	for id, st := range map[string]gov.State{
		"napping": {TaskID: "napping", Paused: true, PauseReason: "deploy"},
		"stale":   {TaskID: "stale", NextRunAt: slot},
		"ended":   {TaskID: "ended", Paused: true, PausedUntil: slot},
	} {
		natstest.PutJSON(t, e.srv.JS, streams.BucketTasks, id, events.TaskSpec{ID: id, Target: events.Target{HTTP: &events.HTTPTarget{URL: tg.srv.URL}}, Schedule: events.Schedule{Interval: events.Duration(time.Hour)}})
		natstest.PutJSON(t, e.srv.JS, streams.BucketSchedules, id, st)
		natstest.PutJSON(t, e.srv.JS, streams.BucketPauses, id, map[string]string{"taskId": id})
		dispatchAt(t, e.srv.JS, id, slot)
	}
	// Started after the writes, so its views load them (a hint written
	// while a dispatch is in flight races it, as a pause does).
	e.start("executor")
	natstest.Eventually(t, 10*time.Second, "three outcomes", func() bool { return len(skipped())+len(succeeded()) == 3 })
	got := map[string]string{}
	for _, ev := range append(skipped(), succeeded()...) {
		var r events.Run
		if err := events.DecodeRun(ev, &r); err != nil {
			t.Fatal(err)
		}
		got[r.TaskID] = ev.Type() + " " + r.Reason
	}
	want := map[string]string{
		"napping": events.OutcomeSkipped.Type() + " task paused",
		"stale":   events.OutcomeSucceeded.Type() + " ",
		"ended":   events.OutcomeSucceeded.Type() + " ",
	}
	if !maps.Equal(got, want) {
		t.Fatalf("outcomes %q, want %q", got, want)
	}
	if n := len(tg.Calls()); n != 2 {
		t.Fatalf("the target got %d calls, want 2 (the paused task is not called)", n)
	}
}

// TestLongCallIsKeptAlive: a call that outlasts the consumer's AckWait is
// not redelivered, because the executor sends InProgress every AckWait/2.
func TestLongCallIsKeptAlive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "governor", "breaker", "deadletter", "timer")
	shortenDispatch(t, e.srv.JS, 20) // AckWait 1s
	var mu sync.Mutex
	calls := 0
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		mu.Unlock()
		select { // a slow endpoint: 2.5 AckWaits
		case <-time.After(2500 * time.Millisecond):
		case <-r.Context().Done():
		}
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(slow.Close)
	e.start("executor") // reads the 1s AckWait at start
	succeeded := e.collect("flyball.run.succeeded.>")
	e.create("slow", fmt.Sprintf(`{"id":"slow","target":{"http":{"url":%q,"timeout":"5s"}},"schedule":{"interval":"1h"}}`, slow.URL))
	natstest.Eventually(t, 15*time.Second, "the slow run succeeds", func() bool { return len(succeeded()) == 1 })
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 {
		t.Fatalf("the target got %d calls: the dispatch was redelivered mid-call", calls)
	}
}

// keyCounter is a target that counts calls per Idempotency-Key (that is,
// per dispatch); calls to /slow take 2.5 s (2.5 AckWaits under
// shortenDispatch), or what newSlowKeyCounter says.
type keyCounter struct {
	srv      *httptest.Server
	mu       sync.Mutex
	keys     map[string]int
	inFlight int
}

func newKeyCounter(t *testing.T) *keyCounter {
	t.Helper()
	return newSlowKeyCounter(t, 2500*time.Millisecond)
}

// newSlowKeyCounter is a keyCounter whose calls to /slow take slow.
func newSlowKeyCounter(t *testing.T, slow time.Duration) *keyCounter {
	t.Helper()
	k := &keyCounter{keys: map[string]int{}}
	k.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k.mu.Lock()
		k.keys[r.Header.Get("Idempotency-Key")]++
		k.inFlight++
		k.mu.Unlock()
		if r.URL.Path == "/slow" {
			select {
			case <-time.After(slow):
			case <-r.Context().Done():
			}
		}
		k.mu.Lock()
		k.inFlight--
		k.mu.Unlock()
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(k.srv.Close)
	return k
}

func (k *keyCounter) calling() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.inFlight
}

// putTask stores a valid spec for id calling url with a 5s timeout.
func putTask(t *testing.T, e *env, id, url string) {
	t.Helper()
	natstest.PutJSON(t, e.srv.JS, streams.BucketTasks, id, events.TaskSpec{
		ID:       id,
		Target:   events.Target{HTTP: &events.HTTPTarget{URL: url, Timeout: events.Duration(5 * time.Second)}},
		Schedule: events.Schedule{Interval: events.Duration(time.Hour)},
	})
}

// checkOneCallEach waits for the DISPATCH consumer to have nothing
// pending (a redelivered copy has made its call by then), and checks
// that every dispatch called the target once.
func (k *keyCounter) checkOneCallEach(t *testing.T, e *env) {
	t.Helper()
	natstest.Eventually(t, 10*time.Second, "DISPATCH settled", func() bool {
		return natstest.CaughtUp(context.Background(), e.srv.JS, streams.StreamDispatch, streams.ConsumerExecutor)
	})
	k.mu.Lock()
	defer k.mu.Unlock()
	for key, n := range k.keys {
		if n != 1 {
			t.Errorf("dispatch %s called %d times with no failure, want 1", key, n)
		}
	}
}

// TestWaitForAHostSlotIsKeptAlive: a dispatch waiting longer than the
// AckWait for its host's PerHost slot sends InProgress meanwhile, so
// JetStream does not redeliver it and the target is called once per
// dispatch. Before, keepAlive started only once the slot was taken: the
// redelivered copy waited too, and both copies called the target.
func TestWaitForAHostSlotIsKeptAlive(t *testing.T) {
	t.Parallel()
	e := &env{t: t, srv: natstest.StartWithStreams(t)}
	// AckWait 2s: with 1s, a keep-alive delayed half a second by a loaded
	// machine (make test runs packages side by side) let JetStream
	// redeliver, and the copy called the target a second time. The slow
	// call stays under putTask's 5s timeout.
	const ackWait = 2 * time.Second
	shortenDispatchTo(t, e.srv.JS, 20, ackWait)
	tg := newSlowKeyCounter(t, 2*ackWait) // holds the host's one slot for 2 AckWaits
	e.st = e.startWith(func(c *stack.Config) { c.Concurrency, c.PerHost = 4, 1 }, "executor")
	succeeded := e.collect("flyball.run.succeeded.>")
	putTask(t, e, "hosta", tg.srv.URL+"/slow")
	putTask(t, e, "hostb", tg.srv.URL+"/fast")
	now := time.Now().UTC()
	dispatchAt(t, e.srv.JS, "hosta", now)
	natstest.Eventually(t, 5*time.Second, "the slow call is in flight", func() bool { return tg.calling() == 1 })
	dispatchAt(t, e.srv.JS, "hostb", now)
	natstest.Eventually(t, 30*time.Second, "both runs succeed", func() bool { return len(succeeded()) >= 2 })
	tg.checkOneCallEach(t, e)
}

// TestSlowHostDoesNotStarveOtherHosts: dispatches waiting for a busy
// host's PerHost slot hold none of the executor's Concurrency call
// slots, so a task on another host runs on time. Before, each took a
// call slot, then waited for its host in it: three dispatches of a slow
// host (Concurrency 2, PerHost 1) held both slots, and the other host's
// run waited for the slow calls to end.
func TestSlowHostDoesNotStarveOtherHosts(t *testing.T) {
	t.Parallel()
	e := &env{t: t, srv: natstest.StartWithStreams(t)}
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	var mu sync.Mutex
	slowCalls := 0
	slow := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		mu.Lock()
		slowCalls++
		mu.Unlock()
		select { // until the test ends it
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(unblock) // before slow.Close, which waits for its handlers
	fast := newKeyCounter(t)
	e.st = e.startWith(func(c *stack.Config) { c.Concurrency, c.PerHost = 2, 1 }, "executor")
	succeeded := e.collect("flyball.run.succeeded.>")
	now := time.Now().UTC()
	for _, id := range []string{"slow1", "slow2", "slow3"} {
		putTask(t, e, id, slow.URL)
		dispatchAt(t, e.srv.JS, id, now)
	}
	natstest.Eventually(t, 5*time.Second, "one slow call is in flight", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slowCalls == 1
	})
	putTask(t, e, "other", fast.srv.URL)
	dispatchAt(t, e.srv.JS, "other", time.Now().UTC())
	natstest.Eventually(t, 3*time.Second, "the other host's run succeeds while the slow host's call is in flight", func() bool {
		return len(succeeded()) == 1
	})
	unblock()
	natstest.Eventually(t, 15*time.Second, "every run succeeds", func() bool { return len(succeeded()) == 4 })
	mu.Lock()
	defer mu.Unlock()
	if slowCalls != 3 {
		t.Errorf("the slow host got %d calls, want 3 (one per dispatch)", slowCalls)
	}
}

// TestWaitForACallSlotIsKeptAlive: a dispatch waiting longer than the
// AckWait for one of the executor's Concurrency call slots sends
// InProgress meanwhile, so it is not redelivered and called twice. Here
// two held dispatches take both slots with slow calls as they fire, and a
// third dispatch, due at once, waits for a slot in its handler while the
// other worker stays free to pull a redelivered copy.
func TestWaitForACallSlotIsKeptAlive(t *testing.T) {
	t.Parallel()
	e := &env{t: t, srv: natstest.StartWithStreams(t)}
	// AckWait 2s, with calls 1.5 times as long: without the keep-alive
	// a waiting dispatch is redelivered, and the ticker (every quarter
	// AckWait) has half a second to spare on a loaded machine (at 1s a
	// quarter second was not always enough).
	shortenDispatchTo(t, e.srv.JS, 20, 2*time.Second)
	tg := newSlowKeyCounter(t, 3*time.Second)
	e.st = e.startWith(func(c *stack.Config) { c.Concurrency, c.PerHost = 2, 4 }, "executor")
	succeeded := e.collect("flyball.run.succeeded.>")
	putTask(t, e, "slow1", tg.srv.URL+"/slow")
	putTask(t, e, "slow2", tg.srv.URL+"/slow")
	putTask(t, e, "waits", tg.srv.URL+"/fast")
	// Held (due within half the AckWait), they leave both workers free.
	slot := time.Now().Add(300 * time.Millisecond).UTC()
	dispatchAt(t, e.srv.JS, "slow1", slot)
	dispatchAt(t, e.srv.JS, "slow2", slot)
	natstest.Eventually(t, 5*time.Second, "both slow calls are in flight", func() bool { return tg.calling() == 2 })
	dispatchAt(t, e.srv.JS, "waits", time.Now().UTC())
	natstest.Eventually(t, 15*time.Second, "all three runs succeed", func() bool { return len(succeeded()) >= 3 })
	tg.checkOneCallEach(t, e)
}

// TestHeldDispatchWaitingForACallerIsKeptAlive: a held dispatch whose
// slot comes while every caller is busy (Concurrency 1, a slow held call
// in flight) waits for a caller, longer than the AckWait: it sends
// InProgress meanwhile, so the free worker does not pull a redelivered
// copy that calls the target a second time.
func TestHeldDispatchWaitingForACallerIsKeptAlive(t *testing.T) {
	t.Parallel()
	e := &env{t: t, srv: natstest.StartWithStreams(t)}
	// AckWait 2s, with calls 1.5 times as long: without the keep-alive
	// a waiting dispatch is redelivered, and the ticker (every quarter
	// AckWait) has half a second to spare on a loaded machine (at 1s a
	// quarter second was not always enough).
	shortenDispatchTo(t, e.srv.JS, 20, 2*time.Second)
	tg := newSlowKeyCounter(t, 3*time.Second)
	e.st = e.startWith(func(c *stack.Config) { c.Concurrency, c.PerHost = 1, 4 }, "executor")
	succeeded := e.collect("flyball.run.succeeded.>")
	putTask(t, e, "slow", tg.srv.URL+"/slow")
	putTask(t, e, "waits", tg.srv.URL+"/fast")
	dispatchAt(t, e.srv.JS, "slow", time.Now().Add(200*time.Millisecond).UTC())
	natstest.Eventually(t, 5*time.Second, "the slow held call is in flight", func() bool { return tg.calling() == 1 })
	dispatchAt(t, e.srv.JS, "waits", time.Now().Add(200*time.Millisecond).UTC())
	natstest.Eventually(t, 15*time.Second, "both runs succeed", func() bool { return len(succeeded()) >= 2 })
	tg.checkOneCallEach(t, e)
}

// earlyDispatch starts an executor alone, stores task "early" calling a
// scripted target, and publishes its dispatch ahead by ahead, as a timer
// with that lead would. It returns the slot.
func earlyDispatch(t *testing.T, ahead time.Duration) (*env, *scripted, time.Time) {
	t.Helper()
	e := newEnv(t, "executor")
	tg := newScripted(t, 200)
	natstest.PutJSON(t, e.srv.JS, streams.BucketTasks, "early", events.TaskSpec{ID: "early", Target: events.Target{HTTP: &events.HTTPTarget{URL: tg.srv.URL}}, Schedule: events.Schedule{Interval: events.Duration(time.Minute)}})
	slot := time.Now().Add(ahead).UTC()
	dispatchAt(t, e.srv.JS, "early", slot)
	return e, tg, slot
}

// dispatchAt publishes a run.due for task id with the given slot.
func dispatchAt(t *testing.T, js jetstream.JetStream, id string, slot time.Time) {
	t.Helper()
	d := events.Dispatch{DispatchID: events.DispatchID(id, slot), TaskID: id, ScheduledAt: slot, FiredAt: time.Now().UTC(), Source: "test"}
	body, err := events.Marshal(events.TypeRunDue, "test", id, d, time.Now(), d.DispatchID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(context.Background(), events.DispatchSubject(id), body); err != nil {
		t.Fatal(err)
	}
}

// TestEarlyDispatchIsHeldUntilItsSlot: a dispatch published ahead of its
// slot is called at the slot, not on arrival.
func TestEarlyDispatchIsHeldUntilItsSlot(t *testing.T) {
	t.Parallel()
	_, tg, slot := earlyDispatch(t, 700*time.Millisecond)
	natstest.Eventually(t, 10*time.Second, "the held dispatch is called", func() bool { return len(tg.Calls()) == 1 })
	at := tg.Calls()[0].at
	if at.Before(slot) {
		t.Fatalf("called %s before its slot", slot.Sub(at))
	}
	// Held, not called on arrival 700 ms ahead; how soon after the slot is
	// for the benchmarks (lateness), not for a timed test on a busy machine.
	if late := at.Sub(slot); late > 500*time.Millisecond {
		t.Fatalf("called %s after its slot", late)
	}
}

// TestHeldDispatchesAreHandedBackAtShutdown: stopping an executor returns
// the dispatches it holds for later slots to the stream at once, so
// another executor runs them on time instead of after AckWait.
func TestHeldDispatchesAreHandedBackAtShutdown(t *testing.T) {
	t.Parallel()
	e, tg, slot := earlyDispatch(t, 3*time.Second)
	// The executor's gauge, not the consumer's ack-pending count: a
	// message the server has sent but the executor has not taken in when
	// its pull is cancelled is redelivered only after AckWait (a known
	// limit of cancelling a pull, docs/architecture.md).
	natstest.Eventually(t, 5*time.Second, "the first executor holds the dispatch", func() bool {
		return testutil.ToFloat64(e.st.Metrics().DispatchHeld) == 1
	})
	e.st.Stop()
	if held := testutil.ToFloat64(e.st.Metrics().DispatchHeld); held != 0 {
		t.Fatalf("flyball_dispatch_held is %v after the stop, want 0", held)
	}
	if stopped := time.Now(); !stopped.Before(slot) || len(tg.Calls()) != 0 {
		t.Fatalf("the stopping executor kept the dispatch: stopped %s before the slot, %d calls", slot.Sub(stopped), len(tg.Calls()))
	}
	e.start("executor")
	natstest.Eventually(t, 10*time.Second, "the second executor calls it", func() bool { return len(tg.Calls()) == 1 })
	at := tg.Calls()[0].at
	if at.Before(slot) || at.Sub(slot) > time.Second {
		t.Fatalf("called %s after its slot, want at the slot (not after AckWait)", at.Sub(slot))
	}
}

// TestRecreatedTaskStartsWithAClosedBreaker: a task deleted while its
// breaker is open, and created again under the same ID before any sweep,
// starts with a closed breaker. It inherited the open one before (the
// sweeper's orphan removal comes only at a sweep that finds the task gone),
// and its calls were deferred until the old retryAt.
func TestRecreatedTaskStartsWithAClosedBreaker(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "governor", "breaker", "executor", "timer") // no sweeper
	failing, healthy := newScripted(t, 500), newScripted(t, 200)
	opened := e.collect("flyball.breaker.open.again")
	accepted := e.collect("flyball.task.accepted.again")
	succeeded := e.collect("flyball.run.succeeded.again")
	schedules := e.watchSchedule("again")
	e.create("again", fmt.Sprintf(`{"id":"again","target":{"http":{"url":%q}},"schedule":{"interval":"1s"},
		"retry":{"maxAttempts":1},"breaker":{"failureThreshold":1,"openDelay":"1h","maxOpenDelay":"1h"}}`, failing.srv.URL))
	natstest.Eventually(t, 10*time.Second, "the breaker opens", func() bool { return len(opened()) == 1 })
	// Deleted at once: the governor reads RUNS apart from TASKS, so the
	// old task's final failure may reach it after the new task's creation.
	// Its dispatch named the old schedule's createdAt, so it does not hold
	// the new task for a dead-letter recheck.
	e.deleteTask("again")
	natstest.Eventually(t, 5*time.Second, "the delete is applied", func() bool { return len(accepted()) == 2 })
	e.create("again", fmt.Sprintf(`{"id":"again","target":{"http":{"url":%q}},"schedule":{"interval":"1s"}}`, healthy.srv.URL))
	natstest.Eventually(t, 10*time.Second, "the re-created task runs", func() bool { return len(succeeded()) >= 1 })
	if n := len(failing.Calls()); n != 1 {
		t.Fatalf("the old target got %d calls, want 1 (the failure that opened the breaker)", n)
	}
	// The run names the schedule it was dispatched from: the new task's.
	var created []time.Time
	for _, st := range schedules() {
		if len(created) == 0 || !st.CreatedAt.Equal(created[len(created)-1]) {
			created = append(created, st.CreatedAt)
		}
	}
	if len(created) != 2 || !created[1].After(created[0]) {
		t.Fatalf("schedules' createdAt %v: want the old task's, then a later one", created)
	}
	if run := runsOf(t, succeeded())[0]; !run.TaskCreatedAt.Equal(created[1]) {
		t.Fatalf("the new task's run names taskCreatedAt %v, want its schedule's %v", run.TaskCreatedAt, created[1])
	}
}

// TestTaskRecreatedWhileTheBreakerServiceIsDownStartsClosed: a task
// deleted while its breaker is open, and created again while the breaker
// service is down (a restart, or its watch of flyball-tasks ended by a
// reconnect), kept the old task's open breaker: the breaker service
// removes the record only for a delete its live watch sees, the sweeper
// only once no spec has the ID, and the executor applied the record to
// the new task's calls, each deferred until the old retryAt (an hour
// here). No outcome came to apply the breaker service's own rule (a newer
// taskCreatedAt starts closed). The executor now lets the new task's
// calls through a record made for another task of its ID, and once the
// breaker service and the sweeper are back, no open record of the old
// task is left (the new task's outcome starts it closed, or the sweeper
// deletes it).
func TestTaskRecreatedWhileTheBreakerServiceIsDownStartsClosed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "governor", "executor", "timer")
	br := e.start("breaker")
	failing, healthy := newScripted(t, 500), newScripted(t, 200)
	opened := e.collect("flyball.breaker.open.again")
	accepted := e.collect("flyball.task.accepted.again")
	schedules := e.watchSchedule("again")
	e.create("again", fmt.Sprintf(`{"id":"again","target":{"http":{"url":%q}},"schedule":{"interval":"1s"},
		"retry":{"maxAttempts":1},"breaker":{"failureThreshold":1,"openDelay":"1h","maxOpenDelay":"1h"}}`, failing.srv.URL))
	natstest.Eventually(t, 10*time.Second, "the breaker opens", func() bool { return len(opened()) == 1 })
	br.Stop()
	e.deleteTask("again")
	natstest.Eventually(t, 5*time.Second, "the delete is applied", func() bool { return len(accepted()) == 2 })
	created := strings.Replace(string(createdEvent("again", fmt.Sprintf(`{"id":"again","target":{"http":{"url":%q}},"schedule":{"interval":"1s"}}`, healthy.srv.URL))),
		`"id":"cmd-again"`, `"id":"cmd-again-2"`, 1)
	if err := e.srv.NC.Publish("flyball.task.created.again", []byte(created)); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "the task created again calls its target, the breaker service still down", func() bool { return len(healthy.Calls()) >= 1 })

	e.start("breaker", "sweeper")
	var createdAt []time.Time
	for _, s := range schedules() {
		if len(createdAt) == 0 || !s.CreatedAt.Equal(createdAt[len(createdAt)-1]) {
			createdAt = append(createdAt, s.CreatedAt)
		}
	}
	if len(createdAt) != 2 {
		t.Fatalf("schedules' createdAt %v: want the old task's, then the new one's", createdAt)
	}
	e.awaitBreakerGone("again", createdAt[1], 10*time.Second)
	if n := len(failing.Calls()); n != 1 {
		t.Fatalf("the old target got %d calls, want 1 (the failure that opened the breaker)", n)
	}
}

// awaitBreakerGone waits up to within for task id's flyball-breakers
// record to be no open breaker of another task of its ID: absent, or
// closed, or naming the task created at createdAt.
func (e *env) awaitBreakerGone(id string, createdAt time.Time, within time.Duration) {
	e.t.Helper()
	kv, err := e.srv.JS.KeyValue(e.t.Context(), streams.BucketBreakers)
	if err != nil {
		e.t.Fatal(err)
	}
	var last string
	defer func() {
		if e.t.Failed() {
			e.t.Logf("the last record of %s read: %s", id, last)
		}
	}()
	natstest.Eventually(e.t, within, "the breaker record of "+id+" is gone, closed, or the new task's", func() bool {
		ent, err := kv.Get(e.t.Context(), id)
		if jsutil.IsKeyMissing(err) {
			return true
		}
		if err != nil {
			last = err.Error()
			return false
		}
		last = string(ent.Value())
		var b struct {
			State         events.BreakerState `json:"state"`
			TaskCreatedAt time.Time           `json:"taskCreatedAt"`
		}
		return json.Unmarshal(ent.Value(), &b) == nil && (b.State == events.BreakerClosed || b.TaskCreatedAt.Equal(createdAt))
	})
}

// TestRestartAfterDowntimeRunsOnce: after a downtime the timer fires a
// task's overdue slot at once. Under catchUp skip (the default) that late
// run is the catch-up, and the task resumes its grid. Before, the governor
// answered the late run with a catch-up run "now": every task ran twice,
// milliseconds apart, when flyball came back.
func TestRestartAfterDowntimeRunsOnce(t *testing.T) {
	t.Parallel()
	e := &env{t: t, srv: natstest.StartWithStreams(t)}
	e.st = e.start("governor")
	tg := newScripted(t, 200)
	accepted := e.collect("flyball.task.accepted.down")
	e.create("down", fmt.Sprintf(`{"id":"down","target":{"http":{"url":%q}},"schedule":{"interval":"5s"}}`, tg.srv.URL))
	natstest.Eventually(t, 10*time.Second, "the task is accepted", func() bool { return len(accepted()) == 1 })

	overdue := e.leaveOverdue("down")
	e.start("timer", "executor") // flyball comes back
	var decided gov.State
	natstest.Eventually(t, 10*time.Second, "the late run's outcome is decided", func() bool {
		// The governor's first try starts from the state it cached before
		// leaveOverdue rewrote it; KV refuses that write and the governor
		// decides again from what KV holds. Only the stored one counts.
		decided = e.storedSchedule("down")
		return decided.Input == gov.KindOutcome && decided.LastScheduledAt.Equal(overdue)
	})
	if decided.Source != gov.SourceBaselineInterval || decided.NextRunAt.Sub(overdue)%(5*time.Second) != 0 {
		t.Fatalf("after the late run of %s: next %s (%s), want the next 5s slot of its grid; trail %q",
			overdue.Format(time.RFC3339Nano), decided.NextRunAt.Format(time.RFC3339Nano), decided.Source, decided.Trail)
	}
	// The slot is at most 5 s away; the rest is slack for a loaded
	// machine (the whole stack shares two cores with the other tests).
	natstest.Eventually(t, 20*time.Second, "the run at the next slot", func() bool { return len(tg.Calls()) >= 2 })
	calls := tg.Calls()
	if calls[0].key != events.DispatchID("down", overdue) || calls[1].key != events.DispatchID("down", decided.NextRunAt) {
		t.Fatalf("calls %v, want the overdue slot %s, then %s", calls, overdue.Format(time.RFC3339Nano), decided.NextRunAt.Format(time.RFC3339Nano))
	}
}

// storedSchedule returns the schedule KV holds for task id (the zero
// state if none).
func (e *env) storedSchedule(id string) gov.State {
	e.t.Helper()
	kv, err := e.srv.JS.KeyValue(e.t.Context(), streams.BucketSchedules)
	if err != nil {
		e.t.Fatal(err)
	}
	var st gov.State
	entry, err := kv.Get(e.t.Context(), id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return st
	}
	if err != nil {
		e.t.Fatal(err)
	}
	if err := json.Unmarshal(entry.Value(), &st); err != nil {
		e.t.Fatal(err)
	}
	return st
}

// awaitBreaker waits up to within for the flyball-breakers record of key
// to hold cond (what names it in the failure).
func (e *env) awaitBreaker(key string, within time.Duration, what string, cond func(executor.BreakerRecord) bool) {
	e.t.Helper()
	kv, err := e.srv.JS.KeyValue(e.t.Context(), streams.BucketBreakers)
	if err != nil {
		e.t.Fatal(err)
	}
	natstest.Eventually(e.t, within, what, func() bool {
		ent, err := kv.Get(e.t.Context(), key)
		if err != nil {
			return false
		}
		b, err := executor.DecodeBreaker(key, ent.Value())
		return err == nil && cond(b)
	})
}

// leaveOverdue makes the schedule of the 5s task id what a downtime
// leaves: it last ran 30 s ago, and its next slot, which it returns,
// passed 25 s ago with nothing running it.
func (e *env) leaveOverdue(id string) time.Time {
	t := e.t
	t.Helper()
	ctx := context.Background()
	_, js := e.srv.Connect(t)
	kv, err := js.KeyValue(ctx, streams.BucketSchedules)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var st gov.State
	if err := json.Unmarshal(entry.Value(), &st); err != nil {
		t.Fatal(err)
	}
	last := time.Now().UTC().Truncate(time.Millisecond).Add(-30 * time.Second)
	overdue := last.Add(5 * time.Second)
	st.LastScheduledAt, st.LastDispatchID, st.LastOutcome, st.LastSuccessAt, st.Runs = last, events.DispatchID(id, last), "succeeded", last, 1
	st.NextRunAt, st.Source = overdue, gov.SourceBaselineInterval
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(ctx, id, data, entry.Revision()); err != nil {
		t.Fatal(err)
	}
	return overdue
}

// TestRestartAfterDowntimeCatchUpNoneWaits: under catchUp none a task
// whose slots passed while flyball was down waits for its next slot. The
// timer fires the overdue slot at once after the restart, and the executor
// called it: one late run, though none promises none.
func TestRestartAfterDowntimeCatchUpNoneWaits(t *testing.T) {
	t.Parallel()
	e := &env{t: t, srv: natstest.StartWithStreams(t)}
	e.st = e.start("governor")
	tg := newScripted(t, 200)
	accepted := e.collect("flyball.task.accepted.down")
	skipped := e.collect(events.RunSubject(events.OutcomeSkipped, "down"))
	e.create("down", fmt.Sprintf(`{"id":"down","target":{"http":{"url":%q}},"schedule":{"interval":"5s"},"catchUp":"none"}`, tg.srv.URL))
	natstest.Eventually(t, 10*time.Second, "the task is accepted", func() bool { return len(accepted()) == 1 })

	overdue := e.leaveOverdue("down")
	back := time.Now()
	e.start("timer", "executor") // flyball comes back
	natstest.Eventually(t, 15*time.Second, "a call", func() bool { return len(tg.Calls()) >= 1 })
	first := tg.Calls()[0]
	if first.key == events.DispatchID("down", overdue) || first.at.Before(back.Add(time.Second)) {
		t.Fatalf("first call %s at %s, %s after the restart; want no call of the overdue slot %s, and the next slot of the grid",
			first.key, first.at.Format(time.RFC3339Nano), first.at.Sub(back), overdue.Format(time.RFC3339Nano))
	}
	var run events.Run
	if got := skipped(); len(got) != 1 || events.DecodeData(got[0], &run) != nil || run.DispatchID != events.DispatchID("down", overdue) || !strings.Contains(run.Reason, "catchUp none") {
		t.Fatalf("run.skipped %+v, want one, of the overdue slot, naming catchUp none", run)
	}
}

// TestSlowTargetIsNotCaughtUp: a 2 s task whose target answers in 5 s
// has slots pass while each run runs. They were not missed, the task was
// busy: the next run is the next slot after the run, not a catch-up run
// the moment it ends (before, the target was called back to back for
// good).
func TestSlowTargetIsNotCaughtUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // the target's own latency, not a wait of the test
		case <-time.After(5 * time.Second):
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(slow.Close)
	schedules := e.watchSchedule("slow")
	e.create("slow", fmt.Sprintf(`{"id":"slow","target":{"http":{"url":%q,"timeout":"10s"}},"schedule":{"interval":"2s"}}`, slow.URL))
	var decided gov.State
	natstest.Eventually(t, 20*time.Second, "the first run's outcome is decided", func() bool {
		for _, s := range schedules() {
			if s.Input == gov.KindOutcome {
				decided = s
				return true
			}
		}
		return false
	})
	if decided.Source == gov.SourceCatchUp || !strings.Contains(strings.Join(decided.Trail, "\n"), "not missed") {
		t.Fatalf("after a 5 s run of a 2 s task: next %s (%s), want the next slot of its grid; trail %q",
			decided.NextRunAt.Format(time.RFC3339Nano), decided.Source, decided.Trail)
	}
	if gap := decided.NextRunAt.Sub(decided.LastScheduledAt); gap%(2*time.Second) != 0 {
		t.Fatalf("next run %s after the slot of the slow run, want a multiple of 2s", gap)
	}
}

// TestSuccessBetweenFailuresResetsTheBreaker: with the real services, a
// success after failures reaches the breaker (as run.recovered: its
// consumer takes no run.succeeded) and resets the count. Each run fails
// twice and then succeeds; with a threshold of 3, two runs make four
// failures, and the breaker opens unless the success between them
// counted.
func TestSuccessBetweenFailuresResetsTheBreaker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := newScripted(t, 500, 500, 200, 500, 500, 200)
	opened := e.collect("flyball.breaker.open.reset")
	succeeded := e.collect("flyball.run.succeeded.reset")
	recovered := e.collect("flyball.run.recovered.reset")
	e.create("reset", fmt.Sprintf(`{"id":"reset","target":{"http":{"url":%q}},"schedule":{"interval":"1s"},
		"retry":{"maxAttempts":5,"initialDelay":"100ms","multiplier":1,"maxDelay":"100ms","jitter":0},
		"breaker":{"failureThreshold":3,"openDelay":"1h","maxOpenDelay":"1h"}}`, tg.srv.URL))
	natstest.Eventually(t, 20*time.Second, "two runs succeed after two failures each", func() bool { return len(succeeded()) >= 2 })
	natstest.Eventually(t, 10*time.Second, "both successes repeated as run.recovered", func() bool { return len(recovered()) >= 2 })
	if n := len(opened()); n != 0 {
		t.Fatalf("the breaker opened %d times on failures a success separated", n)
	}
	first, second := runsOf(t, succeeded())[:2], runsOf(t, recovered())[:2]
	for i := range first {
		if second[i].DispatchID != first[i].DispatchID || second[i].Attempt != 3 {
			t.Fatalf("run.recovered %d is of %s attempt %d, want the success of %s attempt 3", i, second[i].DispatchID, second[i].Attempt, first[i].DispatchID)
		}
	}
	e.awaitBreaker("reset", 10*time.Second, "the breaker record closed with no failures", func(b executor.BreakerRecord) bool {
		return b.State == events.BreakerClosed && b.Failures == 0
	})
}
