// Package heartbeat registers a service instance in KV flyball-runtime and
// keeps its entry fresh. The sweeper marks entries whose last beat is too
// old as offline. A failed beat is logged, counted and retried on the next
// tick; it never stops the service.
package heartbeat

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/streams"
)

// DefaultInterval is how often an instance beats.
const DefaultInterval = 15 * time.Second

// Config describes the instance.
type Config struct {
	JS       jetstream.JetStream
	Kind     string
	Name     string
	Version  string
	Capacity int
	// Interval defaults to 15s.
	Interval time.Duration
	Logger   *slog.Logger
	Metrics  *metrics.Set
	// Now is the process's clock, whose offset from the NATS server's
	// each beat measures (Offset). Defaults to time.Now; tests skew it.
	Now func() time.Time
	// NoClock skips the measurement (and its read-back): a process with
	// several beaters measures its one clock with the first (stack).
	NoClock bool
}

// maxAnnounceGap is the most beats between two tries at a runtime.online
// that was not stored (16: 4 min at the default interval).
const maxAnnounceGap = 16

// announceTimeout bounds one try at a runtime.online: a publish nobody
// answers (a subject the user may not publish to, a stream with no
// leader) waits for its whole context, which was the beat's (15 s). A
// fixed bound, not a share of the interval: tests beat every few ms.
const announceTimeout = 2 * time.Second

// stopTimeout bounds Stop's deregistration and announcements.
const stopTimeout = 2 * time.Second

// SkewWarn is the clock offset from the NATS server past which the beater
// warns (once on crossing, and once more when back within it).
const SkewWarn = time.Second

// offsetSamples is how many beats' measurements Offset chooses from.
const offsetSamples = 4

// sample is one beat's measurement of the process's clock minus the
// server's: offset ± uncertainty.
type sample struct{ offset, uncertainty time.Duration }

// Key is the KV key of an instance: <kind>.<name>.
func Key(kind, name string) string { return kind + "." + name }

// returnID is the event ID of the runtime.online that announces the
// return of the instance under key after the sweeper marked it offline;
// staleBeat is the last beat the sweeper found too old (the offline
// record's lastBeat), so a retried announcement is stored once. Only the
// instance announces a return: it alone knows it was marked, across any
// sweeper restart.
func returnID(key string, staleBeat time.Time) string {
	return "runtime:online:" + key + ":" + strconv.FormatInt(staleBeat.UnixNano(), 10)
}

// Beater keeps one instance's registration alive.
type Beater struct {
	cfg Config
	// kv is bound at the first beat that can: nil until then, and only the
	// beating goroutine (Start's first beat, then loop) touches it before
	// Stop.
	kv     jetstream.KeyValue
	hb     events.Heartbeat
	source string
	stop   chan struct{}
	done   chan struct{}
	// beating is the parent of each beat's context; Stop cancels it.
	beating  context.Context //nolint:containedctx // cancels the beat in flight at Stop
	stopBeat context.CancelFunc
	// rev is the revision of the beater's last write (0 before it): each
	// later beat is a compare-and-set on it, so a write by anyone else in
	// between (the sweeper marking the instance offline) is noticed.
	rev uint64
	// unread is whether the last read-back for the clock offset failed
	// (warned once). Only the beat loop touches it.
	unread bool
	// start is the start's runtime.online: published once the instance
	// is registered, and retried until stored (announceStart).
	start announcement
	// tried is closed once the loop has made its first try at the start's
	// runtime.online (tests' BeatNow waits for it).
	tried chan struct{}
	// back is the runtime.online of the instance's return from an offline
	// mark, while it is not stored (nil otherwise): retried as the
	// start's is (announceReturn).
	back *announcement
	// samples are the last offsetSamples measurements of the clock
	// offset, newest last; skewed is whether the offset reported last was
	// past SkewWarn. Only the beat loop touches them. current is the one
	// Offset reports (best), nil before the first: read on every
	// dispatch by the executor, so without a lock.
	samples []sample
	skewed  bool
	current atomic.Pointer[sample]
}

