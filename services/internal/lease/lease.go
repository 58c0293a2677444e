// Package lease elects one holder among the replicas of a service through
// a key in KV flyball-leases, for work that is safe but wasteful when every
// replica does it.
//
// The holder rewrites the key every TTL/3 with compare-and-set on its last
// revision. The others read it at the same rate and take it over, again
// with compare-and-set, once its revision has not moved for TTL by their
// own clock: each reads it again TTL after it first saw that revision,
// not at its next tick, so it takes over TTL after the last renewal it
// saw, at most TTL + TTL/3 after the holder's last renewal. No clock is
// compared with another's, so skew cannot elect two holders; a holder
// that stalls for longer than TTL can overlap with its successor until
// Run's next step, which finds the TTL run out since the last renewal by
// its own clock and gives the lease up unrenewed (then takes it back if
// nobody wrote the key meanwhile). Callers must therefore stay correct
// with two holders, or none, for a moment: the lease saves work, it does
// not guard it.
//
// A stall of the whole process (SIGSTOP, docker pause, a VM paused or
// migrated) stops Run too, and on waking the holder's work may run before
// Run's next step gives the lease up. A Fence bounds that work by
// the holder's own clock: it stops holding once TTL, less a margin, has
// passed since the lease was last confirmed.
//
// A holder that stops releases the key (a delete with its revision), so a
// replica that stands by takes over at its next read instead of after
// TTL.
//
// The key's value is the holder's name and a token drawn at random by
// each Run ("timer1#5c0f9a3e"), so a process recognises its own writes
// and no other's, even one of the same name: a holder whose renewal was
// stored but whose reply was lost recognises the key by it. A restarted
// holder cannot tell whether the process it replaces is gone, or only
// stalled or cut off from NATS and still dispatching, so it waits out the
// TTL like any other replica.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/repeatlog"
)

// Config configures one replica's part in a lease.
type Config struct {
	// KV is the leases bucket. Required.
	KV jetstream.KeyValue
	// Key names the lease, one per kind of work ("timer"). Required.
	Key string
	// Holder names this replica; with the token of its Run it is the
	// key's value while it holds the lease, so `nats kv get
	// flyball-leases <key>` shows who holds it (HolderOf reads it).
	Holder string
	// TTL is how long the key may go unchanged before another replica
	// takes the lease. Required.
	TTL time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// OnChange is called, from Run's goroutine, each time this replica
	// takes the lease (true) or loses or gives it up (false). Run renews
	// nothing until it returns, so it must not wait on the network: a
	// holder held up in it for TTL is taken over while it still believes
	// it holds the lease.
	OnChange func(held bool)
	// Fence, if set, is kept by Run: it holds while this replica holds
	// the lease and has confirmed it recently enough that no other
	// replica can have taken it yet (see Fence).
	Fence *Fence
	// now is the clock, and wait how Run waits between its steps (tests;
	// ticks by default). A Fence is read on the same clock.
	now  func() time.Time
	wait waitFunc
}

// releaseTimeout bounds the delete that gives the lease up at stop.
const releaseTimeout = 2 * time.Second

// unreadableWarnEvery is how often a standby that cannot read the key
// warns again while it still cannot.
const unreadableWarnEvery = time.Minute

// msgUnreadable is the warning the FlyballNoTimerDispatching runbook
// (docs/operations.md) tells operators to look for.
const msgUnreadable = "lease unreadable; standing by"

// state is one replica's view of the lease.
type state struct {
	cfg Config
	log *slog.Logger
	// value is what this replica writes: Holder#token.
	value []byte
	held  bool
	// rev is the key's revision this replica wrote last (held) or saw last
	// (not held); seen is when it first saw rev while not holding, and
	// renewed when it last wrote rev while holding.
	rev           uint64
	seen, renewed time.Time
	// unreadable counts the reads of the key that failed in a row, the
	// first of them at unreadableSince; warns writes their warning, at
	// most once per unreadableWarnEvery. Each streak has a warns of its
	// own, so a new outage warns at its first failure.
	unreadable      int
	unreadableSince time.Time
	warns           *repeatlog.Log
}

