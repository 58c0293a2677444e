package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/control"
	"github.com/flyballhq/flyball/services/internal/query"
	"github.com/flyballhq/flyball/services/internal/ssrf"
)

func newTaskCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "task",
		Short: "Create, change, inspect and steer tasks",
		Long: `task publishes control-plane CloudEvents (task.created, task.paused, …) on
the TASKS stream, exactly like the HTTP API and 'nats pub', and waits for the
governor's task.accepted or task.rejected answer. Reads come from the KV
buckets flyball-tasks and flyball-schedules.`,
	}
	cmd.AddCommand(
		newTaskSpecCmd(events.VerbCreated), newTaskSpecCmd(events.VerbUpdated),
		newTaskDeleteCmd(), newTaskGetCmd(), newTaskListCmd(),
		newTaskPauseCmd(), newTaskResumeCmd(), newTaskHintCmd(), newTaskRunNowCmd(),
	)
	return cmd
}

// newTaskSpecCmd is task create and task update: both read a spec file.
func newTaskSpecCmd(verb events.Verb) *cobra.Command {
	var (
		cf         clientFlags
		file       string
		dryRun     bool
		ifRevision string
	)
	name, done := "create", "accepted"
	if verb == events.VerbUpdated {
		name, done = "update", "updated"
	}
	cmd := &cobra.Command{
		Use:   name + " -f task.yaml|task.json",
		Short: fmt.Sprintf("%s a task from a YAML or JSON spec (publishes task.%s)", strings.ToUpper(name[:1])+name[1:], verb),
		Long: fmt.Sprintf(`%s reads a task spec (YAML or JSON; '-' reads stdin), decodes it strictly
(unknown fields are errors, naming the field) and validates it locally. With
--dry-run it stops there: it prints "valid", or every reason and exits 1.
Otherwise it publishes task.%s and waits for the governor's answer: it prints
"%s <id>: next run <time> (<source>) (revision <n>)", or every rejection
reason and exits 1.%s`, name, verb, done, ifRevisionHelp(verb)),
		Example: "  flyball task " + name + " -f orders-health.yaml\n  flyball task " + name + " -f task.json --dry-run",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rev, err := parseIfRevision(ifRevision)
			if err != nil {
				return err
			}
			spec, err := readSpec(file, cmd.InOrStdin())
			if err != nil {
				return err
			}
			if dryRun {
				if err := dryRunTarget(file, &spec, cmd.ErrOrStderr()); err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), "valid")
				return nil
			}
			return cf.run(cmd, true, func(ctx context.Context, s *session) error {
				var data any = spec
				if verb == events.VerbUpdated {
					data = events.TaskUpdate{TaskSpec: spec, IfRevision: rev}
				}
				acc, err := s.command(ctx, verb, spec.ID, data)
				if err != nil {
					return err
				}
				fmt.Fprintf(s.out, "%s %s: %s%s\n", done, spec.ID, nextRun(acc), specRevision(acc))
				return nil
			})
		},
	}
	cf.register(cmd)
	cmd.Flags().StringVarP(&file, "file", "f", "", "task spec file, YAML or JSON ('-' for stdin)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "validate locally and print \"valid\"; publish nothing")
	_ = cmd.MarkFlagRequired("file")
	// A create has no spec to check the revision of.
	if verb == events.VerbUpdated {
		cmd.Example += "\n  flyball task update -f orders-health.yaml --if-revision 7"
		cmd.Flags().StringVar(&ifRevision, "if-revision", "", "apply only while the spec is at this `revision` (the revision row of flyball task get); the governor refuses it otherwise")
		markNonEmpty(cmd.Flags(), "if-revision")
	}
	return cmd
}

// ifRevisionHelp is what task update's help says about --if-revision.
func ifRevisionHelp(verb events.Verb) string {
	if verb != events.VerbUpdated {
		return ""
	}
	return `

An update replaces the whole spec: without --if-revision, one made from a
spec read before another update undoes that update without a word. With
--if-revision N (the revision 'flyball task get' shows, or the one the last
create or update printed) the governor applies it only while the spec is
still at revision N; otherwise it is refused ("the task changed since
revision N"), exit 1, and the spec stays as it is.`
}

// openGuard is an SSRF guard that allows every address: what it still
// refuses (a host in a non-canonical numeric form) every guard refuses.
var openGuard = ssrf.Guard{AllowLoopback: true, Allow: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}}

