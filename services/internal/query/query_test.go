package query_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/query"
	"github.com/flyballhq/flyball/streams"
)

type bundle struct {
	srv *natstest.Server
	r   *query.Reader
	ctx context.Context
}

func setup(t *testing.T) *bundle {
	t.Helper()
	srv := natstest.StartWithStreams(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	r, err := query.NewReader(ctx, srv.JS)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{srv: srv, r: r, ctx: ctx}
}

func (b *bundle) publish(t *testing.T, subject, typ, id string, data any) {
	t.Helper()
	if err := jsutil.PublishEvent(b.ctx, b.srv.JS, subject, "", typ, "test", id, data, time.Now().UTC()); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) put(t *testing.T, bucket, key string, v any) {
	t.Helper()
	kv, err := b.srv.JS.KeyValue(b.ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(b.ctx, key, body); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) run(t *testing.T, o events.Outcome, id string, attempt int) {
	t.Helper()
	b.publish(t, events.RunSubject(o, id), o.Type(), id, events.Run{DispatchID: fmt.Sprintf("%s:%d", id, attempt), TaskID: id, Attempt: attempt, Status: 200})
}

func TestScanReadsWithoutConsumingAndStopsAtTheEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := 1; i <= 5; i++ {
		b.run(t, events.OutcomeSucceeded, "a", i)
		b.run(t, events.OutcomeFailed, "b", i)
	}
	cases := []struct {
		name  string
		given query.ScanOptions
		want  []uint64
	}{
		{"everything", query.ScanOptions{}, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
		{"one subject", query.ScanOptions{Subjects: []string{"flyball.run.*.b"}}, []uint64{2, 4, 6, 8, 10}},
		{"from a sequence", query.ScanOptions{StartSeq: 8}, []uint64{8, 9, 10}},
		{"to a sequence", query.ScanOptions{StartSeq: 3, EndSeq: 5}, []uint64{3, 4, 5}},
		{"one subject to a sequence", query.ScanOptions{Subjects: []string{"flyball.run.*.b"}, EndSeq: 5}, []uint64{2, 4}},
		{"none in the range", query.ScanOptions{Subjects: []string{"flyball.run.*.b"}, StartSeq: 5, EndSeq: 5}, nil},
		{"from the future", query.ScanOptions{StartTime: time.Now().Add(time.Hour)}, nil},
		{"until the past", query.ScanOptions{Until: time.Now().Add(-time.Hour)}, nil},
		{"no match", query.ScanOptions{Subjects: []string{"flyball.run.*.nobody"}}, nil},
	}
	for _, c := range cases {
		opts := c.given
		opts.Stream = streams.StreamRuns
		var got []uint64
		caughtUp := 0
		opts.CaughtUp = func() error { caughtUp++; return nil }
		if err := query.Scan(b.ctx, b.srv.JS, opts, func(m query.Message) error {
			got = append(got, m.Seq)
			return nil
		}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !slices.Equal(got, c.want) || caughtUp != 1 {
			t.Errorf("%s: got %v (caught up %d times), want %v once", c.name, got, caughtUp, c.want)
		}
	}
	info, err := b.srv.JS.Stream(b.ctx, streams.StreamRuns)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 10 {
		t.Fatalf("RUNS holds %d messages after the scans, want 10", n)
	}
}

func TestScanStopsWhenAsked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := 1; i <= 5; i++ {
		b.run(t, events.OutcomeSucceeded, "a", i)
	}
	n := 0
	err := query.Scan(b.ctx, b.srv.JS, query.ScanOptions{Stream: streams.StreamRuns}, func(query.Message) error {
		n++
		if n == 2 {
			return query.ErrStop
		}
		return nil
	})
	if err != nil || n != 2 {
		t.Fatalf("scan = %v after %d messages, want nil after 2", err, n)
	}
}

func TestScanFollowDeliversNewMessages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.run(t, events.OutcomeSucceeded, "a", 1)
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	got := make(chan uint64, 16)
	caughtUp := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- query.Scan(ctx, b.srv.JS, query.ScanOptions{
			Stream: streams.StreamRuns, Follow: true,
			CaughtUp: func() error { close(caughtUp); return nil },
		}, func(m query.Message) error {
			got <- m.Seq
			return nil
		})
	}()
	if seq := <-got; seq != 1 {
		t.Fatalf("first message seq %d, want 1", seq)
	}
	<-caughtUp
	b.run(t, events.OutcomeSucceeded, "a", 2)
	select {
	case seq := <-got:
		if seq != 2 {
			t.Fatalf("followed message seq %d, want 2", seq)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a message published after catching up was not delivered")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("follow ended with %v, want nil on cancel", err)
	}
}

func TestScanReadsTheWorkQueueWithoutRemovingIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, id := range []string{"a", "b", "c"} {
		b.publish(t, events.DispatchSubject(id), events.TypeRunDue, id, events.Dispatch{DispatchID: id + ":1", TaskID: id})
	}
	var got []string
	err := query.Scan(b.ctx, b.srv.JS, query.ScanOptions{Stream: streams.StreamDispatch, Subjects: []string{"flyball.dispatch.b"}}, func(m query.Message) error {
		got = append(got, m.Subject)
		return nil
	})
	if err != nil || !slices.Equal(got, []string{"flyball.dispatch.b"}) {
		t.Fatalf("scan DISPATCH = %v, %v; want [flyball.dispatch.b]", got, err)
	}
	st, err := b.srv.JS.Stream(b.ctx, streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != 3 {
		t.Fatalf("DISPATCH holds %d messages after the scan, want 3", n)
	}
	err = query.Scan(b.ctx, b.srv.JS, query.ScanOptions{Stream: streams.StreamDispatch, Follow: true}, func(query.Message) error { return nil })
	if err == nil {
		t.Fatal("following a work queue must be refused")
	}
}

// TestRunsReturnsTheNewestOldestFirst: the newest runs of the task, oldest
// first, without its run.recovered events (a success repeated for the
// breaker is not another run).
func TestRunsReturnsTheNewestOldestFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := 1; i <= 7; i++ {
		b.run(t, events.OutcomeSucceeded, "a", i)
		b.run(t, events.OutcomeRecovered, "a", i)
		b.run(t, events.OutcomeFailed, "other", i)
	}
	runs, _, err := b.r.RunPage(b.ctx, "a", query.Page{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	var attempts []int
	for _, r := range runs {
		if r.Outcome != events.OutcomeSucceeded || r.Run.TaskID != "a" {
			t.Fatalf("unexpected run %+v", r)
		}
		attempts = append(attempts, r.Run.Attempt)
	}
	if !slices.Equal(attempts, []int{5, 6, 7}) {
		t.Fatalf("attempts %v, want [5 6 7]", attempts)
	}
	all, _, err := b.r.RunPage(b.ctx, "a", query.Page{})
	if err != nil || len(all) != 7 {
		t.Fatalf("all runs: %d, %v; want 7", len(all), err)
	}
	none, _, err := b.r.RunPage(b.ctx, "nobody", query.Page{Limit: 5})
	if err != nil || none == nil || len(none) != 0 {
		t.Fatalf("runs of an unknown task = %v, %v; want an empty list", none, err)
	}
}

func deadLetter(id string, n int) events.DeadLetter {
	return events.DeadLetter{
		TaskID: id, Reason: events.DeadLetterPermanent, Attempts: n,
		Dispatch:       events.Dispatch{DispatchID: fmt.Sprintf("%s:%d", id, n), TaskID: id},
		Errors:         []events.AttemptError{{Attempt: n, Status: 404, Error: fmt.Sprintf("HTTP 404 #%d", n)}},
		DeadLetteredAt: time.Now().UTC(),
	}
}

func TestDeadLettersListShowCountPurge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := 1; i <= 4; i++ {
		b.publish(t, events.DeadLetterSubject("a"), events.TypeDeadLettered, "a", deadLetter("a", i))
		b.publish(t, events.DeadLetterSubject("b"), events.TypeDeadLettered, "b", deadLetter("b", i))
	}
	last2, err := b.r.DeadLetters(b.ctx, "", 2)
	if err != nil || len(last2) != 2 || last2[0].Seq != 7 || last2[1].Seq != 8 {
		t.Fatalf("newest 2 = %+v, %v; want seqs 7, 8", last2, err)
	}
	onlyA, err := b.r.DeadLetters(b.ctx, "a", 3)
	if err != nil || len(onlyA) != 3 {
		t.Fatalf("newest 3 of a = %d, %v", len(onlyA), err)
	}
	for i, d := range onlyA {
		if d.Entry.TaskID != "a" || d.Entry.Attempts != i+2 || d.LastError() != fmt.Sprintf("HTTP 404 #%d", i+2) {
			t.Fatalf("entry %d = %+v", i, d)
		}
	}
	one, err := b.r.DeadLetter(b.ctx, 3)
	if err != nil || one.Entry.TaskID != "a" || one.Seq != 3 || !json.Valid(one.Raw) {
		t.Fatalf("dead letter 3 = %+v, %v", one, err)
	}
	if _, err := b.r.DeadLetter(b.ctx, 99); !errors.Is(err, query.ErrNotFound) {
		t.Fatalf("dead letter 99: %v, want ErrNotFound", err)
	}
	if n, err := b.r.CountDeadLetters(b.ctx, "b"); err != nil || n != 4 {
		t.Fatalf("count b = %d, %v; want 4", n, err)
	}
	if n, err := b.r.PurgeDeadLetters(b.ctx, "b"); err != nil || n != 4 {
		t.Fatalf("purge b = %d, %v; want 4", n, err)
	}
	if n, err := b.r.CountDeadLetters(b.ctx, ""); err != nil || n != 4 {
		t.Fatalf("count after purging b = %d, %v; want the 4 of a", n, err)
	}
}

// TestDeadLettersNewestAcrossPurgeGaps: purging one task's entries leaves
// gaps in DEADLETTER's sequences, and the unfiltered list still returns
// the newest limit entries that remain, whether the gaps are spread out or
// one long run, and whatever the limit.
func TestDeadLettersNewestAcrossPurgeGaps(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// seqs 1-5 a, 6-35 b, 36-40 a, then 41-60 alternating c (odd) and b
	var want []uint64
	put := func(id string, n int) {
		b.publish(t, events.DeadLetterSubject(id), events.TypeDeadLettered, id, deadLetter(id, n))
	}
	seq := uint64(0)
	for i := range 5 {
		put("a", i)
		seq++
		want = append(want, seq)
	}
	for i := range 30 {
		put("b", i)
		seq++
	}
	for i := range 5 {
		put("a", 5+i)
		seq++
		want = append(want, seq)
	}
	for i := range 10 {
		put("c", i)
		seq++
		want = append(want, seq)
		put("b", 30+i)
		seq++
	}
	if n, err := b.r.PurgeDeadLetters(b.ctx, "b"); err != nil || n != 40 {
		t.Fatalf("purge b = %d, %v; want 40", n, err)
	}
	for _, limit := range []int{1, 3, 10, 12, 15, 19, 20, 21, 100} {
		got, err := b.r.DeadLetters(b.ctx, "", limit)
		if err != nil {
			t.Fatalf("newest %d: %v", limit, err)
		}
		seqs := make([]uint64, len(got))
		for i, d := range got {
			seqs[i] = d.Seq
		}
		if w := want[max(len(want)-limit, 0):]; !slices.Equal(seqs, w) {
			t.Errorf("newest %d after purging b = seqs %v, want %v", limit, seqs, w)
		}
	}
}

func spec(id, job, interval string) events.TaskSpec {
	d, _ := time.ParseDuration(interval)
	return events.TaskSpec{
		ID: id, Job: job, Labels: map[string]string{"team": job},
		Target:   events.Target{HTTP: &events.HTTPTarget{URL: "http://example.test/" + id}},
		Schedule: events.Schedule{Interval: events.Duration(d)},
	}
}

func TestHealthSummarises(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	b.r.Now = func() time.Time { return now }

	b.put(t, streams.BucketTasks, "due", spec("due", "", "10s"))
	b.put(t, streams.BucketSchedules, "due", gov.State{TaskID: "due", NextRunAt: now.Add(5 * time.Second), LastSuccessAt: now.Add(-10 * time.Second)})
	b.put(t, streams.BucketTasks, "later", spec("later", "orders", "1m"))
	// Last success 3 intervals ago: (180s - 60s) / 240s = 0.5.
	b.put(t, streams.BucketSchedules, "later", gov.State{TaskID: "later", NextRunAt: now.Add(time.Minute), LastSuccessAt: now.Add(-3 * time.Minute)})
	b.put(t, streams.BucketTasks, "paused", spec("paused", "orders", "1m"))
	b.put(t, streams.BucketSchedules, "paused", gov.State{TaskID: "paused", Paused: true, LastSuccessAt: now.Add(-time.Hour)})
	b.put(t, streams.BucketSchedules, "orphan", gov.State{TaskID: "orphan", NextRunAt: now})
	retry := now.Add(30 * time.Second)
	b.put(t, streams.BucketBreakers, "later", executor.BreakerRecord{Key: "later", State: events.BreakerOpen, Failures: 3, RetryAt: retry})
	b.put(t, streams.BucketBreakers, "host_example_test", executor.BreakerRecord{Key: "host_example_test", State: events.BreakerHalfOpen, Failures: 4})
	b.put(t, streams.BucketBreakers, "due", executor.BreakerRecord{Key: "due", State: events.BreakerClosed})
	for i := 1; i <= 30; i++ {
		b.publish(t, events.DeadLetterSubject("later"), events.TypeDeadLettered, "later", deadLetter("later", i))
	}

	h, err := b.r.Health(b.ctx, query.MaxStaleness)
	if err != nil {
		t.Fatal(err)
	}
	if !h.Enabled || !h.UpdatedAt.Equal(now) {
		t.Errorf("enabled %v updatedAt %v", h.Enabled, h.UpdatedAt)
	}
	if q := h.Queue; q.Depth != 2 || q.DueWithinSeconds != 1 || q.PerType["default"] != 1 || q.PerType["orders"] != 1 || len(q.PerType) != 2 {
		t.Errorf("queue = %+v, want depth 2, 1 due, default=1 orders=1", q)
	}
	if d := h.DeadLetter; d.Count != 30 || len(d.Tasks) != 25 || d.Tasks[0].Attempts != 30 || d.Tasks[24].Attempts != 6 || d.Tasks[0].LastError != "HTTP 404 #30" {
		t.Errorf("dead letters: count %d, %d listed, first %+v", d.Count, len(d.Tasks), d.Tasks[0])
	}
	if len(h.Breakers) != 2 || h.Breakers[0].Key != "host_example_test" || h.Breakers[0].TaskID != "" ||
		h.Breakers[1].TaskID != "later" || h.Breakers[1].RetryAt == nil || !h.Breakers[1].RetryAt.Equal(retry) {
		t.Errorf("breakers = %+v", h.Breakers)
	}
	scores := map[string]float64{}
	for _, s := range h.Staleness {
		scores[s.TaskID] = s.Score
	}
	want := map[string]float64{"paused": 1, "later": 0.5, "due": 0}
	if len(scores) != 3 || scores["paused"] != want["paused"] || scores["later"] != want["later"] || scores["due"] != want["due"] {
		t.Errorf("staleness = %v, want %v", scores, want)
	}
	if h.Staleness[0].TaskID != "paused" || !h.Staleness[0].Paused {
		t.Errorf("stalest first: %+v", h.Staleness)
	}
}

// TestHealthServices: status and the health API name the services with no
// instance online and what stops because of it. An executor killed -9
// showed only as tasks growing stale: nothing said no executor ran.
func TestHealthServices(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now().UTC()
	b.r.Now = func() time.Time { return now }
	beat := func(kind, name string, age time.Duration, status events.RuntimeStatus) {
		b.put(t, streams.BucketRuntime, kind+"."+name, events.Heartbeat{
			Kind: kind, Name: name, Host: "h", PID: 7, Status: status, LastBeat: now.Add(-age), Interval: events.Duration(15 * time.Second),
		})
	}
	for _, k := range []string{"timer", "governor", "breaker", "deadletter", "sweeper", "api"} {
		beat(k, "a", 5*time.Second, events.RuntimeOnline)
	}
	beat("timer", "b", 10*time.Second, events.RuntimeOnline)
	beat("executor", "gone", 5*time.Minute, events.RuntimeOffline)
	beat("governor", "old", 10*time.Second, events.RuntimeOffline) // a fresh beat, but marked offline

	h, err := b.r.Health(b.ctx, query.MaxStaleness)
	if err != nil {
		t.Fatal(err)
	}
	sh := h.Services
	if sh.Online["timer"] != 2 || sh.Online["governor"] != 1 || sh.Online["executor"] != 0 || sh.Online["api"] != 1 || len(sh.Online) != 6 {
		t.Errorf("online = %v", sh.Online)
	}
	if len(sh.Missing) != 1 || sh.Missing[0].Kind != "executor" || !strings.Contains(sh.Missing[0].Effect, "DISPATCH") {
		t.Errorf("missing = %+v, want the executor", sh.Missing)
	}
	var off []string
	for _, in := range sh.Offline {
		off = append(off, in.Key)
	}
	// An instance silent but not yet marked: TestHealthServicesIgnoresAnInstanceClockBehind.
	if strings.Join(off, " ") != "executor.gone governor.old" {
		t.Errorf("offline = %v", off)
	}
	if sh.TimerLease != "" {
		t.Errorf("timer lease %q with no lease written", sh.TimerLease)
	}
}

// TestHealthServicesIgnoresAnInstanceClockBehind: status took an instance
// whose clock runs behind for silent: it compared the lastBeat the
// instance stamped with its own clock against the reader's clock, so an
// executor beating every 15 s with a clock 2 minutes behind was listed
// offline and its kind NONE ONLINE. Silence is now measured from the
// time NATS stored the beat (the server's clock): a beat stored just now
// is fresh, however the instance's clock reads.
func TestHealthServicesIgnoresAnInstanceClockBehind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now().UTC()
	b.r.Now = func() time.Time { return now }
	for _, k := range []string{"timer", "governor", "breaker", "deadletter", "sweeper"} {
		b.put(t, streams.BucketRuntime, k+".a", events.Heartbeat{
			Kind: k, Name: "a", Status: events.RuntimeOnline, LastBeat: now, Interval: events.Duration(15 * time.Second),
		})
	}
	// Beats now, with a clock two minutes behind.
	b.put(t, streams.BucketRuntime, "executor.behind", events.Heartbeat{
		Kind: "executor", Name: "behind", Status: events.RuntimeOnline, LastBeat: now.Add(-2 * time.Minute), Interval: events.Duration(15 * time.Second),
	})
	h, err := b.r.Health(b.ctx, query.MaxStaleness)
	if err != nil {
		t.Fatal(err)
	}
	if sh := h.Services; sh.Online["executor"] != 1 || len(sh.Missing) != 0 || len(sh.Offline) != 0 {
		t.Fatalf("an executor that beat just now, with its clock behind: online %v, missing %+v, offline %d", sh.Online, sh.Missing, len(sh.Offline))
	}

	// Silence still shows: read 50 s later with no beat in between.
	later := now.Add(50 * time.Second)
	b.r.Now = func() time.Time { return later }
	if h, err = b.r.Health(b.ctx, query.MaxStaleness); err != nil {
		t.Fatal(err)
	}
	if sh := h.Services; len(sh.Online) != 0 || len(sh.Offline) != 6 {
		t.Fatalf("50 s without a beat: online %v, offline %d, want none online", sh.Online, len(sh.Offline))
	}
}

