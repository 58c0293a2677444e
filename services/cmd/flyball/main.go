// Command flyball is the adaptive scheduler's single binary: `flyball dev`
// runs everything on an embedded NATS server, `flyball serve <service>...`
// runs chosen services against a NATS cluster.
package main

import (
	"fmt"
	"os"
	_ "time/tzdata" // cron time zones must work in FROM-scratch images

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "flyball: "+err.Error())
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "flyball",
		Short:         "flyball: an adaptive scheduler for periodic work on NATS JetStream",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.AddCommand(newDevCmd(), newServeCmd())
	root.AddCommand(newHealthcheckCmd(), newTargetCmd()) // deploy/compose: shell-free healthchecks, demo target
	root.AddCommand(newTaskCmd(), newRunsCmd(), newDLQCmd(), newReplayCmd(), newStatusCmd(), newRuntimeCmd(), newExplainCmd())
	return root
}
