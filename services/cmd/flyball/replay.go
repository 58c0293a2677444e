package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/query"
	"github.com/flyballhq/flyball/streams"
)

// replayStreams are the streams replay reads.
var replayStreams = []string{streams.StreamTasks, streams.StreamRuns, streams.StreamDeadLetter, streams.StreamDispatch, streams.StreamHealth}

// replayHeader marks a republished message with where it came from.
const replayHeader = "Flyball-Replayed-From"

type replayFlags struct {
	stream, subject          string
	since, fromTime, until   string
	fromSeq                  uint64
	to                       string
	dryRun, force            bool
	startTime, untilTime     time.Time
	subjects                 []string
	republish, toHasStream   bool
	replayed, wouldRepublish int
	// republished counts the copies --to took, and lastSeq is the stream
	// sequence of the last one, so a replay that fails partway can say
	// where to go on from.
	republished int
	lastSeq     uint64
}

func newReplayCmd() *cobra.Command {
	var (
		cf  clientFlags
		out output
		f   replayFlags
	)
	cmd := &cobra.Command{
		Use:   "replay --stream TASKS|RUNS|DEADLETTER|DISPATCH|HEALTH",
		Short: "Print (or republish) a stream's stored events, from a time or a sequence",
		Long: `replay reads a stream with an ephemeral ordered consumer (DISPATCH, a work
queue, is read message by message with direct gets) and prints the stored
events: sequence, time, subject, CloudEvents type and a preview of the data,
or with -o json one JSON object per line. It never changes the source
stream, and it stops at the last message stored when it started.

--to republishes every replayed message's payload and headers (but not
Nats-Msg-Id) to another subject, adding a Flyball-Replayed-From header. Use
--dry-run to see what would be sent first. Republishing into
flyball.dispatch.* would run tasks, into any other flyball.* subject would
feed flyball's services again (commands applied again, outcomes counted
again), and into a $ subject ($KV, $JS.API) would overwrite KV keys or call
the server's API; all are refused without --force.`,
		Example: `  flyball replay --stream RUNS --since 1h
  flyball replay --stream TASKS --subject 'flyball.task.*.orders-health' -o json
  flyball replay --stream DEADLETTER --from-seq 40 --until 2026-03-01T08:00:00Z
  flyball replay --stream RUNS --subject 'flyball.run.failed.>' --since 30m --to debug.failed --dry-run`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// An empty value (a script's unset variable) read as not
			// given: "--to $DEST" printed the messages, republished none
			// and exited 0, and "--since $T" replayed the whole stream.
			for _, name := range []string{"subject", "since", "from-time", "until", "to"} {
				if fl := cmd.Flags().Lookup(name); fl.Changed && fl.Value.String() == "" {
					return fmt.Errorf("--%s: empty; give a value or leave the flag out", name)
				}
			}
			if err := f.check(time.Now()); err != nil {
				return err
			}
			return cf.run(cmd, true, func(ctx context.Context, s *session) error {
				return f.replay(ctx, s, out)
			})
		},
	}
	cf.register(cmd)
	out.register(cmd, outTable)
	fl := cmd.Flags()
	fl.StringVar(&f.stream, "stream", "", "stream to read: "+strings.Join(replayStreams, ", "))
	fl.StringVar(&f.subject, "subject", "", "only subjects matching this filter (wildcards allowed)")
	fl.StringVar(&f.since, "since", "", "start this long ago (1h, 30m)")
	fl.Uint64Var(&f.fromSeq, "from-seq", 0, "start at this stream sequence")
	fl.StringVar(&f.fromTime, "from-time", "", "start at this RFC 3339 time")
	fl.StringVar(&f.until, "until", "", "stop after this time: RFC 3339 or a duration ago (10m)")
	fl.StringVar(&f.to, "to", "", "republish each message to this subject")
	fl.BoolVar(&f.dryRun, "dry-run", false, "with --to: print what would be republished, publish nothing")
	fl.BoolVar(&f.force, "force", false, "with --to: allow republishing into flyball.dispatch.* (runs tasks!), another flyball.* subject (its services act on it) or a $ subject ($KV, $JS.API)")
	_ = cmd.MarkFlagRequired("stream")
	cmd.MarkFlagsMutuallyExclusive("since", "from-seq", "from-time")
	return cmd
}