// Start registers the instance and beats until Stop. Registration failure
// is not fatal: the next beat retries it, and so is a failure to bind KV
// flyball-runtime (each beat binds it again until it can). Once registered,
// the instance announces runtime.online, from the beat loop (Start does not
// wait for it: a publish to a missing HEALTH stream takes seconds), and
// tries again, backing off, until it is stored (announceStart). Nothing it
// meets stops it, so it returns no error.
func Start(ctx context.Context, cfg Config) *Beater {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	cfg.Name = events.SanitizeToken(cfg.Name)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Metrics = metrics.OrNew(cfg.Metrics)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	host, _ := os.Hostname()
	now := time.Now().UTC()
	b := &Beater{
		cfg: cfg, source: jsutil.Source(cfg.Kind, cfg.Name),
		hb: events.Heartbeat{
			Kind: cfg.Kind, Name: cfg.Name, PID: os.Getpid(), Host: host, Version: cfg.Version,
			Capacity: cfg.Capacity, Status: events.RuntimeOnline, StartedAt: now, Interval: events.Duration(cfg.Interval),
		},
		stop: make(chan struct{}), done: make(chan struct{}), tried: make(chan struct{}),
	}
	b.start = announcement{
		what:    "the start's runtime.online",
		publish: func(ctx context.Context) error { return b.announce(ctx, events.RuntimeOnline) },
	}
	b.beating, b.stopBeat = context.WithCancel(context.Background())
	b.register(ctx)
	go b.loop()
	return b
}

func (b *Beater) loop() {
	defer close(b.done)
	b.announceStart(b.beating) // each try bounded by announceTimeout
	close(b.tried)
	t := time.NewTicker(b.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(b.beating, b.cfg.Interval)
			b.beat(ctx)
			cancel()
		}
	}
}

func (b *Beater) beat(ctx context.Context) {
	if !b.register(ctx) {
		return
	}
	b.announceStart(ctx)
	b.announceReturn(ctx)
}

// register writes the instance's entry, and reports whether it was stored
// (a failure is logged and counted).
func (b *Beater) register(ctx context.Context) bool {
	b.hb.LastBeat = time.Now().UTC()
	body, err := json.Marshal(b.hb)
	if err == nil {
		err = b.write(ctx, body)
	}
	if err != nil {
		b.cfg.Metrics.HeartbeatFailures.Inc()
		b.cfg.Logger.Warn("heartbeat failed; retrying next tick", "kind", b.cfg.Kind, "name", b.cfg.Name, "err", err)
		return false
	}
	return true
}

// writeTries bounds the reads and conditional writes of one beat that
// found the entry written by someone else: each conflict is a write in
// between, and a beat that loses them all fails, counted and retried at
// the next tick.
const writeTries = 3

