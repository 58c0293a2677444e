package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// attemptTarget answers with a scripted sequence of statuses (the last
// repeats) and records the Flyball-Attempt of every call. While gate is
// set, the call after gateAfter calls waits for it to be closed.
type attemptTarget struct {
	srv    *httptest.Server
	mu     sync.Mutex
	script []int
	calls  []int // Flyball-Attempt of each call
	gate   chan struct{}
	// gateAfter: the gate holds the call made after this many.
	gateAfter int
	// location, if set, is sent as the Location header of every answer.
	location string
}

func newAttemptTarget(t *testing.T, statuses ...int) *attemptTarget {
	t.Helper()
	a := &attemptTarget{script: statuses}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.Header.Get("Flyball-Attempt"))
		a.mu.Lock()
		i := len(a.calls)
		a.calls = append(a.calls, n)
		status := a.script[min(i, len(a.script)-1)]
		var gate chan struct{}
		if i == a.gateAfter {
			gate = a.gate
		}
		location := a.location
		a.mu.Unlock()
		if gate != nil {
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		if location != "" {
			w.Header().Set("Location", location)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

// attempts returns the Flyball-Attempt of every call so far.
func (a *attemptTarget) attempts() []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]int(nil), a.calls...)
}

// logLines records the messages an executor logs at Warn and above, and
// the repeated count of a line internal/repeatlog writes for its repeats.
type logLines struct {
	mu    *sync.Mutex
	lines *[]logLine
}

type logLine struct {
	msg      string
	repeated int64  // 0 for a line of its own
	err      string // the line's err attribute, if any
}

func newLogLines() logLines { return logLines{mu: &sync.Mutex{}, lines: new([]logLine)} }

func (l logLines) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }

func (l logLines) Handle(_ context.Context, r slog.Record) error {
	line := logLine{msg: r.Message}
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "repeated":
			line.repeated = a.Value.Int64()
		case "err":
			line.err = a.Value.String()
		}
		return true
	})
	l.mu.Lock()
	*l.lines = append(*l.lines, line)
	l.mu.Unlock()
	return nil
}

func (l logLines) WithAttrs([]slog.Attr) slog.Handler { return l }

func (l logLines) WithGroup(string) slog.Handler { return l }

// count is how many logged lines are msg.
func (l logLines) count(msg string) int {
	_, lines := l.account(msg)
	return lines
}

// errs returns the err attribute of every logged line that is msg.
func (l logLines) errs(msg string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, x := range *l.lines {
		if x.msg == msg {
			out = append(out, x.err)
		}
	}
	return out
}

// account is how many events the lines of msg stand for (a line of its
// own is one, a count line its count), and how many lines there are.
func (l logLines) account(msg string) (events, lines int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range *l.lines {
		if x.msg != msg {
			continue
		}
		lines++
		if x.repeated > 0 {
			events += int(x.repeated)
		} else {
			events++
		}
	}
	return events, lines
}

// attemptsFixture is a server with every flyball stream and bucket, an
// executor on its own connection, and task id calling target with
// maxAttempts attempts 100ms apart.
type attemptsFixture struct {
	srv  *natstest.Server
	ex   *Service
	logs logLines
	id   string
}

// newAttemptsFixture starts it. ackWait and maxDeliver, when set, replace
// the DISPATCH consumer's (before the executor reads them).
func newAttemptsFixture(t *testing.T, target *attemptTarget, maxAttempts int, ackWait time.Duration, maxDeliver int) *attemptsFixture {
	t.Helper()
	return newTunedAttemptsFixture(t, target, maxAttempts, ackWait, maxDeliver, nil)
}

// newTunedAttemptsFixture is newAttemptsFixture with tune, when set, as the
// executor's Service.tune (it runs once the buckets are bound).
func newTunedAttemptsFixture(t *testing.T, target *attemptTarget, maxAttempts int, ackWait time.Duration, maxDeliver int, tune func(*Service)) *attemptsFixture {
	t.Helper()
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	if ackWait > 0 {
		c, err := srv.JS.Consumer(ctx, streams.StreamDispatch, streams.ConsumerExecutor)
		if err != nil {
			t.Fatal(err)
		}
		cfg := c.CachedInfo().Config
		cfg.AckWait, cfg.MaxDeliver = ackWait, maxDeliver
		if _, err := srv.JS.UpdateConsumer(ctx, streams.StreamDispatch, cfg); err != nil {
			t.Fatal(err)
		}
	}
	nc, _ := srv.Connect(t)
	return startAttemptsFixture(t, srv, nc, target, maxAttempts, tune)
}

