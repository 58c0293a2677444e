package heartbeat_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/heartbeat"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/services/sweeper"
	"github.com/flyballhq/flyball/streams"
)

// The instance and the sweeper run under their compose users
// (natstest.StartCompose), so a rule missing from accounts.conf fails
// these tests as a permission violation.

// services are the compose users that heartbeat, each under its own kind.
var services = []string{"governor", "timer", "executor", "breaker", "deadletter", "sweeper", "api"}

func onlineSubject(kind string) string {
	return events.RuntimeSubject(events.RuntimeOnline, kind, "ghost")
}

func offlineSubject(kind string) string {
	return events.RuntimeSubject(events.RuntimeOffline, kind, "ghost")
}

// stored counts the events HEALTH holds on subject (duplicates of one
// event ID are stored once).
func stored(t *testing.T, srv *natstest.Compose, subject string) uint64 {
	t.Helper()
	st, err := srv.JS.Stream(context.Background(), streams.StreamHealth)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subject]
}

// startGhost starts an instance named ghost of kind, under its compose user.
func startGhost(t *testing.T, srv *natstest.Compose, kind string) *heartbeat.Beater {
	t.Helper()
	_, js := srv.Connect(t, kind)
	// An hour between beats: the test beats with BeatNow.
	b := heartbeat.Start(context.Background(), heartbeat.Config{JS: js, Kind: kind, Name: "ghost", Interval: time.Hour})
	t.Cleanup(b.Stop)
	b.Tried() // the start's runtime.online is published by the beat loop
	return b
}

// startSweeper runs a sweeper whose clock is offset ahead of the real one.
func startSweeper(t *testing.T, srv *natstest.Compose, offset *atomic.Int64) *sweeper.Service {
	t.Helper()
	_, js := srv.Connect(t, "sweeper")
	sw, err := sweeper.New(sweeper.Config{
		Common:   svcconf.Common{JS: js, Now: func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }},
		Interval: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sw.Stop)
	return sw
}

func sweeps(sw *sweeper.Service, n int) {
	for range n {
		<-sw.Swept()
	}
}

// status is the ghost's status in the registry ("" without an entry).
func status(t *testing.T, srv *natstest.Compose, kind string) events.RuntimeStatus {
	t.Helper()
	kv, err := srv.JS.KeyValue(context.Background(), streams.BucketRuntime)
	if err != nil {
		t.Fatal(err)
	}
	ent, err := kv.Get(context.Background(), heartbeat.Key(kind, "ghost"))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	var hb events.Heartbeat
	if err := json.Unmarshal(ent.Value(), &hb); err != nil {
		t.Fatal(err)
	}
	return hb.Status
}

// markOffline runs a sweeper until it has seen the ghost's last beat,
// moves its clock an hour on with no beat in between, and returns it,
// with its clock offset, once it has marked the ghost offline.
func markOffline(t *testing.T, srv *natstest.Compose, kind string) (*sweeper.Service, *atomic.Int64) {
	t.Helper()
	var ahead atomic.Int64
	sw := startSweeper(t, srv, &ahead)
	sweeps(sw, 2) // the first may have begun before the beat was stored
	ahead.Store(int64(time.Hour))
	natstest.Eventually(t, 5*time.Second, "runtime.offline stored", func() bool { return stored(t, srv, offlineSubject(kind)) == 1 })
	if got := status(t, srv, kind); got != events.RuntimeOffline {
		t.Fatalf("status %s after the mark, want offline", got)
	}
	return sw, &ahead
}

// A sweeper that restarts forgets which instances it marked offline; the
// instance itself notices the mark on its next beat, puts its entry back
// online and announces runtime.online. Every service does this under its
// compose user, and deregisters at its stop.
func TestReturnIsAnnouncedAcrossASweeperRestart(t *testing.T) {
	t.Parallel()
	for _, kind := range services {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			srv := natstest.StartCompose(t)
			b := startGhost(t, srv, kind)
			if n := stored(t, srv, onlineSubject(kind)); n != 1 {
				t.Fatalf("%d runtime.online at start, want 1", n)
			}
			sw1, _ := markOffline(t, srv, kind)
			sw1.Stop()

			var now atomic.Int64
			sw2 := startSweeper(t, srv, &now) // remembers no mark
			sweeps(sw2, 2)
			b.BeatNow(context.Background())
			if got := status(t, srv, kind); got != events.RuntimeOnline {
				t.Fatalf("status %q after the beat, want online", got)
			}
			if n := stored(t, srv, onlineSubject(kind)); n != 2 {
				t.Fatalf("%d runtime.online stored, want 2 (start, and the return from offline)", n)
			}
			sweeps(sw2, 2)
			b.BeatNow(context.Background()) // a plain beat announces nothing
			if n := stored(t, srv, onlineSubject(kind)); n != 2 {
				t.Fatalf("%d runtime.online stored after a plain beat, want 2", n)
			}

			b.Stop()
			if got := status(t, srv, kind); got != "" {
				t.Fatalf("status %q after Stop, want no entry", got)
			}
			if n := stored(t, srv, offlineSubject(kind)); n != 2 {
				t.Fatalf("%d runtime.offline stored, want 2 (the sweeper's mark, and the stop)", n)
			}
		})
	}
}