// dryRunTarget checks a spec's target host as far as it can without the
// servers' SSRF settings. A host that every guard refuses (a non-canonical
// numeric form) is a reason, as the governor and the API give it. A host
// the default guard refuses (loopback, link-local, a cloud metadata
// address or name) is valid where the executors, the governor and the API
// are given --allow-loopback or --allow-cidr for it, as flyball dev is
// for loopback, so it gets a one-line note on stderr. Before, a dry run
// printed "valid" for both, and the real create was rejected.
func dryRunTarget(path string, spec *events.TaskSpec, stderr io.Writer) error {
	if err := openGuard.CheckTarget(spec); err != nil {
		return newReasonsError(path+": invalid task spec", events.Reasons(err))
	}
	if h := spec.Target.HTTP; h != nil {
		if u, err := url.Parse(h.URL); err == nil {
			if err := (&ssrf.Guard{}).CheckHost(u.Hostname()); err != nil {
				fmt.Fprintf(stderr, "note: target.http.url: the default SSRF guard refuses its host: %s; it is valid only where the executors, the governor and the API are given --allow-loopback or --allow-cidr for it\n",
					strings.TrimPrefix(err.Error(), ssrf.ErrBlocked.Error()+": "))
			}
		}
	}
	return nil
}

// maxStdinSpec bounds a task spec read from stdin, which may be a stream
// that never ends.
const maxStdinSpec = 4 << 20

// readSpec reads, strictly decodes and validates a task spec file.
func readSpec(path string, stdin io.Reader) (events.TaskSpec, error) {
	var (
		b   []byte
		err error
	)
	if path == "-" {
		path = "stdin"
		// One byte past the limit tells a spec cut off from one that
		// fits: cut, the rest of it was dropped without a word (a spec
		// cut inside a comment still parsed, without what followed).
		b, err = io.ReadAll(io.LimitReader(stdin, maxStdinSpec+1))
		if err == nil && len(b) > maxStdinSpec {
			return events.TaskSpec{}, fmt.Errorf("stdin: more than %d MiB; a task spec is far smaller (give -f its file instead of -)", maxStdinSpec>>20)
		}
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return events.TaskSpec{}, fmt.Errorf("read task spec: %w", err)
	}
	doc := bytes.TrimSpace(b)
	var notJSON error
	if len(doc) > 0 && doc[0] == '{' {
		// JSON (JSON is YAML too, but its own errors read better), or a
		// YAML flow mapping ({id: a, …}), which is no JSON: read as YAML.
		spec, err := control.DecodeSpec(doc)
		if err == nil || json.Valid(doc) {
			return spec, specError(path, err)
		}
		notJSON = err
	}
	if len(doc) > 0 {
		y, err := yamlToJSON(b)
		switch {
		case errors.Is(err, errYAMLDocuments):
			return events.TaskSpec{}, fmt.Errorf("%s: holds %w; want one task per file (split it at each ---)", path, err)
		case err != nil && notJSON != nil:
			return events.TaskSpec{}, fmt.Errorf("%s: neither JSON (%s) nor YAML (%w)", path, events.Reasons(notJSON)[0].Rule, err)
		case err != nil:
			return events.TaskSpec{}, fmt.Errorf("%s: not valid YAML: %w", path, err)
		}
		doc = y
	}
	spec, err := control.DecodeSpec(doc)
	return spec, specError(path, err)
}

// specError is readSpec's error for a spec that does not decode or
// validate: every reason, on a line of its own.
func specError(path string, err error) error {
	if err == nil {
		return nil
	}
	return newReasonsError(path+": invalid task spec", events.Reasons(err))
}

