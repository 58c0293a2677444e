package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/flyballhq/flyball/streams"
)

// newProvisionCmd creates or updates flyball's streams, durable consumers
// and KV buckets, then exits. It is what `serve --ensure-streams` does at
// start, as a one-shot: a deployment can then give the right to create and
// update streams (which can discard stored data, by lowering a limit) to a
// user that runs once per deploy, not to a service that runs all day.
func newProvisionCmd() *cobra.Command {
	var (
		nf         natsFlags
		async      bool
		timeout    time.Duration
		tryTimeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "provision",
		Short: "Create or update flyball's streams, consumers and KV buckets, then exit",
		Long: `provision creates every stream, durable consumer and KV bucket flyball needs,
or updates them to the definitions this binary carries, then exits 0. It
changes nothing on a server that already matches, so it is safe to run on
every deploy. It is what "flyball serve --ensure-streams" does at start;
run it instead where the services' own NATS users may not create or update
streams (the compose stack does: its provision container runs it as the
provisioner user, and every service starts with --ensure-streams=false).

A failure it may outgrow (a cluster still electing its meta leader, a
server not answering yet) is retried every second until --timeout. Each
try gives up after --try-timeout: a request to a stream that has no leader
yet, as just after a whole cluster restarted, is never answered, and it
waited out all of --timeout, so one try took the whole budget. A
definition the server refuses (a storage type or persist mode it cannot
change in place) fails the same way each time, and the last error is
printed when --timeout ends.`,
		Example: `  flyball provision --nats-url nats://nats1:4222 --replicas 3
  NATS_USER=provisioner NATS_PASSWORD=... flyball provision --replicas 3`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := nf.checkReplicas(); err != nil {
				return err
			}
			if async && nf.replicas > 1 {
				return fmt.Errorf("--async-persist: applies to replicas 1 only, not %d: replicated streams already write asynchronously behind their Raft log", nf.replicas)
			}
			if timeout <= 0 {
				return fmt.Errorf("--timeout: must be positive, got %s", timeout)
			}
			if tryTimeout <= 0 {
				return fmt.Errorf("--try-timeout: must be positive, got %s", tryTimeout)
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			nf.name = "flyball-provision"
			nc, js, err := nf.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			errOut := cmd.ErrOrStderr()
			replicas := fmt.Sprint(nf.replicas)
			if !cmd.Flags().Changed("replicas") {
				replicas = "as they were, new streams at the highest found or 1"
			}
			start := time.Now()
			tries, diffs, err := ensureTrying(ctx, js, nf.ensureOptions(cmd, async), tryTimeout, "--try-timeout "+tryTimeout.String(), nil, func(try int, err error) {
				fmt.Fprintf(errOut, "provision: try %d: %v; trying again in 1s\n", try, err)
			})
			out := cmd.OutOrStdout()
			kept, newer := 0, 0
			var created []string // "DISPATCH with 3", streams.LimitReplicas
			for _, d := range diffs {
				fmt.Fprintf(out, "provision: %s\n", d)
				switch {
				case d.Limit == streams.LimitReplicas:
					created = append(created, d.Stream+" with "+d.Live)
				case d.Limit == streams.LimitDefinitions:
					newer++
				case d.Kept:
					kept++
				}
			}
			if err == nil {
				but := ""
				switch kept {
				case 0:
				case 1:
					but = ", but for the 1 retention limit above, kept as it was"
				default:
					but = fmt.Sprintf(", but for the %d retention limits above, kept as they were", kept)
				}
				if newer > 0 {
					// An older binary during a rolling upgrade: the newer
					// definitions stay (streams.MetadataVersion).
					but += fmt.Sprintf(", and for the %d left above under newer definitions", newer)
				}
				sep := ", "
				if len(created) > 0 {
					replicas += "; created " + strings.Join(created, ", ")
					sep = "; "
				}
				fmt.Fprintf(out, "provisioned: streams, consumers and KV buckets match this binary's definitions%s (replicas %s%s%d tries, %s)\n",
					but, replicas, sep, tries, time.Since(start).Round(time.Millisecond))
				return nil
			}
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("provision: not done within --timeout %s (%d tries): %w", timeout, tries, err)
			}
			return err
		},
	}
	nf.register(cmd)
	cmd.Flags().IntVar(&nf.replicas, "replicas", 1, "stream and KV replicas (3 on a 3-node cluster); without it, existing streams keep theirs and new ones get the highest of theirs, or 1 with none")
	cmd.Flags().BoolVar(&async, "async-persist", false, asyncPersistUsage)
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "give up after this long")
	cmd.Flags().DurationVar(&tryTimeout, "try-timeout", 10*time.Second, "give one try this long, then try again (a request to a stream still electing its leader is never answered)")
	return cmd
}

