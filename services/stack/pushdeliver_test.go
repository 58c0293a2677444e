package stack_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// TestPushConsumerDeliversWhereItsCreatorMayNotPublish pins a hole that
// docs/security.md ("Push consumers deliver where their creator may not
// publish") says flyball cannot close: nats-server does not check a push
// consumer's deliver_subject against its creator's publish permissions
// (nats-server issue #8274; PR #8279 was not merged). Under
// deploy/compose/nats/accounts.conf, the api user may not publish to
// targets.x (a NATS target, which only the executor may call) nor to
// flyball.dispatch.victim (only the timer may), yet it can store a body of
// its own in TASKS (a task command) and create a push consumer that has
// the server deliver it to either subject, where a core subscriber
// receives it. The test passes while the hole stands. When it fails,
// nats-server has started checking deliver subjects: update
// docs/security.md and turn this test into one that proves the refusal.
func TestPushConsumerDeliversWhereItsCreatorMayNotPublish(t *testing.T) {
	t.Parallel()
	const fixed = "nats-server now checks deliver subjects (#8274 fixed?): update docs/security.md and tighten this test"
	srv := natstest.StartCompose(t)
	api, _ := srv.Connect(t, "api")

	// First, that api may not publish to them: the server refuses it.
	refused := make(chan error, 4)
	direct, _ := srv.Connect(t, "api", nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		refused <- err
	}))
	for _, subject := range []string{"targets.x", "flyball.dispatch.victim"} {
		srv.ExpectViolation(subject)
		if err := direct.Publish(subject, []byte(`{"direct":true}`)); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-refused:
			if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), subject) {
				t.Fatalf("api publishing to %s: %v, want a permissions violation naming it", subject, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("api published to %s without a permissions violation: accounts.conf changed, and this test no longer shows the hole", subject)
		}
	}

	// A body of api's own, stored in TASKS: a task command it may send.
	const cmd = "flyball.task.created.evil"
	if err := api.Publish(cmd, []byte(`{"forged":true}`)); err != nil {
		t.Fatal(err)
	}
	if err := api.Flush(); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "the forged command stored in TASKS", func() bool {
		st, err := srv.JS.Stream(t.Context(), streams.StreamTasks)
		return err == nil && st.CachedInfo().State.Msgs > 0
	})

	for i, deliver := range []string{"targets.x", "flyball.dispatch.victim"} {
		// The target's side: a core subscriber, with no permission issue
		// of its own (admin stands in for the target's user).
		sub, err := srv.NC.SubscribeSync(deliver)
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.NC.Flush(); err != nil {
			t.Fatal(err)
		}
		name := "snoop" + string(rune('1'+i))
		body, err := json.Marshal(map[string]any{"stream_name": streams.StreamTasks, "config": map[string]any{
			"name": name, "filter_subject": cmd, "deliver_subject": deliver,
			"deliver_policy": "all", "ack_policy": "none", "mem_storage": true, "num_replicas": 1,
		}})
		if err != nil {
			t.Fatal(err)
		}
		// The filtered create subject, as api's rules allow it.
		subject := "$JS.API.CONSUMER.CREATE." + streams.StreamTasks + "." + name + "." + cmd
		resp, err := api.Request(subject, body, 10*time.Second)
		if err != nil {
			t.Fatalf("api creating a push consumer delivering to %s: %v\n%s", deliver, err, fixed)
		}
		var created struct {
			Error *struct {
				Code        int    `json:"code"`
				Description string `json:"description"`
			} `json:"error"`
		}
		if err := json.Unmarshal(resp.Data, &created); err != nil {
			t.Fatal(err)
		}
		if created.Error != nil {
			t.Fatalf("api creating a push consumer delivering to %s was refused (%d %s)\n%s", deliver, created.Error.Code, created.Error.Description, fixed)
		}
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("a subscriber of %s received nothing from api's push consumer (%v)\n%s", deliver, err, fixed)
		}
		if string(m.Data) != `{"forged":true}` || m.Subject != cmd || !strings.HasPrefix(m.Reply, "$JS.ACK."+streams.StreamTasks+".") {
			t.Errorf("a subscriber of %s received %q as %s (reply %s), want api's {\"forged\":true} as %s with a $JS.ACK.%s reply",
				deliver, m.Data, m.Subject, m.Reply, cmd, streams.StreamTasks)
		}
	}
}