func newTaskDeleteCmd() *cobra.Command {
	var (
		cf         clientFlags
		reason     string
		ifRevision string
	)
	cmd := &cobra.Command{
		Use:   "delete <id>",
		Short: "Delete a task (publishes task.deleted); its history stays in RUNS and DEADLETTER",
		Long: `delete publishes task.deleted and waits for the governor's answer. With
--if-revision N (the revision 'flyball task get' shows) the governor deletes
the task only while its spec is still at revision N; otherwise it is refused
("the task changed since revision N"), exit 1, and the task stays.`,
		Example: "  flyball task delete orders-health --reason 'service retired'\n  flyball task delete orders-health --if-revision 7",
		Args:    oneArg("task id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := validID(id); err != nil {
				return err
			}
			if err := control.ValidateReason(reason); err != nil {
				return flagError(err)
			}
			rev, err := parseIfRevision(ifRevision)
			if err != nil {
				return err
			}
			return cf.run(cmd, true, func(ctx context.Context, s *session) error {
				// The governor accepts a delete of a missing task (a
				// redelivered delete must not fail), so a mistyped id
				// would print "deleted"; the API answers 404, and so
				// does this. A task whose spec does not decode exists.
				if _, err := s.q.Task(ctx, id); errors.Is(err, query.ErrNotFound) {
					return fmt.Errorf("no task %q (flyball task list shows the tasks)", id)
				} else if err != nil {
					return err
				}
				// Without ifRevision it is the TaskRef it was before.
				del := events.TaskDelete{TaskRef: events.TaskRef{ID: id, Reason: reason}, IfRevision: rev}
				if _, err := s.command(ctx, events.VerbDeleted, id, del); err != nil {
					return err
				}
				fmt.Fprintf(s.out, "deleted %s\n", id)
				return nil
			})
		},
	}
	cf.register(cmd)
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded on the event")
	cmd.Flags().StringVar(&ifRevision, "if-revision", "", "delete only while the spec is at this `revision` (the revision row of flyball task get); the governor refuses it otherwise")
	markNonEmpty(cmd.Flags(), "if-revision")
	return cmd
}

// taskJSON is task get -o json: the view, and the spec's revision, which
// the view leaves out of its JSON (the API sends it as the ETag). Named
// as in task.accepted.
type taskJSON struct {
	*query.TaskView
	SpecRevision uint64 `json:"specRevision"`
}

func newTaskGetCmd() *cobra.Command {
	var (
		cf  clientFlags
		out output
	)
	cmd := &cobra.Command{
		Use:   "get <id>",
		Short: "Show a task's spec and schedule state (KV flyball-tasks and flyball-schedules)",
		Args:  oneArg("task id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := validID(args[0]); err != nil {
				return err
			}
			return cf.run(cmd, true, func(ctx context.Context, s *session) error {
				v, err := s.q.Task(ctx, args[0])
				if errors.Is(err, query.ErrNotFound) {
					return fmt.Errorf("no task %q (flyball task list shows the tasks)", args[0])
				}
				if err != nil {
					return err
				}
				if out == outJSON {
					return printJSON(s.out, taskJSON{TaskView: v, SpecRevision: v.SpecRevision})
				}
				printTask(s.out, v, time.Now())
				return nil
			})
		},
	}
	cf.register(cmd)
	out.register(cmd, outJSON)
	return cmd
}

func describeSchedule(sc events.Schedule) string {
	if sc.Cron != "" {
		tz := sc.Timezone
		if tz == "" {
			tz = "UTC"
		}
		return fmt.Sprintf("cron %q (%s)", sc.Cron, tz)
	}
	return "every " + sc.Interval.String()
}

func describeTarget(t events.Target) string {
	switch {
	case t.HTTP != nil:
		m := t.HTTP.Method
		if m == "" {
			m = "GET"
		}
		return m + " " + t.HTTP.URL
	case t.NATS != nil:
		return "nats request " + t.NATS.Subject
	}
	return "-"
}

func describeState(st *gov.State, now time.Time) string {
	switch {
	case st == nil:
		return "no schedule yet"
	case st.Paused && st.PausedUntil.IsZero():
		return "paused " + reasonSuffix(st.PauseReason)
	case st.PausedAt(now):
		return "paused until " + fmtTime(st.PausedUntil) + " " + reasonSuffix(st.PauseReason)
	case st.Paused:
		return "pause ended at " + fmtTime(st.PausedUntil) + "; resumes with the run at " + fmtTime(st.NextRunAt)
	}
	return "active"
}

func reasonSuffix(r string) string {
	if r == "" {
		return ""
	}
	return "(" + r + ")"
}

// untilNextRun says when a next run at t falls, seen at now: "in 8s",
// "due now", or "overdue by 8s" for one in the past, which read "in -8s".
func untilNextRun(t, now time.Time) string {
	switch d := t.Sub(now).Round(time.Second); {
	case d > 0:
		return "in " + d.String()
	case d < 0:
		return "overdue by " + (-d).String()
	default:
		return "due now"
	}
}