// The sweeper that marked the instance, seeing it back, adds nothing: the
// return is announced once, by the instance.
func TestReturnIsAnnouncedOnce(t *testing.T) {
	t.Parallel()
	srv := natstest.StartCompose(t)
	b := startGhost(t, srv, "executor")
	sw, ahead := markOffline(t, srv, "executor")
	b.BeatNow(context.Background())
	if n := stored(t, srv, onlineSubject("executor")); n != 2 {
		t.Fatalf("%d runtime.online stored, want 2 (start, and the instance's return)", n)
	}
	ahead.Store(0) // the sweeper's clock is back: the beat is fresh
	sweeps(sw, 3)  // the first may have begun before the clock changed
	if n := stored(t, srv, onlineSubject("executor")); n != 2 {
		t.Fatalf("%d runtime.online stored after the sweeper saw the return too, want 2", n)
	}
}

// lockedBuffer is a log sink the beater and the test share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A beat whose Update failed without a CAS conflict (its reply lost: a
// timeout, a reconnect that flushed the buffered request later) may have
// been stored all the same. The next beat's CAS then conflicts with the
// instance's own entry: that is no second instance under its name, and
// is not logged as one.
func TestOwnUnconfirmedBeatIsNotAnotherInstance(t *testing.T) {
	t.Parallel()
	srv := natstest.StartCompose(t)
	var logs lockedBuffer
	_, js := srv.Connect(t, "executor")
	b := heartbeat.Start(context.Background(), heartbeat.Config{
		JS: js, Kind: "executor", Name: "ghost", Interval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	t.Cleanup(b.Stop)
	// The beat whose reply was lost, stored as the beater would have.
	hb := b.Entry()
	hb.LastBeat = time.Now().UTC()
	body, err := json.Marshal(hb)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := srv.JS.KeyValue(context.Background(), streams.BucketRuntime)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), heartbeat.Key("executor", "ghost"), body); err != nil {
		t.Fatal(err)
	}
	b.BeatNow(context.Background())
	if got := status(t, srv, "executor"); got != events.RuntimeOnline {
		t.Fatalf("status %q after the beat, want online", got)
	}
	if strings.Contains(logs.String(), "another instance") {
		t.Fatalf("the instance's own entry was taken for another instance's:\n%s", logs.String())
	}
	if n := stored(t, srv, onlineSubject("executor")); n != 1 {
		t.Fatalf("%d runtime.online stored, want 1 (the start)", n)
	}

	// A second instance under the same kind and name is still noticed.
	other := b.Entry()
	other.PID++
	other.LastBeat = time.Now().UTC()
	if body, err = json.Marshal(other); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), heartbeat.Key("executor", "ghost"), body); err != nil {
		t.Fatal(err)
	}
	b.BeatNow(context.Background())
	if !strings.Contains(logs.String(), "another instance beats under this kind and name") {
		t.Fatalf("a second instance under the same name was not logged:\n%s", logs.String())
	}
}

// TestSweeperClockAheadMarksNoLiveInstance: the sweeper compared its own
// clock with the lastBeat an instance wrote with its clock, so a sweeper
// whose clock ran more than OfflineAfter (45 s) ahead marked every live
// instance offline at each sweep, and they flapped offline and online. An
// instance is marked when the sweeper has seen no new beat of it for
// OfflineAfter by its own clock: a live one, beating every 100 ms here,
// is never marked, however far ahead the sweeper's clock is.
func TestSweeperClockAheadMarksNoLiveInstance(t *testing.T) {
	t.Parallel()
	srv := natstest.StartCompose(t)
	_, js := srv.Connect(t, "executor")
	b := heartbeat.Start(context.Background(), heartbeat.Config{JS: js, Kind: "executor", Name: "ghost", Interval: 100 * time.Millisecond})
	t.Cleanup(b.Stop)
	var ahead atomic.Int64
	ahead.Store(int64(time.Hour))
	sw := startSweeper(t, srv, &ahead)
	sweeps(sw, 20) // 20 ms apart: a few beats in between
	if n := stored(t, srv, offlineSubject("executor")); n != 0 {
		t.Fatalf("a live instance was marked offline %d time(s) by a sweeper an hour ahead", n)
	}
}

// TestBeaterRegistersOnceTheBucketCanBeRead: a service whose heartbeat
// could not bind KV flyball-runtime at start (a request timing out under
// load, a stream electing a leader, streams not provisioned yet) ran for
// its whole life without a beat: Start returned the error, the stack logged
// "heartbeat not started", and nothing tried again, so status listed its
// kind NONE ONLINE although it ran. The beater now binds the bucket again
// at each beat until it can.
func TestBeaterRegistersOnceTheBucketCanBeRead(t *testing.T) {
	srv := natstest.Start(t) // no flyball streams or buckets yet
	b := heartbeat.Start(t.Context(), heartbeat.Config{JS: srv.JS, Kind: "executor", Name: "early", Interval: 20 * time.Millisecond})
	t.Cleanup(b.Stop)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := streams.Ensure(ctx, srv.JS); err != nil {
		t.Fatal(err)
	}
	kv, err := srv.JS.KeyValue(ctx, streams.BucketRuntime)
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 20*time.Second, "the instance registered once the bucket exists", func() bool {
		_, err := kv.Get(ctx, heartbeat.Key("executor", "early"))
		return err == nil
	})
}

