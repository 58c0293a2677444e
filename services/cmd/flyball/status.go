package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/flyballhq/flyball/services/internal/query"
)

func newStatusCmd() *cobra.Command {
	var (
		cf     clientFlags
		asJSON bool
		out    output
		stale  int
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Scheduler health: queue, dead letters, open breakers, staleness",
		Long: `status prints the scheduler-health summary, the same data as
GET /api/v1/scheduler/health: scheduled tasks (and how many are due within
12s, by job), stored dead letters (the 25 newest), breakers that are not
closed, and the staleness score of the stalest tasks:

  score = min(1, max(0, (age - expected) / (4 × expected)))

where age is the time since the task's last success (or since it was
created) and expected its baseline interval: 0 while the last success is
at most one interval old, 1 at five intervals. A cron task counts the
occurrences due since its last success instead: 0 until the first, 1 at
the fifth.

The table lists the 10 stalest tasks and says how many more there are;
--stale N lists N (0 to 1000). -o json lists 1000, as the API does,
unless --stale is given.`,
		Example: "  flyball status\n  flyball status --stale 100\n  flyball status -o json | jq '.stalenessCount'",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// --json won over -o table without a word.
			if asJSON && out != outJSON && cmd.Flags().Changed("output") {
				return fmt.Errorf("--json and -o %s conflict: --json is -o json", out)
			}
			if stale < 0 || stale > query.MaxStaleness {
				return fmt.Errorf("--stale: must be in [0, %d], got %d", query.MaxStaleness, stale)
			}
			jsonOut := asJSON || out == outJSON
			if jsonOut && !cmd.Flags().Changed("stale") {
				stale = query.MaxStaleness // the API's default
			}
			return cf.run(cmd, true, func(ctx context.Context, s *session) error {
				h, err := s.q.Health(ctx, stale)
				if err != nil {
					return err
				}
				if jsonOut {
					return printJSON(s.out, h)
				}
				printHealth(s.out, h)
				return nil
			})
		},
	}
	cf.register(cmd)
	out.register(cmd, outTable)
	cmd.Flags().BoolVar(&asJSON, "json", false, "the same as -o json (the API's shape)")
	cmd.Flags().IntVar(&stale, "stale", statusStale, fmt.Sprintf("list the N stalest tasks, 0 to %d (-o json: %d unless given)", query.MaxStaleness, query.MaxStaleness))
	return cmd
}

// statusStale is how many of the stalest tasks the status table lists by
// default: at 100,000 tasks it printed 100,000 lines.
const statusStale = 10

func printHealth(w io.Writer, h *query.Health) {
	fmt.Fprintf(w, "scheduler health at %s\n\n", fmtTime(h.UpdatedAt))
	jobs := make([]string, 0, len(h.Queue.PerType))
	for j, n := range h.Queue.PerType {
		jobs = append(jobs, fmt.Sprintf("%s=%d", j, n))
	}
	slices.Sort(jobs)
	printServices(w, &h.Services)
	fmt.Fprintf(w, "queue         %d scheduled, %d due within %s", h.Queue.Depth, h.Queue.DueWithinSeconds, query.DueWindow)
	if len(jobs) > 0 {
		fmt.Fprintf(w, "  (by job: %s)", strings.Join(jobs, " "))
	}
	fmt.Fprintln(w)
	printBacklog(w, h.Backlog)
	fmt.Fprintf(w, "dead letters  %d stored\n", h.DeadLetter.Count)
	if len(h.DeadLetter.Tasks) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  SEQ\tDEAD-LETTERED\tTASK\tREASON\tATTEMPTS\tLAST ERROR")
		for _, d := range h.DeadLetter.Tasks {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%d\t%s\n", d.Seq, fmtTime(d.DeadLetteredAt), printable(d.TaskID), printable(d.Reason), d.Attempts, preview(d.LastError, 60))
		}
		_ = tw.Flush()
	}
	fmt.Fprintf(w, "breakers      %d not closed\n", len(h.Breakers))
	if len(h.Breakers) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  KEY\tSTATE\tFAILURES\tRETRY AT")
		for _, b := range h.Breakers {
			retry := "-"
			if b.RetryAt != nil {
				retry = fmtTime(*b.RetryAt)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\n", b.Key, b.State, b.Failures, retry)
		}
		_ = tw.Flush()
	}
	fmt.Fprintf(w, "staleness     %d task(s), stalest first\n", h.StalenessCount)
	if len(h.Staleness) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  TASK\tSCORE\tLAST SUCCESS\tEXPECTED\tPAUSED")
		for _, e := range h.Staleness {
			last := "never"
			if e.LastSuccess != nil {
				last = fmtTime(*e.LastSuccess)
			}
			paused := ""
			if e.Paused {
				paused = "yes"
			}
			fmt.Fprintf(tw, "  %s\t%.2f\t%s\t%s\t%s\n", e.TaskID, e.Score, last, e.Expected.D().Round(time.Second), paused)
		}
		_ = tw.Flush()
	}
	if more := h.StalenessCount - len(h.Staleness); more > 0 {
		if h.StalenessCount <= query.MaxStaleness {
			fmt.Fprintf(w, "  … and %d more (flyball status --stale %d lists them all)\n", more, h.StalenessCount)
		} else {
			fmt.Fprintf(w, "  … and %d more (flyball status --stale %d lists the %d stalest)\n", more, query.MaxStaleness, query.MaxStaleness)
		}
	}
}