// startAttemptsFixture puts the fixture's task on srv and starts its
// executor on nc, with tune as in newTunedAttemptsFixture.
func startAttemptsFixture(t *testing.T, srv *natstest.Server, nc *nats.Conn, target *attemptTarget, maxAttempts int, tune func(*Service)) *attemptsFixture {
	t.Helper()
	ctx := t.Context()
	f := &attemptsFixture{srv: srv, logs: newLogLines(), id: "flaky"}
	jitter := 0.0
	natstest.PutJSON(t, srv.JS, streams.BucketTasks, f.id, events.TaskSpec{
		ID:       f.id,
		Target:   events.Target{HTTP: &events.HTTPTarget{URL: target.srv.URL, Timeout: events.Duration(5 * time.Second)}},
		Schedule: events.Schedule{Interval: events.Duration(time.Hour)},
		Retry: &events.Retry{
			MaxAttempts: maxAttempts, InitialDelay: events.Duration(100 * time.Millisecond),
			Multiplier: 1, MaxDelay: events.Duration(100 * time.Millisecond), Jitter: &jitter,
		},
	})
	js, err := jsutil.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	f.ex, err = New(Config{JS: js, Guard: Guard{AllowLoopback: true}, Logger: slog.New(f.logs), ShutdownGrace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f.ex.tune = tune
	if err := f.ex.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.ex.Stop)
	// Views still loading take other paths, by design: a hand-back of a
	// task the spec view does not know is marked, and a success the
	// breaker view cannot place repeats as run.recovered. Tests start
	// from loaded views unless they say otherwise.
	natstest.Eventually(t, 10*time.Second, "the executor's spec and breaker views loaded", func() bool {
		return f.ex.specs.Lookup(f.id).Found && Settled(f.ex.breakers.Lookup(f.id))
	})
	return f
}

// dispatch publishes the task's run.due for a slot a moment ago.
// dispatch publishes a dispatch of the fixture's task due a moment ago
// and returns its stream sequence. DISPATCH takes one message per
// subject: wait for the previous one to be acked before the next
// (natstest.AwaitAcked), since its run event is stored before its ack.
func (f *attemptsFixture) dispatch(t *testing.T) uint64 {
	t.Helper()
	slot := time.Now().Add(-time.Millisecond).UTC()
	d := events.Dispatch{DispatchID: events.DispatchID(f.id, slot), TaskID: f.id, ScheduledAt: slot, FiredAt: slot, Source: "test"}
	body, err := events.Marshal(events.TypeRunDue, "test", f.id, d, slot, d.DispatchID)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := f.srv.JS.Publish(t.Context(), events.DispatchSubject(f.id), body)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// storedRun is a run event as stored on RUNS.
type storedRun struct {
	outcome string // the subject's outcome token
	run     events.Run
	id      string // its Nats-Msg-Id
}

func (r storedRun) String() string {
	return fmt.Sprintf("%s(attempt %d, final %v)", r.outcome, r.run.Attempt, r.run.Final)
}

// stored reads the task's run events stored on RUNS, in order.
func (f *attemptsFixture) stored(t *testing.T) []storedRun {
	t.Helper()
	ctx := t.Context()
	st, err := f.srv.JS.Stream(ctx, streams.StreamRuns)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []storedRun
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		raw, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(raw.Subject, "."+f.id) {
			continue
		}
		out = append(out, storedRun{outcome: strings.Split(raw.Subject, ".")[2], run: runOf(t, raw), id: raw.Header.Get(jetstream.MsgIDHeader)})
	}
	return out
}

// changeRuns updates RUNS with change and returns a function that puts
// its configuration back.
func (f *attemptsFixture) changeRuns(t *testing.T, change func(*jetstream.StreamConfig)) (restore func()) {
	t.Helper()
	runs, err := f.srv.JS.Stream(t.Context(), streams.StreamRuns)
	if err != nil {
		t.Fatal(err)
	}
	cfg := runs.CachedInfo().Config
	changed := cfg
	change(&changed)
	if _, err := f.srv.JS.UpdateStream(t.Context(), changed); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if _, err := f.srv.JS.UpdateStream(t.Context(), cfg); err != nil {
			t.Fatal(err)
		}
	}
}