// Run takes part in the lease until ctx ends, then releases it if held.
func Run(ctx context.Context, cfg Config) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	value := cfg.Holder + tokenSep + newToken()
	if cfg.wait == nil {
		t := time.NewTicker(cfg.TTL / 3)
		defer t.Stop()
		cfg.wait = ticks(t)
	}
	st := &state{cfg: cfg, value: []byte(value), log: cfg.Logger.With("lease", cfg.Key, "holder", value)}
	for {
		st.step(ctx)
		if !cfg.wait(ctx, st.takeAt(cfg.now())) {
			st.release()
			return
		}
	}
}

// waitFunc waits for Run's next step: its next tick or, if at is not
// zero, the moment at, whichever comes first. It reports false if ctx
// ends first.
type waitFunc func(ctx context.Context, at time.Time) bool

// ticks waits on t, and on a timer for at.
func ticks(t *time.Ticker) waitFunc {
	return func(ctx context.Context, at time.Time) bool {
		var due <-chan time.Time
		if !at.IsZero() {
			due = time.After(time.Until(at))
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		case <-due:
		}
		return true
	}
}

// step renews a held lease, or reads the key and takes it if it is free
// or has not moved for TTL.
func (st *state) step(ctx context.Context) {
	// Each step ends before the next is due: a request that hangs must
	// not hold up the renewals after it.
	tick := st.cfg.TTL / 3
	now := st.cfg.now()
	if st.held {
		elapsed := now.Sub(st.renewed)
		if elapsed < st.cfg.TTL {
			st.renew(ctx, now, tick)
			return
		}
		// TTL since the last renewal by this replica's own clock, and no
		// step gave the lease up: it did not run (renewals come TTL/3
		// apart, and one that fails near the TTL gives the lease up). A
		// standby may hold the lease already, and a renewal may wait
		// for nothing of the TTL: none is sent. The log says so rather
		// than "context deadline exceeded", which reads as NATS. Then
		// the key is read as a standby reads it: a key nobody wrote
		// since is taken back now, not a tick later.
		st.lose(fmt.Sprintf("lease not renewed for %s, past its %s TTL: the process did not run for that long (stopped, paused or starved?)",
			elapsed.Round(time.Millisecond), st.cfg.TTL))
	}
	ctx, cancel := context.WithTimeout(ctx, tick)
	defer cancel()
	e, err := st.cfg.KV.Get(ctx, st.cfg.Key)
	if err != nil && !jsutil.IsKeyMissing(err) {
		st.readFailed(now, err)
		return
	}
	st.readWorks(now)
	switch {
	case jsutil.IsKeyMissing(err):
		// Never held, or released by a holder that stopped.
		if rev, err := st.cfg.KV.Create(ctx, st.cfg.Key, st.value); err == nil {
			st.take(rev, now, "lease was free")
		}
	case e.Revision() == st.rev && string(e.Value()) == string(st.value):
		// This replica stood down when it could not renew, or had not
		// run for its TTL, and nobody has written the key since: it is
		// still this replica's.
		if rev, err := st.cfg.KV.Update(ctx, st.cfg.Key, st.value, e.Revision()); err == nil {
			st.take(rev, now, "lease untouched since this replica gave it up")
		}
	case e.Revision() != st.rev || st.seen.IsZero():
		st.rev, st.seen = e.Revision(), now
	case now.Sub(st.seen) >= st.cfg.TTL:
		if rev, err := st.cfg.KV.Update(ctx, st.cfg.Key, st.value, e.Revision()); err == nil {
			st.take(rev, now, "lease holder silent for its TTL", "previous", string(e.Value()))
		}
	}
}

// takeAt is when a standby may take the lease: TTL after it first saw
// the key's revision, when it reads the key again rather than at its next
// tick. A tick comes TTL/3 after the last, give or take its jitter, so the
// third after the one that saw the revision can fall just short of TTL,
// and waiting for the fourth would leave the lease idle up to a tick
// longer. Zero when this replica holds the lease, has seen no revision, or
// that moment is past (a take that failed then: the ticks retry it).
func (st *state) takeAt(now time.Time) time.Time {
	if st.held || st.seen.IsZero() {
		return time.Time{}
	}
	if at := st.seen.Add(st.cfg.TTL); at.After(now) {
		return at
	}
	return time.Time{}
}