// Each beat measures the process's clock against the NATS server's: the
// write is stored (stamped with the server's clock) between the moments
// the beat sent it and got its reply, so the offset lies between those
// moments less the stamp. On one machine it is about zero; a clock
// skewed ahead is measured as that much ahead, within the uncertainty.
func TestBeatMeasuresTheClockOffsetFromTheServer(t *testing.T) {
	t.Parallel()
	for _, skew := range []time.Duration{0, 2500 * time.Millisecond, -1800 * time.Millisecond} {
		t.Run(skew.String(), func(t *testing.T) {
			t.Parallel()
			srv := natstest.StartCompose(t)
			_, js := srv.Connect(t, "executor")
			var logs lockedBuffer
			m := metrics.New()
			b := heartbeat.Start(context.Background(), heartbeat.Config{
				JS: js, Kind: "executor", Name: "ghost", Interval: time.Hour, Metrics: m,
				Logger: slog.New(slog.NewTextHandler(&logs, nil)),
				Now:    func() time.Time { return time.Now().Add(skew) },
			})
			t.Cleanup(b.Stop)
			b.BeatNow(context.Background()) // an update after Start's put
			b.BeatNow(context.Background())
			offset, uncertainty, ok := b.Offset()
			if !ok {
				t.Fatal("no offset measured after two beats")
			}
			if uncertainty < 0 || uncertainty > time.Second {
				t.Errorf("uncertainty %s, want a round trip's half on a loopback server", uncertainty)
			}
			// The server's stamp and the clock agree to the microsecond
			// here: the skew is within the uncertainty (and a little
			// rounding) of the estimate.
			if d := (offset - skew).Abs(); d > uncertainty+time.Millisecond {
				t.Errorf("offset %s ± %s, want %s", offset, uncertainty, skew)
			}
			if got := testutil.ToFloat64(m.ClockOffset); got != offset.Seconds() {
				t.Errorf("flyball_clock_offset_seconds %v, want %v", got, offset.Seconds())
			}
			if got := testutil.ToFloat64(m.ClockOffsetMeasured); got != 1 {
				t.Errorf("flyball_clock_offset_measured %v, want 1", got)
			}
			// Warned once, on crossing 1 s, not at every beat.
			want := 0
			if skew.Abs() > heartbeat.SkewWarn {
				want = 1
			}
			if n := strings.Count(logs.String(), "clock is off the NATS server's"); n != want {
				t.Errorf("%d clock warnings after three beats, want %d:\n%s", n, want, logs.String())
			}
		})
	}
}

// A clock stepped between beats (chrony correcting it at boot, a VM
// resumed, a hand fix) is measured anew at the next beat: a sample from
// before the step, however precise, no longer counts once the newest
// disagrees with it by more than both their uncertainties. Before, the
// most precise of the last four beats won, and the executor judged
// catchUp none slots by the stale offset for up to a minute.
func TestASteppedClockIsMeasuredAnewAtTheNextBeat(t *testing.T) {
	t.Parallel()
	srv := natstest.StartCompose(t)
	_, js := srv.Connect(t, "executor")
	var skew atomic.Int64
	skew.Store(int64(-2 * time.Second))
	// After the step, each write's reply seems to take 40 ms more (every
	// second reading, a write's end, is late): its sample is the least
	// precise of all, so only its agreement can make it count.
	var stepped atomic.Bool
	var reads atomic.Int64
	now := func() time.Time {
		t := time.Now().Add(time.Duration(skew.Load()))
		if stepped.Load() && reads.Add(1)%2 == 0 {
			t = t.Add(40 * time.Millisecond)
		}
		return t
	}
	b := heartbeat.Start(context.Background(), heartbeat.Config{
		JS: js, Kind: "executor", Name: "stepped", Interval: time.Hour, Metrics: metrics.New(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: now,
	})
	t.Cleanup(b.Stop)
	b.BeatNow(context.Background())
	b.BeatNow(context.Background())
	if offset, _, ok := b.Offset(); !ok || offset > -time.Second {
		t.Fatalf("offset %s (measured %v) before the step, want about -2s", offset, ok)
	}
	skew.Store(0) // the clock is stepped right
	stepped.Store(true)
	b.BeatNow(context.Background())
	offset, uncertainty, _ := b.Offset()
	if offset.Abs() > uncertainty+time.Millisecond {
		t.Fatalf("offset %s ± %s one beat after the clock was stepped right, want about 0: a sample from before the step still counts", offset, uncertainty)
	}
}

// A beat whose read-back fails (a NATS user without the direct get of its
// own runtime entry) measures no offset, and says so once, not at every
// beat; before, nothing said the offset went unmeasured (the gauge at 0,
// the executor judging catchUp none on its own clock).
//
// It says so in a metric too: the write succeeds, so
// flyball_heartbeat_failures_total stays 0, and flyball_clock_offset_seconds
// stays 0 however far off the clock is, so neither FlyballHeartbeatFailing
// nor FlyballClockSkew fired, while an executor 30 s behind the server
// handed back every dispatch more than 15 s ahead by its clock until it was
// dead-lettered. flyball_clock_offset_measured is 0 until a beat measures
// the offset and whenever a read-back fails, 1 once one measures it
// (FlyballClockOffsetUnmeasured).
func TestAFailedReadBackIsWarnedOnce(t *testing.T) {
	t.Parallel()
	srv := natstest.StartCompose(t)
	_, js := srv.Connect(t, "executor")
	var logs lockedBuffer
	m := metrics.New()
	var refused atomic.Bool
	refused.Store(true)
	b := heartbeat.Start(context.Background(), heartbeat.Config{
		JS: noReadBack{JetStream: js, refused: &refused}, Kind: "executor", Name: "unread", Interval: time.Hour, Metrics: m,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Now:    func() time.Time { return time.Now().Add(-30 * time.Second) },
	})
	t.Cleanup(b.Stop)
	for range 4 {
		b.BeatNow(context.Background())
	}
	if _, _, ok := b.Offset(); ok {
		t.Fatal("an offset measured though no beat could be read back")
	}
	if n := strings.Count(logs.String(), "clock offset not measured"); n != 1 {
		t.Fatalf("%d warnings after five beats whose read-back failed, want 1:\n%s", n, logs.String())
	}
	if n := testutil.ToFloat64(m.HeartbeatFailures); n != 0 {
		t.Errorf("flyball_heartbeat_failures_total %v, want 0: every write was stored", n)
	}
	if got := testutil.ToFloat64(m.ClockOffsetMeasured); got != 0 {
		t.Fatalf("flyball_clock_offset_measured %v after five beats whose read-back failed, want 0", got)
	}

	refused.Store(false) // the user may read its entry now
	b.BeatNow(context.Background())
	if offset, _, ok := b.Offset(); !ok || offset > -29*time.Second {
		t.Fatalf("offset %s (measured %v) once the read-back succeeds, want about -30s", offset, ok)
	}
	if got := testutil.ToFloat64(m.ClockOffsetMeasured); got != 1 {
		t.Fatalf("flyball_clock_offset_measured %v after a beat measured the offset, want 1", got)
	}

	// Refused again: the executor keeps the last offset, but the gauge
	// says it is not measured any more, and the beater warns anew.
	refused.Store(true)
	b.BeatNow(context.Background())
	if _, _, ok := b.Offset(); !ok {
		t.Fatal("the offset measured before was dropped at a failed read-back")
	}
	if got := testutil.ToFloat64(m.ClockOffsetMeasured); got != 0 {
		t.Fatalf("flyball_clock_offset_measured %v after a failed read-back, want 0", got)
	}
	if n := strings.Count(logs.String(), "clock offset not measured"); n != 2 {
		t.Fatalf("%d warnings after the read-back failed again, want 2:\n%s", n, logs.String())
	}
}

// noReadBack is a JetStream whose flyball-runtime refuses reads, as for a
// user without the direct get of its entries: always, or while refused
// is set when it is not nil.
type noReadBack struct {
	jetstream.JetStream
	refused *atomic.Bool
}

func (j noReadBack) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := j.JetStream.KeyValue(ctx, bucket)
	if err != nil {
		return nil, err
	}
	return refusedGet{KeyValue: kv, refused: j.refused}, nil
}

