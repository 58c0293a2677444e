package stack_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/stack"
	"github.com/flyballhq/flyball/streams"
)

// TestServicesRefuseStreamsThatDrifted: run with --ensure-streams=false,
// a service whose stream lost a setting it relies on (DISPATCH created
// with limits retention by an old deployment, a duplicate window an
// operator shortened) refuses to start, naming the stream, the setting,
// both values and the cure, rather than losing dispatches without a word.
func TestServicesRefuseStreamsThatDrifted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		service string
		stream  string
		edit    func(*jetstream.StreamConfig)
		want    string
	}{
		{
			name: "DISPATCH with limits retention", service: "timer", stream: streams.StreamDispatch,
			edit: func(c *jetstream.StreamConfig) { c.Retention = jetstream.LimitsPolicy },
			want: "timer: stream DISPATCH: retention Limits, want WorkQueue",
		},
		{
			name: "DISPATCH with many messages per subject", service: "deadletter", stream: streams.StreamDispatch,
			edit: func(c *jetstream.StreamConfig) { c.MaxMsgsPerSubject = -1; c.DiscardNewPerSubject = false },
			want: "deadletter: stream DISPATCH: max_msgs_per_subject -1, want 1; discard DiscardNew (per subject false), want DiscardNew (per subject true)",
		},
		{
			name: "DISPATCH with a short duplicate window", service: "sweeper", stream: streams.StreamDispatch,
			edit: func(c *jetstream.StreamConfig) { c.Duplicates = 10 * time.Second },
			want: "sweeper: stream DISPATCH: duplicate_window 10s, want at least 2m0s",
		},
		{
			name: "TASKS with a short duplicate window", service: "governor", stream: streams.StreamTasks,
			edit: func(c *jetstream.StreamConfig) { c.Duplicates = 10 * time.Second },
			want: "governor: stream TASKS: duplicate_window 10s, want at least 2m0s",
		},
		{
			name: "RUNS with a short duplicate window", service: "executor", stream: streams.StreamRuns,
			edit: func(c *jetstream.StreamConfig) { c.Duplicates = 10 * time.Second },
			want: "executor: stream RUNS: duplicate_window 10s, want at least 2m0s",
		},
		{
			name: "DEADLETTER with a short duplicate window", service: "deadletter", stream: streams.StreamDeadLetter,
			edit: func(c *jetstream.StreamConfig) { c.Duplicates = 10 * time.Second },
			want: "deadletter: stream DEADLETTER: duplicate_window 10s, want at least 24h0m0s",
		},
		{
			name: "DEADLETTER with a short duplicate window, at the sweeper", service: "sweeper", stream: streams.StreamDeadLetter,
			edit: func(c *jetstream.StreamConfig) { c.Duplicates = 10 * time.Second },
			want: "sweeper: stream DEADLETTER: duplicate_window 10s, want at least 24h0m0s",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := natstest.StartWithStreams(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			st, err := srv.JS.Stream(ctx, tc.stream)
			if err != nil {
				t.Fatal(err)
			}
			cfg := st.CachedInfo().Config
			tc.edit(&cfg)
			if cfg.Retention != st.CachedInfo().Config.Retention {
				// nats-server changes retention only by re-creating.
				if err := srv.JS.DeleteStream(ctx, tc.stream); err != nil {
					t.Fatal(err)
				}
				_, err = srv.JS.CreateStream(ctx, cfg)
			} else {
				_, err = srv.JS.UpdateStream(ctx, cfg)
			}
			if err != nil {
				t.Fatal(err)
			}

			s, err := stack.Start(ctx, stack.Config{JS: srv.JS, Services: []string{tc.service}, Instance: tc.service + "1"})
			if err == nil {
				s.Stop()
				t.Fatalf("%s started on a %s that drifted", tc.service, tc.stream)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `"flyball provision"`) {
				t.Errorf("error %q\nwant it to contain %q and the cure, \"flyball provision\"", err, tc.want)
			}
		})
	}
}