// write stores body as the instance's entry. The first beat puts it; each
// later one updates the revision of the beat before, and a conflict means
// someone else wrote the key since. If that was the sweeper marking this
// instance offline (it was silent too long: a pause, a partition), the
// beat puts it back online and the return is announced (back). Anything
// else (a second instance under the same kind and name, a deleted key, a
// beat of its own whose Update reply was lost) is overwritten. That
// write is conditional on the revision read (a create if there is none),
// and a conflict reads again: an unconditional put erased an offline
// mark stored between the read and the write, unseen, so no return was
// announced and HEALTH left the live instance offline.
func (b *Beater) write(ctx context.Context, body []byte) error {
	if b.kv == nil {
		// Not bound at start (a request that timed out, a stream electing
		// a leader, streams not provisioned yet): a service whose bind
		// failed once used to run without a beat for its whole life.
		kv, err := b.cfg.JS.KeyValue(ctx, streams.BucketRuntime)
		if err != nil {
			return fmt.Errorf("bind KV %s: %w", streams.BucketRuntime, err)
		}
		b.kv = kv
	}
	key := Key(b.cfg.Kind, b.cfg.Name)
	if b.rev == 0 {
		t0 := b.cfg.Now()
		rev, err := b.kv.Put(ctx, key, body)
		if err != nil {
			return err
		}
		b.wrote(ctx, key, rev, t0)
		return nil
	}
	t0 := b.cfg.Now()
	rev, err := b.kv.Update(ctx, key, body, b.rev)
	if err == nil {
		b.wrote(ctx, key, rev, t0)
		return nil
	}
	if !jsutil.IsCASConflict(err) {
		return err
	}
	warned := false
	rev, err = jsutil.CAS(ctx, b.kv, key, writeTries, func(cur []byte) ([]byte, error) {
		if cur != nil {
			// Not reported: this instance's own beat, stored although its
			// Update failed (the reply was lost).
			var prev events.Heartbeat
			readable := json.Unmarshal(cur, &prev) == nil
			switch {
			case readable && prev.Status == events.RuntimeOffline:
				b.returned(&prev)
			case (!readable || !b.own(&prev)) && !warned:
				warned = true
				b.cfg.Logger.Warn("another instance beats under this kind and name", "kind", b.cfg.Kind, "name", b.cfg.Name)
			}
		}
		t0 = b.cfg.Now()
		return body, nil
	})
	if err != nil {
		return err
	}
	b.wrote(ctx, key, rev, t0)
	return nil
}

// wrote records the beater's write of revision rev, sent at t0, and
// measures the clock offset by it.
func (b *Beater) wrote(ctx context.Context, key string, rev uint64, t0 time.Time) {
	b.rev = rev
	b.measure(ctx, key, rev, t0, b.cfg.Now())
}

// measure estimates the process's clock minus the NATS server's, as NTP
// does with one exchange: the write of revision rev was sent at t0 and
// its reply came at t1 (the process's clock), and the server stamped it
// (the entry's Created, on the server's clock) in between. So the offset
// lies in [t0 − created, t1 − created]: the estimate is the midpoint,
// within half the round trip. The entry is read back for its stamp (one
// KV read a beat); one written since by anyone else (another revision)
// measures nothing, and neither does a failed read: it sets
// flyball_clock_offset_measured to 0 (record sets it to 1), and is logged
// once until a read succeeds again. A NATS user without the direct get of
// its own entry left the offset unmeasured (its gauge at 0, the executor
// on its own clock) with no alert: its writes were stored, so no
// heartbeat failure was counted either.
func (b *Beater) measure(ctx context.Context, key string, rev uint64, t0, t1 time.Time) {
	if b.cfg.NoClock {
		return
	}
	ent, err := b.kv.Get(ctx, key)
	if err != nil {
		if ctx.Err() != nil {
			return // stopping, or the beat ran out of time
		}
		b.cfg.Metrics.ClockOffsetMeasured.Set(0)
		if !b.unread {
			b.unread = true
			b.cfg.Logger.Warn("clock offset not measured: the heartbeat could not be read back; it is tried again each beat",
				"kind", b.cfg.Kind, "name", b.cfg.Name, "err", err)
		}
		return
	}
	b.unread = false
	if ent.Revision() != rev {
		return
	}
	half := t1.Sub(t0) / 2
	b.record(sample{offset: t0.Sub(ent.Created()) + half, uncertainty: half})
}