type refusedGet struct {
	jetstream.KeyValue
	refused *atomic.Bool
}

func (k refusedGet) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if k.refused != nil && !k.refused.Load() {
		return k.KeyValue.Get(ctx, key)
	}
	return nil, errors.New("nats: permissions violation (injected)")
}

// A beater told NoClock (every beater of a stack but its first: they
// share one clock) does not read its entry back, and so measures nothing:
// here its reads would fail, and no warning comes.
func TestANoClockBeaterDoesNotReadBack(t *testing.T) {
	t.Parallel()
	srv := natstest.StartCompose(t)
	_, js := srv.Connect(t, "executor")
	var logs lockedBuffer
	b := heartbeat.Start(context.Background(), heartbeat.Config{
		JS: noReadBack{JetStream: js}, Kind: "executor", Name: "second", Interval: time.Hour, Metrics: metrics.New(),
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), NoClock: true,
	})
	t.Cleanup(b.Stop)
	b.BeatNow(context.Background())
	if _, _, ok := b.Offset(); ok {
		t.Fatal("a NoClock beater measured an offset")
	}
	if strings.Contains(logs.String(), "clock offset not measured") {
		t.Fatalf("a NoClock beater read its entry back:\n%s", logs.String())
	}
}

// TestStopLeavesTheEntryOfTheInstanceThatReplacedIt: Stop deleted the
// key whoever had written it last. Compose names instances (executor1):
// an old process's clean stop that ended after its replacement under the
// same name registered deleted the new instance's entry, which was then
// missing (and, for flyball status, the service had no instance) until
// its next beat. Stop now deletes only its own entry, on the revision it
// read; its own entry the sweeper marked offline still goes.
func TestStopLeavesTheEntryOfTheInstanceThatReplacedIt(t *testing.T) {
	t.Parallel()
	srv := natstest.StartCompose(t)
	_, js := srv.Connect(t, "executor")
	kv, err := srv.JS.KeyValue(context.Background(), streams.BucketRuntime)
	if err != nil {
		t.Fatal(err)
	}
	key := heartbeat.Key("executor", "ghost")
	old := heartbeat.Start(context.Background(), heartbeat.Config{JS: js, Kind: "executor", Name: "ghost", Interval: time.Hour})
	t.Cleanup(old.Stop)
	replacement := heartbeat.Start(context.Background(), heartbeat.Config{JS: js, Kind: "executor", Name: "ghost", Interval: time.Hour})
	t.Cleanup(replacement.Stop)
	old.Stop()
	ent, err := kv.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("the replacement's entry after the old instance stopped: %v", err)
	}
	var hb events.Heartbeat
	if err := json.Unmarshal(ent.Value(), &hb); err != nil {
		t.Fatal(err)
	}
	if !hb.StartedAt.Equal(replacement.Entry().StartedAt) || hb.Status != events.RuntimeOnline {
		t.Fatalf("entry %+v after the old instance stopped, want the replacement's, online", hb)
	}

	// The replacement's own entry, marked offline by the sweeper since
	// its last beat: its stop deletes it.
	hb.Status = events.RuntimeOffline
	body, err := json.Marshal(hb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(context.Background(), key, body, ent.Revision()); err != nil {
		t.Fatal(err)
	}
	replacement.Stop()
	if _, err := kv.Get(context.Background(), key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the instance's own entry, marked offline, after its stop: %v, want it deleted", err)
	}
}