func printTask(w io.Writer, v *query.TaskView, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	// Reasons, the URL and an unreadable spec's error are free text.
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, printable(v)) }
	sp := v.Spec
	row("id", sp.ID)
	// The --if-revision of an update or a delete decided on what follows.
	row("revision", fmt.Sprint(v.SpecRevision))
	if v.Unreadable != "" {
		row("UNREADABLE", v.Unreadable)
	}
	row("job", orDash(sp.Job))
	row("labels", orDash(formatLabels(sp.Labels)))
	row("target", describeTarget(sp.Target))
	row("schedule", describeSchedule(sp.Schedule))
	st := v.Schedule
	row("state", describeState(st, now))
	if st != nil {
		next := "none"
		if !st.NextRunAt.IsZero() {
			next = fmt.Sprintf("%s (%s)", fmtTime(st.NextRunAt), untilNextRun(st.NextRunAt, now))
		}
		row("next run", fmt.Sprintf("%s, source %s", next, orDash(string(st.Source))))
		row("last outcome", orDash(st.LastOutcome))
		row("last success", fmtTime(st.LastSuccessAt))
		row("last failure", fmtTime(st.LastFailureAt))
		row("failures", fmt.Sprint(st.Failures))
		if h := st.IntervalHint; h != nil {
			row("interval hint", fmt.Sprintf("%s until %s %s", h.Interval, fmtTime(h.ExpiresAt), reasonSuffix(h.Reason)))
		}
		if h := st.OneShotHint; h != nil {
			row("one-shot hint", fmt.Sprintf("at %s (expires %s) %s", fmtTime(h.At), fmtTime(h.ExpiresAt), reasonSuffix(h.Reason)))
		}
		for i, t := range st.Trail {
			k := ""
			if i == 0 {
				k = "trail"
			}
			row(k, t)
		}
	}
	_ = tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func formatLabels(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + l[k]
	}
	return strings.Join(parts, ",")
}

func newTaskListCmd() *cobra.Command {
	var (
		cf     clientFlags
		out    output
		labels []string
		job    string
		limit  int
		after  string
	)
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List tasks, optionally by job or label, sorted by id",
		Example: "  flyball task list --label team=payments\n  flyball task list --job orders -o json\n  flyball task list --limit 100 --after orders-health",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sel, err := query.ParseLabels(labels)
			if err != nil {
				return fmt.Errorf("--label: %w", err)
			}
			if err := checkLimit(limit); err != nil {
				return err
			}
			// Given empty, it read as not given: the first page again.
			if after != "" {
				if err := validID(after); err != nil {
					return fmt.Errorf("--after: %w", err)
				}
			}
			return cf.run(cmd, true, func(ctx context.Context, s *session) error {
				tasks, next, err := s.q.TaskPage(ctx, query.TaskFilter{Job: job, Labels: sel}, after, limit)
				if err != nil {
					return err
				}
				if next != "" {
					defer printNextPage(s.errOut, "tasks", "--after", next)
				}
				if out == outJSON {
					return printJSON(s.out, tasks)
				}
				tw := tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tJOB\tSCHEDULE\tNEXT RUN\tSOURCE\tSTATE\tLAST OUTCOME")
				for i := range tasks {
					v := &tasks[i]
					next, src, last := "-", "-", "-"
					if st := v.Schedule; st != nil {
						next, src, last = fmtTime(st.NextRunAt), orDash(string(st.Source)), orDash(st.LastOutcome)
					}
					sched := describeSchedule(v.Spec.Schedule)
					if v.Unreadable != "" {
						sched = "UNREADABLE SPEC (flyball task get " + v.Spec.ID + ")"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Spec.ID, orDash(v.Spec.Job), sched,
						next, src, printable(describeState(v.Schedule, time.Now())), printable(last))
				}
				return tw.Flush()
			})
		},
	}
	cf.register(cmd)
	out.register(cmd, outTable)
	cmd.Flags().StringArrayVar(&labels, "label", nil, "only tasks with this label, key=value (repeatable: all must match)")
	cmd.Flags().StringVar(&job, "job", "", "only tasks of this job")
	cmd.Flags().IntVarP(&limit, "limit", "n", 0, "show at most N tasks (0: all)")
	cmd.Flags().StringVar(&after, "after", "", "show the tasks whose id sorts after this one (the next page)")
	markNonEmpty(cmd.Flags(), "after")
	// Given empty (a script's unset $JOB), --job read as no filter and
	// every task was listed, as ?job= was by the API.
	markNonEmpty(cmd.Flags(), "job")
	return cmd
}