// check validates the flags before connecting.
func (f *replayFlags) check(now time.Time) error {
	f.stream = strings.ToUpper(f.stream)
	if !slices.Contains(replayStreams, f.stream) {
		return fmt.Errorf("--stream: want one of %s, got %q", strings.Join(replayStreams, ", "), f.stream)
	}
	if f.subject != "" {
		f.subjects = []string{f.subject}
	}
	var err error
	switch {
	case f.since != "":
		d, perr := time.ParseDuration(f.since)
		if perr != nil || d <= 0 {
			return fmt.Errorf("--since: want a positive duration such as 1h or 30m, got %q", f.since)
		}
		f.startTime = now.Add(-d).UTC()
	case f.fromTime != "":
		if f.startTime, err = time.Parse(time.RFC3339Nano, f.fromTime); err != nil {
			return fmt.Errorf("--from-time: want an RFC 3339 time such as 2026-01-02T15:04:05Z, got %q", f.fromTime)
		}
		// The server reads a start time in Unix nanoseconds, which wrap
		// outside their range: 3000-01-01 replayed the whole stream (with
		// --to, republished it), and 1600-01-01 none of it.
		if _, ok := events.UnixNanos(f.startTime); !ok {
			return fmt.Errorf("--from-time %s: outside the times a stream can be read from, %s to %s",
				f.fromTime, time.Unix(0, math.MinInt64).UTC().Format(time.RFC3339), time.Unix(0, math.MaxInt64).UTC().Format(time.RFC3339))
		}
	}
	if f.until != "" {
		if f.untilTime, err = parseWhen("until", f.until, now, false); err != nil {
			return err
		}
		// "--since 1h --until 2h" reads as a window but is empty (--until
		// counts back from now too): say so rather than print nothing.
		if !f.startTime.IsZero() && f.untilTime.Before(f.startTime) {
			return fmt.Errorf("--until %s (%s) is before the start (%s): nothing to replay; --until counts back from now, like --since",
				f.until, f.untilTime.Format(time.RFC3339), f.startTime.Format(time.RFC3339))
		}
	}
	if f.dryRun && f.to == "" {
		return errors.New("--dry-run goes with --to")
	}
	if f.force && f.to == "" {
		return errors.New("--force goes with --to")
	}
	if f.to != "" {
		if strings.ContainsFunc(f.to, notInSubject) || strings.HasPrefix(f.to, ".") || strings.HasSuffix(f.to, ".") || strings.Contains(f.to, "..") {
			return fmt.Errorf("--to: want one concrete subject (no wildcards or spaces), got %q", f.to)
		}
		if strings.HasPrefix(f.to, "flyball.dispatch.") && !f.force {
			return fmt.Errorf("--to %s: republishing into flyball.dispatch.* makes the executor run tasks; add --force if you really mean it", f.to)
		}
		// RUNS replayed into flyball.run.failed.<id> counted old failures
		// again toward the task's breaker; TASKS into flyball.task.* applied
		// old commands again. Every flyball.* subject is in one of flyball's
		// streams, and some service acts on it.
		if strings.HasPrefix(f.to, "flyball.") && !f.force {
			return fmt.Errorf("--to %s: flyball.* subjects are stored in flyball's own streams and its services act on them (a task command is applied again, a run outcome counts toward a breaker); replay into a subject of your own, or add --force if you really mean it", f.to)
		}
		// $KV.flyball-tasks.web took the replayed run events as the task's
		// spec: its runs were skipped as "invalid stored spec".
		if strings.HasPrefix(f.to, "$") && !f.force {
			return fmt.Errorf("--to %s: a subject starting with $ belongs to the server ($KV.<bucket>.<key> overwrites a KV key, $JS.API is its API); add --force if you really mean it", f.to)
		}
		f.republish = !f.dryRun
	}
	return nil
}

// notInSubject reports a rune a concrete subject cannot hold: a wildcard,
// a space or a control character (a CR or newline pasted with --to).
func notInSubject(r rune) bool {
	return r == '*' || r == '>' || unicode.IsSpace(r) || unicode.IsControl(r)
}