// loseSettles points the executor's settler at another server, where no
// DISPATCH consumer answers: from now on no ack, nak or term reaches the
// real consumer, none is confirmed, and each is given up at its deadline,
// like one sent into a consumer-leader election longer than the AckWait.
// JetStream then redelivers after every AckWait.
func (f *attemptsFixture) loseSettles(t *testing.T, elsewhere *natstest.Server) {
	t.Helper()
	st := f.ex.settles
	st.mu.Lock()
	st.nc, st.try = elsewhere.NC, 100*time.Millisecond
	st.mu.Unlock()
}

// deliveriesExhausted returns a channel closed when JetStream reports
// that the dispatch used up MaxDeliver (the MAX_DELIVERIES advisory): by
// then every delivery was made and the last one's AckWait has passed.
func (f *attemptsFixture) deliveriesExhausted(t *testing.T) <-chan struct{} {
	t.Helper()
	done := make(chan struct{})
	var once sync.Once
	natstest.Subscribe(t, f.srv.NC, "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."+streams.StreamDispatch+"."+streams.ConsumerExecutor, func(*nats.Msg) {
		once.Do(func() { close(done) })
	})
	return done
}

func awaitClosed(t *testing.T, c <-chan struct{}, within time.Duration, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(within):
		t.Fatalf("%s: not within %s", what, within)
	}
}

// TestLostFinalTermDoesNotCallAgain: a final failure whose term is never
// confirmed (every try lost, as in a consumer-leader election longer than
// the AckWait) is redelivered by JetStream until MaxDeliver. Each
// redelivery must only send the term again: the target was called once,
// and RUNS holds its one final run.failed. Before, the term's callback
// purged the attempt record at once, so each redelivery started again at
// attempt 1 and called the target.
func TestLostFinalTermDoesNotCallAgain(t *testing.T) {
	t.Parallel()
	elsewhere := natstest.Start(t)
	target := newAttemptTarget(t, http.StatusNotFound) // permanent: final at attempt 1
	f := newAttemptsFixture(t, target, 3, time.Second, 3)
	exhausted := f.deliveriesExhausted(t)
	f.loseSettles(t, elsewhere)
	f.dispatch(t)
	awaitClosed(t, exhausted, 30*time.Second, "3 deliveries")
	if got := target.attempts(); len(got) != 1 {
		t.Fatalf("target called with attempts %v over 3 deliveries, want one call", got)
	}
	if got := f.stored(t); len(got) != 1 || got[0].outcome != "failed" || !got[0].run.Final || got[0].run.Attempt != 1 {
		t.Fatalf("RUNS holds %v, want one final run.failed of attempt 1", got)
	}
	// Every delivery sent a term (and lost it): the redeliveries were
	// terminated again, not nakked or dropped.
	natstest.Eventually(t, 10*time.Second, "3 terms given up", func() bool {
		return testutil.ToFloat64(f.ex.cfg.Metrics.SettlesUnconfirmed.WithLabelValues("term")) == 3
	})
	if f.logs.count("term not confirmed; the dispatch is redelivered after AckWait") == 0 {
		t.Fatal("no warning for the terms given up")
	}
}

// TestLostAckAfterRetriesDoesNotCallAgain: a run that succeeded at
// attempt 2, whose ack is never confirmed, is redelivered until
// MaxDeliver; each redelivery is only acked again. Before, the ack's
// callback purged the attempt record, so the next redelivery called the
// target again as attempt 1.
func TestLostAckAfterRetriesDoesNotCallAgain(t *testing.T) {
	t.Parallel()
	elsewhere := natstest.Start(t)
	target := newAttemptTarget(t, http.StatusInternalServerError, http.StatusOK)
	f := newAttemptsFixture(t, target, 3, time.Second, 4)
	exhausted := f.deliveriesExhausted(t)
	f.loseSettles(t, elsewhere) // the nak is lost too: attempt 2 comes after the AckWait
	f.dispatch(t)
	awaitClosed(t, exhausted, 30*time.Second, "4 deliveries")
	if got := target.attempts(); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("target called with attempts %v over 4 deliveries, want [1 2]", got)
	}
	got := f.stored(t)
	// The success follows this executor's failure of the key, so it is
	// repeated for the breaker (recovered.go), once.
	if len(got) != 3 || got[0].outcome != "failed" || got[0].run.Attempt != 1 || got[1].outcome != "succeeded" || got[1].run.Attempt != 2 ||
		got[2].outcome != "recovered" || got[2].run.Attempt != 2 {
		t.Fatalf("RUNS holds %v, want failed(attempt 1), succeeded(attempt 2), recovered(attempt 2)", got)
	}
	natstest.Eventually(t, 10*time.Second, "3 acks given up", func() bool {
		return testutil.ToFloat64(f.ex.cfg.Metrics.SettlesUnconfirmed.WithLabelValues("ack")) == 3
	})
	if f.logs.count("ack not confirmed; the dispatch is redelivered after AckWait") == 0 {
		t.Fatal("no warning for the acks given up")
	}
}

