package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/control"
	"github.com/flyballhq/flyball/services/internal/query"
	"github.com/flyballhq/flyball/streams"
)

func newDLQCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Watch, inspect, retry and purge dead-lettered runs (the DEADLETTER stream)",
		Long: `A run is dead-lettered when it failed permanently (a 4xx other than 408/429,
an invalid or blocked target) or exhausted its attempts. Each entry is a
CloudEvent on flyball.deadletter.<id> in the DEADLETTER stream, carrying the
original dispatch and every attempt's error. Entries are addressed by their
stream sequence (the SEQ column).`,
	}
	cmd.AddCommand(newDLQTailCmd(), newDLQListCmd(), newDLQShowCmd(), newDLQRetryCmd(), newDLQPurgeCmd())
	return cmd
}

const dlqHeader = "SEQ     TIME                      TASK                      REASON          ATTEMPTS  LAST ERROR"

// printDeadLetter writes one entry as a fixed-width row or a JSON line.
func printDeadLetter(w io.Writer, out output, rec *query.DeadLetterRecord) error {
	if out == outJSON {
		b, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	seq := "-"
	if rec.Seq > 0 {
		seq = strconv.FormatUint(rec.Seq, 10)
	}
	// TIME is when the run was dead-lettered; an entry that does not
	// decode has only the stored time.
	at := rec.Entry.DeadLetteredAt
	if at.IsZero() {
		at = rec.Time
	}
	_, err := fmt.Fprintf(w, "%-7s %-25s %-25s %-15s %8d  %s\n", seq, fmtTime(at), printable(rec.Entry.TaskID),
		orDash(printable(rec.Entry.Reason)), rec.Entry.Attempts, preview(rec.LastError(), 80))
	return err
}

func taskFilterFlag(cmd *cobra.Command, task *string) {
	cmd.Flags().StringVar(task, "task", "", "only this task's dead letters")
}

// checkTaskFilter checks --task. Given empty (a script's unset variable)
// it is refused, not read as no filter: `dlq purge --task "" --yes`
// purged every task's dead letters.
func checkTaskFilter(cmd *cobra.Command, task string) error {
	if task == "" {
		if cmd.Flags().Changed("task") {
			return errors.New("--task: give a task id, got an empty one (leave out --task for every task)")
		}
		return nil
	}
	if err := validID(task); err != nil {
		return fmt.Errorf("--task: %w", err)
	}
	return nil
}

func newDLQTailCmd() *cobra.Command {
	var (
		cf    clientFlags
		out   output
		task  string
		count int
	)
	cmd := &cobra.Command{
		Use:   "tail",
		Short: "Print dead letters as they are stored (reads DEADLETTER from the next entry)",
		Long: `tail reads the DEADLETTER stream (flyball.deadletter.>, or
flyball.deadletter.<task>) from the next entry on and prints one line per
new entry: its sequence, when it was dead-lettered, task, reason,
attempts and the last error; with -o json, the whole entry as one JSON line. Every line is flushed
at once, so tail can be piped into grep. It runs until Ctrl-C (or --count
entries). Entries stored before tail started are shown by 'dlq list'.`,
		Example: "  flyball dlq tail\n  flyball dlq tail --task orders-health -o json | jq .entry.errors",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkTaskFilter(cmd, task); err != nil {
				return err
			}
			if count < 0 {
				return fmt.Errorf("--count: must be >= 0, got %d", count)
			}
			return cf.run(cmd, false, func(ctx context.Context, s *session) error {
				subject := events.DeadLetterSubject("*")
				if task != "" {
					subject = events.DeadLetterSubject(task)
				}
				// A consumer of DEADLETTER from the next sequence on, not a
				// core subscription: every line has its sequence (for dlq
				// show and retry), and an entry stored while the
				// connection is down is printed when it comes back.
				st, err := s.js.Stream(ctx, streams.StreamDeadLetter)
				if err != nil {
					return fmt.Errorf("stream %s: %w", streams.StreamDeadLetter, err)
				}
				seen := 0
				return query.Scan(ctx, s.js, query.ScanOptions{
					Stream: streams.StreamDeadLetter, Subjects: []string{subject},
					StartSeq: st.CachedInfo().State.LastSeq + 1, Follow: true,
					CaughtUp: func() error {
						fmt.Fprintf(s.errOut, "listening on %s (Ctrl-C to stop)\n", subject)
						if out == outTable {
							fmt.Fprintln(s.out, dlqHeader)
						}
						return nil
					},
				}, func(m query.Message) error {
					rec := query.DecodeDeadLetter(m.Seq, m.Time, m.Subject, m.Header, m.Data)
					if err := printDeadLetter(s.out, out, &rec); err != nil {
						return err
					}
					if seen++; count > 0 && seen >= count {
						return query.ErrStop
					}
					return nil
				})
			})
		},
	}
	cf.register(cmd)
	out.register(cmd, outTable)
	taskFilterFlag(cmd, &task)
	cmd.Flags().IntVar(&count, "count", 0, "exit after this many entries (0: run until Ctrl-C)")
	return cmd
}