// record keeps s among the last offsetSamples measurements, and exports
// and judges the one Offset reports.
func (b *Beater) record(s sample) {
	b.samples = append(b.samples, s)
	if len(b.samples) > offsetSamples {
		b.samples = b.samples[len(b.samples)-offsetSamples:]
	}
	best := b.best()
	b.current.Store(&best)
	crossed := best.offset.Abs() > SkewWarn
	changed := crossed != b.skewed
	b.skewed = crossed
	b.cfg.Metrics.ClockOffset.Set(best.offset.Seconds())
	b.cfg.Metrics.ClockOffsetMeasured.Set(1)
	switch {
	case changed && crossed:
		b.cfg.Logger.Warn("this host's clock is off the NATS server's by more than "+SkewWarn.String()+"; keep both synchronized (NTP, chrony)",
			"kind", b.cfg.Kind, "name", b.cfg.Name, "offset", best.offset, "uncertainty", best.uncertainty)
	case changed:
		b.cfg.Logger.Info("this host's clock is back within "+SkewWarn.String()+" of the NATS server's",
			"kind", b.cfg.Kind, "name", b.cfg.Name, "offset", best.offset, "uncertainty", best.uncertainty)
	}
}

// best is the measurement with the smallest uncertainty among the last
// offsetSamples that agree with the newest (the newest of equals): a round
// trip slowed by a busy server widens one beat's bounds, and the clocks
// drift far less in a minute of beats than such a round trip. A sample
// whose bounds and the newest's do not overlap measured a clock stepped
// since (chrony at boot, a VM resumed, a hand fix) and no longer counts:
// the executor would judge catchUp none slots by it.
func (b *Beater) best() sample {
	newest := b.samples[len(b.samples)-1]
	best := newest
	for _, s := range b.samples {
		if (s.offset - newest.offset).Abs() > s.uncertainty+newest.uncertainty {
			continue
		}
		if s.uncertainty < best.uncertainty {
			best = s
		}
	}
	return best
}

// Offset reports this process's clock minus the NATS server's, as the
// beats measured it: the estimate with the smallest uncertainty among
// those of the last 4 beats (a minute at the default interval) that agree
// with the newest (best), and that
// uncertainty (half the write's round trip). ok is false before any beat
// measured it. Safe for concurrent use, and lock-free.
func (b *Beater) Offset() (offset, uncertainty time.Duration, ok bool) {
	s := b.current.Load()
	if s == nil {
		return 0, 0, false
	}
	return s.offset, s.uncertainty, true
}

// own reports whether hb was written by this beater: an Update that
// failed without a conflict (a timeout, a request flushed after a
// reconnect) may have been stored all the same.
func (b *Beater) own(hb *events.Heartbeat) bool {
	return hb.PID == b.hb.PID && hb.Host == b.hb.Host && hb.StartedAt.Equal(b.hb.StartedAt)
}

// announcement is a runtime.online the beat loop retries until it is
// stored: the start's (Beater.start) and the return's from an offline
// mark (Beater.back). publish stores it under one event ID, so a retry is
// stored once within HEALTH's duplicate window (2 min): a try stored
// whose ack came after announceTimeout counts as failed, and a retry 8 or
// 16 beats later stores the same event a second time (the same ID and
// content). A failed try is warned once (then logged at debug, with
// the count) and tried again 1, 2, 4, 8 and then every maxAnnounceGap
// beats later; each try is bounded by announceTimeout. One never stored
// (a user that may not publish it) was tried, and warned, at every beat
// for the life of the process, each try waiting up to a beat.
type announcement struct {
	// what names it in the logs; attrs are added to its log lines. id is
	// a return's event ID (returned), empty for the start's.
	what    string
	id      string
	attrs   []any
	publish func(context.Context) error
	// stored is whether a try stored it. failed counts the tries that
	// failed; skip is the beats to let pass before the next.
	stored bool
	failed int
	skip   int
}

// try publishes a if it is not stored and a try is due at this beat, and
// reports whether this try stored it. A try cut short by Stop counts for
// nothing: Stop tries again (announceStop).
func (b *Beater) try(ctx context.Context, a *announcement) bool {
	if a.stored {
		return false
	}
	if a.skip > 0 {
		a.skip--
		return false
	}
	err := a.publishWithin(ctx, announceTimeout)
	switch {
	case err == nil:
		return true
	case b.beating.Err() != nil:
		return false // stopping
	}
	a.failed++
	gap := min(1<<min(a.failed-1, 30), maxAnnounceGap)
	a.skip = gap - 1
	level := slog.LevelDebug
	if a.failed == 1 {
		level = slog.LevelWarn
	}
	b.cfg.Logger.Log(ctx, level, a.what+" not published; tried again with backoff, up to every "+strconv.Itoa(maxAnnounceGap)+" beats",
		append([]any{"kind", b.cfg.Kind, "name", b.cfg.Name, "tries", a.failed, "nextTryIn", time.Duration(gap) * b.cfg.Interval, "err", err}, a.attrs...)...)
	return false
}