// TestHealthNamesTheTimerLeaseHolder: with --timer-lease, status names
// the one timer that dispatches; against streams of a version before the
// lease (no flyball-leases bucket) it names none and does not fail.
func TestHealthNamesTheTimerLeaseHolder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	kv, err := b.srv.JS.KeyValue(b.ctx, streams.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(b.ctx, streams.LeaseTimer, []byte("timer2#5c0f9a3e")); err != nil {
		t.Fatal(err)
	}
	h, err := b.r.Health(b.ctx, query.MaxStaleness)
	if err != nil {
		t.Fatal(err)
	}
	if h.Services.TimerLease != "timer2" {
		t.Errorf("timer lease %q, want timer2", h.Services.TimerLease)
	}
	if err := b.srv.JS.DeleteKeyValue(b.ctx, streams.BucketLeases); err != nil {
		t.Fatal(err)
	}
	if h, err = b.r.Health(b.ctx, query.MaxStaleness); err != nil {
		t.Fatalf("health without the leases bucket: %v", err)
	}
	if h.Services.TimerLease != "" {
		t.Errorf("without the bucket: timer lease %q, want none", h.Services.TimerLease)
	}
}

// TestHealthStalenessFollowsARelaxationOnPurpose: status scores a task
// whose settings put its next run further out (here activity dormancy,
// 6 × 1m) against that run, as the sweeper's metric does, and shows the
// gap as its expected interval.
func TestHealthStalenessFollowsARelaxationOnPurpose(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	b.r.Now = func() time.Time { return now }
	last := now.Add(-5 * time.Minute)
	b.put(t, streams.BucketTasks, "dormant", spec("dormant", "", "1m"))
	b.put(t, streams.BucketSchedules, "dormant", gov.State{
		TaskID: "dormant", NextRunAt: last.Add(6 * time.Minute), Source: gov.SourceActivityDormant,
		LastScheduledAt: last, LastSuccessAt: last,
	})
	h, err := b.r.Health(b.ctx, query.MaxStaleness)
	if err != nil {
		t.Fatal(err)
	}
	if s := h.Staleness; len(s) != 1 || s[0].Score != 0 || s[0].Expected.D() != 6*time.Minute {
		t.Errorf("staleness = %+v, want score 0 expecting 6m", s)
	}
}

