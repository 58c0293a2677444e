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

	"github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/query"
)

func newRunsCmd() *cobra.Command {
	var (
		cf     clientFlags
		out    output
		limit  int
		before string
		follow bool
	)
	cmd := &cobra.Command{
		Use:   "runs <id>",
		Short: "Show a task's run history from the RUNS stream",
		Long: `runs reads the task's run events (flyball.run.*.<id>: succeeded, failed
per attempt, skipped; the services publish no started, and run.recovered, a
success repeated for the breaker, is left out) from the RUNS stream with an ephemeral ordered
consumer and prints the newest --limit of them, oldest first: time, outcome,
attempt, HTTP status, duration and a preview of the response body (or the
error). --follow then keeps printing new ones until Ctrl-C. When older runs
remain, a line on stderr gives the --before <seq> that prints the page of
them. RUNS keeps a
deleted task's runs under its id; where they give way to those of a task
created again under it, the table prints a line starting "--", also when
that falls between two pages: above the newer page's first run and below
the older page's last.`,
		Example: "  flyball runs orders-health --limit 50\n  flyball runs orders-health --limit 50 --before 1234\n  flyball runs orders-health --follow\n  flyball runs orders-health -o json | jq '.run.body'",
		Args:    oneArg("task id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := validID(id); err != nil {
				return err
			}
			if err := checkLimit(limit); err != nil {
				return err
			}
			seq, err := parseBefore(before)
			if err != nil {
				return err
			}
			if seq > 0 && follow {
				return errors.New("--before lists older runs and --follow newer ones: give one of them")
			}
			return cf.run(cmd, !follow, func(ctx context.Context, s *session) error {
				if out == outTable {
					fmt.Fprintln(s.out, runHeader)
				}
				p := runPrinter{w: s.out, out: out}
				if follow {
					return s.q.FollowRuns(ctx, id, limit, true, func(rec query.RunRecord) error {
						return p.print(&rec)
					})
				}
				page, err := s.q.RunPageEdges(ctx, id, query.Page{Limit: limit, Before: seq})
				if err != nil {
					return err
				}
				runs, next := page.Runs, page.Next
				// The runs next to the page's edges: a changeover
				// between pages is marked on both.
				p.created = page.OlderCreatedAt
				for i := range runs {
					if err := p.print(&runs[i]); err != nil {
						return err
					}
				}
				if len(runs) > 0 {
					if err := p.end(page.NewerCreatedAt); err != nil {
						return err
					}
				}
				switch {
				case next > 0:
					printNextPage(s.errOut, "runs", "--before", next)
				case len(runs) == 0 && seq > 0:
					fmt.Fprintf(s.errOut, "no runs of %q on RUNS before sequence %d\n", id, seq)
				case len(runs) == 0:
					fmt.Fprintf(s.errOut, "no runs of %q on RUNS\n", id)
				}
				return nil
			})
		},
	}
	cf.register(cmd)
	out.register(cmd, outTable)
	cmd.Flags().IntVarP(&limit, "limit", "n", 20, "show the newest N runs (0: all)")
	cmd.Flags().StringVar(&before, "before", "", "show runs stored before this RUNS sequence (the next page)")
	markNonEmpty(cmd.Flags(), "before")
	cmd.Flags().BoolVarP(&follow, "follow", "F", false, "keep printing new runs until Ctrl-C")
	return cmd
}

const runHeader = "TIME                      OUTCOME    ATTEMPT  STATUS  DURATION  BODY"

// runPrinter prints a task's runs in stored order, and in the table
// marks where they pass from one task to another of the same ID: RUNS
// keeps a deleted task's runs under the subjects of a task created again
// under its ID, and the run events' taskCreatedAt tells them apart.
type runPrinter struct {
	w   io.Writer
	out output
	// created is the taskCreatedAt of the last printed run that had one,
	// or of the run before the first printed one.
	created time.Time
}

func (p *runPrinter) print(rec *query.RunRecord) error {
	if c := rec.Run.TaskCreatedAt; !c.IsZero() {
		if err := p.changeover(c, "below"); err != nil {
			return err
		}
		p.created = c
	}
	return printRun(p.w, p.out, rec)
}

// end marks, below the last printed run, that the run after it (on the
// newer page, not printed) is of the other task: created is its
// taskCreatedAt.
func (p *runPrinter) end(created time.Time) error {
	return p.changeover(created, "after these")
}

// changeover writes, in the table, the line that marks a pass from the
// task of the last printed run to the task created at created, if that
// is another; where says which runs are its ("below", "after these").
func (p *runPrinter) changeover(created time.Time, where string) error {
	if p.out != outTable || !governor.OtherCreatedAt(p.created, created) {
		return nil
	}
	var err error
	if created.After(p.created) {
		_, err = fmt.Fprintf(p.w, "-- task deleted and created again at %s: the runs %s are the new task's --\n", fmtTime(created), where)
	} else {
		_, err = fmt.Fprintf(p.w, "-- the runs %s are the deleted task's (created at %s), stored late --\n", where, fmtTime(created))
	}
	return err
}

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