func newDLQListCmd() *cobra.Command {
	var (
		cf     clientFlags
		out    output
		task   string
		limit  int
		before string
	)
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List stored dead letters, newest last",
		Example: "  flyball dlq list\n  flyball dlq list --task orders-health --limit 5 -o json\n  flyball dlq list --limit 50 --before 1234",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkTaskFilter(cmd, task); err != nil {
				return err
			}
			if err := checkLimit(limit); err != nil {
				return err
			}
			seq, err := parseBefore(before)
			if err != nil {
				return err
			}
			return cf.run(cmd, true, func(ctx context.Context, s *session) error {
				list, next, err := s.q.DeadLetterPage(ctx, task, query.Page{Limit: limit, Before: seq})
				if err != nil {
					return err
				}
				if next > 0 {
					defer printNextPage(s.errOut, "dead letters", "--before", next)
				}
				if out == outJSON {
					return printJSON(s.out, list)
				}
				fmt.Fprintln(s.out, dlqHeader)
				for i := range list {
					if err := printDeadLetter(s.out, out, &list[i]); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
	cf.register(cmd)
	out.register(cmd, outTable)
	taskFilterFlag(cmd, &task)
	cmd.Flags().IntVarP(&limit, "limit", "n", 50, "show the newest N entries (0: all)")
	cmd.Flags().StringVar(&before, "before", "", "show entries stored before this DEADLETTER sequence (the next page)")
	markNonEmpty(cmd.Flags(), "before")
	return cmd
}

func parseSeq(s string) (uint64, error) {
	seq, err := strconv.ParseUint(s, 10, 64)
	if err != nil || seq == 0 {
		return 0, fmt.Errorf("want a DEADLETTER sequence (the SEQ column of 'flyball dlq list'), got %q", s)
	}
	return seq, nil
}

func newDLQShowCmd() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "show <seq>",
		Short: "Print one dead letter in full, as GET /api/v1/deadletter/<seq> does, and the stored CloudEvent (event)",
		Args:  oneArg("DEADLETTER sequence (SEQ in flyball dlq list)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			seq, err := parseSeq(args[0])
			if err != nil {
				return err
			}
			return cf.run(cmd, true, func(ctx context.Context, s *session) error {
				rec, err := s.q.DeadLetter(ctx, seq)
				if errors.Is(err, query.ErrNotFound) {
					return fmt.Errorf("no dead letter at sequence %d (flyball dlq list shows them)", seq)
				}
				if err != nil {
					return err
				}
				var ev any = string(rec.Raw)
				if json.Valid(rec.Raw) {
					ev = json.RawMessage(rec.Raw)
				}
				// The record as dlq list -o json and GET
				// /api/v1/deadletter/{seq} give it (entry, eventId, error),
				// and the stored CloudEvent as it is, envelope and all.
				return printJSON(s.out, struct {
					*query.DeadLetterRecord
					Event any `json:"event"`
				}{rec, ev})
			})
		},
	}
	cf.register(cmd)
	return cmd
}

func newDLQRetryCmd() *cobra.Command {
	var (
		cf     clientFlags
		all    bool
		task   string
		reason string
		force  bool
	)
	cmd := &cobra.Command{
		Use:   "retry (<seq> | --all --task <id>)",
		Short: "Run dead-lettered tasks again (publishes task.requeued)",
		Long: `retry publishes task.requeued for the entry's task, carrying the entry's
sequence (deadLetterSeq); the governor schedules a run now. The entry stays
in DEADLETTER as a record: purge it once the task is healthy again. --all
retries the task of --task once, naming its newest stored entry: one
requeue runs the task again whatever entry it names. An entry of a task
deleted and created again since is refused: its retry would run the new
task; --force runs it anyway. The requeue names the task the entry is of
(taskCreatedAt), so the governor rejects it if the task is deleted and
created again before it applies it; with --force it names none. When
DEADLETTER stores no entry of --task (purged) but the task is still held
for its dead-letter recheck, --all requeues the task (naming its
createdAt) so that it runs now.`,
		Example: "  flyball dlq retry 42\n  flyball dlq retry --all --task orders-health --reason 'fixed the endpoint'",
		// cobra.MaximumNArgs said "accepts at most 1 arg(s), received 2",
		// naming neither the command nor what it wants.
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 1 {
				return tooManyArgs("dlq retry", "DEADLETTER sequence", args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case all && len(args) > 0:
				return errors.New("give a sequence or --all --task <id>, not both")
			case all && task == "":
				return errors.New("--all needs --task <id>: retrying every task's dead letters at once is refused")
			case !all && len(args) == 0:
				return errors.New("give a sequence (the SEQ column of 'flyball dlq list') or --all --task <id>")
			case !all && task != "":
				return errors.New("--task goes with --all")
			}
			if err := checkTaskFilter(cmd, task); err != nil {
				return err
			}
			if err := control.ValidateReason(reason); err != nil {
				return flagError(err)
			}
			var seq uint64
			if !all {
				var err error
				if seq, err = parseSeq(args[0]); err != nil {
					return err
				}
			}
			return cf.run(cmd, true, func(ctx context.Context, s *session) error {
				var recs []query.DeadLetterRecord
				if all {
					var err error
					if recs, err = s.q.DeadLetters(ctx, task, 0); err != nil {
						return err
					}
					if len(recs) == 0 {
						return retryPurged(ctx, s, task, reason)
					}
				} else {
					rec, err := s.q.DeadLetter(ctx, seq)
					if errors.Is(err, query.ErrNotFound) {
						return fmt.Errorf("no dead letter at sequence %d (flyball dlq list shows them)", seq)
					}
					if err != nil {
						return err
					}
					recs = []query.DeadLetterRecord{*rec}
				}
				// One requeue per task, naming its newest entry: a requeue
				// plans a run of the task, whichever entry it names, and
				// each further one re-plans "now" after the run the one
				// before it already dispatched, which then does not count
				// for it: --all over n entries called the target twice.
				rec := &recs[len(recs)-1]
				id := rec.Entry.TaskID
				if err := validID(id); err != nil {
					return fmt.Errorf("dead letter %d: %w", rec.Seq, err)
				}
				// The entry of a task deleted and created again under the
				// same ID is not the new task's: its requeue ran the new
				// task once. It is refused unless --force asks for that run.
				// The requeue names the entry's task (taskCreatedAt), so the
				// governor rejects it if the task is deleted and created
				// again between this check and the requeue.
				v, err := s.q.Task(ctx, id)
				// Deleted and not created again: the governor rejects a
				// requeue, over two lines. --force runs no task either.
				if errors.Is(err, query.ErrNotFound) {
					return fmt.Errorf("no task %q: dead letter %d is of a task deleted since, nothing to retry (flyball task list shows the tasks)", id, rec.Seq)
				}
				if err != nil {
					return err
				}
				if why := rec.Recreated(v); why != "" && !force {
					return errors.New(why + "; add --force to run it anyway")
				}
				acc, err := s.command(ctx, events.VerbRequeued, id, rec.Requeue(reason, force))
				if err != nil {
					return err
				}
				if len(recs) > 1 {
					fmt.Fprintf(s.out, "requeued %s (dead letter %d, the newest of %d): %s\n", id, rec.Seq, len(recs), nextRun(acc))
				} else {
					fmt.Fprintf(s.out, "requeued %s (dead letter %d): %s\n", id, rec.Seq, nextRun(acc))
				}
				return nil
			})
		},
	}
	cf.register(cmd)
	cmd.Flags().BoolVar(&all, "all", false, "requeue --task once, naming its newest stored dead letter")
	cmd.Flags().BoolVar(&force, "force", false, "retry an entry of a task deleted and created again since, running the new task (the requeue names no task creation)")
	taskFilterFlag(cmd, &task)
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded on the event")
	return cmd
}

func newDLQPurgeCmd() *cobra.Command {
	var (
		cf   clientFlags
		task string
		yes  bool
	)
	cmd := &cobra.Command{
		Use:   "purge [--task <id>] --yes",
		Short: "Delete stored dead letters (all, or one task's); refuses without --yes",
		Long: `purge deletes entries from the DEADLETTER stream: every entry, or with
--task that task's. It changes no task and no schedule: it only forgets the
record: a task held for its dead-letter recheck stays held (a warning
says so), and 'flyball dlq retry --all --task <id>' runs it now. Without
--yes it prints what it would delete and exits 1.`,
		Example: "  flyball dlq purge --task orders-health          # shows what would go\n  flyball dlq purge --task orders-health --yes",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkTaskFilter(cmd, task); err != nil {
				return err
			}
			what, none := "every task", "no dead letters stored"
			if task != "" {
				what = fmt.Sprintf("task %q", task)
				none = "no dead letters of " + what
			}
			return cf.run(cmd, true, func(ctx context.Context, s *session) error {
				if !yes {
					n, err := s.q.CountDeadLetters(ctx, task)
					if err != nil {
						return err
					}
					if n == 0 {
						fmt.Fprintf(s.out, "%s: nothing to purge\n", none)
						return nil
					}
					list, err := s.q.DeadLetters(ctx, task, 20)
					if err != nil {
						return err
					}
					fmt.Fprintf(s.out, "would purge %d dead letter(s) of %s from DEADLETTER; the newest:\n", n, what)
					fmt.Fprintln(s.out, dlqHeader)
					for i := range list {
						_ = printDeadLetter(s.out, outTable, &list[i])
					}
					return fmt.Errorf("refusing to purge %d dead letter(s) without --yes", n)
				}
				n, err := s.q.PurgeDeadLetters(ctx, task)
				if err != nil {
					return err
				}
				if n == 0 {
					fmt.Fprintf(s.out, "%s: nothing to purge\n", none)
				} else {
					fmt.Fprintf(s.out, "purged %d dead letter(s) of %s\n", n, what)
				}
				if task == "" {
					return nil
				}
				// The purge forgets the record only: the governor holds the
				// task for its recheck still, up to deadLetter.recheckAfter.
				v, err := s.q.Task(ctx, task)
				if err != nil && !errors.Is(err, query.ErrNotFound) {
					return err
				}
				if h := recheckHold(v); h != nil {
					fmt.Fprintf(s.errOut, "warning: %s is still held for its dead-letter recheck at %s (a purge lifts no hold): 'flyball dlq retry --all --task %s' runs it now\n",
						task, h.RecheckAt.UTC().Format(time.RFC3339), task)
				}
				return nil
			})
		},
	}
	cf.register(cmd)
	taskFilterFlag(cmd, &task)
	cmd.Flags().BoolVar(&yes, "yes", false, "really delete")
	return cmd
}