// readFailed records a read of the key that failed. A standby that cannot
// read it cannot take the lease either: when the holder is gone too, no
// timer dispatches, so it warns (at the default log level) at the first
// failure of a streak and then once a minute while it lasts, with the
// count and the start of the streak, instead of once per read.
func (st *state) readFailed(now time.Time, err error) {
	if st.unreadable == 0 {
		st.unreadableSince = now
		st.warns = repeatlog.New(st.log, unreadableWarnEvery)
	}
	st.unreadable++
	st.warns.Log(now, slog.LevelWarn, msgUnreadable,
		"err", err, "failures", st.unreadable, "since", st.unreadableSince)
}

// readWorks ends a streak of failed reads, once, at Info. The count of
// the warnings held back is not written: failures counts them all.
func (st *state) readWorks(now time.Time) {
	if st.unreadable == 0 {
		return
	}
	st.log.Info("lease readable again", "failures", st.unreadable, "after", now.Sub(st.unreadableSince))
	st.unreadable, st.unreadableSince, st.warns = 0, time.Time{}, nil
}

// renew rewrites a held key, ticked every tick. A standby that saw the
// last renewal may take the lease TTL after it, and this replica must
// have given it up by that time, not a tick later.
func (st *state) renew(parent context.Context, now time.Time, tick time.Duration) {
	// A renewal waits at most for what is left of the TTL (step sends
	// none once it has run out).
	timeout := tick
	if left := st.cfg.TTL - now.Sub(st.renewed); left < timeout {
		timeout = left
	}
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	rev, err := st.cfg.KV.Update(ctx, st.cfg.Key, st.value, st.rev)
	switch {
	case err == nil:
		st.confirm(rev, now)
		return
	case jsutil.IsCASConflict(err) && st.wroteLast(ctx):
		// A renewal stored whose reply was lost moved the revision
		// past ours: the key still holds this Run's value. When it
		// was stored is not known, so the TTL still runs from the
		// last renewal confirmed; the next renewal, from the revision
		// adopted, resets it.
	case jsutil.IsCASConflict(err) || jsutil.IsKeyMissing(err):
		st.lose("lease taken by another replica")
		return
	}
	if parent.Err() != nil {
		// Run is stopping: it releases the key next.
		return
	}
	// Not renewed. The clock is read again: the renewal took time. The
	// next tick comes a tick from now, give or take the ticker's jitter
	// (half a tick of margin covers it); if the TTL runs out before
	// then, another replica may take the lease while this one still
	// believes it holds it, so it gives the lease up now. A renewal that
	// fails at once (no responders while the bucket elects a leader, a
	// closed connection) at the tick before the TTL would otherwise keep
	// the lease up to a tick past it. Once it can read the key again and
	// finds it unchanged, this replica takes it back at once.
	if elapsed := st.cfg.now().Sub(st.renewed); elapsed+tick+tick/2 > st.cfg.TTL {
		st.lose("lease not renewed, and its TTL runs out before the next renewal", "err", err)
		return
	}
	st.log.Debug("lease renewal failed; retrying", "err", err)
}

// wroteLast reports whether the key holds this Run's value at a revision
// past the one it last wrote, and adopts that revision if so. The name
// alone would not do: another process of the same name (a restart while
// the old one was cut off, or two replicas given one name) that took the
// lease would be adopted, and both would hold it for good.
func (st *state) wroteLast(ctx context.Context) bool {
	e, err := st.cfg.KV.Get(ctx, st.cfg.Key)
	if err != nil || string(e.Value()) != string(st.value) || e.Revision() <= st.rev {
		return false
	}
	st.rev = e.Revision()
	return true
}

// take records the lease taken by a write sent at now, and says so. The
// fence holds before OnChange is told, so the holder's work finds it
// holding.
func (st *state) take(rev uint64, now time.Time, msg string, args ...any) {
	st.held = true
	st.confirm(rev, now)
	st.log.Info("took the lease: "+msg, args...)
	st.notify()
}

// confirm records a write of the key at revision rev, sent at now, that
// was stored: the lease is confirmed as of now. The time it was sent, not
// the time its reply came, bounds when a standby can have seen it.
func (st *state) confirm(rev uint64, now time.Time) {
	st.rev, st.renewed = rev, now
	st.cfg.Fence.confirm(now, st.cfg.TTL)
}

// lose records the lease lost. OnChange is told before the fence is
// cleared, so the holder's work stops as standing by, not as fenced off.
func (st *state) lose(msg string, args ...any) {
	st.held, st.seen = false, time.Time{}
	st.log.Warn("lost the lease: "+msg, args...)
	st.notify()
	st.cfg.Fence.clear()
}

