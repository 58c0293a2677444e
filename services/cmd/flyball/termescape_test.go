package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flyballhq/flyball/services/internal/natstest"
)

// hostileText is what a target may answer to take over the operator's
// terminal: a window title (OSC 0, ended by BEL), a screen clear and a
// cursor move up that would overwrite the row above.
const hostileText = "ok\x1b]0;pwned\x07\x1b[2J\x1b[1Aall good"

// hostileEscaped is hostileText as the tables print it.
const hostileEscaped = `ok\x1b]0;pwned\a\x1b[2J\x1b[1Aall good`

// TestPreviewEscapesControlCharacters: a preview shows every control
// character, bidi control and invalid UTF-8 byte of remote text as Go
// writes it in a quoted string, so that none reaches the terminal; it
// still collapses whitespace, and cuts to n runes between escapes, never
// inside one.
func TestPreviewEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{hostileText, 80, hostileEscaped},
		{"a\r\n\tb  c", 80, "a b c"},
		{"del\x7f c1\u009b nul\x00", 80, `del\x7f c1\u009b nul\x00`},
		{"raw c1 \x9b[2J", 80, `raw c1 \x9b[2J`},
		{"paid \u202egnp.exe", 80, `paid \u202egnp.exe`},
		{"héllo, 世界 {\"a\":\"b\\\"\"} \ufffd", 80, "héllo, 世界 {\"a\":\"b\\\"\"} \ufffd"},
		{"0123456789", 10, "0123456789"},
		{"0123456789a", 10, "012345678…"},
		{"\x1b\x1b\x1b\x1b", 10, `\x1b\x1b…`},
		{"\x1b\x1b", 8, `\x1b\x1b`},
	} {
		if got := preview(c.in, c.n); got != c.want {
			t.Errorf("preview(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
	// printable, for the cells that are not previews, keeps the text
	// whole and escapes the whitespace a preview collapses.
	if got, want := printable("a\tb\r\nc\\x1b \x1b"), `a\tb\r\nc\x1b \x1b`; got != want {
		t.Errorf("printable = %q, want %q", got, want)
	}
}

// TestCLITablesEscapeTargetText: text a target controls (an HTTP
// response's body, a NATS service's Nats-Service-Error) reaches the runs,
// dlq list and status tables with its escape sequences shown, not sent to
// the terminal: they could retitle the window, clear the screen or
// overwrite the rows above.
func TestCLITablesEscapeTargetText(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(hostileText))
	}))
	t.Cleanup(s.Close)
	// A NATS target answering a 400 service error: permanent, so its run
	// is dead-lettered at once with the error's text.
	nc, _ := e.srv.Connect(t)
	if _, err := nc.Subscribe("targets.hostile", func(m *nats.Msg) {
		r := nats.NewMsg(m.Reply)
		r.Header.Set("Nats-Service-Error-Code", "400")
		r.Header.Set("Nats-Service-Error", hostileText)
		_ = m.RespondMsg(r)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	e.ok(t, "task", "create", "-f", e.file(t, "web.yaml", taskYAML("web", s.URL, "1h")))
	e.ok(t, "task", "create", "-f", e.file(t, "svc.yaml",
		"id: svc\ntarget:\n  nats:\n    subject: targets.hostile\n    timeout: 5s\nschedule:\n  interval: 1h\n"))

	clean := func(what, out string) {
		t.Helper()
		if i := strings.IndexAny(out, "\x1b\x07"); i >= 0 {
			t.Fatalf("%s printed a control character at byte %d:\n%q", what, i, out)
		}
	}
	var out string
	natstest.Eventually(t, 15*time.Second, "the run of web listed", func() bool {
		out = e.ok(t, "runs", "web")
		return strings.Contains(out, " succeeded ")
	})
	clean("runs", out)
	if !strings.Contains(out, hostileEscaped) {
		t.Fatalf("runs does not show the body escaped (%s):\n%s", hostileEscaped, out)
	}
	natstest.Eventually(t, 15*time.Second, "the dead letter of svc listed", func() bool {
		out = e.ok(t, "dlq", "list")
		return strings.Contains(out, " svc ")
	})
	clean("dlq list", out)
	if !strings.Contains(out, "service error 400: "+hostileEscaped) {
		t.Fatalf("dlq list does not show the service error escaped:\n%s", out)
	}
	out = e.ok(t, "status")
	clean("status", out)
	if !strings.Contains(out, "service error 400: "+hostileEscaped) {
		t.Fatalf("status does not show the dead letter's error escaped:\n%s", out)
	}
	// A pause's reason is free text too, shown by task get and task list.
	e.ok(t, "task", "pause", "web", "--reason", hostileText)
	for _, args := range [][]string{{"task", "get", "web", "-o", "table"}, {"task", "list"}} {
		out = e.ok(t, args...)
		clean(strings.Join(args, " "), out)
		if !strings.Contains(out, "paused ("+hostileEscaped+")") {
			t.Fatalf("%s does not show the pause reason escaped:\n%s", strings.Join(args, " "), out)
		}
	}
}