// TestALateRegistrationIsAnnounced: Start published the start's
// runtime.online once, and a failure was only logged. An instance that
// registered late (streams provisioned after it started) showed online in
// flyball-runtime but never on HEALTH, and Start waited seconds on that
// publish to the missing stream. The announcement now follows the
// registration, from the beat loop, and is retried each beat until stored.
func TestALateRegistrationIsAnnounced(t *testing.T) {
	srv := natstest.Start(t) // no flyball streams or buckets yet
	began := time.Now()
	b := heartbeat.Start(t.Context(), heartbeat.Config{JS: srv.JS, Kind: "executor", Name: "early", Interval: 20 * time.Millisecond})
	t.Cleanup(b.Stop)
	// A publish to the missing HEALTH stream is retried for about 5 s.
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("Start took %s with no streams, want it not to wait on the runtime.online publish", took)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := streams.Ensure(ctx, srv.JS); err != nil {
		t.Fatal(err)
	}
	kv, err := srv.JS.KeyValue(ctx, streams.BucketRuntime)
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 20*time.Second, "the instance registered once the bucket exists", func() bool {
		_, err := kv.Get(ctx, heartbeat.Key("executor", "early"))
		return err == nil
	})
	health, err := srv.JS.Stream(ctx, streams.StreamHealth)
	if err != nil {
		t.Fatal(err)
	}
	subject := events.RuntimeSubject(events.RuntimeOnline, "executor", "early")
	var last error
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last read of %s: %v", subject, last)
		}
	})
	natstest.Eventually(t, 10*time.Second, "runtime.online of the late registration stored", func() bool {
		_, last = health.GetLastMsgForSubject(ctx, subject)
		return last == nil
	})
}

// lastSeq is the stream sequence of the last event HEALTH holds on
// subject, 0 without one.
func lastSeq(t *testing.T, js jetstream.JetStream, subject string) uint64 {
	t.Helper()
	health, err := js.Stream(t.Context(), streams.StreamHealth)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := health.GetLastMsgForSubject(t.Context(), subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return msg.Sequence
}

// TestAStopRightAfterStartAnnouncesOnlineFirst: the beat loop publishes
// the start's runtime.online, under the context Stop cancels, so a stop
// soon after the start (stack.Start stopping the beaters already started
// when a later service fails to start: a crash loop) cancelled it, and
// Stop published runtime.offline alone; each stop also warned "retrying
// next beat", which no beat would. Stop now stores the start's
// runtime.online first when the loop had not, and warns of nothing.
func TestAStopRightAfterStartAnnouncesOnlineFirst(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	var logs lockedBuffer
	for i := range 5 {
		name := "quick" + strconv.Itoa(i)
		b := heartbeat.Start(t.Context(), heartbeat.Config{
			JS: srv.JS, Kind: "executor", Name: name, Interval: time.Hour,
			Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		})
		b.Stop()
		online := lastSeq(t, srv.JS, events.RuntimeSubject(events.RuntimeOnline, "executor", name))
		offline := lastSeq(t, srv.JS, events.RuntimeSubject(events.RuntimeOffline, "executor", name))
		if online == 0 || offline == 0 || online > offline {
			t.Fatalf("stop %d: runtime.online at sequence %d, runtime.offline at %d on HEALTH (0: not stored); want both, online first", i, online, offline)
		}
	}
	if strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("a stop right after the start warned:\n%s", logs.String())
	}
}