// statusOffline is how many offline instances status lists (flyball
// runtime lists them all).
const statusOffline = 10

// printServices prints the services line first: a kind with no instance
// online explains every other line (a timer down, and nothing is due).
func printServices(w io.Writer, sh *query.ServicesHealth) {
	kinds := make([]string, 0, len(sh.Online))
	total := 0
	for k, n := range sh.Online {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
		total += n
	}
	slices.Sort(kinds)
	fmt.Fprintf(w, "services      %d online", total)
	if len(kinds) > 0 {
		fmt.Fprintf(w, "  (%s)", strings.Join(kinds, " "))
	}
	fmt.Fprintln(w)
	for _, m := range sh.Missing {
		fmt.Fprintf(w, "  NONE ONLINE: %s: %s\n", m.Kind, m.Effect)
	}
	if sh.TimerLease != "" {
		// With one timer online there is no other to stand by.
		state := "dispatches; no other timer is online to take over"
		if sh.Online["timer"] > 1 {
			state = "dispatches; other timers stand by"
		}
		for _, in := range sh.Offline {
			if in.Kind == "timer" && in.Name == sh.TimerLease {
				state = "is OFFLINE: a standby takes the lease once it has gone unrenewed for the lease's duration"
			}
		}
		fmt.Fprintf(w, "  timer lease: %s %s\n", sh.TimerLease, state)
	}
	for i, in := range sh.Offline {
		if i == statusOffline {
			fmt.Fprintf(w, "  … and %d more offline (flyball runtime lists them)\n", len(sh.Offline)-i)
			break
		}
		fmt.Fprintf(w, "  offline: %s %s on %s (pid %d), last beat %s ago\n", in.Kind, in.Name, in.Host, in.PID, in.LastBeatAge.D().Round(time.Second))
	}
}

// printBacklog prints the work waiting in NATS: one line of totals, then
// the durables that have messages waiting or redelivered, are near their
// max_ack_pending, or could not be read.
func printBacklog(w io.Writer, bs []query.ConsumerBacklog) {
	var pending uint64
	unacked := 0
	for _, b := range bs {
		pending += b.Pending
		unacked += b.AckPending
	}
	fmt.Fprintf(w, "backlog       %d waiting for delivery, %d delivered and unacked (%d durable(s))\n", pending, unacked, len(bs))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := false
	for _, b := range bs {
		full := b.MaxAckPending > 0 && b.AckPending*10 >= b.MaxAckPending*9
		if b.Pending == 0 && b.Redelivered == 0 && !full && b.Error == "" {
			continue
		}
		if !header {
			fmt.Fprintln(tw, "  DURABLE\tWAITING\tUNACKED\tREDELIVERED\t")
			header = true
		}
		if b.Error != "" {
			fmt.Fprintf(tw, "  %s/%s\t-\t-\t-\tcannot read: %s\n", b.Stream, b.Consumer, preview(b.Error, 80))
			continue
		}
		note := ""
		if full {
			note = "at its max_ack_pending: delivers little more"
		}
		fmt.Fprintf(tw, "  %s/%s\t%d\t%d of %d\t%d\t%s\n", b.Stream, b.Consumer, b.Pending, b.AckPending, b.MaxAckPending, b.Redelivered, note)
	}
	_ = tw.Flush()
}