func TestTasksFilterByJobAndLabel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.put(t, streams.BucketTasks, "b", spec("b", "orders", "10s"))
	b.put(t, streams.BucketTasks, "a", spec("a", "orders", "10s"))
	b.put(t, streams.BucketTasks, "c", spec("c", "billing", "10s"))
	b.put(t, streams.BucketSchedules, "a", gov.State{TaskID: "a", Source: gov.SourceBaselineInterval})
	ids := func(f query.TaskFilter) []string {
		tasks, err := b.r.Tasks(b.ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, v := range tasks {
			out = append(out, v.Spec.ID)
		}
		return out
	}
	if got := ids(query.TaskFilter{}); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("all = %v", got)
	}
	if got := ids(query.TaskFilter{Job: "orders"}); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("job orders = %v", got)
	}
	if got := ids(query.TaskFilter{Labels: map[string]string{"team": "billing"}}); !slices.Equal(got, []string{"c"}) {
		t.Errorf("label team=billing = %v", got)
	}
	v, err := b.r.Task(b.ctx, "a")
	if err != nil || v.Schedule == nil || v.Schedule.Source != gov.SourceBaselineInterval {
		t.Fatalf("task a = %+v, %v", v, err)
	}
	if _, err := b.r.Task(b.ctx, "zzz"); !errors.Is(err, query.ErrNotFound) {
		t.Fatalf("missing task: %v, want ErrNotFound", err)
	}
	if _, err := query.ParseLabels([]string{"novalue"}); err == nil {
		t.Fatal("a selector without = must be refused")
	}
}

