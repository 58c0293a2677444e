package sweeper

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestAZombieReNudgeRefusedByAStreamLimitIsAFailure: DISPATCH refuses a
// message with error 10077 for any limit it reaches. Full to its
// stream-wide max_msgs with another task's dispatch, it refuses the
// re-nudge of a zombie that has nothing pending: the re-nudge failed and
// the next sweep retries it, logged at Warn. It was taken for a dispatch
// of the task stored since the check and dropped at Debug.
func TestAZombieReNudgeRefusedByAStreamLimitIsAFailure(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	logs := &records{}
	s, _ := startRaced(t, srv.JS, events.DispatchSubject("late"), logs)
	now := time.Now().UTC()
	putZombie(t, srv.JS, "late", now)

	dispatch, err := srv.JS.Stream(ctx, streams.StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	cfg := dispatch.CachedInfo().Config
	cfg.MaxMsgs = 1
	if _, err := srv.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := jsutil.Publish(ctx, srv.JS, events.DispatchSubject("other"), events.DispatchID("other", now), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	s.renudge(ctx, newAckFloors(), schedule{TaskID: "late"}, now)

	got := logs.named(renudgeFailed)
	if len(got) != 1 || got[0].level != slog.LevelWarn || got[0].attrs["task"] != "late" {
		t.Fatalf("logged %+v (all: %+v), want one Warn %q for task late: DISPATCH's max_msgs refused it, and late has nothing pending", got, logs.list, renudgeFailed)
	}
	if n := testutil.ToFloat64(s.cfg.Metrics.ZombiesRenudged); n != 0 {
		t.Fatalf("flyball_zombies_renudged_total = %v for a re-nudge DISPATCH refused, want 0", n)
	}
}