// TestUnstoredRunEventDoesNotCountTheAttempt: while RUNS refuses the run
// events (here: a message size limit no event fits), a failed call's
// event is not stored and the dispatch is nakked; the redelivery must
// repeat the same attempt number, since no one can see that call. Once
// RUNS takes events again, attempts 1, 2 and 3 each have their run.failed
// and the third is final. Before, the attempt was recorded before its
// event was handed to the outbox, so the redelivery became attempt 2,
// attempt 1 had no event at all, and maxAttempts came one call early.
func TestUnstoredRunEventDoesNotCountTheAttempt(t *testing.T) {
	t.Parallel()
	target := newAttemptTarget(t, http.StatusInternalServerError)
	target.gate, target.gateAfter = make(chan struct{}), 1 // hold the second call
	f := newAttemptsFixture(t, target, 3, 0, 0)
	restore := f.changeRuns(t, func(c *jetstream.StreamConfig) { c.MaxMsgSize = 16 })
	f.dispatch(t)
	// The second call comes once the first one's event was refused and
	// its dispatch nakked; it waits at the gate while RUNS is restored.
	natstest.Eventually(t, 20*time.Second, "a second call", func() bool { return len(target.attempts()) == 2 })
	restore()
	close(target.gate)
	natstest.Eventually(t, 20*time.Second, "a final run.failed on RUNS", func() bool {
		got := f.stored(t)
		return len(got) > 0 && got[len(got)-1].run.Final
	})
	if got := target.attempts(); fmt.Sprint(got) != "[1 1 2 3]" {
		t.Fatalf("target called with attempts %v, want [1 1 2 3]: the call whose event was refused is repeated as attempt 1", got)
	}
	got := f.stored(t)
	if fmt.Sprint(got) != "[failed(attempt 1, final false) failed(attempt 2, final false) failed(attempt 3, final true)]" {
		t.Fatalf("RUNS holds %v, want run.failed for attempts 1, 2 and 3, the last final", got)
	}
}

// TestLoweredMaxAttemptsEndsThePendingRetry: retry.maxAttempts is
// lowered from 5 to 2 while attempt 2 is running, so attempt 3 is already
// pending (nakked under the old limit) when the new spec arrives. It must
// not be made: the run ends with a final run.failed (permanent, no
// status, so the breaker does not count it) after two calls. Before, the
// pending retry called the target a third time and only then failed for
// good.
func TestLoweredMaxAttemptsEndsThePendingRetry(t *testing.T) {
	t.Parallel()
	target := newAttemptTarget(t, http.StatusInternalServerError)
	target.gate, target.gateAfter = make(chan struct{}), 1 // hold the second call
	f := newAttemptsFixture(t, target, 5, 0, 0)
	f.dispatch(t)
	natstest.Eventually(t, 20*time.Second, "a second call", func() bool { return len(target.attempts()) == 2 })
	spec := f.ex.specs.Lookup(f.id).Value.spec
	lowered := *spec
	retry := *spec.Retry
	retry.MaxAttempts = 2
	lowered.Retry = &retry
	natstest.PutJSON(t, f.srv.JS, streams.BucketTasks, f.id, lowered)
	natstest.Eventually(t, 10*time.Second, "the executor's view of the lowered spec", func() bool {
		r := f.ex.specs.Lookup(f.id)
		return r.Found && r.Err == nil && r.Value.spec.Retry.MaxAttempts == 2
	})
	close(target.gate)
	natstest.Eventually(t, 20*time.Second, "a final run.failed on RUNS", func() bool {
		got := f.stored(t)
		return len(got) > 0 && got[len(got)-1].run.Final
	})
	if got := target.attempts(); fmt.Sprint(got) != "[1 2]" {
		t.Fatalf("target called with attempts %v after maxAttempts was lowered to 2, want [1 2]", got)
	}
	got := f.stored(t)
	last := got[len(got)-1].run
	if fmt.Sprint(got) != "[failed(attempt 1, final false) failed(attempt 2, final false) failed(attempt 2, final true)]" ||
		last.ErrorKind != events.ErrorPermanent || last.Status != 0 || last.Dispatch == nil {
		t.Fatalf("RUNS holds %v (last: %+v), want run.failed for attempts 1 and 2, then a final permanent one without status, with its dispatch", got, last)
	}
}

