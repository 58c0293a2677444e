package deadletter_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/deadletter"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestStartNamesTheStreamInfoItsUserMayNotRead: the service binds RUNS
// and DEADLETTER at start (an exhausted dispatch's stored outcome is read
// there). A deployment with its own NATS users that upgraded without
// granting their stream info got no reply to the info request, only the
// server's asynchronous -ERR, and Start failed after the JetStream
// timeout with "context deadline exceeded" and a hint to provision. It
// now fails at the refusal, naming the refused subject and the direct
// gets the service needs with it.
func TestStartNamesTheStreamInfoItsUserMayNotRead(t *testing.T) {
	t.Parallel()
	for _, stream := range []string{streams.StreamRuns, streams.StreamDeadLetter} {
		t.Run(stream, func(t *testing.T) {
			t.Parallel()
			denied := "$JS.API.STREAM.INFO." + stream
			// The violation also reaches the connection's handler: keep
			// nats.go's default from printing it.
			_, _, js := natstest.StartDenying(t, "deadletter", denied, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
			cfg := deadletter.Config{}
			cfg.JS = js
			cfg.Metrics = metrics.New()
			svc, err := deadletter.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = svc.Start(t.Context())
			t.Cleanup(svc.Stop)
			want := "deadletter: stream " + stream + ": permissions violation: may not publish to " + denied +
				"; the deadletter service's NATS user needs it, and $JS.API.DIRECT.GET." + stream + ".> (docs/security.md lists its subjects)"
			var v *jsutil.PubViolation
			if err == nil || err.Error() != want || !errors.As(err, &v) || v.Subject != denied || strings.Contains(err.Error(), "provision") {
				t.Fatalf("start with no permission for %s: %v\nwant: %s", denied, err, want)
			}
		})
	}
}

// TestExhaustedDispatchNamesTheDirectGetItsUserMayNotRead: an exhausted
// dispatch's stored outcome is read from RUNS and DEADLETTER with direct
// gets. A deployment whose deadletter user had the streams' info but not
// those gets got no reply to them, only the server's asynchronous -ERR:
// each read waited out the JetStream timeout, and the advisory (or the
// reconcile pass) was retried again and again, logging only "context
// deadline exceeded". The read now ends at the refusal, and the warning
// names the refused subject and the permission the user needs; the
// dispatch stays in DISPATCH and is tried again: nothing is lost.
func TestExhaustedDispatchNamesTheDirectGetItsUserMayNotRead(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		stream string
		// read is the subject of the first refused read: RUNS is read
		// before DEADLETTER, for the task's last run.succeeded first.
		read string
	}{
		{streams.StreamRuns, events.RunSubject(events.OutcomeSucceeded, "t1")},
		{streams.StreamDeadLetter, events.DeadLetterSubject("t1")},
	} {
		for _, path := range []struct {
			name, warning string
			reconcile     bool
		}{
			{"advisory", "max-deliveries dead-letter failed; retrying", false},
			{"reconcile", "exhausted dispatch not dead-lettered; retrying next interval", true},
		} {
			t.Run(c.stream+"/"+path.name, func(t *testing.T) {
				t.Parallel()
				denied := "$JS.API.DIRECT.GET." + c.stream + ".>"
				_, admin, js := natstest.StartDenying(t, "deadletter", denied, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
				seq := publishDispatch(t, admin, "t1")
				cfg := deadletter.Config{ReconcileInterval: time.Hour}
				if path.reconcile {
					exhaustWithoutAdvisory(t, admin, 1)
					cfg.ReconcileInterval = 20 * time.Millisecond
				}
				warned := make(warnings, 64)
				cfg.JS = js
				cfg.Metrics, cfg.Logger = metrics.New(), slog.New(warned)
				svc, err := deadletter.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				if err := svc.Start(t.Context()); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(svc.Stop)
				if !path.reconcile {
					adv, err := json.Marshal(map[string]any{"stream": streams.StreamDispatch, "consumer": streams.ConsumerExecutor, "stream_seq": seq, "deliveries": 5})
					if err != nil {
						t.Fatal(err)
					}
					if _, err := admin.Publish(t.Context(), "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.DISPATCH.executor", adv); err != nil {
						t.Fatal(err)
					}
				}
				want := "read the slot's outcome: permissions violation: may not publish to $JS.API.DIRECT.GET." + c.stream + "." + c.read +
					"; the deadletter service's NATS user needs " + denied + " (docs/security.md lists its subjects)"
				// Twice: the first try's, and the retry's (the advisory
				// nakked, or the next pass).
				for try := range 2 {
					select {
					case w := <-warned:
						if w.msg != path.warning || w.err != want {
							t.Fatalf("try %d warned %q, err %q\nwant %q, err %q", try+1, w.msg, w.err, path.warning, want)
						}
					case <-time.After(10 * time.Second):
						t.Fatalf("try %d: no warning within 10s", try+1)
					}
				}
				dispatch, err := admin.Stream(t.Context(), streams.StreamDispatch)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := dispatch.GetMsg(t.Context(), seq); err != nil {
					t.Fatalf("the dispatch whose outcome could not be read left DISPATCH: %v", err)
				}
				h := &harness{t: t, js: admin, metrics: cfg.Metrics}
				if n := h.entries("t1"); n != 0 {
					t.Fatalf("%d dead-letter entries for a dispatch whose outcome could not be read, want 0", n)
				}
			})
		}
	}
}

// warnings hands on the message and err of each warning logged.
type warnings chan warning

type warning struct{ msg, err string }

func (warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (w warnings) Handle(_ context.Context, r slog.Record) error {
	got := warning{msg: r.Message}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			got.err = a.Value.String()
		}
		return true
	})
	select {
	case w <- got:
	default: // the test reads the first few
	}
	return nil
}

func (w warnings) WithAttrs([]slog.Attr) slog.Handler { return w }

func (w warnings) WithGroup(string) slog.Handler { return w }
