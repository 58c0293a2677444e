package sweeper

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/svcconf"
	"github.com/flyballhq/flyball/streams"
)

// TestAZombieCheckNamesTheDirectGetItsUserMayNotRead: before it
// re-dispatches a zombie, the sweeper reads the slot's outcome from RUNS
// and DEADLETTER with direct gets. A deployment whose sweeper user lacked
// those gets got no reply to them, only the server's asynchronous -ERR:
// each zombie held the sweep for the JetStream timeout (5 s), one after
// the other, and the warning said only "context deadline exceeded". The
// read now ends at the refusal, and the warning names the refused
// subject and the permission the user needs; the zombie is not
// re-dispatched, and the next sweep looks again, as on any read error.
func TestAZombieCheckNamesTheDirectGetItsUserMayNotRead(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		stream string
		// read is the subject of the first refused read: RUNS is read
		// before DEADLETTER, for the task's last run.succeeded first.
		read string
	}{
		{streams.StreamRuns, events.RunSubject(events.OutcomeSucceeded, "late")},
		{streams.StreamDeadLetter, events.DeadLetterSubject("late")},
	} {
		t.Run(c.stream, func(t *testing.T) {
			t.Parallel()
			denied := "$JS.API.DIRECT.GET." + c.stream + ".>"
			ctx := t.Context()
			_, admin, js := natstest.StartDenying(t, "sweeper", denied, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
			logs := &records{}
			s := startHourlyWith(t, svcconf.Common{JS: js, Logger: slog.New(logs)}) // its first sweep: no task yet

			now := time.Now().UTC()
			putZombie(t, admin, "late", now)
			awaitInView(t, s, "late")

			want := "permissions violation: may not publish to " + jsutil.APISubject(js, "DIRECT.GET."+c.stream+"."+c.read) +
				"; the sweeper service's NATS user needs " + denied + " (docs/security.md lists its subjects)"
			dispatch, err := admin.Stream(ctx, streams.StreamDispatch)
			if err != nil {
				t.Fatal(err)
			}
			// Twice: each sweep looks again.
			for sweep := 1; sweep <= 2; sweep++ {
				if err := s.Sweep(ctx); err != nil {
					t.Fatal(err)
				}
				got := logs.named("zombie check failed")
				if len(got) != sweep || got[sweep-1].attrs["task"] != "late" || got[sweep-1].attrs["err"] != want {
					t.Fatalf("sweep %d: logged %+v\nwant %d warnings \"zombie check failed\", the last for task late with err %q", sweep, got, sweep, want)
				}
				if m, err := dispatch.GetLastMsgForSubject(ctx, events.DispatchSubject("late")); err == nil {
					t.Fatalf("sweep %d re-dispatched a zombie whose outcome it could not read: %s", sweep, m.Data)
				} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
					t.Fatal(err)
				}
			}
			if n := testutil.ToFloat64(s.cfg.Metrics.ZombiesRenudged); n != 0 {
				t.Fatalf("flyball_zombies_renudged_total = %v, want 0", n)
			}
		})
	}
}
