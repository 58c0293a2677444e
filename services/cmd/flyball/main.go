// Command flyball is the adaptive scheduler's single binary: `flyball dev`
// runs everything on an embedded NATS server, `flyball serve <service>...`
// runs chosen services against a NATS cluster.
package main

import (
	"fmt"
	"os"
	"strings"
	_ "time/tzdata" // cron time zones must work in FROM-scratch images

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "flyball: "+oneLineSuggestion(err.Error()))
		os.Exit(1)
	}
}

// oneLineSuggestion folds cobra's "\n\nDid you mean this?\n\ttask\n" (for
// a mistyped command) into the error's one line.
func oneLineSuggestion(msg string) string {
	head, s, ok := strings.Cut(msg, "\n\nDid you mean this?\n")
	if !ok {
		return msg
	}
	return head + didYouMean(strings.Fields(s))
}

func didYouMean(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return " (did you mean " + strings.Join(names, " or ") + "?)"
}

// requireSubcommand makes every command that only groups others (task,
// dlq) refuse anything but one of them, in one line and with exit 1.
// Cobra printed the group's help and exited 0, so a typo such as
// "flyball task delet web" in a script passed as done.
func requireSubcommand(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		requireSubcommand(c)
	}
	if !cmd.HasParent() || !cmd.HasSubCommands() || cmd.Runnable() {
		return // the root reports an unknown command itself
	}
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(c *cobra.Command, args []string) error {
		var names []string
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				names = append(names, sub.Name())
			}
		}
		path := strings.TrimPrefix(c.CommandPath(), "flyball ")
		if len(args) == 0 {
			return fmt.Errorf("%s: give a command: %s (flyball %s --help)", path, strings.Join(names, ", "), path)
		}
		return fmt.Errorf("unknown command %q for \"flyball %s\"%s; want one of %s",
			args[0], path, didYouMean(c.SuggestionsFor(args[0])), strings.Join(names, ", "))
	}
}

// noArgs refuses positional arguments in one line that counts them
// (cobra.NoArgs calls one an unknown command). A command that reads its
// input from -f says so: "flyball task create t.yaml" means -f t.yaml.
// The arguments are not quoted: a stray one is often a secret parted from
// its flag by a space ("--api-token= <token>"), and the errors quoted it
// into a terminal's scrollback or a container's logs.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	path := strings.TrimPrefix(cmd.CommandPath(), "flyball ")
	if cmd.Flags().Lookup("file") != nil && len(args) == 1 {
		return fmt.Errorf("%s: takes no arguments, got 1 %s; give the spec file with -f <file>", path, notShown(args))
	}
	return fmt.Errorf("%s: takes no arguments, got %d %s; %s", path, len(args), notShown(args), strayHint)
}

// oneArg accepts exactly one positional argument and names it when it is
// missing or doubled: cobra's "accepts 1 arg(s), received 0" did not say
// what was wanted. Like noArgs, it quotes none of them.
func oneArg(what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == 1 {
			return nil
		}
		path := strings.TrimPrefix(cmd.CommandPath(), "flyball ")
		if len(args) == 0 {
			return fmt.Errorf("%s: give the %s: %s%s", path, what, cmd.CommandPath(), strings.TrimPrefix(cmd.Use, cmd.Name()))
		}
		return tooManyArgs(path, what, args)
	}
}

// tooManyArgs is the error for more than one argument where one (what)
// is wanted, quoting none of them.
func tooManyArgs(path, what string, args []string) error {
	return fmt.Errorf("%s: want one %s, got %d arguments %s; %s", path, what, len(args), notShown(args), strayHint)
}

// strayHint is how a stray argument usually comes about.
const strayHint = `quote an argument that has spaces, and write --flag=value without a space after "="`

// notShown says why the arguments of an error are not quoted.
func notShown(args []string) string {
	if len(args) == 1 {
		return "(not shown: it may be a secret)"
	}
	return "(not shown: one may be a secret)"
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "flyball",
		Short:         "flyball: an adaptive scheduler for periodic work on NATS JetStream",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	// No flag error may quote a secret's value (secretflag.go).
	root.SetFlagErrorFunc(redactFlagError)
	root.AddCommand(newDevCmd(), newServeCmd(), newProvisionCmd())
	root.AddCommand(newHealthcheckCmd(), newTargetCmd()) // deploy/compose: shell-free healthchecks, demo target
	root.AddCommand(newTaskCmd(), newRunsCmd(), newDLQCmd(), newReplayCmd(), newStatusCmd(), newRuntimeCmd(), newExplainCmd())
	root.SetHelpCommand(newHelpCmd(root))
	root.InitDefaultHelpCmd() // now, not at Execute: the docs tests walk the tree
	// Added here rather than by Execute, so requireSubcommand covers it:
	// "flyball completion" alone, or with a shell it does not know, is a
	// mistake like any other.
	root.InitDefaultCompletionCmd()
	requireSubcommand(root)
	return root
}

// newHelpCmd replaces cobra's help command, which answers a topic it does
// not know with the usage and exit 0.
func newHelpCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		RunE: func(_ *cobra.Command, args []string) error {
			cmd, rest, err := root.Find(args)
			if err != nil || len(rest) > 0 {
				return fmt.Errorf("help: no command %q (flyball --help lists them)", strings.Join(args, " "))
			}
			return cmd.Help()
		},
	}
}