// newControlCmd builds a command that names one task and sends one command.
func newControlCmd(use, short, done string, verb events.Verb, setup func(*cobra.Command), data func(id string, now time.Time) (any, error)) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  oneArg("task id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := validID(id); err != nil {
				return err
			}
			sent := time.Now()
			d, err := data(id, sent)
			if err != nil {
				return err
			}
			return cf.run(cmd, true, func(ctx context.Context, s *session) error {
				acc, err := s.command(ctx, verb, id, d)
				if err != nil {
					return err
				}
				fmt.Fprintf(s.out, "%s %s: %s\n", done, id, nextRun(acc))
				if h, ok := d.(events.TaskHint); ok && h.At != nil {
					// A pause says nothing of a dead-letter hold under it,
					// which a resume leaves in place: the stored state does.
					var st *gov.State
					if acc != nil && gov.Source(acc.Source) == gov.SourcePaused {
						if v, err := s.q.Task(ctx, id); err == nil {
							st = v.Schedule
						}
					}
					if note := oneShotOverruled(id, *h.At, sent, acc, st); note != "" {
						fmt.Fprintln(s.errOut, note)
					}
				}
				return nil
			})
		},
	}
	cf.register(cmd)
	if setup != nil {
		setup(cmd)
	}
	return cmd
}

func newTaskPauseCmd() *cobra.Command {
	var (
		until, reason string
		flags         *pflag.FlagSet
	)
	cmd := newControlCmd("pause <id>", "Pause a task (publishes task.paused); pending runs are skipped", "paused", events.VerbPaused,
		func(cmd *cobra.Command) {
			flags = cmd.Flags()
			cmd.Flags().StringVar(&until, "until", "", "end of the pause: RFC 3339 time or a duration from now (2h); default: until resumed")
			cmd.Flags().StringVar(&reason, "reason", "", "why, recorded on the event and in the schedule")
		},
		func(id string, now time.Time) (any, error) {
			p := events.TaskPause{ID: id, Reason: reason}
			// An empty --until (a script's unset variable) is refused by
			// parseWhen: read as not given, it paused the task until
			// resumed instead of for a while.
			if until != "" || flags.Changed("until") {
				t, err := parseWhen("until", until, now, true)
				if err != nil {
					return nil, err
				}
				if !t.After(now) {
					return nil, fmt.Errorf("--until: must be in the future, got %s", t.Format(time.RFC3339))
				}
				p.Until = &t
			}
			if err := control.ValidatePause(&p); err != nil {
				return nil, flagError(err)
			}
			return p, nil
		})
	cmd.Example = "  flyball task pause orders-health --until 2h --reason 'deploy'\n  flyball task pause orders-health --until 2026-03-01T08:00:00Z"
	return cmd
}

func newTaskResumeCmd() *cobra.Command {
	var reason string
	return newControlCmd("resume <id>", "Resume a paused task (publishes task.resumed)", "resumed", events.VerbResumed,
		func(cmd *cobra.Command) {
			cmd.Flags().StringVar(&reason, "reason", "", "why, recorded on the event")
		},
		func(id string, _ time.Time) (any, error) {
			if err := control.ValidateReason(reason); err != nil {
				return nil, flagError(err)
			}
			return events.TaskRef{ID: id, Reason: reason}, nil
		})
}

// flagError turns a validation error of a pause or a hint into one line
// naming flags (the command's flags are named after the fields).
func flagError(err error) error {
	reasons := events.Reasons(err)
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = "--" + r.Field + ": " + r.Rule
	}
	return errors.New(strings.Join(parts, "; "))
}

func newTaskHintCmd() *cobra.Command {
	var (
		interval, ttl time.Duration
		at, reason    string
		flags         *pflag.FlagSet
	)
	cmd := newControlCmd("hint <id> (--interval 30s | --at T)", "Hint a cadence or a one-shot run (publishes task.hinted)", "hinted", events.VerbHinted,
		func(cmd *cobra.Command) {
			flags = cmd.Flags()
			cmd.Flags().DurationVar(&interval, "interval", 0, "run at this interval instead of the baseline while the hint lives (>= 1s)")
			cmd.Flags().StringVar(&at, "at", "", "run once at this time: RFC 3339, a duration from now, or 'now'")
			cmd.Flags().DurationVar(&ttl, "ttl", 0, "how long the hint lives (default 60m for --interval, 30m for --at; at most 168h)")
			cmd.Flags().StringVar(&reason, "reason", "", "why, recorded on the event and in the schedule")
		},
		func(id string, now time.Time) (any, error) {
			// An empty --at (a script's unset variable) is refused by
			// parseWhen: read as not given, "--interval 30s --at $T" sent
			// the cadence alone and no one-shot run.
			if interval == 0 && at == "" && !flags.Changed("at") {
				return nil, errors.New("give --interval, --at, or both")
			}
			h := events.TaskHint{ID: id, Interval: events.Duration(interval), TTL: events.Duration(ttl), Reason: reason}
			if at != "" || flags.Changed("at") {
				t, err := parseWhen("at", at, now, true)
				if err != nil {
					return nil, err
				}
				h.At = &t
			}
			if err := control.ValidateHint(&h); err != nil {
				return nil, flagError(err)
			}
			return h, nil
		})
	cmd.Example = "  flyball task hint orders-health --interval 30s --ttl 15m --reason 'incident 4711'\n  flyball task hint orders-health --at 10m"
	return cmd
}

