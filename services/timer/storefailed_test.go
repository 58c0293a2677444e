package timer

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// warnings records the Warn lines a timer logs, and its Info lines too
// if info is set.
type warnings struct {
	info bool
	mu   sync.Mutex
	list []string // message, then each attribute as key=value
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || w.info && l >= slog.LevelInfo
}

func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	line := []string{r.Message}
	r.Attrs(func(a slog.Attr) bool {
		line = append(line, a.Key+"="+a.Value.String())
		return true
	})
	w.mu.Lock()
	w.list = append(w.list, strings.Join(line, " "))
	w.mu.Unlock()
	return nil
}

func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

// with reports whether a warning contains every one of parts.
func (w *warnings) with(parts ...string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
next:
	for _, l := range w.list {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue next
			}
		}
		return true
	}
	return false
}

// TestDispatchRefusedByAStreamLimitIsAnError: DISPATCH refuses a dispatch
// with error 10077 for any limit it reaches, not only the per-subject one
// (an earlier run of the task still pending). Full to its stream-wide
// max_msgs with another task's dispatch, it refuses task a, which has
// nothing pending: that is a dispatch not stored, counted as an error
// (what FlyballDispatchFailing watches), logged at Warn and retried until
// it is stored, not counted as pending and retried at Debug.
func TestDispatchRefusedByAStreamLimitIsAnError(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := context.Background()
	st, err := srv.JS.Stream(ctx, streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	full := cfg
	full.MaxMsgs = 1
	if _, err := srv.JS.UpdateStream(ctx, full); err != nil {
		t.Fatal(err)
	}
	other, err := jsutil.Publish(ctx, srv.JS, events.DispatchSubject("other"), events.DispatchID("other", time.Now()), []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	logs := &warnings{}
	s, err := New(Config{JS: srv.JS, Instance: "test", Logger: slog.New(logs), Metrics: metrics.New(), RetryDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	at := time.Now().Add(-time.Second).Truncate(time.Millisecond).UTC()
	putSchedule(t, srv.JS, "a", at, gov.SourceBaselineInterval)
	natstest.Eventually(t, within, "a refused three times", func() bool {
		r := results(s)
		return r[resultPending]+r[resultError] >= 3
	})
	if r := results(s); r[resultPending] != 0 || r[resultNew]+r[resultDuplicate] != 0 {
		t.Fatalf("results %v: a refused by DISPATCH's max_msgs, want it counted as an error, not pending", r)
	}
	natstest.Eventually(t, within, "the refusal logged at Warn", func() bool {
		return logs.with("dispatch not stored; retrying", "task=a", "maximum messages exceeded")
	})
	// DISPATCH has room again: the retry stores a's slot.
	if err := st.DeleteMsg(ctx, other.Sequence); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, within, "a's slot stored once DISPATCH has room", func() bool {
		m, err := st.GetLastMsgForSubject(ctx, events.DispatchSubject("a"))
		return err == nil && m.Header.Get(jetstream.MsgIDHeader) == events.DispatchID("a", at)
	})
	natstest.Eventually(t, within, "a's slot counted as new", func() bool { return results(s)[resultNew] == 1 })
	if r := results(s); r[resultPending] != 0 {
		t.Fatalf("results %v, want no pending", r)
	}
}