// ensureTrying runs streams.Ensure until it succeeds or ctx ends, each try
// bounded by tryTimeout, a second apart, calling retried after each failed
// try that is followed by another. A request to a stream that has no
// leader yet, as just after a whole cluster restarted, is never answered:
// unbounded, one try waited out all of ctx. It returns the number of tries,
// the retention limits any try found different from the definitions
// (streams.WithReport: kept on a history stream, set back on the others;
// on an error too) and the last error; when ctx's deadline cut the last try short (it says
// only "context deadline exceeded"), the error of the try before it.
// An unanswered try's error says "no answer within <try>" and wraps
// errUnanswered. again, if not nil, says whether a failed try is tried
// again (provision: every one; serve: an unanswered one, so that a
// server without JetStream still fails at once).
func ensureTrying(ctx context.Context, js jetstream.JetStream, opts []streams.Option, tryTimeout time.Duration, try string, again func(error) bool, retried func(try int, err error)) (int, []streams.Difference, error) {
	var prev error
	// The differences of every try: a try reports each one before it
	// updates any stream, and may set a limit back and then fail on a
	// later stream; the next try, finding that limit as defined, reports
	// nothing of it. Each limit is kept as first reported, and they are
	// returned on an error too: a set-back is never silent.
	var diffs []streams.Difference
	opts = append(slices.Clip(opts), streams.WithReport(func(d streams.Difference) {
		if !slices.ContainsFunc(diffs, func(o streams.Difference) bool { return o.Stream == d.Stream && o.Limit == d.Limit }) {
			diffs = append(diffs, d)
		}
	}))
	for n := 1; ; n++ {
		tryCtx, cancel := context.WithTimeout(ctx, tryTimeout)
		err := noJetStream(streams.Ensure(tryCtx, js, opts...))
		if err != nil && ctx.Err() == nil && errors.Is(tryCtx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%w within %s: %w", errUnanswered, try, err)
		}
		cancel()
		if err == nil {
			return n, diffs, nil
		}
		if ctx.Err() != nil {
			if prev != nil && errors.Is(err, context.DeadlineExceeded) {
				err = prev
			}
			return n, diffs, err
		}
		if again != nil && !again(err) {
			return n, diffs, err
		}
		retried(n, err)
		prev = err
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// errUnanswered is a try of ensureTrying that got no answer in its time.
var errUnanswered = errors.New("no answer")

// logDifferences logs each retention limit an ensure at start found
// different from the definitions: a kept one at info (an operator's
// `nats stream edit` of a history stream, which stays), one set back at
// warn (a limit flyball relies on, changed by hand).
func logDifferences(log *slog.Logger, diffs []streams.Difference) {
	for _, d := range diffs {
		if d.Limit == streams.LimitReplicas {
			log.Info("--ensure-streams: new stream created with the replicas of the existing ones", "stream", d.Stream, "replicas", d.Live)
			continue
		}
		if d.Limit == streams.LimitDefinitions {
			log.Warn("--ensure-streams: newer definitions in place, left as they are (an older binary during a rolling upgrade)", "object", d.Stream, "recorded", d.Live)
			continue
		}
		if d.Kept {
			log.Info("--ensure-streams: retention limit kept", "limit", d.String())
		} else {
			log.Warn("--ensure-streams: limit set back to its definition", "limit", d.String())
		}
	}
}
