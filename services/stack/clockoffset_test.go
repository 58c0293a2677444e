package stack_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