// announceStart publishes the start's runtime.online once the instance is
// registered (an entry stored), unless it is stored already. An instance
// that registered late (streams provisioned after it started, KV
// unreachable at start) announced nothing: its one try, at Start, had
// failed, and it showed online in flyball-runtime but never on HEALTH.
// Failed tries back off (announcement).
func (b *Beater) announceStart(ctx context.Context) {
	if b.rev == 0 {
		return
	}
	if b.try(ctx, &b.start) && b.start.failed > 0 {
		b.cfg.Logger.Info("the start's runtime.online published", "kind", b.cfg.Kind, "name", b.cfg.Name, "tries", b.start.failed+1)
	}
}

// returned makes the runtime.online of the instance's return from the
// offline mark from (the sweeper's record) the one to publish (back). A
// mark made while the return from an earlier one was not stored yet
// replaces it, tried at once and warned anew if it fails: HEALTH then
// holds both runtime.offline and one runtime.online after them, which
// tells the same. The same mark read again (the put that followed it
// failed) keeps its tries.
func (b *Beater) returned(from *events.Heartbeat) {
	id := returnID(Key(b.cfg.Kind, b.cfg.Name), from.LastBeat)
	if b.back != nil && b.back.id == id {
		return
	}
	b.back = &announcement{
		what:  "the return's runtime.online",
		id:    id,
		attrs: []any{"silentSince", from.LastBeat},
		publish: func(ctx context.Context) error {
			return jsutil.PublishEvent(ctx, b.cfg.JS, events.RuntimeSubject(events.RuntimeOnline, b.cfg.Kind, b.cfg.Name),
				id, events.TypeRuntimeOnline, b.source, b.cfg.Name, b.hb, time.Now().UTC())
		},
	}
}

// announceReturn publishes the runtime.online of the instance's return
// from an offline mark (back), if one is not stored yet. Failed tries
// back off as the start's do (announcement).
func (b *Beater) announceReturn(ctx context.Context) {
	if b.back == nil || !b.try(ctx, b.back) {
		return
	}
	b.cfg.Logger.Info("back online after being marked offline",
		append([]any{"kind", b.cfg.Kind, "name", b.cfg.Name, "tries", b.back.failed + 1}, b.back.attrs...)...)
	b.back = nil
}

// announce publishes st for this instance's start (its event ID, so a
// retry is stored once).
func (b *Beater) announce(ctx context.Context, st events.RuntimeStatus) error {
	hb := b.hb
	hb.Status = st
	id := b.source + ":" + string(st) + ":" + hb.StartedAt.Format(time.RFC3339Nano)
	return jsutil.PublishEvent(ctx, b.cfg.JS, events.RuntimeSubject(st, b.cfg.Kind, b.cfg.Name), id,
		st.Type(), b.source, b.cfg.Name, hb, time.Now().UTC())
}

// Stop deregisters the instance: it deletes its KV entry and announces
// runtime.offline. Idempotent. Only its own entry (own: the sweeper's
// offline mark of it too) is deleted, on the revision read: a same-named
// replacement (compose names instances, executor1) that registered before
// this stop ended keeps its entry, which an unconditional delete removed
// until its next beat.
func (b *Beater) Stop() {
	select {
	case <-b.stop:
		return
	default:
	}
	close(b.stop)
	// A beat in flight while NATS is unreachable waits up to an interval
	// (15s) for its reply: the process stopping would wait with it.
	b.stopBeat()
	<-b.done
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if b.kv != nil {
		b.deregister(ctx)
	}
	b.announceStop(ctx)
}