// TestTasksListsUnreadableSpecsWithTheirSchedules: the whole listing
// (Tasks, the CLI's task list without --limit) lists a spec that does not
// decode with the reason Task gives and its schedule, unless a filter
// asks for what it cannot tell; a schedule without a spec lists no task,
// and a schedule that does not decode leaves its task without one.
func TestTasksListsUnreadableSpecsWithTheirSchedules(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.put(t, streams.BucketTasks, "a", spec("a", "orders", "10s"))
	b.put(t, streams.BucketTasks, "c", spec("c", "billing", "10s"))
	b.put(t, streams.BucketTasks, "bad", "not a spec")
	b.put(t, streams.BucketTasks, "d", spec("d", "orders", "10s"))
	for _, id := range []string{"a", "bad", "c", "orphan"} {
		b.put(t, streams.BucketSchedules, id, gov.State{TaskID: id, Source: gov.SourceBaselineInterval})
	}
	b.put(t, streams.BucketSchedules, "d", "not a state")
	one, err := b.r.Task(b.ctx, "bad")
	if err != nil || one.Unreadable == "" {
		t.Fatalf("task bad = %+v, %v", one, err)
	}
	describe := func(list []query.TaskView) []string {
		var out []string
		for _, v := range list {
			s := v.Spec.ID
			if v.Schedule != nil {
				s += "+" + v.Schedule.TaskID
			}
			if v.Unreadable != "" {
				s += " unreadable: " + v.Unreadable
			}
			out = append(out, s)
		}
		return out
	}
	for _, c := range []struct {
		name string
		f    query.TaskFilter
		want []string
	}{
		{"every task", query.TaskFilter{}, []string{"a+a", "bad+bad unreadable: " + one.Unreadable, "c+c", "d"}},
		{"one job", query.TaskFilter{Job: "orders"}, []string{"a+a", "d"}},
		{"one label", query.TaskFilter{Labels: map[string]string{"team": "billing"}}, []string{"c+c"}},
	} {
		list, err := b.r.Tasks(b.ctx, c.f)
		if err != nil {
			t.Fatal(err)
		}
		if got := describe(list); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestRuntimeListsInstancesWithAge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now().UTC()
	at := now.Add(5 * time.Second)
	b.r.Now = func() time.Time { return at }
	b.put(t, streams.BucketRuntime, "timer.x", events.Heartbeat{Kind: "timer", Name: "x", Status: events.RuntimeOnline, LastBeat: now.Add(-5 * time.Second)})
	b.put(t, streams.BucketRuntime, "api.y", events.Heartbeat{Kind: "api", Name: "y", Status: events.RuntimeOffline, LastBeat: now.Add(-time.Minute)})
	list, err := b.r.Runtime(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The online entry's age runs from its stored time
	// (TestRuntimeListsASilentInstanceWithItsClockAheadOffline);
	// the offline mark's, stored by the sweeper, from its lastBeat.
	if len(list) != 2 || list[0].Key != "api.y" || list[0].Status != events.RuntimeOffline || list[0].LastBeatAge.D() != at.Sub(now.Add(-time.Minute)) ||
		list[1].Kind != "timer" || list[1].LastBeatAge.D() != max(0, at.Sub(list[1].StoredAt)) {
		t.Fatalf("runtime = %+v", list)
	}
}

// TestRuntimeListsASilentInstanceOffline: `flyball runtime` and GET
// /api/v1/runtime printed the status an instance last wrote, so an
// instance killed while no sweeper ran (or before the sweeper's next
// sweep) was listed "online 5m2s ago" while `flyball status` listed it
// offline. docs/operations.md says an instance silent for 45 s is listed
// offline by both; they now judge it alike.
func TestRuntimeListsASilentInstanceOffline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now().UTC()
	b.r.Now = func() time.Time { return now }
	b.put(t, streams.BucketRuntime, "timer.killed", events.Heartbeat{
		Kind: "timer", Name: "killed", Status: events.RuntimeOnline, LastBeat: now, Interval: events.Duration(15 * time.Second),
	})
	status := func() events.RuntimeStatus {
		t.Helper()
		list, err := b.r.Runtime(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 {
			t.Fatalf("runtime = %+v, want one instance", list)
		}
		return list[0].Status
	}
	if got := status(); got != events.RuntimeOnline {
		t.Fatalf("an instance that beat just now: status %q, want online", got)
	}
	// 50 s with no beat, and no sweeper to mark it.
	b.r.Now = func() time.Time { return now.Add(50 * time.Second) }
	if got := status(); got != events.RuntimeOffline {
		t.Errorf("an instance silent for 50 s (3 beats of 15 s missed): status %q, want offline, as flyball status lists it", got)
	}
	h, err := b.r.Health(b.ctx, query.MaxStaleness)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Services.Offline) != 1 || h.Services.Offline[0].Status != events.RuntimeOffline {
		t.Errorf("health's offline list = %+v, want the instance, offline", h.Services.Offline)
	}
}

func TestExpectedInterval(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name  string
		given events.Schedule
		want  time.Duration
	}{
		{"interval", events.Schedule{Interval: events.Duration(30 * time.Second)}, 30 * time.Second},
		{"cron every 5 minutes", events.Schedule{Cron: "*/5 * * * *", Timezone: "Europe/Berlin"}, 5 * time.Minute},
		{"bad cron", events.Schedule{Cron: "nope"}, 0},
	}
	for _, c := range cases {
		s := events.TaskSpec{Schedule: c.given}
		if got := query.Expect(&s).Interval(now); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// purgeRaceJS stores one more dead letter (run before) right before each
// purge request of DEADLETTER is sent: an entry that arrives while `flyball
// dlq purge --yes` runs, after it counted what it would delete.
type purgeRaceJS struct {
	jetstream.JetStream
	before func()
}

func (j *purgeRaceJS) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	st, err := j.JetStream.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	return &purgeRaceStream{Stream: st, before: j.before}, nil
}

type purgeRaceStream struct {
	jetstream.Stream
	before func()
}

func (s *purgeRaceStream) Purge(ctx context.Context, opts ...jetstream.StreamPurgeOpt) error {
	s.before()
	return s.Stream.Purge(ctx, opts...)
}

// TestPurgeDeadLettersKeepsEntriesStoredMeanwhile: a purge deletes the
// entries it counted and reports, not one stored after it counted them.
// It purged the whole stream (or the task's whole subject), so a dead
// letter stored between the count and the purge was deleted, unreported
// ("purged 3" when 4 went) and never seen by anyone.
func TestPurgeDeadLettersKeepsEntriesStoredMeanwhile(t *testing.T) {
	t.Parallel()
	for _, task := range []string{"", "a"} {
		b := setup(t)
		for i := 1; i <= 3; i++ {
			b.publish(t, events.DeadLetterSubject("a"), events.TypeDeadLettered, "a", deadLetter("a", i))
		}
		b.publish(t, events.DeadLetterSubject("b"), events.TypeDeadLettered, "b", deadLetter("b", 1))
		counted := uint64(4)
		if task != "" {
			counted = 3
		}
		js := &purgeRaceJS{JetStream: b.srv.JS, before: func() {
			b.publish(t, events.DeadLetterSubject("a"), events.TypeDeadLettered, "a", deadLetter("a", 99))
		}}
		r, err := query.NewReader(b.ctx, js)
		if err != nil {
			t.Fatal(err)
		}
		n, err := r.PurgeDeadLetters(b.ctx, task)
		if err != nil || n != counted {
			t.Fatalf("purge %q = %d, %v; want the %d counted", task, n, err, counted)
		}
		left, err := b.r.DeadLetters(b.ctx, "a", 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(left) != 1 || left[0].Entry.Attempts != 99 {
			t.Fatalf("purge %q: entries of a left: %+v; want only the one stored after the count (attempts 99)", task, left)
		}
	}
}

// TestRuntimeAgeRunsFromWhenNATSStoredTheBeat: lastBeatAge was the
// reader's clock minus the lastBeat the instance stamped by its own. An
// instance whose clock runs ahead was listed "last beat -1m50s ago" (and,
// from the later of lastBeat and the stored time, 0s ago for as long as
// its skew), one whose clock runs behind as silent for longer than it
// was. The age runs from the time NATS stored the beat, as its status
// (online) does: about 5 s here, whichever way the clock is off.
func TestRuntimeAgeRunsFromWhenNATSStoredTheBeat(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now().UTC()
	for name, off := range map[string]time.Duration{"ahead": 2 * time.Minute, "behind": -2 * time.Minute} {
		b.put(t, streams.BucketRuntime, "executor."+name, events.Heartbeat{
			Kind: "executor", Name: name, Status: events.RuntimeOnline, LastBeat: now.Add(off), Interval: events.Duration(15 * time.Second),
		})
	}
	b.r.Now = func() time.Time { return time.Now().UTC().Add(5 * time.Second) }
	list, err := b.r.Runtime(b.ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("runtime %+v, %v; want the two executors", list, err)
	}
	for _, in := range list {
		if age := in.LastBeatAge.D(); age < 5*time.Second || age > 10*time.Second || in.Status != events.RuntimeOnline {
			t.Errorf("an executor that beat just now with its clock %s: %s, last beat %v ago; want online, about 5s ago", in.Name, in.Status, age)
		}
	}
}

// TestTasksServeAStoredStartAtInUTC: a spec stored before flyball wrote
// startAt in UTC keeps its offset in flyball-tasks
// ("2026-04-01T00:00:00+02:00"); the API served it so, though flyball
// emits UTC. A task, one or listed, has it in UTC.
func TestTasksServeAStoredStartAtInUTC(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := spec("s", "orders", "10s")
	start := time.Date(2026, 4, 1, 0, 0, 0, 0, time.FixedZone("", 2*3600))
	s.StartAt = &start
	b.put(t, streams.BucketTasks, "s", s)
	one, err := b.r.Task(b.ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	list, err := b.r.Tasks(b.ctx, query.TaskFilter{})
	if err != nil || len(list) != 1 {
		t.Fatalf("tasks %+v, %v; want s", list, err)
	}
	for _, v := range []query.TaskView{*one, list[0]} {
		if got, err := json.Marshal(v.Spec.StartAt); err != nil || string(got) != `"2026-03-31T22:00:00Z"` {
			t.Fatalf("task s served with startAt %s, want 2026-03-31T22:00:00Z", got)
		}
	}
}

// TestRuntimeListsASilentInstanceWithItsClockAheadOffline: an instance's
// silence ran from the later of the lastBeat it stamped and the time NATS
// stored the beat, so one whose clock runs ahead (by 2 min here) stayed
// listed online for its skew plus 45 s after it died, while no sweeper
// marked it. Silence now runs from the stored time, by the server's clock.
func TestRuntimeListsASilentInstanceWithItsClockAheadOffline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body, err := json.Marshal(events.Heartbeat{
		Kind: "executor", Name: "ahead", Status: events.RuntimeOnline,
		LastBeat: time.Now().UTC().Add(2 * time.Minute), Interval: events.Duration(15 * time.Second),
	})
	if err != nil {
		t.Fatal(err)
	}
	stored := b.putRaw(t, streams.BucketRuntime, "executor.ahead", string(body))
	b.r.Now = func() time.Time { return stored.Add(60 * time.Second) }
	list, err := b.r.Runtime(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Status != events.RuntimeOffline || list[0].LastBeatAge.D() != 60*time.Second {
		t.Errorf("an executor with its clock 2 min ahead, silent for 60 s: %+v; want offline, last beat 60s ago", list)
	}
	h, err := b.r.Health(b.ctx, query.MaxStaleness)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Services.Offline) != 1 || h.Services.Offline[0].Key != "executor.ahead" {
		t.Errorf("health's offline list = %+v, want executor.ahead", h.Services.Offline)
	}
}

// TestTasksListAValueWhoseIDIsNotItsKeyUnderItsKey: the task's ID is its
// flyball-tasks key. A value without an id (null) or with another one is
// listed under its key as unreadable, by Task, Tasks and every page,
// without failing the listing (it read the schedule of task "": nats:
// invalid key) or listing it as the task its id names.
func TestTasksListAValueWhoseIDIsNotItsKeyUnderItsKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.put(t, streams.BucketTasks, "a", spec("a", "orders", "10s"))
	b.put(t, streams.BucketTasks, "emptyid", nil)
	b.put(t, streams.BucketTasks, "mismatch", spec("other", "orders", "10s"))
	b.put(t, streams.BucketTasks, "noid", spec("", "orders", "10s"))
	for _, id := range []string{"a", "mismatch", "other"} {
		b.put(t, streams.BucketSchedules, id, gov.State{TaskID: id, Source: gov.SourceBaselineInterval})
	}
	describe := func(list []query.TaskView) []string {
		var out []string
		for _, v := range list {
			s := v.Spec.ID
			if v.Schedule != nil {
				s += "+" + v.Schedule.TaskID
			}
			if v.Unreadable != "" {
				s += " unreadable"
			}
			out = append(out, s)
		}
		return out
	}
	want := []string{"a+a", "emptyid unreadable", "mismatch+mismatch unreadable", "noid unreadable"}
	list, err := b.r.Tasks(b.ctx, query.TaskFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if got := describe(list); !slices.Equal(got, want) {
		t.Errorf("Tasks: %q, want %q", got, want)
	}
	if list, err = b.r.Tasks(b.ctx, query.TaskFilter{Job: "orders"}); err != nil {
		t.Fatal(err)
	} else if got := describe(list); !slices.Equal(got, want[:1]) {
		t.Errorf("Tasks of job orders: %q, want %q", got, want[:1])
	}
	for _, limit := range []int{1, 2, 10} {
		var got []string
		after := ""
		for {
			page, next, err := b.r.TaskPage(b.ctx, query.TaskFilter{}, after, limit)
			if err != nil {
				t.Fatalf("page of %d after %q: %v", limit, after, err)
			}
			got = append(got, describe(page)...)
			if next == "" {
				break
			}
			after = next
		}
		if !slices.Equal(got, want) {
			t.Errorf("pages of %d: %q, want %q", limit, got, want)
		}
	}
	for _, key := range []string{"emptyid", "mismatch", "noid"} {
		v, err := b.r.Task(b.ctx, key)
		if err != nil || v.Spec.ID != key || !strings.Contains(v.Unreadable, query.ErrBadSpec.Error()) {
			t.Errorf("task %s = %+v, %v; want it unreadable under its key", key, v, err)
		}
	}
	if _, err := b.r.Task(b.ctx, "other"); !errors.Is(err, query.ErrNotFound) {
		t.Errorf("task other: %v, want ErrNotFound", err)
	}
}