func newTaskRunNowCmd() *cobra.Command {
	var reason string
	return newControlCmd("run-now <id>", "Run a task now: a one-shot hint at the current time", "run-now", events.VerbHinted,
		func(cmd *cobra.Command) {
			cmd.Flags().StringVar(&reason, "reason", "", "why, recorded on the event (default \"run-now\")")
		},
		func(id string, _ time.Time) (any, error) {
			h := control.RunNow(id, 0, reason)
			if err := control.ValidateHint(&h); err != nil {
				return nil, flagError(err)
			}
			return h, nil
		})
}

// oneShotOverruled explains an accepted one-shot hint (run-now, hint
// --at) whose run was put after its time: a rule above hints (pause,
// dead-letter, breaker, budget, quiet hours, clamps) chose the next run. A
// run-now answered "next run in 30m (deadletter-recheck)" left the
// operator to guess why and what to do. at is the hint's time, zero for
// run-now; sent is when the command was sent. st is the task's stored
// state, read for a paused task (nil: not read): a resume runs a paused
// task only when it holds no dead-letter hold, which stays after the
// pause, so that the note named resume to a task that then waited for
// its recheck.
//
// Its time is at, or sent if that is later: the governor runs a one-shot
// whose time has passed at once, and run-now's zero time is its now. By
// at alone, "hint --at" an hour ago got a note about a run due that
// moment.
//
// No note either when the governor took a slot in flight, at or after
// the one-shot's time, as the run it asked for (its trail says so): one
// up to gov.InFlightWindow ahead by the server's clock is kept and uses
// the hint up, as docs/operations.md says, and one already running (a
// past --at) is its run. The clocks cannot tell it: the check allowed
// 1 s by the CLI's clock, and a run-now during "hint --interval 2s" got
// a note about half the time.
func oneShotOverruled(id string, at, sent time.Time, a *events.TaskAccepted, st *gov.State) string {
	if at.Before(sent) {
		at = sent
	}
	if a == nil || gov.Source(a.Source) == gov.SourceHintOneShot || (a.NextRunAt != nil && !a.NextRunAt.After(at.Add(time.Second))) ||
		slices.ContainsFunc(a.Trail, oneShotServedInFlight) {
		return ""
	}
	why := "note: the one-shot does not run at its time"
	if n := len(a.Trail); n > 0 {
		why += ": " + a.Trail[n-1]
	}
	switch gov.Source(a.Source) {
	case gov.SourceDeadLetterRecheck:
		return why + fmt.Sprintf("\nthe task is dead-lettered: 'flyball dlq retry --all --task %s' runs it now", id)
	case gov.SourcePaused:
		if st != nil && st.DeadLetter != nil {
			return why + fmt.Sprintf("\nthe task is paused and dead-lettered: 'flyball task resume %[1]s' and 'flyball dlq retry --all --task %[1]s' run it now "+
				"(a resume alone waits for the dead-letter recheck at %[2]s)", id, fmtTime(st.DeadLetter.RecheckAt))
		}
		return why + fmt.Sprintf("\nthe task is paused: 'flyball task resume %s' runs it", id)
	}
	return why
}

// oneShotServedInFlight reports whether a trail line is the governor's
// "slot … is in flight (…) and is the one-shot hint for …: kept" (a slot
// still ahead) or "one-shot hint for … is served by the slot in flight
// …: not planned again; its outcome consumes it" (a slot running; ":
// consumed, not planned again" from a governor before 2026-12-02).
func oneShotServedInFlight(line string) bool {
	kept := strings.HasPrefix(line, "slot ") && strings.Contains(line, " is in flight ") &&
		strings.Contains(line, " and is the one-shot hint for ") && strings.Contains(line, ": kept")
	served := strings.HasPrefix(line, "one-shot hint for ") && strings.Contains(line, " is served by the slot in flight ")
	return kept || served
}