// announceStop publishes runtime.offline, after the start's runtime.online
// if the instance registered and the beat loop had not stored it yet, and
// after the return's (back) if one is pending: a stop soon after the
// start (stack.Start stopping the services it started when a later one
// fails: a crash loop) cancelled the loop's try, and HEALTH held a
// runtime.offline with no runtime.online before it. An instance that
// never registered announced no start, and announces its stop alone.
func (b *Beater) announceStop(ctx context.Context) {
	if b.rev != 0 {
		b.lastTry(ctx, &b.start)
	}
	if b.back != nil {
		b.lastTry(ctx, b.back)
	}
	if err := b.announce(ctx, events.RuntimeOffline); err != nil {
		b.cfg.Logger.Warn("runtime.offline not published at the stop", "kind", b.cfg.Kind, "name", b.cfg.Name, "err", err)
	}
}

// lastTry is the stop's try at a, unless it is stored: with half of what
// is left of the stop's time, so that the runtime.offline still has the
// rest. If it fails, the runtime.offline is published without it (the
// instance did stop), and the warning says so.
func (b *Beater) lastTry(ctx context.Context, a *announcement) {
	if a.stored {
		return
	}
	deadline, _ := ctx.Deadline()
	if err := a.publishWithin(ctx, time.Until(deadline)/2); err != nil {
		b.cfg.Logger.Warn("runtime.offline published without "+a.what+", which could not be stored",
			append([]any{"kind", b.cfg.Kind, "name", b.cfg.Name, "tries", a.failed + 1, "err", err}, a.attrs...)...)
	}
}

// publishWithin is one try at a, bounded by timeout; a try that stores it
// marks it stored. try and lastTry differ only in the timeout and in what
// a failure does.
func (a *announcement) publishWithin(ctx context.Context, timeout time.Duration) error {
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := a.publish(tctx)
	if err == nil {
		a.stored = true
	}
	return err
}

// deregister deletes the instance's entry if it is its own, and leaves
// another instance's (logged at Info: a replacement, the normal case of a
// restart under a fixed name). The delete is a compare-and-set on the
// revision read: a conflict is an entry written since, by the replacement.
func (b *Beater) deregister(ctx context.Context) {
	key := Key(b.cfg.Kind, b.cfg.Name)
	if b.rev != 0 {
		// The common case: the entry is still this beater's last write
		// (the beat loop has ended, so rev is final). Only a conflict, an
		// entry written since (a replacement, or the sweeper's offline
		// mark of this instance), needs the read below.
		err := b.kv.Delete(ctx, key, jetstream.LastRevision(b.rev))
		if err == nil || jsutil.IsKeyMissing(err) {
			return
		}
		if !jsutil.IsCASConflict(err) {
			b.cfg.Logger.Warn("deregister failed", "err", err)
			return
		}
	}
	ent, err := b.kv.Get(ctx, key)
	if jsutil.IsKeyMissing(err) {
		return
	}
	if err != nil {
		b.cfg.Logger.Warn("deregister failed", "err", err)
		return
	}
	var hb events.Heartbeat
	if json.Unmarshal(ent.Value(), &hb) == nil && !b.own(&hb) {
		b.cfg.Logger.Info("deregister skipped: another instance registered under this kind and name", "kind", b.cfg.Kind, "name", b.cfg.Name)
		return
	}
	err = b.kv.Delete(ctx, key, jetstream.LastRevision(ent.Revision()))
	switch {
	case err == nil, jsutil.IsKeyMissing(err):
	case jsutil.IsCASConflict(err):
		b.cfg.Logger.Info("deregister skipped: the entry was written since (another instance under this kind and name)", "kind", b.cfg.Kind, "name", b.cfg.Name)
	default:
		b.cfg.Logger.Warn("deregister failed", "err", err)
	}
}
