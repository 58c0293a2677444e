package control_test

import (
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/control"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestStoredJudgesTheWindowByTheServersClock: Stored tells a retried
// keyed command (a DELETE whose first copy removed the task, a pause
// whose until has passed) from a new one by looking for its id in TASKS
// within the duplicate window: found, it is sent again and deduplicated.
// The look started at this host's clock less the window and a minute for
// clock skew, so a command stored up to a minute past the server's
// window was found, and its retry stored as a new command. It is judged
// by the server's clock now, whatever this host's says: found within the
// window (here 1 s, after the send), not found past it, even by a host an
// hour behind, which looked an hour further back.
func TestStoredJudgesTheWindowByTheServersClock(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	c := &control.Client{NC: srv.NC, JS: srv.JS, Source: "test"}
	const id, cmdID = "skewed", "delete-skewed-1"
	if _, _, err := c.SendID(ctx, events.VerbDeleted, id, cmdID, events.TaskRef{ID: id}, 0); err != nil {
		t.Fatal(err)
	}
	for _, skew := range []time.Duration{2*time.Minute + 30*time.Second, -time.Hour} {
		control.SetClock(c, func() time.Time { return time.Now().Add(skew) })
		if found, err := c.Stored(ctx, events.VerbDeleted, id, cmdID); err != nil || !found {
			t.Fatalf("Stored by a host %s off, within the window = %v, %v; want found", skew, found, err)
		}
	}

	tasks, err := srv.JS.Stream(ctx, streams.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	cfg := tasks.CachedInfo().Config
	cfg.Duplicates = time.Second
	if _, err := srv.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	md, err := natstest.Read(t, srv.JS, streams.StreamTasks, events.TaskSubject(events.VerbDeleted, id))[0].Metadata()
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "the window passed, by the server's clock", func() bool {
		info, err := tasks.Info(ctx)
		return err == nil && info.TimeStamp.After(md.Timestamp.Add(cfg.Duplicates))
	})
	if found, err := c.Stored(ctx, events.VerbDeleted, id, cmdID); err != nil || found {
		t.Fatalf("Stored by a host an hour behind, past the server's window = %v, %v; want not found", found, err)
	}
}
