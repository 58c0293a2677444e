package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/control"
	"github.com/flyballhq/flyball/services/internal/query"
)

// defaultTimeout bounds every client command that does not follow a stream.
const defaultTimeout = 10 * time.Second

// clientFlags are the flags of every command that talks to a running
// flyball through NATS: the connection flags shared with serve, and how
// long to wait.
type clientFlags struct {
	nats    natsFlags
	timeout time.Duration
}

func (f *clientFlags) register(cmd *cobra.Command) {
	f.nats.register(cmd)
	cmd.Flags().DurationVar(&f.timeout, "timeout", defaultTimeout, "give up on NATS, or on the governor's answer, after this long")
}

// session is an open connection with the clients commands need.
type session struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	ctl     *control.Client
	q       *query.Reader
	timeout time.Duration
	out     io.Writer
	errOut  io.Writer
}

// signalContext is cmd's context, cancelled by Ctrl-C or SIGTERM.
func signalContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
}

// open connects to NATS and binds the readers. ctx bounds the binding.
func (f *clientFlags) open(ctx context.Context, cmd *cobra.Command) (*session, error) {
	if f.timeout <= 0 {
		return nil, fmt.Errorf("--timeout: must be positive, got %s", f.timeout)
	}
	f.nats.name = "flyball-cli"
	nc, js, err := f.nats.connect()
	if err != nil {
		return nil, err
	}
	bctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	q, err := query.NewReader(bctx, js)
	if err != nil {
		nc.Close()
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("%w (timed out: no answer within --timeout %s)", err, f.timeout)
		}
		return nil, noJetStream(err)
	}
	return &session{
		nc: nc, js: js, q: q, timeout: f.timeout,
		ctl: &control.Client{NC: nc, JS: js, Source: cliSource()},
		out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr(),
	}, nil
}

func (s *session) close() { s.nc.Close() }

// cliSource is the CloudEvents source of commands sent from this shell.
func cliSource() string {
	user := os.Getenv("USER")
	if user == "" {
		user = "unknown"
	}
	host, _ := os.Hostname()
	return "flyball/cli/" + events.SanitizeToken(user) + "@" + events.SanitizeToken(host)
}

// reasonsError is a failure with several reasons: its first line is a
// one-line summary, then one reason per line (main prints it after
// "flyball: ").
type reasonsError struct {
	summary string
	reasons []events.FieldError
}

func (e *reasonsError) Error() string {
	var b strings.Builder
	b.WriteString(e.summary)
	for i := range e.reasons {
		b.WriteString("\n  ")
		b.WriteString(e.reasons[i].Error())
	}
	return b.String()
}

func newReasonsError(what string, reasons []events.FieldError) error {
	n := "1 reason"
	if len(reasons) != 1 {
		n = fmt.Sprintf("%d reasons", len(reasons))
	}
	return &reasonsError{summary: fmt.Sprintf("%s (%s):", what, n), reasons: reasons}
}

// command sends a control command and waits for the governor's answer.
func (s *session) command(ctx context.Context, verb events.Verb, id string, data any) (*events.TaskAccepted, error) {
	cmdID, ans, err := s.ctl.Send(ctx, verb, id, data, s.timeout)
	switch {
	case errors.Is(err, control.ErrTimeout):
		return nil, fmt.Errorf("task.%s for %q was stored (command %s) but the governor did not answer within %s: is the governor running? It accepts or rejects the command when it reads it; do not send it again", verb, id, cmdID, s.timeout)
	// The publish's ack was lost (a timeout, a dropped connection, or an
	// interrupt: Ctrl-C or the bound of --timeout) and publishing it again
	// did not settle it. Printed as the bare publish error, a command
	// that TASKS may hold read as "not sent".
	case errors.Is(err, control.ErrMaybeStored):
		return nil, fmt.Errorf("task.%s for %q: %w; if it was, it is applied when the governor reads it; see flyball replay --stream TASKS --subject %s before sending it again", verb, id, err, events.TaskSubject(verb, id))
	// Interrupted once the command was stored: it is applied when the
	// governor reads it. A bare "context canceled" read as "not sent",
	// and the command sent again ran a requeued task twice.
	case err != nil && ctx.Err() != nil && cmdID != "":
		return nil, fmt.Errorf("task.%s for %q was stored (command %s), but the wait for the governor's answer was interrupted (%w): the command is applied when the governor reads it; do not send it again", verb, id, cmdID, ctx.Err())
	// Stored, but its answer could not be read: not "not sent".
	case errors.Is(err, control.ErrStored):
		return nil, fmt.Errorf("task.%s for %q (command %s): %w; do not send it again", verb, id, cmdID, err)
	case err != nil:
		return nil, err
	case ans.Rejected != nil:
		if ans.Rejected.Stale() {
			return nil, staleRevision(verb, id, data, ans.Rejected)
		}
		return nil, newReasonsError(fmt.Sprintf("task.%s for %q rejected by the governor", verb, id), ans.Rejected.Reasons)
	}
	return ans.Accepted, nil
}

// staleRevision is the governor's rejection (rej.Stale) of the
// --if-revision that data, a TaskUpdate or a TaskDelete, carried, as one
// line that says what to do: read the task again. It names the stored
// revision when the rejection carries it (a governor older than
// specRevision on task.rejected does not).
func staleRevision(verb events.Verb, id string, data any, rej *events.TaskRejected) error {
	var sent uint64
	switch d := data.(type) {
	case events.TaskUpdate:
		sent = d.IfRevision
	case events.TaskDelete:
		sent = d.IfRevision
	}
	now := ""
	if rej.SpecRevision != 0 {
		now = fmt.Sprintf(": it is at revision %d now", rej.SpecRevision)
	}
	next := "apply your change to it and update again with --if-revision set to the revision it shows"
	if verb == events.VerbDeleted {
		next = "decide again whether to delete it"
	}
	return fmt.Errorf("task.%s for %q rejected by the governor: the task changed since revision %d%s; run 'flyball task get %s' to see the change, then %s",
		verb, id, sent, now, id, next)
}