// recheckHold is the dead-letter hold of v's schedule: the governor runs
// the task at its recheck and no sooner. It is nil when the task (v may be
// nil) is not held.
func recheckHold(v *query.TaskView) *gov.DeadLetterHold {
	if v == nil || v.Schedule == nil {
		return nil
	}
	return v.Schedule.DeadLetter
}

// retryPurged is `dlq retry --all --task id` when DEADLETTER stores no entry
// of id. A task whose entries were purged is still held for its recheck
// (up to 30 min by default), and the retry run-now advises printed "no dead
// letters to retry" and ran nothing: it requeues the held task, naming the
// task's createdAt so that the governor rejects the requeue if the task is
// deleted and created again before it applies it. A task not held has
// nothing to retry (exit 0); an unknown task is an error, as for `task get`.
func retryPurged(ctx context.Context, s *session, id, reason string) error {
	v, err := s.q.Task(ctx, id)
	if errors.Is(err, query.ErrNotFound) {
		return fmt.Errorf("no task %q and no dead letters of it (flyball task list shows the tasks)", id)
	}
	if err != nil {
		return err
	}
	h := recheckHold(v)
	if h == nil {
		fmt.Fprintf(s.out, "no dead letters of %q to retry\n", id)
		return nil
	}
	req := events.TaskRequeue{ID: id, Reason: reason, TaskCreatedAt: v.Schedule.CreatedAt}
	acc, err := s.command(ctx, events.VerbRequeued, id, req)
	if err != nil {
		return err
	}
	fmt.Fprintf(s.out, "requeued %s: its dead letters are gone (purged), but it was held for its dead-letter recheck at %s: %s\n",
		id, h.RecheckAt.UTC().Format(time.RFC3339), nextRun(acc))
	return nil
}