// TestFinalFailureOfARepeatedAttemptIsStored: attempt 1 fails (503) and
// its run.failed is stored, but its attempt record cannot be written
// (here flyball-attempts refuses every value; a crash between the event
// and the record, or an outbox give-up whose event was in fact stored,
// does the same). The redelivery repeats attempt 1, as documented, and
// this time the target answers 404: a permanent failure, final. Its event
// must be stored next to the first one, and only then the dispatch
// terminated. Before, both had the Nats-Msg-Id <dispatch>:1:failed, RUNS
// dropped the final one as a duplicate within its window, the outbox took
// the duplicate ack for "stored" and the dispatch was terminated with no
// final outcome on RUNS: nothing dead-lettered, and the governor waited
// for a retry that never came.
func TestFinalFailureOfARepeatedAttemptIsStored(t *testing.T) {
	t.Parallel()
	target := newAttemptTarget(t, http.StatusServiceUnavailable, http.StatusNotFound)
	f := newAttemptsFixture(t, target, 3, 0, 0)
	kv, err := f.srv.JS.Stream(t.Context(), "KV_"+streams.BucketAttempts)
	if err != nil {
		t.Fatal(err)
	}
	cfg := kv.CachedInfo().Config
	cfg.MaxMsgSize = 16 // no attempt record fits
	if _, err := f.srv.JS.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	f.dispatch(t)
	// The dispatch leaves DISPATCH with its term, which is sent only once
	// the final event's publish was acknowledged.
	natstest.Eventually(t, 20*time.Second, "the dispatch terminated", func() bool {
		if len(target.attempts()) < 2 {
			return false
		}
		st, err := f.srv.JS.Stream(t.Context(), streams.StreamDispatch)
		if err != nil {
			return false
		}
		info, err := st.Info(t.Context())
		return err == nil && info.State.Msgs == 0
	})
	if got := target.attempts(); fmt.Sprint(got) != "[1 1]" {
		t.Fatalf("target called with attempts %v, want [1 1]: the attempt whose record was not written is repeated", got)
	}
	got := f.stored(t)
	if fmt.Sprint(got) != "[failed(attempt 1, final false) failed(attempt 1, final true)]" {
		t.Fatalf("RUNS holds %v, want the first call's run.failed, then the repeat's final one", got)
	}
	if last := got[1].run; last.Status != http.StatusNotFound || last.ErrorKind != events.ErrorPermanent || last.Dispatch == nil {
		t.Fatalf("final run.failed = %+v, want the 404, permanent, with its dispatch", last)
	}
}

// TestRedispatchedSlotContinuesItsAttemptCount: a run failed twice and
// was waiting for its third and last attempt when its dispatch left
// DISPATCH (lost with the stream's data, say). The sweeper dispatches the
// slot again as a zombie, with the same dispatch ID: a new message, so
// its first delivery. flyball-attempts still counts the two calls made.
// The slot must go on from attempt 3, not start over at 1: before, the
// first delivery never read the record, the target was called as
// attempt 1 again (its Idempotency-Key and Flyball-Attempt repeating
// calls already made), the record was overwritten, and the run got
// maxAttempts more calls on top of those it had used.
//
// Subtest "timer-behind": the slot published again by a timer whose clock
// runs behind the server's, fired a second after the slot by that clock
// but stored ten minutes after it. Lateness is judged by DISPATCH's
// stamp too: before, the firedAt alone made it a first call, attempt 1.
func TestRedispatchedSlotContinuesItsAttemptCount(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		late func(slot time.Time) time.Time // firedAt
	}{
		{"zombie", func(time.Time) time.Time { return time.Now().UTC() }},
		{"timer-behind", func(slot time.Time) time.Time { return slot.Add(time.Second) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			redispatchContinuesAttemptCount(t, c.late)
		})
	}
}

