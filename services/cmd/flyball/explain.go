package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/query"
)

func newExplainCmd() *cobra.Command {
	var (
		cf        clientFlags
		since     string
		out       output
		maxInputs int
	)
	cmd := &cobra.Command{
		Use:   "explain <id>",
		Short: "Why a task runs when it does: its decision timeline, replayed from the streams",
		Long: `explain reads every input of the task from TASKS (accepted commands),
RUNS (final outcomes), HEALTH (breaker transitions) and DEADLETTER, replays
them through the governor's pure decision function with the clocks the
governor itself used (each message's stored time), and prints one line per
decision: when, what came in, the next run it chose, the rule (source) and
its trail. It ends by comparing the replay with the schedule stored in
KV flyball-schedules; a mismatch is reported, never hidden. Inputs stored
in the last 10s that the governor has not applied yet are marked
(pending), and the stored schedule is compared with the replay before them.

--since hides older lines; the replay itself always starts at the task's
creation, so the decisions shown are the ones actually taken, as long as
the streams still hold every input since (RUNS and HEALTH keep 7 days and
1000 messages per subject): a warning names a stream that may have dropped
some, and a mismatch may follow. It holds at most --max-inputs inputs:
past it, it keeps the first (the creation) and the newest ones, and warns
of those it left out.`,
		Args: oneArg("task id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := validID(args[0]); err != nil {
				return err
			}
			var from time.Time
			if since != "" {
				t, err := parseWhen("since", since, time.Now(), false)
				if err != nil {
					return err
				}
				from = t
			}
			if maxInputs < 1 {
				return fmt.Errorf("--max-inputs must be at least 1, got %d", maxInputs)
			}
			return cf.run(cmd, true, func(ctx context.Context, s *session) error {
				s.q.MaxExplainInputs = maxInputs
				ex, err := s.q.Explain(ctx, args[0], from)
				if err != nil {
					return err
				}
				if len(ex.Timeline) == 0 && ex.Hidden == 0 && ex.DeletedAt.IsZero() && ex.Stored == nil && ex.Replayed == nil && len(ex.Warnings) == 0 {
					// Nothing in any stream and no schedule: a mistyped id, or
					// a task whose history has expired since it was deleted.
					return fmt.Errorf("no task %q: no decision recorded and no schedule stored (flyball task list shows the tasks)", args[0])
				}
				if out == outJSON {
					if err := printJSON(s.out, ex); err != nil {
						return err
					}
				} else {
					printExplanation(s.out, ex, from)
				}
				// A mismatch exits 1 in either format: a script reading
				// -o json checks the exit code as one reading the table.
				if !ex.Agrees {
					return fmt.Errorf("the replay does not match the stored schedule of %s (see above)", args[0])
				}
				return nil
			})
		},
	}
	cf.register(cmd)
	out.register(cmd, outTable)
	cmd.Flags().StringVar(&since, "since", "", "show decisions from this long ago (1h) or this time (RFC 3339)")
	markNonEmpty(cmd.Flags(), "since") // given empty, it showed every decision
	cmd.Flags().IntVar(&maxInputs, "max-inputs", query.DefaultMaxExplainInputs, "hold at most this many inputs of the task (an estimated 1-2 KB each): past it, keep its current creation and the newest")
	return cmd
}

// printExplanation prints ex, explained from since (zero: from the start).
func printExplanation(w io.Writer, ex *query.Explanation, since time.Time) {
	switch {
	case len(ex.Timeline) == 0 && ex.Hidden > 0:
		fmt.Fprintf(w, "no decisions for %s since %s: %d were recorded before it (a wider --since shows them)\n", ex.TaskID, fmtTime(since), ex.Hidden)
	case len(ex.Timeline) == 0:
		fmt.Fprintf(w, "no decisions recorded for %s\n", ex.TaskID)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tINPUT\tNEXT RUN\tSOURCE\tWHY")
	for _, st := range ex.Timeline {
		next := "-"
		if !st.NextRunAt.IsZero() {
			next = fmtTime(st.NextRunAt)
		}
		why := ""
		if n := len(st.Trail); n > 0 {
			why = st.Trail[n-1]
		}
		if st.NoChange != "" {
			why = st.NoChange
		}
		input := st.Input
		if st.Pending {
			input = "(pending) " + input
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", fmtTime(st.At), printable(input), next, st.Source, printable(why))
	}
	_ = tw.Flush()
	for _, wn := range ex.Warnings {
		fmt.Fprintln(w, "warning: "+printable(wn))
	}
	switch {
	case ex.Agrees && ex.Pending > 0:
		fmt.Fprintf(w, "stored: %s; the replay agrees up to the last %d input(s), marked (pending): the governor had not applied them yet (stored within %s); they lead to %s\n",
			scheduleText(ex.Stored), ex.Pending, query.InFlight, scheduleText(ex.Replayed))
	case ex.Stored == nil && ex.NothingReplayed && !ex.DeletedAt.IsZero():
		// Nothing replayed: no agreement to claim, and no mismatch.
		fmt.Fprintf(w, "stored: no schedule: the task was deleted at %s; nothing was replayed to compare with (see the warning)\n", fmtTime(ex.DeletedAt))
	case ex.Stored == nil && ex.NothingReplayed:
		fmt.Fprintln(w, "stored: no schedule (the task does not exist or was deleted); nothing was replayed to compare with")
	case ex.NothingReplayed:
		fmt.Fprintf(w, "stored: %s; nothing was replayed to compare with (see the warning)\n", scheduleText(ex.Stored))
	case ex.Stored == nil && ex.Replayed == nil && !ex.DeletedAt.IsZero():
		fmt.Fprintf(w, "stored: no schedule: the task was deleted at %s; the replay agrees\n", fmtTime(ex.DeletedAt))
	case ex.Stored == nil && ex.Replayed == nil:
		fmt.Fprintln(w, "stored: no schedule (the task does not exist or was deleted); the replay agrees")
	case ex.Agrees:
		fmt.Fprintf(w, "stored: %s; the replay agrees\n", scheduleText(ex.Stored))
	default:
		fmt.Fprintf(w, "MISMATCH: stored %s, replayed %s\n", scheduleText(ex.Stored), scheduleText(ex.Replayed))
	}
}

// scheduleText names a schedule's next run and rule, or "no schedule".
func scheduleText(st *gov.State) string {
	if st == nil {
		return "no schedule"
	}
	return fmt.Sprintf("next run %s (%s)", fmtTime(st.NextRunAt), st.Source)
}
