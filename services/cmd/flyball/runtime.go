package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

func newRuntimeCmd() *cobra.Command {
	var (
		cf  clientFlags
		out output
	)
	cmd := &cobra.Command{
		Use:   "runtime",
		Short: "List the service instances in the runtime registry (KV flyball-runtime)",
		Long: `runtime lists every registered service instance with its host, pid,
version, status and the age of its last heartbeat. Instances beat every 15s;
one whose last beat is older than 45s is listed offline (the sweeper also
marks it so in the registry, 45 to 75s after the beat, as it measures 45s of
silence from the 15s sweep that first saw the beat), and an instance that
stops cleanly removes its entry.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cf.run(cmd, true, func(ctx context.Context, s *session) error {
				list, err := s.q.Runtime(ctx)
				if err != nil {
					return err
				}
				if out == outJSON {
					return printJSON(s.out, list)
				}
				if len(list) == 0 {
					fmt.Fprintln(s.errOut, "no service instances registered (is flyball running against this NATS?)")
					return nil
				}
				tw := tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "KIND\tNAME\tHOST\tPID\tVERSION\tSTATUS\tLAST BEAT")
				for i := range list {
					in := &list[i]
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s ago\n", in.Kind, in.Name, orDash(in.Host), in.PID, orDash(in.Version),
						in.Status, in.LastBeatAge.D().Round(time.Second))
				}
				return tw.Flush()
			})
		},
	}
	cf.register(cmd)
	out.register(cmd, outTable)
	return cmd
}