func (st *state) notify() {
	if st.cfg.OnChange != nil {
		st.cfg.OnChange(st.held)
	}
}

// release deletes a held key with its revision, so a replica standing by
// takes the lease at its next read. A release that fails leaves the key to
// expire by TTL.
func (st *state) release() {
	if !st.held {
		return
	}
	st.held = false
	st.notify()
	st.cfg.Fence.clear()
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := st.cfg.KV.Delete(ctx, st.cfg.Key, jetstream.LastRevision(st.rev)); err != nil &&
		!errors.Is(err, jetstream.ErrKeyNotFound) {
		st.log.Warn("lease not released; another replica takes it after its TTL", "err", err)
		return
	}
	st.log.Info("released the lease")
}

// Fence bounds a holder's work by its own clock. Run learns that another
// replica took the lease only at its next rewrite; a process stalled as a
// whole wakes with that rewrite and its work both ready, in either order,
// and work that runs first overlaps with the new holder's. A Fence holds
// until TTL less FenceMargin after the lease was last confirmed (taken or
// renewed), timed when its write was sent: a standby first sees the write
// after it was sent, and takes over only once TTL has passed since by its
// own clock. Work checked against Holds on the clock Run reads (time.Now,
// whose monotonic reading a wall clock step does not move) therefore
// stops before another replica can hold the lease, whether or not Run has
// run since; what it admitted just before, it may still be doing.
//
// The zero Fence does not hold. Its methods are safe for concurrent use.
type Fence struct {
	last atomic.Pointer[confirmation]
}

// confirmation is a Fence's last confirmation: when its write was sent,
// and until when it holds.
type confirmation struct{ sent, until time.Time }

// FenceMargin is how long before the TTL runs out a Fence stops holding:
// a tenth of it, 100 ms for the shortest lease the timer accepts (1s) and
// 300 ms for the compose stack's 3s. It covers the rate at which the
// standby's clock may gain on the holder's (NTP slews a clock by at most
// 500 ppm: 1.5 ms of a 3s TTL), and leaves the work a check admitted just
// before that long to reach the server while the process runs (a publish
// written to the connection and flushed). It bounds nothing that a
// freeze after the check holds up: a process frozen between the check
// and the write, or between a publish buffered and nats.go flushing it,
// sends that publish when it wakes, however late; a timeout on the
// write bounds only the wait for its reply. What the holder's work
// admitted before the freeze is what may go out late (the timer bounds
// it: see its publishAll).
//
// While renewals succeed on time it costs nothing: a holder renews every
// TTL/3, so the fence is renewed long before it runs out. It runs out
// while the holder still holds the lease when Run stalls, and also when a
// renewal fails and the next is slow: one that fails at once at TTL/3
// (no responders while the bucket elects a leader) keeps the lease, since
// the next is due before the TTL runs out (renew), and the next, sent at
// 2TTL/3, may wait until the TTL runs out, so one that succeeds after
// TTL less the margin confirms the lease only after the fence ran out.
// The holder's work holds back meanwhile, which is safe, if late.
func FenceMargin(ttl time.Duration) time.Duration { return ttl / 10 }

// Holds reports whether, at now, the lease was confirmed less than TTL
// less FenceMargin ago and is not known to be lost or released.
func (f *Fence) Holds(now time.Time) bool {
	c := f.last.Load()
	return c != nil && now.Before(c.until)
}

// Confirmed returns when the write that last confirmed the lease was
// sent; zero while the lease is not held.
func (f *Fence) Confirmed() time.Time {
	if c := f.last.Load(); c != nil {
		return c.sent
	}
	return time.Time{}
}

func (f *Fence) confirm(sent time.Time, ttl time.Duration) {
	if f != nil {
		f.last.Store(&confirmation{sent: sent, until: sent.Add(ttl - FenceMargin(ttl))})
	}
}

func (f *Fence) clear() {
	if f != nil {
		f.last.Store(nil)
	}
}

// tokenSep separates the holder's name from its Run's token in the key.
const tokenSep = "#"

// newToken draws the token of one Run.
func newToken() string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// HolderOf reads the holder's name from a lease key's value: the value
// up to its token, or the whole value as written before tokens.
func HolderOf(value []byte) string {
	v := string(value)
	if i := strings.LastIndex(v, tokenSep); i >= 0 {
		return v[:i]
	}
	return v
}