func (f *replayFlags) replay(ctx context.Context, s *session, out output) error {
	if f.republish {
		_, err := s.js.StreamNameBySubject(ctx, f.to)
		switch {
		case err == nil:
			f.toHasStream = true
		case !errors.Is(err, jetstream.ErrStreamNotFound):
			return fmt.Errorf("--to %s: %w", f.to, err)
		}
		fmt.Fprintf(s.errOut, "warning: republishing every replayed message to %s (not a dry run)\n", f.to)
	}
	if out == outTable {
		fmt.Fprintln(s.out, replayTableHeader)
	}
	err := query.Scan(ctx, s.js, query.ScanOptions{
		Stream: f.stream, Subjects: f.subjects, StartSeq: f.fromSeq, StartTime: f.startTime, Until: f.untilTime,
	}, func(m query.Message) error {
		f.replayed++
		if err := printReplayed(s.out, out, &m); err != nil {
			return err
		}
		switch {
		case f.to == "":
		case f.dryRun:
			f.wouldRepublish++
		default:
			if err := f.publish(ctx, s, &m); err != nil {
				return fmt.Errorf("republish seq %d to %s: %w", m.Seq, f.to, err)
			}
			f.republished++
			f.lastSeq = m.Seq
		}
		return nil
	})
	if err != nil {
		return f.partly(err)
	}
	if f.republish {
		if err := s.nc.FlushWithContext(ctx); err != nil {
			return f.partly(err)
		}
		// Core publishes are not acknowledged: a subject this user may not
		// publish to shows only as the connection's last error, which the
		// server reports before it answers the flush.
		if err := s.nc.LastError(); errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `Publish to "`+f.to+`"`) {
			return fmt.Errorf("--to %s: nothing was republished: %w; use a NATS user that may publish there", f.to, err)
		}
	}
	switch {
	case f.to != "" && f.dryRun:
		fmt.Fprintf(s.errOut, "dry run: would republish %d message(s) from %s to %s\n", f.wouldRepublish, f.stream, f.to)
	case f.to != "":
		fmt.Fprintf(s.errOut, "republished %d message(s) from %s to %s\n", f.replayed, f.stream, f.to)
	default:
		fmt.Fprintf(s.errOut, "%d message(s) from %s\n", f.replayed, f.stream)
	}
	return nil
}

// partly adds to err, when copies were already republished, how many and
// where to go on from, so that running the replay again does not send
// them twice.
func (f *replayFlags) partly(err error) error {
	if f.republished == 0 {
		return err
	}
	took := "were stored"
	if !f.toHasStream {
		// Core publishes are not acknowledged: sent, but not confirmed.
		took = "were sent"
	}
	return fmt.Errorf("%w; %d message(s), up to seq %d, %s to %s before it stopped: to go on without sending them again, use --from-seq %d in place of the start flag",
		err, f.republished, f.lastSeq, took, f.to, f.lastSeq+1)
}

// publish sends a copy of m to --to: through JetStream (waiting for the
// ack) if a stream captures the subject, as a core message otherwise.
func (f *replayFlags) publish(ctx context.Context, s *session, m *query.Message) error {
	msg := &nats.Msg{Subject: f.to, Data: m.Data, Header: nats.Header{}}
	for k, v := range m.Header {
		if k == jetstream.MsgIDHeader || strings.HasPrefix(k, "Nats-Expected-") {
			continue
		}
		msg.Header[k] = v
	}
	msg.Header.Set(replayHeader, fmt.Sprintf("%s:%d", m.Stream, m.Seq))
	if f.toHasStream {
		_, err := s.js.PublishMsg(ctx, msg)
		return err
	}
	return s.nc.PublishMsg(msg)
}

const replayTableHeader = "SEQ       TIME                      SUBJECT                                   TYPE                         DATA"

// replayed is the JSON form of one replayed message.
type replayed struct {
	Stream  string          `json:"stream"`
	Seq     uint64          `json:"seq"`
	Time    time.Time       `json:"time"`
	Subject string          `json:"subject"`
	Headers nats.Header     `json:"headers,omitempty"`
	Event   json.RawMessage `json:"event,omitempty"`
	Data    string          `json:"data,omitempty"`
}

func printReplayed(w io.Writer, out output, m *query.Message) error {
	if out == outJSON {
		r := replayed{Stream: m.Stream, Seq: m.Seq, Time: m.Time, Subject: m.Subject, Headers: m.Header}
		if json.Valid(m.Data) {
			r.Event = m.Data
		} else {
			r.Data = string(m.Data)
		}
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	typ, data := "-", string(m.Data)
	if e, err := events.Decode(m.Header, m.Data); err == nil {
		typ, data = e.Type(), string(e.Data())
	}
	_, err := fmt.Fprintf(w, "%-9d %-25s %-41s %-28s %s\n", m.Seq, fmtTime(m.Time), printable(m.Subject), printable(typ), preview(data, 80))
	return err
}
