package bench

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/embedded"
)

// TestConfigValidateNamesTheField checks that each bad setting is refused
// with an error naming its flag, and that the defaults pass.
func TestConfigValidateNamesTheField(t *testing.T) {
	t.Parallel()
	defaults := validConfig()
	if err := defaults.validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	cases := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"unknown tier", func(c *Config) { c.Tiers = []string{"w9"} }, `tiers: unknown tier "w9"`},
		{"unknown system", func(c *Config) { c.Systems = []string{"cron"} }, `systems: unknown system "cron"`},
		{"zero duration", func(c *Config) { c.Duration = 0 }, "duration: must be > 0"},
		{"concurrency", func(c *Config) { c.Concurrency = 0 }, "concurrency: must be in [1, 100000]"},
		{"stack", func(c *Config) { c.Stack = "bogus" }, `stack: want inproc, process or external, got "bogus"`},
		{"process without the flyball binary", func(c *Config) { c.Stack = StackProcess }, "flyball-bin: stack \"process\" needs the flyball binary"},
		{"stack pid without an external stack", func(c *Config) { c.StackPIDs = []int{1234} }, "stack-pid: applies to a stack behind --nats-url only"},
		{"external without URL", func(c *Config) { c.Stack = StackExternal }, "stack: \"external\" needs a NATS URL"},
		{"external without stack pids", func(c *Config) { c.NATSURL = "nats://127.0.0.1:4222" }, "stack-pid: --nats-url needs the PIDs of the stack's processes"},
		{"a stack pid that cannot be read", func(c *Config) {
			c.NATSURL = "nats://127.0.0.1:4222"
			c.StackPIDs = []int{os.Getpid(), math.MaxInt32}
		}, fmt.Sprintf("stack-pid: %d cannot be read", math.MaxInt32)},
		{"timer lead too long", func(c *Config) { c.TimerLead = 1001 * time.Millisecond }, "timer-lead: must be at most 1s"},
		{"pipeline on an external stack", func(c *Config) {
			c.NATSURL = "nats://127.0.0.1:4222"
			c.Systems = []string{SystemFlyball, SystemPipeline}
		}, "systems: pipeline needs a server of its own"},
		{"timer lead on an external stack", func(c *Config) {
			c.NATSURL = "nats://127.0.0.1:4222"
			c.TimerLead = time.Second
		}, "timer-lead: applies to the in-process stack only"},
		{"async persist on an external stack", func(c *Config) {
			c.NATSURL = "nats://127.0.0.1:4222"
			c.AsyncPersist = true
		}, "async-persist: the stack behind --nats-url has its streams already"},
		{"nats sync on an external stack", func(c *Config) {
			c.NATSURL = "nats://127.0.0.1:4222"
			c.NATSSync = embedded.Sync{Always: true}
		}, "nats-sync: the server behind --nats-url has its own sync_interval"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.mutate(&c)
			err := c.validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestConfigDefaultSystemsLeaveThePipelineOutOnAnExternalStack(t *testing.T) {
	t.Parallel()
	c := validConfig()
	if err := c.validate(); err != nil || !slices.Equal(c.Systems, AllSystems) {
		t.Fatalf("in process: systems %v (%v), want %v", c.Systems, err, AllSystems)
	}
	c = validConfig()
	c.NATSURL = "nats://127.0.0.1:4222"
	c.StackPIDs = []int{os.Getpid()}
	if err := c.validate(); err != nil || slices.Contains(c.Systems, SystemPipeline) || !slices.Contains(c.Systems, SystemFlyball) {
		t.Fatalf("external: systems %v (%v), want every system but the pipeline", c.Systems, err)
	}
}

func TestConfigValidateAcceptsTimerLead(t *testing.T) {
	t.Parallel()
	for _, lead := range []time.Duration{-1, 0, 250 * time.Millisecond, gov.MaxLead} {
		c := validConfig()
		c.TimerLead = lead
		if err := c.validate(); err != nil {
			t.Errorf("TimerLead %s: %v", lead, err)
		}
	}
}

// validConfig is DefaultConfig with what the command sets (the executable
// that serves the target process).
func validConfig() Config {
	c := DefaultConfig()
	c.Executable = "/proc/self/exe"
	return c
}