// TestAStartAnnouncementNeverStoredBacksOff: a start's runtime.online
// that is never stored (here a user that may not publish it) was tried
// again at every beat for the life of the process, each try waiting up
// to 5 s and each failure a warning (one every 15 s). It is now warned
// once, tried after 1, 2, 4, 8 and then every 16 beats (at debug), and
// each try is bounded well within the beat. The stop says the
// runtime.offline goes alone, and publishes it.
func TestAStartAnnouncementNeverStoredBacksOff(t *testing.T) {
	t.Parallel()
	_, admin, js := natstest.StartDenying(t, "executor", "flyball.runtime.online.>")
	var logs lockedBuffer
	b := heartbeat.Start(t.Context(), heartbeat.Config{
		JS: js, Kind: "executor", Name: "mute", Interval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	t.Cleanup(b.Stop)
	const msg = "the start's runtime.online not published"
	// The loop's first try, then tries after 1, 2, 4, 8, 16, 16 beats.
	tries := map[int]bool{0: true, 1: true, 3: true, 7: true, 15: true, 31: true}
	want := 1
	b.Tried()
	for beat := 1; beat <= 40; beat++ {
		began := time.Now()
		b.BeatNow(t.Context())
		if took := time.Since(began); took > 4*time.Second {
			t.Errorf("beat %d took %s: the try at the runtime.online is not bounded", beat, took)
		}
		if tries[beat] {
			want++
		}
		if n := strings.Count(logs.String(), msg); n != want {
			t.Fatalf("%d tries at the start's runtime.online after %d beats, want %d:\n%s", n, beat, want, logs.String())
		}
	}
	if n := strings.Count(logs.String(), "level=WARN msg=\""+msg); n != 1 {
		t.Fatalf("%d warnings for the start's runtime.online, want 1 (then debug):\n%s", n, logs.String())
	}
	b.Stop()
	if !strings.Contains(logs.String(), "runtime.offline published without the start's runtime.online") {
		t.Errorf("the stop did not say its runtime.offline went alone:\n%s", logs.String())
	}
	if n := lastSeq(t, admin, events.RuntimeSubject(events.RuntimeOffline, "executor", "mute")); n == 0 {
		t.Error("no runtime.offline stored at the stop")
	}
	if n := lastSeq(t, admin, events.RuntimeSubject(events.RuntimeOnline, "executor", "mute")); n != 0 {
		t.Errorf("runtime.online stored at %d by a user that may not publish it", n)
	}
}

// muted is a JetStream that publishes through a connection of a user that
// may not publish flyball.runtime.online.> while mute is set (a real
// permissions violation, never answered), and through one that may
// otherwise; tries counts the publishes of runtime.online made muted.
type muted struct {
	jetstream.JetStream
	refused jetstream.JetStream
	mute    atomic.Bool
	tries   atomic.Int64
}

func (m *muted) PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if !m.mute.Load() {
		return m.JetStream.PublishMsg(ctx, msg, opts...)
	}
	if strings.HasPrefix(msg.Subject, "flyball.runtime.online.") {
		m.tries.Add(1)
	}
	return m.refused.PublishMsg(ctx, msg, opts...)
}

// returnSetup starts a server with streams, a user that may publish
// everything (admin) and one that may not publish runtime.online (mute),
// and a beater named name whose publishes go through mute while js.mute
// is set. Its start's runtime.online is stored (js is not muted yet).
func returnSetup(t *testing.T, name string) (admin jetstream.JetStream, js *muted, b *heartbeat.Beater, logs *lockedBuffer) {
	t.Helper()
	srv, admin, refused := natstest.StartDenying(t, "mute", "flyball.runtime.online.>")
	_, open := natstest.ConnectAs(t, srv, "admin", "pw")
	js = &muted{JetStream: open, refused: refused}
	logs = &lockedBuffer{}
	b = heartbeat.Start(t.Context(), heartbeat.Config{
		JS: js, Kind: "executor", Name: name, Interval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	t.Cleanup(b.Stop)
	b.Tried()
	if n := storedIn(t, admin, events.RuntimeSubject(events.RuntimeOnline, "executor", name)); n != 1 {
		t.Fatalf("%d runtime.online stored at the start, want 1", n)
	}
	return admin, js, b, logs
}

// storedIn counts the events HEALTH holds on subject.
func storedIn(t *testing.T, js jetstream.JetStream, subject string) uint64 {
	t.Helper()
	st, err := js.Stream(t.Context(), streams.StreamHealth)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subject]
}

// markEntryOffline writes the sweeper's offline mark over the instance's
// entry, as the sweeper would, and returns the event ID of the
// runtime.online that announces its return (the mark's lastBeat).
func markEntryOffline(t *testing.T, admin jetstream.JetStream, name string) string {
	t.Helper()
	kv, err := admin.KeyValue(t.Context(), streams.BucketRuntime)
	if err != nil {
		t.Fatal(err)
	}
	key := heartbeat.Key("executor", name)
	ent, err := kv.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	var hb events.Heartbeat
	if err := json.Unmarshal(ent.Value(), &hb); err != nil {
		t.Fatal(err)
	}
	hb.Status = events.RuntimeOffline
	body, err := json.Marshal(hb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(t.Context(), key, body, ent.Revision()); err != nil {
		t.Fatal(err)
	}
	return "runtime:online:" + key + ":" + strconv.FormatInt(hb.LastBeat.UnixNano(), 10)
}

// lastID is the event ID (Nats-Msg-Id) of the last event HEALTH holds on
// subject.
func lastID(t *testing.T, js jetstream.JetStream, subject string) string {
	t.Helper()
	health, err := js.Stream(t.Context(), streams.StreamHealth)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := health.GetLastMsgForSubject(t.Context(), subject)
	if err != nil {
		t.Fatal(err)
	}
	return msg.Header.Get(jetstream.MsgIDHeader)
}

// warnings counts the warnings about a runtime.online in logs.
func warnings(logs *lockedBuffer) int {
	n := 0
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "runtime.online") {
			n++
		}
	}
	return n
}

// TestAReturnAnnouncementNeverStoredBacksOff: the runtime.online of an
// instance back from the sweeper's offline mark was tried at every beat,
// under the whole beat's context (a denied publish is never answered, so
// each try waited for it), with a warning each time, for the life of the
// process when it was never stored (a user that may not publish it). It
// now backs off as the start's does: tried at once, then 1, 2, 4, 8 and
// then every 16 beats later, each try bounded, warned once and then
// logged at debug. Once it may be published, the next try stores it,
// under the mark's event ID, once.
func TestAReturnAnnouncementNeverStoredBacksOff(t *testing.T) {
	t.Parallel()
	admin, js, b, logs := returnSetup(t, "back")
	subject := events.RuntimeSubject(events.RuntimeOnline, "executor", "back")
	js.mute.Store(true)
	id := markEntryOffline(t, admin, "back")
	// Tries at the beat that finds the mark, then after 1, 2, 4, 8 beats.
	tries := map[int]bool{1: true, 2: true, 4: true, 8: true, 16: true}
	want := int64(0)
	for beat := 1; beat <= 31; beat++ {
		began := time.Now()
		b.BeatNow(t.Context())
		if took := time.Since(began); took > 4*time.Second {
			t.Errorf("beat %d took %s: the try at the return's runtime.online is not bounded", beat, took)
		}
		if n := warnings(logs); n != 1 {
			t.Fatalf("%d warnings about a runtime.online after %d beats, want 1 (then debug):\n%s", n, beat, logs.String())
		}
		if tries[beat] {
			want++
		}
		if n := js.tries.Load(); n != want {
			t.Fatalf("%d tries at the return's runtime.online after %d beats, want %d:\n%s", n, beat, want, logs.String())
		}
	}
	if n := strings.Count(logs.String(), "the return's runtime.online not published"); n != 5 {
		t.Fatalf("%d failed tries logged, want 5:\n%s", n, logs.String())
	}
	if n := storedIn(t, admin, subject); n != 1 {
		t.Fatalf("%d runtime.online stored while the user may not publish it, want 1 (the start)", n)
	}

	js.mute.Store(false)   // the user may publish it now
	b.BeatNow(t.Context()) // beat 32: the next try (16 beats after the last)
	if n := storedIn(t, admin, subject); n != 2 {
		t.Fatalf("%d runtime.online stored at the try after the user may publish it, want 2 (the start, and the return)", n)
	}
	if got := lastID(t, admin, subject); got != id {
		t.Fatalf("the return's runtime.online stored under event ID %q, want %q (the mark's)", got, id)
	}
	if n := strings.Count(logs.String(), "back online after being marked offline"); n != 1 {
		t.Fatalf("%d lines \"back online after being marked offline\", want 1:\n%s", n, logs.String())
	}
	for range 3 {
		b.BeatNow(t.Context())
	}
	if n := storedIn(t, admin, subject); n != 2 {
		t.Fatalf("%d runtime.online stored after more beats, want 2 (the return stored once)", n)
	}
}

// TestAStopAnnouncesAPendingReturnFirst: a return from an offline mark
// whose runtime.online the beats had not stored was dropped at the stop,
// and HEALTH held the sweeper's runtime.offline and then the stop's, as
// if the instance never came back. The stop now publishes it before the
// runtime.offline, as it does the start's; if it still cannot, the
// runtime.offline goes alone and the warning says so.
func TestAStopAnnouncesAPendingReturnFirst(t *testing.T) {
	t.Parallel()
	for _, allowed := range []bool{true, false} {
		t.Run("allowed="+strconv.FormatBool(allowed), func(t *testing.T) {
			t.Parallel()
			admin, js, b, logs := returnSetup(t, "back")
			online := events.RuntimeSubject(events.RuntimeOnline, "executor", "back")
			offline := events.RuntimeSubject(events.RuntimeOffline, "executor", "back")
			js.mute.Store(true)
			id := markEntryOffline(t, admin, "back")
			b.BeatNow(t.Context()) // the try fails: next in 1 beat
			js.mute.Store(!allowed)
			b.Stop()
			if lastSeq(t, admin, offline) == 0 {
				t.Fatal("no runtime.offline stored at the stop")
			}
			if !allowed {
				if n := storedIn(t, admin, online); n != 1 {
					t.Fatalf("%d runtime.online stored by a user that may not publish it, want 1 (the start)", n)
				}
				if !strings.Contains(logs.String(), "runtime.offline published without the return's runtime.online") {
					t.Fatalf("the stop did not say its runtime.offline went without the return's runtime.online:\n%s", logs.String())
				}
				return
			}
			if n := storedIn(t, admin, online); n != 2 {
				t.Fatalf("%d runtime.online stored after the stop, want 2 (the start, and the return)", n)
			}
			if got := lastID(t, admin, online); got != id {
				t.Fatalf("the return's runtime.online stored under event ID %q, want %q (the mark's)", got, id)
			}
			if on, off := lastSeq(t, admin, online), lastSeq(t, admin, offline); on > off {
				t.Fatalf("the return's runtime.online at sequence %d, after the stop's runtime.offline at %d", on, off)
			}
		})
	}
}

// A second offline mark while the return from the first is not stored
// replaces it: the next beat announces the return from the second, under
// its own event ID, tried at once (and warned, as a new failure), and
// the return from the first is never published.
func TestASecondMarkReplacesAPendingReturn(t *testing.T) {
	t.Parallel()
	admin, js, b, logs := returnSetup(t, "twice")
	subject := events.RuntimeSubject(events.RuntimeOnline, "executor", "twice")
	js.mute.Store(true)
	markEntryOffline(t, admin, "twice")
	b.BeatNow(t.Context())
	id := markEntryOffline(t, admin, "twice")
	b.BeatNow(t.Context()) // finds the second mark: tried at once
	if n := js.tries.Load(); n != 2 {
		t.Fatalf("%d tries after two marks, want 2 (one at each)", n)
	}
	if n := warnings(logs); n != 2 {
		t.Fatalf("%d warnings after two marks whose returns failed, want 2:\n%s", n, logs.String())
	}
	js.mute.Store(false)
	b.BeatNow(t.Context()) // next try 1 beat after the failure
	if n := storedIn(t, admin, subject); n != 2 {
		t.Fatalf("%d runtime.online stored, want 2 (the start, and the return from the second mark)", n)
	}
	if got := lastID(t, admin, subject); got != id {
		t.Fatalf("the return stored under event ID %q, want %q (the second mark's)", got, id)
	}
	b.BeatNow(t.Context())
	b.BeatNow(t.Context())
	if n := storedIn(t, admin, subject); n != 2 {
		t.Fatalf("%d runtime.online stored after more beats, want 2", n)
	}
}

// markAfterGet is a JetStream whose flyball-runtime runs after (once
// armed, and once) right after a Get returns: the sweeper's offline mark
// landing between the read of a beat whose Update conflicted and its
// write.
type markAfterGet struct {
	jetstream.JetStream
	after atomic.Pointer[func()]
}

func (j *markAfterGet) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := j.JetStream.KeyValue(ctx, bucket)
	if err != nil {
		return nil, err
	}
	return &hookedGet{KeyValue: kv, after: &j.after}, nil
}

