package sweeper

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/streams"
)

// TestAZombieDispatchedWithinTheDuplicateWindowIsReNudgedAfterIt: a slot
// the timer dispatched late (or published again late), that the executor
// then took off DISPATCH without an outcome, is a zombie whose re-nudge
// DISPATCH drops as a duplicate of that dispatch while it is in the
// duplicate window. That sweep adds nothing and counts nothing, and says
// so in the log; the first sweep after the window dispatches the slot,
// and it is counted once.
func TestAZombieDispatchedWithinTheDuplicateWindowIsReNudgedAfterIt(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	logs := &records{}
	s := startHourlyWith(t, svcconf.Common{JS: srv.JS, Logger: slog.New(logs)}) // its first sweep: no task yet

	// A short window, set once the sweeper has checked DISPATCH's config
	// at start (it refuses less than the 2 minutes flyball provisions).
	dispatch, err := srv.JS.Stream(ctx, streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	cfg := dispatch.CachedInfo().Config
	cfg.Duplicates = 5 * time.Second // room for a loaded runner's first sweep
	if _, err := srv.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}

	now := time.Now().UTC()
	due := putZombie(t, srv.JS, "late", now)
	awaitInView(t, s, "late")

	// The slot's own dispatch, published late with the timer's ID, then
	// taken off the work queue with no outcome.
	d := events.Dispatch{DispatchID: events.DispatchID("late", due), TaskID: "late", ScheduledAt: due, FiredAt: now, Source: string(gov.SourceBaselineInterval)}
	if stored, err := jsutil.PublishNewEvent(ctx, srv.JS, events.DispatchSubject("late"), d.DispatchID, events.TypeRunDue, "timer", "late", d, now); err != nil || !stored {
		t.Fatalf("the slot's first dispatch: stored %t, err %v", stored, err)
	}
	first, err := dispatch.GetLastMsgForSubject(ctx, events.DispatchSubject("late"))
	if err != nil {
		t.Fatal(err)
	}
	natstest.FetchOne(t, srv.JS, streams.StreamDispatch, streams.ConsumerExecutor, func(m jetstream.Msg) error { return m.DoubleAck(ctx) })

	if err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if m, err := dispatch.GetLastMsgForSubject(ctx, events.DispatchSubject("late")); err == nil {
		t.Fatalf("a re-nudge within %s of the slot's dispatch was stored (the test's steps took longer than the window?): %s", cfg.Duplicates, m.Data)
	}
	if n := testutil.ToFloat64(s.cfg.Metrics.ZombiesRenudged); n != 0 {
		t.Fatalf("flyball_zombies_renudged_total = %v for a re-nudge DISPATCH dropped, want 0", n)
	}
	const dropped = "zombie re-nudge dropped: the slot was dispatched within DISPATCH's duplicate window; the next sweep tries again"
	if got := logs.named(dropped); len(got) != 1 || got[0].level != slog.LevelInfo ||
		got[0].attrs["task"] != "late" || got[0].attrs["due"] != due.Format(time.RFC3339Nano) || got[0].attrs["reason"] != "zombie" {
		t.Fatalf("logged %+v for the dropped re-nudge, want one Info %q naming task late, due %s and reason zombie", got, dropped, due.Format(time.RFC3339Nano))
	}

	// Past the window, counted from when DISPATCH stored the first one,
	// a sweep dispatches the slot: the run is not lost.
	window := cfg.Duplicates
	natstest.Eventually(t, 20*time.Second, "the zombie re-nudged once the duplicate window passed", func() bool {
		if time.Since(first.Time) < window {
			return false
		}
		if err := s.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		_, err := dispatch.GetLastMsgForSubject(ctx, events.DispatchSubject("late"))
		return err == nil
	})
	m, err := dispatch.GetLastMsgForSubject(ctx, events.DispatchSubject("late"))
	if err != nil {
		t.Fatal(err)
	}
	if id := m.Header.Get(jetstream.MsgIDHeader); id != d.DispatchID {
		t.Fatalf("re-nudged with Nats-Msg-Id %q, want the slot's %q", id, d.DispatchID)
	}
	if err := s.Sweep(ctx); err != nil { // finds it pending: nothing more
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(s.cfg.Metrics.ZombiesRenudged); n != 1 {
		t.Fatalf("flyball_zombies_renudged_total = %v after one re-nudge stored, want 1", n)
	}
}

// records keeps every log record, at every level, with its attributes as
// text.
type records struct {
	mu   sync.Mutex
	list []record
}

type record struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (*records) Enabled(context.Context, slog.Level) bool { return true }

func (r *records) Handle(_ context.Context, rec slog.Record) error {
	got := record{level: rec.Level, msg: rec.Message, attrs: map[string]string{}}
	rec.Attrs(func(a slog.Attr) bool {
		v := a.Value.Resolve()
		if v.Kind() == slog.KindTime {
			got.attrs[a.Key] = v.Time().Format(time.RFC3339Nano)
		} else {
			got.attrs[a.Key] = v.String()
		}
		return true
	})
	r.mu.Lock()
	r.list = append(r.list, got)
	r.mu.Unlock()
	return nil
}

func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }

func (r *records) WithGroup(string) slog.Handler { return r }

// named returns the records logged with msg.
func (r *records) named(msg string) []record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []record
	for _, rec := range r.list {
		if rec.msg == msg {
			out = append(out, rec)
		}
	}
	return out
}

// awaitInView waits until the spec and the schedule of task id are in s's
// view: a sweep that does not know the spec yet takes the schedule for an
// orphan, not a zombie, and would re-nudge nothing.
func awaitInView(t *testing.T, s *Service, id string) {
	t.Helper()
	natstest.Eventually(t, 10*time.Second, "the schedule and the spec in the sweeper's view", func() bool {
		s.view.mu.Lock()
		defer s.view.mu.Unlock()
		_, decoded := s.view.schedules[id]
		_, stale := s.view.stale[id]
		_, spec := s.view.specs[id]
		return (decoded || stale) && spec
	})
}