// parseIfRevision reads --if-revision, the flyball-tasks revision the spec
// must still be at for the command to apply; 0 when it is not given.
// Given empty, markNonEmpty refuses it: read as not given, the command
// would apply whatever the revision.
func parseIfRevision(s string) (uint64, error) {
	return parsePositive("if-revision", "the revision of the spec the change was made from (a positive integer: the revision row of flyball task get)", s)
}

// specRevision is the " (revision N)" an accepted create or update ends
// with: the --if-revision of the next update made from it. Empty when the
// answer carries none (a governor older than specRevision).
func specRevision(a *events.TaskAccepted) string {
	if a == nil || a.SpecRevision == 0 {
		return ""
	}
	return fmt.Sprintf(" (revision %d)", a.SpecRevision)
}

// nextRun describes an accepted command's decision: "next run <t> (<source>)".
func nextRun(a *events.TaskAccepted) string {
	if a == nil {
		return "no answer"
	}
	if a.NextRunAt == nil {
		return fmt.Sprintf("no run scheduled (%s)", a.Source)
	}
	return fmt.Sprintf("next run %s (%s)", a.NextRunAt.UTC().Format(time.RFC3339), a.Source)
}

// parseWhen parses an RFC 3339 time, or a duration taken from now: ahead
// (for --until and --at) or back (for --since). "now" is now.
func parseWhen(flag, s string, now time.Time, ahead bool) (time.Time, error) {
	if s == "now" {
		return now.UTC(), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("--%s: want an RFC 3339 time (2026-01-02T15:04:05Z) or a positive duration (2h, 30m), got %q", flag, s)
	}
	if ahead {
		return now.Add(d).UTC(), nil
	}
	return now.Add(-d).UTC(), nil
}

// output is the --output flag: table (for people) or json (for scripts).
type output string

const (
	outTable output = "table"
	outJSON  output = "json"
)

func (o *output) String() string { return string(*o) }
func (o *output) Type() string   { return "json|table" }

func (o *output) Set(s string) error {
	switch output(s) {
	case outTable, outJSON:
		*o = output(s)
		return nil
	}
	return fmt.Errorf("want json or table, got %q", s)
}

func (o *output) register(cmd *cobra.Command, def output) {
	*o = def
	cmd.Flags().VarP(o, "output", "o", "output format: json or table")
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// tsFormat is the time format of table columns: UTC, milliseconds.
const tsFormat = "2006-01-02T15:04:05.000Z"

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(tsFormat)
}

// preview cuts s to n runes on one line, marking a cut with "…", and
// escapes what printable escapes. A cut falls between escapes, never
// inside one.
func preview(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	var b strings.Builder
	width, room := 0, 0 // room: b's length while it left a rune for "…"
	for s != "" {
		piece, size := printableRune(s)
		s = s[size:]
		if width += utf8.RuneCountInString(piece); width > n {
			return b.String()[:room] + "…"
		}
		b.WriteString(piece)
		if width < n {
			room = b.Len()
		}
	}
	return b.String()
}

// printable returns s with every control character (C0, DEL, C1), bidi
// control (U+202E and the like) and byte that is not UTF-8 escaped as Go
// writes it in a quoted string (\x1b, \a, \n, \u202e, \x9b): s is
// text a target, a NATS service or a publisher chose (a run's body or
// error, a reason), which the tables print to a terminal, where an escape
// sequence could retitle the window, clear the screen or rewrite the rows
// above, and a bidi override reorder what follows. A backslash is left as
// it is: the form is for reading, -o json for the exact text.
func printable(s string) string {
	var b strings.Builder
	for s != "" {
		piece, size := printableRune(s)
		b.WriteString(piece)
		s = s[size:]
	}
	return b.String()
}

// printableRune returns the first rune of s as printable prints it, and
// its size in s.
func printableRune(s string) (piece string, size int) {
	r, size := utf8.DecodeRuneInString(s)
	switch {
	case r == utf8.RuneError && size == 1:
		return fmt.Sprintf(`\x%02x`, s[0]), 1
	case unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r):
		q := strconv.QuoteRune(r)
		return q[1 : len(q)-1], size
	}
	return s[:size], size
}

// validID checks a task id argument before anything is sent.
func validID(id string) error {
	if !events.ValidToken(id) {
		return fmt.Errorf("task id %q: must be 1-%d characters of [A-Za-z0-9_-]", id, events.MaxIDLength)
	}
	return nil
}

// run opens a session and runs fn. A bounded command's context ends after
// --timeout (plus a second, so the governor's answer wait, which is
// --timeout, ends first with its clearer message).
func (f *clientFlags) run(cmd *cobra.Command, bounded bool, fn func(context.Context, *session) error) error {
	ctx, stop := signalContext(cmd)
	defer stop()
	s, err := f.open(ctx, cmd)
	if err != nil {
		return err
	}
	defer s.close()
	if bounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.timeout+time.Second)
		defer cancel()
	}
	err = fn(ctx, s)
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w (after --timeout %s)", err, f.timeout)
	}
	return err
}
