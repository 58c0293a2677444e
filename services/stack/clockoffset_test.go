package stack_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/stack"
)

// TestTheStackFeedsItsExecutorTheMeasuredClockOffset: the executor judges
// catchUp none slots on the server's clock by the offset the stack's
// first heartbeat measures (executor and heartbeat tests take the offset
// as given, or check the measurement alone). Here, under the compose
// users, the stack's services beat against a real server and the offset
// the executor is given is measured: about zero on one machine.
func TestTheStackFeedsItsExecutorTheMeasuredClockOffset(t *testing.T) {
	t.Parallel()
	srv := natstest.StartCompose(t)
	var st *stack.Stack
	srv.Each(t, []string{"executor"}, func(_ string, js jetstream.JetStream) {
		st = startRepairStack(t, "executor", js)
	})
	if _, ok := st.ClockOffset(); !ok {
		t.Fatal("no clock offset after the first beat: the executor judges on its own clock")
	}
	natstest.Eventually(t, 10*time.Second, "a measured offset near zero", func() bool {
		off, ok := st.ClockOffset()
		return ok && off.Abs() < time.Second
	})
}

// TestAFastTaskKeepsRunningOnAnExecutorBehindTheServer: the governor
// plans on the NATS server's clock and ignores, as outdated, an outcome
// that finished before the slot of the last outcome it applied. An
// executor 1.5 s behind the server calls each slot of a 1 s task on time
// (on the server's clock, by the offset its heartbeat measured), but it
// stamped startedAt and finishedAt with its own clock: each finish looked
// 1.5 s early, before the slot before it, and from the second run on the
// outcomes were ignored: the task stalled until the sweeper's repair
// (5 minutes later in production). Its stamps are on the server's clock
// too, and the task runs every second.
func TestAFastTaskKeepsRunningOnAnExecutorBehindTheServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "governor", "timer")
	const behind = -1500 * time.Millisecond // the executor's clock minus the server's
	_, js := e.srv.Connect(t)
	ex, err := executor.New(executor.Config{
		JS: js, Guard: executor.Guard{AllowLoopback: true}, ShutdownGrace: time.Millisecond,
		Now:         func() time.Time { return time.Now().Add(behind) },
		ClockOffset: func() (time.Duration, bool) { return behind, true },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ex.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ex.Stop)
	tg := newScripted(t, 200)
	runs := e.collect("flyball.run.succeeded.fast")
	e.create("fast", fmt.Sprintf(`{"id":"fast","target":{"http":{"url":%q}},"schedule":{"interval":"1s"}}`, tg.srv.URL))
	const want = 5
	natstest.Eventually(t, 10*time.Second, fmt.Sprintf("%d runs of the 1 s task on an executor %s behind the server", want, -behind), func() bool {
		return len(tg.Calls()) >= want
	})
	for _, ev := range runs() {
		var r events.Run
		if err := events.DecodeRun(ev, &r); err != nil {
			t.Fatal(err)
		}
		// On the server's clock, a call starts at its slot or after.
		if r.StartedAt.Before(r.ScheduledAt) || r.FinishedAt.Before(r.StartedAt) {
			t.Errorf("run of %s stamped started %s, finished %s: not on the server's clock", r.ScheduledAt, r.StartedAt, r.FinishedAt)
		}
	}
}
