package executor

import (
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestALateSlotsReadNamesTheDirectGetItsUserMayNotRead: before it calls a
// slot dispatched a minute or more after it fell due, the executor reads
// the slot's outcome from RUNS and DEADLETTER with direct gets
// (ranAlready). A deployment whose executor user lacked those gets got no
// reply to them, only the server's asynchronous -ERR: each such dispatch
// waited out the JetStream timeout (5 s) before its call, and the warning
// said only "context deadline exceeded". The read now ends at the
// refusal, and the warning names the refused subject and the permission
// the user needs; the slot is still called, once, as on any read error.
func TestALateSlotsReadNamesTheDirectGetItsUserMayNotRead(t *testing.T) {
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
			_, admin, js := natstest.StartDenying(t, "executor", denied, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
			target := newPathTarget(t)
			natstest.PutJSON(t, admin, streams.BucketTasks, "late", target.spec("late"))
			logs := newLogLines()
			ex, err := New(Config{JS: js, Guard: Guard{AllowLoopback: true}, Logger: slog.New(logs), ShutdownGrace: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if err := ex.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(ex.Stop)
			slot := time.Now().Add(-10 * time.Minute).UTC().Truncate(time.Millisecond)
			d := events.Dispatch{
				DispatchID: events.DispatchID("late", slot), TaskID: "late", ScheduledAt: slot, FiredAt: slot.Add(3 * time.Minute),
				Source: "baseline-interval",
			}
			publishEvent(t, admin, events.DispatchSubject("late"), events.TypeRunDue, "late", d)

			const warning = "could not read whether a slot dispatched again long after it fell due already ran; calling it"
			want := "permissions violation: may not publish to " + jsutil.APISubject(js, "DIRECT.GET."+c.stream+"."+c.read) +
				"; the executor service's NATS user needs " + denied + " (docs/security.md lists its subjects)"
			natstest.Eventually(t, 10*time.Second, "the warning that the slot's outcome could not be read", func() bool {
				return logs.count(warning) > 0
			})
			if errs := logs.errs(warning); len(errs) != 1 || errs[0] != want {
				t.Fatalf("warned %q with err %q\nwant one, err %q", warning, errs, want)
			}
			// Nothing is lost: the slot is called, as on any read error.
			natstest.Eventually(t, 10*time.Second, "the slot's call", func() bool { return target.of("late") == 1 })
			natstest.Eventually(t, 10*time.Second, "the slot's run.succeeded", func() bool {
				_, ok := lastRun(t, admin, events.OutcomeSucceeded, "late")
				return ok
			})
		})
	}
}
