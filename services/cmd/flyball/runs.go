package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/flyballhq/flyball/services/internal/query"
)

func newRunsCmd() *cobra.Command {
	var (
		cf     clientFlags
		out    output
		limit  int
		follow bool
	)
	cmd := &cobra.Command{
		Use:   "runs <id>",
		Short: "Show a task's run history from the RUNS stream",
		Long: `runs reads the task's run events (flyball.run.*.<id>: succeeded, failed
per attempt, skipped; the services publish no started) from the RUNS stream with an ephemeral ordered
consumer and prints the newest --limit of them, oldest first: time, outcome,
attempt, HTTP status, duration and a preview of the response body (or the
error). --follow then keeps printing new ones until Ctrl-C.`,
		Example: "  flyball runs orders-health --limit 50\n  flyball runs orders-health --follow\n  flyball runs orders-health -o json | jq '.run.body'",
		Args:    oneArg("task id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := validID(id); err != nil {
				return err
			}
			if limit < 0 {
				return fmt.Errorf("--limit: must be >= 0, got %d", limit)
			}
			return cf.run(cmd, !follow, func(ctx context.Context, s *session) error {
				if out == outTable {
					fmt.Fprintln(s.out, runHeader)
				}
				n := 0
				err := s.q.FollowRuns(ctx, id, limit, follow, func(rec query.RunRecord) error {
					n++
					return printRun(s.out, out, &rec)
				})
				if err == nil && n == 0 && !follow {
					fmt.Fprintf(s.errOut, "no runs of %q on RUNS\n", id)
				}
				return err
			})
		},
	}
	cf.register(cmd)
	out.register(cmd, outTable)
	cmd.Flags().IntVarP(&limit, "limit", "n", 20, "show the newest N runs (0: all)")
	cmd.Flags().BoolVarP(&follow, "follow", "F", false, "keep printing new runs until Ctrl-C")
	return cmd
}

const runHeader = "TIME                      OUTCOME    ATTEMPT  STATUS  DURATION  BODY"

// printRun writes one run as a table row or a JSON line. Rows have fixed
// widths so --follow can print each as it arrives.
func printRun(w io.Writer, out output, rec *query.RunRecord) error {
	if out == outJSON {
		b, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	r := &rec.Run
	at := r.FinishedAt
	if at.IsZero() {
		at = r.StartedAt
	}
	if at.IsZero() {
		at = rec.Time
	}
	attempt, status, dur := "-", "-", "-"
	if r.Attempt > 0 {
		attempt = strconv.Itoa(r.Attempt)
	}
	if r.Status > 0 {
		status = strconv.Itoa(r.Status)
	}
	if r.Duration > 0 {
		dur = r.Duration.D().Round(time.Millisecond).String()
		if r.Duration.D() < time.Millisecond {
			dur = r.Duration.D().Round(time.Microsecond).String()
		}
	}
	body := r.Body
	switch {
	case rec.Error != "":
		body = "undecodable event: " + rec.Error
	case r.Error != "":
		body = "error: " + r.Error
	case r.Reason != "":
		body = "skipped: " + r.Reason
	}
	_, err := fmt.Fprintf(w, "%-25s %-10s %7s  %6s  %8s  %s\n", fmtTime(at), rec.Outcome, attempt, status, dur, preview(body, 60))
	return err
}