type hookedGet struct {
	jetstream.KeyValue
	after *atomic.Pointer[func()]
}

func (k *hookedGet) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	ent, err := k.KeyValue.Get(ctx, key)
	if f := k.after.Swap(nil); f != nil {
		(*f)()
	}
	return ent, err
}

// TestAMarkBetweenAConflictsReadAndItsWriteIsAnnounced: after a beat's
// Update conflicted, the beater read the entry and, finding its own,
// wrote an unconditional Put. The sweeper's offline mark stored between
// that read and the Put was erased unseen: KV said online, but no
// runtime.online followed the sweeper's runtime.offline, and HEALTH left
// a live instance offline. The write is now conditional on the revision
// read, and a conflict reads again: the mark is seen, and the return
// announced under its event ID.
func TestAMarkBetweenAConflictsReadAndItsWriteIsAnnounced(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	js := &markAfterGet{JetStream: srv.JS}
	b := heartbeat.Start(t.Context(), heartbeat.Config{JS: js, Kind: "executor", Name: "raced", Interval: time.Hour, NoClock: true})
	t.Cleanup(b.Stop)
	b.Tried()
	subject := events.RuntimeSubject(events.RuntimeOnline, "executor", "raced")
	if n := storedIn(t, srv.JS, subject); n != 1 {
		t.Fatalf("%d runtime.online stored at the start, want 1", n)
	}
	// The instance's own beat whose reply was lost: the next Update
	// conflicts, and the beater reads the entry.
	kv, err := srv.JS.KeyValue(t.Context(), streams.BucketRuntime)
	if err != nil {
		t.Fatal(err)
	}
	hb := b.Entry()
	hb.LastBeat = time.Now().UTC()
	body, err := json.Marshal(hb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), heartbeat.Key("executor", "raced"), body); err != nil {
		t.Fatal(err)
	}
	var id string
	mark := func() { id = markEntryOffline(t, srv.JS, "raced") }
	js.after.Store(&mark)
	b.BeatNow(t.Context())
	if id == "" {
		t.Fatal("the beat read no entry after its conflict")
	}
	ent, err := kv.Get(t.Context(), heartbeat.Key("executor", "raced"))
	if err != nil {
		t.Fatal(err)
	}
	var now events.Heartbeat
	if err := json.Unmarshal(ent.Value(), &now); err != nil || now.Status != events.RuntimeOnline {
		t.Fatalf("entry after the beat: %s (%v), want online", ent.Value(), err)
	}
	if n := storedIn(t, srv.JS, subject); n != 2 {
		t.Fatalf("%d runtime.online stored after a beat over the sweeper's offline mark, want 2 (the start, and the return)", n)
	}
	if got := lastID(t, srv.JS, subject); got != id {
		t.Fatalf("the return's runtime.online stored under event ID %q, want %q (the mark's)", got, id)
	}
}

