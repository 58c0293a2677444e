package governor

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestMessageNoRetryMendsDoesNotHoldUpItsWorker: a message is retried in
// place, ahead of every message of its worker (untilSettled), only for
// NATS or KV trouble, which clears. A failure of one task's message that
// no retry mends must settle it: taken for a transient one, it held its
// worker forever, and every task sharded to it (1/Workers of them) was
// no longer scheduled, with nothing but flyball_governor_retries_total
// and a warning per try to show for it. With one worker, a healthy
// task's message stored behind such a message must be applied within
// seconds, and the poisonous one never retried.
func TestMessageNoRetryMendsDoesNotHoldUpItsWorker(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		stream string
		// poison stores a message of task "a" that no retry mends, then
		// one of task "b" behind it.
		poison func(t *testing.T, s *Service, js jetstream.JetStream)
		// applied reports whether b's message was applied.
		applied func(t *testing.T, s *Service) bool
	}{{
		name:   "a spec too large to store",
		stream: streams.StreamTasks,
		poison: func(t *testing.T, _ *Service, js jetstream.JetStream) {
			publishRaw(t, js, events.TaskSubject(events.VerbCreated, "a"), specTooLargeToStore(t, js, "a"))
			publish(t, js, events.VerbCreated, events.TypeTaskCreated, "b", "create-b", *minuteSpec("b"))
		},
		applied: func(t *testing.T, s *Service) bool {
			st, ok := s.loadState(t.Context(), "b")
			return ok && !st.NextRunAt.IsZero()
		},
	}, {
		name:   "a dead letter too large for the bucket's maximum value size",
		stream: streams.StreamDeadLetter,
		poison: func(t *testing.T, _ *Service, js jetstream.JetStream) {
			command(t, js, events.VerbCreated, events.TypeTaskCreated, "a", "create-a", *minuteSpec("a"))
			command(t, js, events.VerbCreated, events.TypeTaskCreated, "b", "create-b", *minuteSpec("b"))
			bucket, err := js.Stream(t.Context(), "KV_"+streams.BucketSchedules)
			if err != nil {
				t.Fatal(err)
			}
			cfg := bucket.CachedInfo().Config
			// a's schedule holds its reason twice (the hold, the trail),
			// over the bucket's maximum; b's short one fits.
			cfg.MaxMsgSize = 1536 // `nats kv add --max-value-size 1536`
			if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
				t.Fatal(err)
			}
			deadLetter(t, js, "a", strings.Repeat("r", events.MaxReasonBytes))
			deadLetter(t, js, "b", "final failure")
		},
		applied: func(t *testing.T, s *Service) bool {
			st, ok := s.loadState(t.Context(), "b")
			return ok && st.DeadLetter != nil
		},
	}, {
		name:   "an outcome of a task whose stored spec is unreadable",
		stream: streams.StreamRuns,
		poison: func(t *testing.T, s *Service, js jetstream.JetStream) {
			if _, err := s.tasks.Put(t.Context(), "a", []byte(`{"id":"a","schedule":`)); err != nil {
				t.Fatal(err)
			}
			command(t, js, events.VerbCreated, events.TypeTaskCreated, "b", "create-b", *minuteSpec("b"))
			natstest.Eventually(t, 5*time.Second, "the spec view sees a's garbled value", func() bool { return s.specs.Lookup("a").Found })
			slot := time.Now().UTC().Truncate(time.Second)
			for _, id := range []string{"a", "b"} {
				run := events.Run{DispatchID: events.DispatchID(id, slot), TaskID: id, ScheduledAt: slot, Attempt: 1, FinishedAt: time.Now().UTC(), Status: 200}
				body, err := events.Marshal(events.OutcomeSucceeded.Type(), "test", id, run, time.Now(), "")
				if err != nil {
					t.Fatal(err)
				}
				publishRaw(t, js, events.RunSubject(events.OutcomeSucceeded, id), body)
			}
		},
		applied: func(t *testing.T, s *Service) bool {
			st, ok := s.loadState(t.Context(), "b")
			return ok && st.Runs == 1
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := natstest.StartWithStreams(t)
			s := runGovernorWith(t, Config{JS: srv.JS, Workers: 1})

			tc.poison(t, s, srv.JS)
			// Generous for a 1 MB message decoded under -race on a busy
			// machine; a held worker never applies it.
			natstest.Eventually(t, 15*time.Second, "task b's message, behind task a's on the one worker, is applied", func() bool {
				return tc.applied(t, s)
			})
			if n := testutil.ToFloat64(s.cfg.Metrics.GovernorRetries.WithLabelValues(tc.stream)); n != 0 {
				t.Fatalf("%v tries of %s messages again, want 0: no retry mends task a's", n, tc.stream)
			}
		})
	}
}

// deadLetter publishes the dead-letter entry of a final failure of task
// id, now, without waiting for the governor.
func deadLetter(t *testing.T, js jetstream.JetStream, id, reason string) {
	t.Helper()
	now := time.Now().UTC()
	dl := events.DeadLetter{
		TaskID: id, Reason: reason, Attempts: 1, DeadLetteredAt: now,
		Dispatch: events.Dispatch{DispatchID: events.DispatchID(id, now), TaskID: id, ScheduledAt: now},
	}
	body, err := events.Marshal(events.TypeDeadLettered, "test", id, dl, now, "dl-"+id)
	if err != nil {
		t.Fatal(err)
	}
	publishRaw(t, js, events.DeadLetterSubject(id), body)
}
