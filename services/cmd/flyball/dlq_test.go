package main

import (
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
)

// TestDLQListTimeIsDeadLetteredAt: the TIME column of `dlq list` is when
// the run was dead-lettered (the entry's deadLetteredAt, as in `status`,
// the JSON and the docs), not when DEADLETTER stored the message; an entry
// that does not decode falls back to the stored time.
func TestDLQListTimeIsDeadLetteredAt(t *testing.T) {
	t.Parallel()
	srv, url := natstest.StartListening(t)
	e := &cliEnv{url: url, srv: srv, dir: t.TempDir()}
	at := time.Date(2020, 1, 2, 3, 4, 5, 600e6, time.UTC)
	entry := events.DeadLetter{
		TaskID: "old", Reason: events.DeadLetterPermanent, Attempts: 1,
		Errors:         []events.AttemptError{{Attempt: 1, At: at, Status: 404, Error: "HTTP 404"}},
		DeadLetteredAt: at,
	}
	data, err := events.Marshal(events.TypeDeadLettered, "test", "old", entry, at, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.JS.Publish(t.Context(), events.DeadLetterSubject("old"), data); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.JS.Publish(t.Context(), events.DeadLetterSubject("garbled"), []byte("not an event")); err != nil {
		t.Fatal(err)
	}

	rows := strings.Split(strings.TrimSpace(e.ok(t, "dlq", "list")), "\n")
	if len(rows) != 3 {
		t.Fatalf("dlq list printed %d lines, want a header and 2 rows:\n%s", len(rows), strings.Join(rows, "\n"))
	}
	if f := strings.Fields(rows[1]); len(f) < 3 || f[1] != "2020-01-02T03:04:05.600Z" || f[2] != "old" {
		t.Fatalf("dlq list row %q: want TIME 2020-01-02T03:04:05.600Z (deadLetteredAt), not when it was stored", rows[1])
	}
	f := strings.Fields(rows[2])
	if len(f) < 3 || f[2] != "garbled" {
		t.Fatalf("dlq list row %q: want the garbled entry", rows[2])
	}
	if stored, err := time.Parse(tsFormat, f[1]); err != nil || time.Since(stored).Abs() > time.Minute {
		t.Fatalf("dlq list row %q: want TIME the stored time (just now) of an entry that does not decode", rows[2])
	}
}