// TestABeatThatLosesEveryCASTryFailsAndTheNextBeatRegisters: a second
// instance under the same kind and name writes the entry between each of
// a beat's reads and its compare-and-set, every time. The beat gives up
// after writeTries (3) conflicts with an error naming the key, counts and
// logs it, and the beat loop goes on: its next beat, with no one writing
// in between, puts the instance back.
func TestABeatThatLosesEveryCASTryFailsAndTheNextBeatRegisters(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	js := &markAfterGet{JetStream: srv.JS}
	var logs lockedBuffer
	m := metrics.New()
	// The beat loop's own ticker beats, as in a service; no read-back, so
	// that the only reads are the CAS's.
	b := heartbeat.Start(t.Context(), heartbeat.Config{
		JS: js, Kind: "executor", Name: "twin", Interval: 200 * time.Millisecond, NoClock: true, Metrics: m,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	t.Cleanup(b.Stop)
	b.Tried()
	kv, err := srv.JS.KeyValue(t.Context(), streams.BucketRuntime)
	if err != nil {
		t.Fatal(err)
	}
	key := heartbeat.Key("executor", "twin")
	entry := func() (events.Heartbeat, uint64) {
		ent, err := kv.Get(t.Context(), key)
		if err != nil {
			return events.Heartbeat{}, 0
		}
		var hb events.Heartbeat
		if err := json.Unmarshal(ent.Value(), &hb); err != nil {
			t.Fatalf("entry %s: %v", ent.Value(), err)
		}
		return hb, ent.Revision()
	}
	own := b.Entry()
	twin := own
	twin.PID++
	body, err := json.Marshal(twin)
	if err != nil {
		t.Fatal(err)
	}
	// The twin wins each of the next 3 tries: it writes right after each
	// read, so the write conditional on that read conflicts.
	var wins atomic.Int32
	var rival func()
	rival = func() {
		if _, err := kv.Put(context.Background(), key, body); err != nil {
			t.Errorf("the twin's write: %v", err)
			return
		}
		if wins.Add(1) < 3 {
			js.after.Store(&rival)
		}
	}
	js.after.Store(&rival)
	// The twin's first write: the next beat's update conflicts, and the
	// CAS reads.
	if _, err := kv.Put(t.Context(), key, body); err != nil {
		t.Fatal(err)
	}
	want := `"heartbeat failed; retrying next tick" kind=executor name=twin err="write executor.twin: 3 CAS conflicts in a row`
	natstest.Eventually(t, 5*time.Second, "the beat that lost every CAS try logged", func() bool { return strings.Contains(logs.String(), want) })
	if n := wins.Load(); n != 3 {
		t.Fatalf("the twin won %d tries, want 3", n)
	}
	if n := testutil.ToFloat64(m.HeartbeatFailures); n < 1 {
		t.Errorf("flyball_heartbeat_failures_total %v after the failed beat, want it counted", n)
	}
	var back uint64
	natstest.Eventually(t, 5*time.Second, "the instance's own entry back at a later beat", func() bool {
		hb, rev := entry()
		back = rev
		return hb.PID == own.PID && hb.Status == events.RuntimeOnline
	})
	natstest.Eventually(t, 5*time.Second, "the loop beating on", func() bool {
		_, rev := entry()
		return rev > back
	})
	if !strings.Contains(logs.String(), "another instance beats under this kind and name") {
		t.Errorf("the twin was not logged:\n%s", logs.String())
	}
}