func redispatchContinuesAttemptCount(t *testing.T, firedAt func(slot time.Time) time.Time) {
	target := newAttemptTarget(t, http.StatusServiceUnavailable)
	f := newAttemptsFixture(t, target, 3, 0, 0)
	slot := time.Now().Add(-10 * time.Minute).UTC().Truncate(time.Millisecond)
	d := events.Dispatch{DispatchID: events.DispatchID(f.id, slot), TaskID: f.id, ScheduledAt: slot, FiredAt: firedAt(slot), Source: "test", Reason: "zombie"}
	natstest.PutJSON(t, f.srv.JS, streams.BucketAttempts, attemptKey(&d), attemptRecord{Attempts: 2, UpdatedAt: slot.Add(time.Minute)})
	body, err := events.Marshal(events.TypeRunDue, "test", f.id, d, d.FiredAt, d.DispatchID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.srv.JS.Publish(t.Context(), events.DispatchSubject(f.id), body); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 20*time.Second, "a final run.failed on RUNS", func() bool {
		got := f.stored(t)
		return len(got) > 0 && got[len(got)-1].run.Final
	})
	if got := target.attempts(); fmt.Sprint(got) != "[3]" {
		t.Fatalf("target called with attempts %v for a slot dispatched again after 2 of its 3 attempts, want [3]", got)
	}
	if got := f.stored(t); fmt.Sprint(got) != "[failed(attempt 3, final true)]" {
		t.Fatalf("RUNS holds %v, want one final run.failed of attempt 3", got)
	}
}

// TestRedispatchedRetryRunsUnderCatchUpNone: a task with catchUp "none"
// fails attempt 1, and its dispatch, nakked for the retry, is lost; the
// sweeper re-dispatches the slot long after it and its next slot passed
// (a zombie, with the slot's cadence source). flyball-attempts shows an
// attempt made: this is the slot's retry, which runs under "none"
// (docs/governor.md), not a missed slot. It must go on from attempt 2 to
// its final run.failed (and dead letter): before, it was skipped as
// "missed: the slot of … and the next one … passed", and the run ended
// with no final failure and no dead letter.
func TestRedispatchedRetryRunsUnderCatchUpNone(t *testing.T) {
	t.Parallel()
	target := newAttemptTarget(t, http.StatusServiceUnavailable)
	f := newAttemptsFixture(t, target, 3, 0, 0)
	jitter := 0.0
	natstest.PutJSON(t, f.srv.JS, streams.BucketTasks, f.id, events.TaskSpec{
		ID:       f.id,
		Target:   events.Target{HTTP: &events.HTTPTarget{URL: target.srv.URL, Timeout: events.Duration(5 * time.Second)}},
		Schedule: events.Schedule{Interval: events.Duration(time.Minute)},
		CatchUp:  events.CatchUpNone,
		Retry: &events.Retry{
			MaxAttempts: 3, InitialDelay: events.Duration(100 * time.Millisecond),
			Multiplier: 1, MaxDelay: events.Duration(100 * time.Millisecond), Jitter: &jitter,
		},
	})
	natstest.Eventually(t, 10*time.Second, "the executor's view holds catchUp none", func() bool {
		r := f.ex.specs.Lookup(f.id)
		return r.Found && r.Value.spec.CatchUp == events.CatchUpNone
	})
	slot := time.Now().Add(-10 * time.Minute).UTC().Truncate(time.Millisecond)
	d := events.Dispatch{
		DispatchID: events.DispatchID(f.id, slot), TaskID: f.id, ScheduledAt: slot, FiredAt: time.Now().UTC(),
		Source: string(governor.SourceBaselineInterval), Reason: "zombie",
	}
	natstest.PutJSON(t, f.srv.JS, streams.BucketAttempts, attemptKey(&d), attemptRecord{Attempts: 1, UpdatedAt: slot.Add(time.Second)})
	body, err := events.Marshal(events.TypeRunDue, "test", f.id, d, d.FiredAt, d.DispatchID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.srv.JS.Publish(t.Context(), events.DispatchSubject(f.id), body); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 20*time.Second, "a final run.failed or a run.skipped on RUNS", func() bool {
		got := f.stored(t)
		return len(got) > 0 && (got[len(got)-1].run.Final || got[len(got)-1].outcome == "skipped")
	})
	if got := f.stored(t); fmt.Sprint(got) != "[failed(attempt 2, final false) failed(attempt 3, final true)]" {
		t.Fatalf("RUNS holds %v for a slot re-dispatched while its retry was pending, want attempts 2 and 3, the last final", got)
	}
	if got := target.attempts(); fmt.Sprint(got) != "[2 3]" {
		t.Fatalf("target called with attempts %v, want [2 3]", got)
	}
}
