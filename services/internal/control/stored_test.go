package control_test

import (
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/control"
	"github.com/flyballhq/flyball/services/internal/natstest"
)

// TestStoredLooksPastTheWindowForClockSkew: Stored tells a retried keyed
// command (a DELETE whose first copy removed the task) from a new one by
// looking for its id in TASKS within the duplicate window. TASKS stamps
// messages by the NATS server's clock and the look started at the API
// host's clock less the window, with no margin: an API host ahead of the
// server missed a first command stored near the window's start, and the
// retried DELETE got 404 instead of the first one's verdict. The look now
// starts ControlClockSkew (1 minute) earlier. Here the command is stored
// now and the client's clock runs the window plus 30 s ahead: as a
// command stored at the window's start read by a host 30 s ahead.
func TestStoredLooksPastTheWindowForClockSkew(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	c := &control.Client{NC: srv.NC, JS: srv.JS, Source: "test"}
	const id, cmdID = "skewed", "delete-skewed-1"
	if _, _, err := c.SendID(t.Context(), events.VerbDeleted, id, cmdID, events.TaskRef{ID: id}, 0); err != nil {
		t.Fatal(err)
	}
	control.SetClock(c, func() time.Time { return time.Now().Add(2*time.Minute + 30*time.Second) })
	found, err := c.Stored(t.Context(), events.VerbDeleted, id, cmdID)
	if err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatal("Stored by a host 30 s ahead of the server, past the window: command not found, want found (the look has a 1-minute margin)")
	}
	// Beyond the margin it is not found: the look is the window plus 1 minute.
	control.SetClock(c, func() time.Time { return time.Now().Add(3*time.Minute + 30*time.Second) })
	if found, err := c.Stored(t.Context(), events.VerbDeleted, id, cmdID); err != nil || found {
		t.Fatalf("Stored by a host 1m30s ahead past the window = %v, %v; want not found", found, err)
	}
}
