package timer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/kvcache"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

const within = 30 * time.Second

// startTimer starts a timer on js after tune has adjusted it, and waits
// until it has loaded the schedules bucket.
func startTimer(t *testing.T, js jetstream.JetStream, tune func(*Service)) *Service {
	t.Helper()
	s, err := New(Config{JS: js, Instance: "test", Metrics: metrics.New(), RetryDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if tune != nil {
		tune(s)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	select {
	case <-s.Ready():
	case <-time.After(within):
		t.Fatal("timer not ready")
	}
	return s
}

// putSchedule stores the schedule of id the way the governor does.
func putSchedule(t *testing.T, js jetstream.JetStream, id string, at time.Time, source gov.Source) {
	t.Helper()
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, streams.BucketSchedules)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(gov.State{TaskID: id, NextRunAt: at, Source: source, Trail: []string{"rule: " + string(source)}, DecidedAt: at})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, id, b); err != nil {
		t.Fatal(err)
	}
}

// results reads flyball_dispatch_total by result.
func results(s *Service) map[string]int {
	m := map[string]int{}
	for _, l := range []string{resultNew, resultDuplicate, resultPending, resultInProcess, resultError} {
		m[l] = int(counterValue(s.cfg.Metrics.DispatchTotal, l))
	}
	return m
}

func queued(s *Service) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// storedDispatch reads the run.due pending for id on DISPATCH.
func storedDispatch(t *testing.T, js jetstream.JetStream, id string) (msgID string, d events.Dispatch) {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, events.DispatchSubject(id))
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	e, err := events.Decode(m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if err := events.DecodeData(e, &d); err != nil {
		t.Fatal(err)
	}
	return m.Header.Get(jetstream.MsgIDHeader), d
}

// TestDispatchBatches loads more due schedules than fit in one batch and
// checks every one is stored once, with its dedup ID and slot.
func TestDispatchBatches(t *testing.T) {
	const n = 1000
	srv := natstest.StartWithStreams(t)
	at := time.Now().Add(-time.Minute).Truncate(time.Millisecond).UTC()
	sources := gov.AllSources()
	for i := range n {
		putSchedule(t, srv.JS, fmt.Sprintf("task-%04d", i), at.Add(time.Duration(i)*time.Millisecond), sources[i%len(sources)])
	}
	s := startTimer(t, srv.JS, func(s *Service) { s.batch = 64 })
	s.mu.Lock()
	presized := cap(s.queue)
	s.mu.Unlock()
	if presized < n {
		t.Errorf("heap capacity %d after loading %d schedules: not pre-sized", presized, n)
	}
	natstest.Eventually(t, within, "every dispatch acknowledged", func() bool { return results(s)[resultNew] >= n })
	if got := results(s); got[resultNew] != n || got[resultDuplicate]+got[resultPending]+got[resultError] != 0 {
		t.Fatalf("results %v, want %d new and nothing else", got, n)
	}
	if q := queued(s); q != 0 {
		t.Fatalf("%d items still queued", q)
	}
	info, err := srv.JS.Stream(context.Background(), streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	if msgs := info.CachedInfo().State.Msgs; msgs != n {
		t.Fatalf("DISPATCH holds %d messages, want %d", msgs, n)
	}
	for i := 0; i < n; i += 97 {
		id := fmt.Sprintf("task-%04d", i)
		slot := at.Add(time.Duration(i) * time.Millisecond)
		msgID, d := storedDispatch(t, srv.JS, id)
		if msgID != events.DispatchID(id, slot) || d.DispatchID != msgID || d.TaskID != id || !d.ScheduledAt.Equal(slot) || d.Source != string(sources[i%len(sources)]) {
			t.Fatalf("%s: Nats-Msg-Id %q, data %+v; want slot %v", id, msgID, d, slot)
		}
	}
}

// TestDispatchDuplicateAndPending: a dispatch JetStream already holds
// (same Nats-Msg-Id) counts as dispatched. A slot refused with 10077
// because an earlier slot is still pending is kept and retried until the
// subject frees up: the earlier run may have finished with its ack still on
// the way, and dropping the new slot would end the task's chain of runs.
func TestDispatchDuplicateAndPending(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := context.Background()
	at := time.Now().Add(-time.Second).Truncate(time.Millisecond).UTC()
	// "dup" was dispatched by another replica; "busy" still has an older
	// run pending.
	if _, err := jsutil.Publish(ctx, srv.JS, events.DispatchSubject("dup"), events.DispatchID("dup", at), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	older := events.DispatchID("busy", at.Add(-time.Minute))
	busy, err := jsutil.Publish(ctx, srv.JS, events.DispatchSubject("busy"), older, []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"dup", "busy", "fresh"} {
		putSchedule(t, srv.JS, id, at, gov.SourceBaselineInterval)
	}
	s := startTimer(t, srv.JS, nil)
	natstest.Eventually(t, within, "busy refused twice and waiting for a retry", func() bool {
		r := results(s)
		s.mu.Lock()
		defer s.mu.Unlock()
		return r[resultNew] >= 1 && r[resultDuplicate] >= 1 && s.items["busy"].waits >= 2 && s.items["busy"].index >= 0
	})
	if got := results(s); got[resultNew] != 1 || got[resultDuplicate] != 1 || got[resultPending] < 2 || got[resultError] != 0 {
		t.Fatalf("results %v, want one new, one duplicate, busy pending and no errors", got)
	}
	if msgID, _ := storedDispatchRaw(t, srv.JS, "busy"); msgID != older {
		t.Fatalf("busy: pending run %q replaced, want %q kept", msgID, older)
	}
	// The older run is acked: the retry stores the new slot.
	st, err := srv.JS.Stream(ctx, streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(ctx, busy.Sequence); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, within, "busy's slot stored once the older run is gone", func() bool {
		m, err := st.GetLastMsgForSubject(ctx, events.DispatchSubject("busy"))
		return err == nil && m.Header.Get(jetstream.MsgIDHeader) == events.DispatchID("busy", at)
	})
	// The timer counts the slot once its publish ack is back, which can be
	// an instant after the stored message is readable.
	natstest.Eventually(t, within, "busy's slot counted as new", func() bool { return results(s)[resultNew] >= 2 })
	if got := results(s); got[resultNew] != 2 || got[resultError] != 0 {
		t.Fatalf("results %v, want busy's slot stored as new", got)
	}
}

// TestPendingSlotTellsTheSameSlotFromAnEarlierOne: a 10077 caused by the
// slot itself (published again after the duplicate window, by a timer that
// restarted during a long run) must not be retried, or the slot would run
// twice.
func TestPendingSlotTellsTheSameSlotFromAnEarlierOne(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := context.Background()
	at := time.Now().Truncate(time.Millisecond).UTC()
	if _, err := jsutil.Publish(ctx, srv.JS, events.DispatchSubject("a"), events.DispatchID("a", at), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	s := startTimer(t, srv.JS, nil)
	for _, c := range []struct {
		id   string
		at   time.Time
		want bool
	}{
		{"a", at, true},                   // DISPATCH holds this slot
		{"a", at.Add(time.Second), false}, // an earlier slot is pending
		{"b", at, false},                  // nothing pending: publish now
	} {
		got, err := s.pendingSlot(c.id, c.at.UnixNano())
		if err != nil || got != c.want {
			t.Errorf("pendingSlot(%s, %v) = %v, %v; want %v", c.id, c.at, got, err, c.want)
		}
	}
}

func storedDispatchRaw(t *testing.T, js jetstream.JetStream, id string) (string, []byte) {
	t.Helper()
	st, err := js.Stream(context.Background(), streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(context.Background(), events.DispatchSubject(id))
	if err != nil {
		t.Fatal(err)
	}
	return m.Header.Get(jetstream.MsgIDHeader), m.Data
}

// TestDispatchRetriesUntilStored: a dispatch the server refuses is counted
// as an error and re-published, with the same dedup ID, until it is
// stored.
func TestDispatchRetriesUntilStored(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := context.Background()
	st, err := srv.JS.Stream(ctx, streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	refusing := cfg
	refusing.MaxMsgSize = 16 // every run.due is larger
	if _, err := srv.JS.UpdateStream(ctx, refusing); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Second).Truncate(time.Millisecond).UTC()
	putSchedule(t, srv.JS, "task", at, gov.SourceBaselineInterval)
	written := time.Now() // the slot was written (its plan, past) by now
	s := startTimer(t, srv.JS, nil)
	natstest.Eventually(t, within, "refused twice (so retried)", func() bool { return results(s)[resultError] >= 2 })
	if results(s)[resultNew] != 0 {
		t.Fatal("stored despite the size limit")
	}
	if n, _ := lateness(t, s); n != 0 {
		t.Fatalf("lateness observed %d times before anything was stored, want 0", n)
	}
	accepted := time.Now()
	if _, err := srv.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, within, "stored once the server accepts it", func() bool { return results(s)[resultNew] == 1 })
	// One observation, for the try that was stored, and it shows the
	// refusals: at least from the slot's write (after its plan) to when
	// the server accepted.
	if n, sum := lateness(t, s); n != 1 || sum < accepted.Sub(written) {
		t.Fatalf("lateness: %d observations summing to %v; want 1 of at least %v", n, sum, accepted.Sub(written))
	}
	msgID, d := storedDispatch(t, srv.JS, "task")
	if msgID != events.DispatchID("task", at) || !d.ScheduledAt.Equal(at) {
		t.Fatalf("stored Nats-Msg-Id %q scheduledAt %v, want the original slot %v", msgID, d.ScheduledAt, at)
	}
	if q := queued(s); q != 0 {
		t.Fatalf("%d items still queued after success", q)
	}
}

// TestDispatchLostAckRetries: when no ack ever comes (here: the stream is
// gone and a plain subscriber swallows the publish), the batch stops
// waiting after the ack timeout and the run is published again.
func TestDispatchLostAckRetries(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := context.Background()
	// Deleted once the timer runs: it binds DISPATCH to start.
	_, js := srv.Connect(t)
	s := startTimer(t, js, func(s *Service) { s.ackTimeout = 50 * time.Millisecond })
	if err := srv.JS.DeleteStream(ctx, streams.StreamDispatch); err != nil {
		t.Fatal(err)
	}
	var swallowed atomic.Int64
	sub, err := srv.NC.Subscribe("flyball.dispatch.>", func(*nats.Msg) { swallowed.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Second).Truncate(time.Millisecond).UTC()
	putSchedule(t, srv.JS, "task", at, gov.SourceBaselineInterval)
	natstest.Eventually(t, within, "published again after a lost ack", func() bool {
		return swallowed.Load() >= 2 && results(s)[resultError] >= 1
	})
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if err := streams.Ensure(ctx, srv.JS); err != nil {
		t.Fatal(err)
	}
	// An abandoned publish that nats.go itself retried after "no
	// responders" may store the run first; ours is then a duplicate.
	natstest.Eventually(t, within, "stored once acks come back", func() bool {
		r := results(s)
		return r[resultNew]+r[resultDuplicate] >= 1
	})
	if msgID, _ := storedDispatch(t, srv.JS, "task"); msgID != events.DispatchID("task", at) {
		t.Fatalf("stored Nats-Msg-Id %q, want %q", msgID, events.DispatchID("task", at))
	}
}

// TestDispatchPublishErrorRequeues: a publish that cannot even be sent
// (the connection is closed) is counted and re-queued, never dropped.
func TestDispatchPublishErrorRequeues(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	nc, js := srv.Connect(t)
	s := startTimer(t, js, nil)
	nc.Close()
	at := time.Now().Add(-time.Second).Truncate(time.Millisecond).UnixNano()
	s.upsert("task", at, "baseline-interval", 0, 0)
	natstest.Eventually(t, within, "failed and retried", func() bool { return results(s)[resultError] >= 3 })
	s.mu.Lock()
	defer s.mu.Unlock()
	it := s.items["task"]
	if it == nil || it.due != at {
		t.Fatalf("item %+v, want it held with its slot %d", it, at)
	}
}

// TestRetryLater covers the re-queue rules without a server round trip.
func TestRetryLater(t *testing.T) {
	srv := natstest.Start(t)
	s, err := New(Config{JS: srv.JS, RetryDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t1 := time.Now().Add(-time.Minute).UnixNano()
	t2 := t1 + int64(time.Second)
	take := func() dueRun {
		t.Helper()
		runs, _ := s.takeDue()
		if len(runs) != 1 {
			t.Fatalf("took %d runs, want 1", len(runs))
		}
		return runs[0]
	}

	s.upsert("a", t1, "x", 0, 0)
	r := take()
	s.retryLater(r.it, r.at, 0)
	if it := s.items["a"]; it.index != 0 || it.due != t1 || it.at < time.Now().Add(time.Hour-time.Minute).UnixNano() || it.fired != noSlot {
		t.Fatalf("retry: %+v, want slot %d re-queued a RetryDelay out", it, t1)
	}

	s.upsert("a", t1, "x", 0, 0) // the schedule still says t1: due again now
	r = take()
	s.upsert("a", t2, "x", 0, 0) // the governor moved on meanwhile
	s.retryLater(r.it, r.at, 0)
	if it := s.items["a"]; len(s.queue) != 1 || it.due != t2 {
		t.Fatalf("after a newer schedule: queue %d, item %+v; want only the newer slot", len(s.queue), it)
	}

	r = take()
	s.upsert("a", t2, "x", 0, 0) // a re-put of the dispatched slot is not a new run
	if len(s.queue) != 0 {
		t.Fatal("a re-put of the dispatched slot was queued again")
	}
	s.remove("a")
	s.retryLater(r.it, r.at, 0)
	if len(s.queue) != 0 || len(s.items) != 0 {
		t.Fatal("a deleted task was re-queued")
	}
}

func TestClassify(t *testing.T) {
	apiErr := func(code jetstream.ErrorCode, description string) error {
		return fmt.Errorf("wrapped: %w", &jetstream.APIError{Code: 400, ErrorCode: code, Description: description})
	}
	for _, c := range []struct {
		ack  *jetstream.PubAck
		err  error
		want string
	}{
		{&jetstream.PubAck{Stream: "DISPATCH", Sequence: 1}, nil, resultNew},
		{&jetstream.PubAck{Stream: "DISPATCH", Sequence: 1, Duplicate: true}, nil, resultDuplicate},
		{nil, apiErr(10158, "duplicate message id is in process"), resultInProcess},
		{nil, apiErr(10077, "maximum messages per subject exceeded"), resultPending},
		{nil, apiErr(10077, "maximum messages exceeded"), resultError},
		{nil, apiErr(10077, "maximum bytes exceeded"), resultError},
		{nil, apiErr(10054, "x"), resultError},
		{nil, nats.ErrDisconnected, resultError},
		{nil, jsutil.ErrAckTimeout, resultError},
		{nil, errors.New("boom"), resultError},
	} {
		if got := classify(c.ack, c.err); got != c.want {
			t.Errorf("classify(%+v, %v) = %s, want %s", c.ack, c.err, got, c.want)
		}
	}
}

// TestNewRefusesALeadPastMaxLead: the governor keeps a slot due within
// governor.InFlightWindow when a breaker or spec change arrives, because
// the timer may have dispatched it; a lead past half of that would leave
// no margin for the governor's own delay.
func TestNewRefusesALeadPastMaxLead(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	if _, err := New(Config{JS: srv.JS, Lead: gov.MaxLead}); err != nil {
		t.Fatalf("lead of exactly the window: %v", err)
	}
	_, err := New(Config{JS: srv.JS, Lead: gov.MaxLead + time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "Config.Lead") {
		t.Fatalf("lead past the window: err %v, want one naming Config.Lead", err)
	}
}

// TestLeadFollowsTheTimeSinceThePreviousSlot covers each slot's lead: a
// quarter of the time since the task's previous dispatched slot, at most
// Config.Lead, and at most FirstLead with no previous slot.
func TestLeadFollowsTheTimeSinceThePreviousSlot(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	const ms = int64(time.Millisecond)
	for _, c := range []struct {
		name      string
		lead      time.Duration // Config.Lead
		gap       time.Duration // since the previous slot; 0 for none
		wantAhead time.Duration
	}{
		{"first slot", 0, 0, FirstLead},
		{"1s task", 0, time.Second, 250 * time.Millisecond},
		{"2s task", 0, 2 * time.Second, 500 * time.Millisecond},
		{"10s task", 0, 10 * time.Second, time.Second},
		{"tightened to 400ms", 0, 400 * time.Millisecond, 100 * time.Millisecond},
		{"Lead caps a 10s task", 300 * time.Millisecond, 10 * time.Second, 300 * time.Millisecond},
		{"Lead below FirstLead", 100 * time.Millisecond, 0, 100 * time.Millisecond},
		{"no lead", -1, 10 * time.Second, 0},
	} {
		s, err := New(Config{JS: srv.JS, Lead: c.lead, RetryDelay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		prev := time.Now().Add(-time.Minute).UnixNano()
		if c.gap > 0 {
			s.upsert("a", prev, "x", 0, 0)
			if runs, _ := s.takeDue(); len(runs) != 1 {
				t.Fatalf("%s: took %d runs, want the previous slot", c.name, len(runs))
			}
		}
		at := prev + int64(c.gap) // with no previous slot, any slot
		s.upsert("a", at, "x", 0, 0)
		it := s.items["a"]
		if got := time.Duration(it.due - it.at); it.due != at || got != c.wantAhead {
			t.Errorf("%s: slot %d planned %v ahead (due %d), want %v", c.name, at/ms, got, it.due/ms, c.wantAhead)
		}
	}
}

// TestDispatchIsPublishedItsLeadEarly: on a real server, a slot 4s after
// the task's previous one is published its 1s lead early, not FirstLead,
// and never before that.
func TestDispatchIsPublishedItsLeadEarly(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	s := startTimer(t, srv.JS, nil)
	ctx := context.Background()
	prev := time.Now().Add(-2500 * time.Millisecond).Truncate(time.Millisecond).UTC()
	putSchedule(t, srv.JS, "task", prev, gov.SourceBaselineInterval)
	natstest.Eventually(t, within, "previous slot stored", func() bool { return results(s)[resultNew] == 1 })
	st, err := srv.JS.Stream(ctx, streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(ctx); err != nil { // its run is over
		t.Fatal(err)
	}
	slot := prev.Add(4 * time.Second)
	putSchedule(t, srv.JS, "task", slot, gov.SourceBaselineInterval)
	natstest.Eventually(t, within, "next slot stored", func() bool { return results(s)[resultNew] == 2 })
	_, d := storedDispatch(t, srv.JS, "task")
	ahead := slot.Sub(d.FiredAt)
	if !d.ScheduledAt.Equal(slot) || ahead > time.Second || ahead < 2*FirstLead {
		t.Fatalf("slot %v published at %v, %v ahead; want between %v and 1s ahead", d.ScheduledAt, d.FiredAt, ahead, 2*FirstLead)
	}
}

// TestRetriedDispatchLatenessCountsFromItsSlot: a retried dispatch is
// planned against its slot, not against the retry, so the time a NATS
// outage costs shows in flyball_dispatch_lateness_seconds.
func TestRetriedDispatchLatenessCountsFromItsSlot(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	s, err := New(Config{JS: srv.JS, RetryDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	slot := time.Now().Add(-time.Minute).UnixNano()
	want := slot - int64(FirstLead)
	s.upsert("a", slot, "x", 0, 0)
	runs, _ := s.takeDue()
	if len(runs) != 1 || runs[0].planned != want {
		t.Fatalf("first try: %+v, want one run planned at %d", runs, want)
	}
	s.retryLater(runs[0].it, runs[0].at, 0)
	natstest.Eventually(t, within, "the retry due", func() bool {
		runs, _ = s.takeDue()
		return len(runs) == 1
	})
	if got := runs[0].planned; got != want {
		t.Fatalf("retry planned at %d (%v after the slot's plan), want %d", got, time.Duration(got-want), want)
	}
	// The next slot's plan is its own lead before it again.
	s.upsert("a", slot+int64(10*time.Second), "x", 0, 0)
	if runs, _ = s.takeDue(); len(runs) != 1 || runs[0].planned != slot+int64(9*time.Second) {
		t.Fatalf("next slot: %+v, want one run planned 1s before it", runs)
	}
}

// lateness reads flyball_dispatch_lateness_seconds: its sample count and
// sum.
func lateness(t *testing.T, s *Service) (uint64, time.Duration) {
	t.Helper()
	var m dto.Metric
	if err := s.cfg.Metrics.DispatchLateness.Write(&m); err != nil {
		t.Fatal(err)
	}
	h := m.GetHistogram()
	return h.GetSampleCount(), time.Duration(h.GetSampleSum() * float64(time.Second))
}

// TestTimerWatchesAgainWhenTheWatchEnds ends the timer's watch of
// flyball-schedules the way nats.go does when it cannot re-create the
// watch's consumer, and changes the bucket while no watch is up: the slot
// written meanwhile is dispatched, the task purged meanwhile is forgotten
// instead of firing for a schedule that no longer exists, and a slot
// dispatched before the watch ended is not dispatched again by the replay.
func TestTimerWatchesAgainWhenTheWatchEnds(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	ctx := context.Background()
	kv, err := srv.JS.KeyValue(ctx, streams.BucketSchedules)
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour).Truncate(time.Millisecond).UTC()
	putSchedule(t, srv.JS, "gone", later, gov.SourceBaselineInterval)
	putSchedule(t, srv.JS, "kept", later, gov.SourceBaselineInterval)
	watchers := make(chan jetstream.KeyWatcher, 4)
	replays := make(chan struct{}, 4)
	slot := time.Now().Add(1500 * time.Millisecond).Truncate(time.Millisecond).UTC()
	s := startTimer(t, srv.JS, func(s *Service) {
		s.tuneFollow = func(f *kvcache.Follower) {
			f.Watching = func(w jetstream.KeyWatcher) { watchers <- w }
			loaded := f.Loaded
			f.Loaded = func() { loaded(); replays <- struct{}{} }
			f.Ended = func(error) {
				// Deleted, then its marker removed: gone without a trace,
				// as the sweeper's delete and compaction leave it (no
				// flyball bucket allows the roll-up a KV purge sends).
				if err := kv.Delete(ctx, "gone"); err != nil {
					t.Error(err)
				}
				if err := kv.PurgeDeletes(ctx, jetstream.DeleteMarkersOlderThan(-1)); err != nil {
					t.Error(err)
				}
				putSchedule(t, srv.JS, "fresh", slot, gov.SourceBaselineInterval)
			}
		}
	})
	<-replays // the first load
	if n := queued(s); n != 2 {
		t.Fatalf("%d slots queued after the load, want 2", n)
	}
	done := time.Now().Add(300 * time.Millisecond).Truncate(time.Millisecond).UTC()
	putSchedule(t, srv.JS, "done", done, gov.SourceBaselineInterval)
	natstest.Eventually(t, within, "a slot dispatched before the watch ends", func() bool { return results(s)[resultNew] == 1 })
	natstest.EndWatch(t, watchers, replays)
	natstest.Eventually(t, within, "the slot written while the watch was down is dispatched", func() bool {
		return results(s)[resultNew] == 2
	})
	if r := results(s); r[resultDuplicate] != 0 || r[resultPending] != 0 {
		t.Fatalf("results %v: the replay dispatched the slot dispatched before it again", r)
	}
	if _, d := storedDispatch(t, srv.JS, "fresh"); !d.ScheduledAt.Equal(slot) {
		t.Fatalf("dispatched slot %v, want %v", d.ScheduledAt, slot)
	}
	s.mu.Lock()
	_, gone := s.items["gone"]
	_, kept := s.items["kept"]
	s.mu.Unlock()
	if gone || !kept {
		t.Fatalf("after the replay: purged task still scheduled %v, kept task scheduled %v", gone, kept)
	}
}

// TestSlotsUnixNanosecondsCannotHoldAreNotQueued: a nextRunAt after
// 2262-04-11 (a startAt or a timed pause's end: the governor accepts years
// up to 9999) wrapped in Unix nanoseconds to the distant past. Queued
// wrapped, it was dispatched at once with a garbage slot (2500, 9999), or
// sat at the top of the heap and made the timer sleep for centuries, so no
// other task was dispatched (2262, 2300). It is left out of the heap, on
// load and when a queued task is rewritten to it.
func TestSlotsUnixNanosecondsCannotHoldAreNotQueued(t *testing.T) {
	for _, far := range []time.Time{
		time.Date(2262, 4, 12, 0, 0, 0, 0, time.UTC),
		time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2500, 1, 1, 0, 0, 0, 0, time.UTC),
		events.MaxTime,
	} {
		t.Run(far.Format("2006"), func(t *testing.T) {
			srv := natstest.StartWithStreams(t)
			putSchedule(t, srv.JS, "loaded", far, gov.SourceStartAt)
			putSchedule(t, srv.JS, "paused", time.Now().Add(time.Hour), gov.SourceBaselineInterval)
			s := startTimer(t, srv.JS, nil)
			putSchedule(t, srv.JS, "paused", far, gov.SourcePaused)
			// Written last: the watch applies the far slots before it.
			soon := time.Now().Add(-time.Second).Truncate(time.Millisecond).UTC()
			putSchedule(t, srv.JS, "soon", soon, gov.SourceBaselineInterval)
			natstest.Eventually(t, within, "soon dispatched", func() bool {
				return results(s)[resultNew] >= 1 && hasDispatch(t, srv.JS, "soon")
			})
			if r := results(s); r[resultNew] != 1 || r[resultDuplicate]+r[resultPending]+r[resultError] != 0 {
				t.Errorf("results %v, want soon alone dispatched", r)
			}
			for _, id := range []string{"loaded", "paused"} {
				if hasDispatch(t, srv.JS, id) {
					id, d := storedDispatch(t, srv.JS, id)
					t.Errorf("dispatched %s, scheduledAt %s; its slot is %s", id, d.ScheduledAt, far)
				}
			}
			if _, d := storedDispatch(t, srv.JS, "soon"); !d.ScheduledAt.Equal(soon) {
				t.Errorf("soon dispatched for %s, want %s", d.ScheduledAt, soon)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if len(s.queue) != 0 || s.items["loaded"] != nil || s.items["paused"] != nil {
				t.Errorf("%d queued, loaded %+v, paused %+v: want the far slots held nowhere", len(s.queue), s.items["loaded"], s.items["paused"])
			}
		})
	}
}

// hasDispatch reports whether DISPATCH holds a run.due of task id.
func hasDispatch(t *testing.T, js jetstream.JetStream, id string) bool {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.GetLastMsgForSubject(ctx, events.DispatchSubject(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// TestApplyQueuesOnlySlotsUnixNanosecondsHold checks the edges: the last
// instant Unix nanoseconds hold is queued with its lead, the next one and
// anything before 1678 (never written by the governor: it cannot be named
// in a dispatch) is not, and a queued task rewritten to either leaves the
// heap.
func TestApplyQueuesOnlySlotsUnixNanosecondsHold(t *testing.T) {
	srv := natstest.Start(t)
	s, err := New(Config{JS: srv.JS})
	if err != nil {
		t.Fatal(err)
	}
	put := func(id string, at time.Time) {
		t.Helper()
		b, err := json.Marshal(gov.State{TaskID: id, NextRunAt: at, Source: gov.SourceStartAt})
		if err != nil {
			t.Fatal(err)
		}
		s.apply(putEntry(id, b))
	}
	last := time.Unix(0, math.MaxInt64).UTC()
	first := time.Unix(0, minSlot).UTC()
	for _, c := range []struct {
		at     time.Time
		queued bool
	}{
		{last, true},
		{last.Add(time.Nanosecond), false},
		{time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC), false},
		{first, true},
		{first.Add(-time.Nanosecond), false},
		{time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC), false},
		{time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC), false},
	} {
		put("task", time.Now().Add(time.Hour))
		put("task", c.at)
		it := s.items["task"]
		if !c.queued {
			if it != nil || len(s.queue) != 0 {
				t.Errorf("nextRunAt %s: item %+v, %d queued; want it not held", c.at, it, len(s.queue))
			}
			continue
		}
		if it == nil || it.index != 0 || len(s.queue) != 1 || it.due != c.at.UnixNano() || it.at != it.due-int64(FirstLead) {
			t.Errorf("nextRunAt %s: item %+v, %d queued; want it queued at its slot less %s", c.at, it, len(s.queue), FirstLead)
		}
	}
	put("task", last)
	if runs, wait := s.takeDue(); runs != nil || wait != maxWait {
		t.Errorf("the last slot: took %d runs, wait %s; want none, and the longest wait (%s)", len(runs), wait, maxWait)
	}
}

// TestWaitUntilSaturates: the dispatch loop's wait never wraps, and never
// exceeds maxWait, so a wall clock stepped forward (an NTP step, a resumed
// VM) delays the next slot by at most maxWait, not by the step.
func TestWaitUntilSaturates(t *testing.T) {
	if got := waitUntil(math.MaxInt64, -1); got != maxWait {
		t.Errorf("waitUntil past a Duration's range: %s, want %s", got, maxWait)
	}
	if got := waitUntil(5, 2); got != 3 {
		t.Errorf("waitUntil(5, 2) = %d, want 3", got)
	}
	hour := int64(time.Hour)
	if got := waitUntil(hour, 0); got != maxWait {
		t.Errorf("waitUntil an hour ahead = %s, want %s: a sleep of an hour ends an hour late if the wall clock steps forward meanwhile", got, maxWait)
	}
}

// TestEpochSlotIsDispatched: a nextRunAt of 1970-01-01T00:00:00Z is Unix
// nanosecond 0, which item.fired also used for "no slot dispatched": upsert
// took it for a re-put of a slot already dispatched and never queued it.
func TestEpochSlotIsDispatched(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	epoch := time.Unix(0, 0).UTC()
	putSchedule(t, srv.JS, "epoch", epoch, gov.SourceBaselineInterval)
	s := startTimer(t, srv.JS, nil)
	// Written last and due later than epoch's slot: once it is stored,
	// epoch's dispatch, published before it, is too.
	putSchedule(t, srv.JS, "after", time.Unix(0, 1).UTC(), gov.SourceBaselineInterval)
	natstest.Eventually(t, within, "after dispatched", func() bool { return hasDispatch(t, srv.JS, "after") })
	if !hasDispatch(t, srv.JS, "epoch") {
		t.Fatalf("epoch's slot not dispatched; results %v", results(s))
	}
	if id, d := storedDispatch(t, srv.JS, "epoch"); id != "epoch:0" || !d.ScheduledAt.Equal(epoch) {
		t.Errorf("epoch dispatched as %s for %s, want epoch:0 for %s", id, d.ScheduledAt, epoch)
	}
}

// TestUpsertTellsTheEpochSlotFromNone checks, without a server round trip,
// that the slot at Unix nanosecond 0 is queued, dispatched and, re-put
// once dispatched, not queued again.
func TestUpsertTellsTheEpochSlotFromNone(t *testing.T) {
	srv := natstest.Start(t)
	s, err := New(Config{JS: srv.JS})
	if err != nil {
		t.Fatal(err)
	}
	s.upsert("epoch", 0, "x", 0, 0)
	if len(s.queue) != 1 {
		t.Fatalf("%d queued, want the epoch slot queued", len(s.queue))
	}
	runs, _ := s.takeDue()
	if len(runs) != 1 || runs[0].at != 0 || s.items["epoch"].fired != 0 {
		t.Fatalf("took %+v, item %+v; want the epoch slot taken and marked dispatched", runs, s.items["epoch"])
	}
	s.upsert("epoch", 0, "x", 0, 0)
	if len(s.queue) != 0 {
		t.Fatal("a re-put of the dispatched epoch slot was queued again")
	}
}
