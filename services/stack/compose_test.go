package stack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/apitest"
	"github.com/flyballhq/flyball/services/internal/control"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/stack"
	"github.com/flyballhq/flyball/streams"
)

// TestServicesRunUnderTheirComposeUsers runs every service as compose does
// (one `flyball serve <service>` each, under its own least-privileged user
// of deploy/compose/nats/accounts.conf) and takes tasks through what
// operators do: create, runs of HTTP and NATS targets, failures, a task
// and a host breaker that open, one turning half-open, a dead letter and
// its retry, update, pause, hint, resume,
// run-now, a slot dispatched again after it ran (skipped), every read of the API, a command from the CLI's user, delete
// (the breaker removes the task's record), an orphan the sweeper deletes,
// and a clean stop. A permission
// missing from accounts.conf, for any of it, fails the test
// (natstest.Compose.Connect).
func TestServicesRunUnderTheirComposeUsers(t *testing.T) {
	t.Parallel()
	srv := natstest.StartCompose(t)
	const token = "compose-test-token-0123"
	var api *stack.Stack
	srv.Each(t, stack.All, func(name string, js jetstream.JetStream) {
		st, err := stack.Start(context.Background(), stack.Config{
			JS: js, Services: []string{name}, Instance: name + "1", Guard: executor.Guard{AllowLoopback: true},
			APIAddr: "127.0.0.1:0", APITokens: []string{token},
			HeartbeatInterval: 100 * time.Millisecond, OfflineAfter: 10 * time.Second, SweepInterval: 100 * time.Millisecond,
			// As compose runs its timers: reading, taking, renewing and
			// releasing the lease need the timer user's permissions.
			TimerLease: 3 * time.Second,
		})
		if err != nil {
			t.Fatalf("start %s as its compose user: %v", name, err)
		}
		t.Cleanup(st.Stop)
		if name == "api" {
			api = st
		}
	})
	client := apitest.Client{Base: "http://" + api.API.Addr(), Token: token}
	idempotencyKey := ""
	call := func(method, path, body string, want int) []byte {
		t.Helper()
		var header []string
		if idempotencyKey != "" {
			header = []string{"Idempotency-Key", idempotencyKey}
		}
		code, out := client.Do(t, method, path, body, header...)
		if code != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, code, out, want)
		}
		return out
	}

	succeeded := record(t, srv.NC, "flyball.run.succeeded.ok", func(m *nats.Msg) (string, bool) { return m.Subject, true })
	breakers := record(t, srv.NC, "flyball.breaker.*.bad", func(m *nats.Msg) (string, bool) { return m.Subject, true })
	dead := record(t, srv.NC, "flyball.deadletter.bad", func(m *nats.Msg) (string, bool) { return m.Subject, true })

	good, bad := newScripted(t, 200), newScripted(t, 500)
	call("POST", "/api/v1/tasks", fmt.Sprintf(`{"id":"ok","target":{"http":{"url":%q,"headers":{"Authorization":"Bearer s3cret"}}},"schedule":{"interval":"1s"}}`, good.srv.URL), http.StatusAccepted)
	call("POST", "/api/v1/tasks", fmt.Sprintf(`{"id":"bad","target":{"http":{"url":%q}},"schedule":{"interval":"1s"},
		"retry":{"maxAttempts":2,"initialDelay":"100ms","multiplier":1,"maxDelay":"100ms","jitter":0},
		"breaker":{"failureThreshold":2,"openDelay":"1s","maxOpenDelay":"2s"}}`, bad.srv.URL), http.StatusAccepted)
	// A NATS target (targets.>), answered on the admin connection.
	natstest.Subscribe(t, srv.NC, "targets.echo", func(m *nats.Msg) { _ = m.Respond([]byte("pong")) })
	echoed := record(t, srv.NC, "flyball.run.succeeded.echo", func(m *nats.Msg) (string, bool) { return m.Subject, true })
	call("POST", "/api/v1/tasks", `{"id":"echo","target":{"nats":{"subject":"targets.echo","payload":"ping"}},"schedule":{"interval":"1s"}}`, http.StatusAccepted)
	// A host-scoped breaker (a host_ key) on the failing target.
	hostOpen := record(t, srv.NC, "flyball.breaker.open.>", func(m *nats.Msg) (string, bool) { return m.Subject, strings.Contains(m.Subject, ".host_") })
	call("POST", "/api/v1/tasks", fmt.Sprintf(`{"id":"hostbad","target":{"http":{"url":%q}},"schedule":{"interval":"1s"},
		"retry":{"maxAttempts":1},"breaker":{"scope":"host","failureThreshold":1,"openDelay":"1s"}}`, bad.srv.URL), http.StatusAccepted)

	// A task that runs once an hour: its first slot, run at once, stays
	// its last outcome, which a slot dispatched again must find.
	once := record(t, srv.NC, "flyball.run.succeeded.once", func(m *nats.Msg) (string, bool) { return m.Subject, true })
	call("POST", "/api/v1/tasks", fmt.Sprintf(`{"id":"once","target":{"http":{"url":%q}},"schedule":{"interval":"1h"}}`, good.srv.URL), http.StatusAccepted)

	natstest.Eventually(t, 10*time.Second, "runs of ok", func() bool { return len(succeeded()) >= 2 })
	natstest.Eventually(t, 10*time.Second, "the run of once", func() bool { return len(once()) >= 1 })
	skippedAsRun(t, srv.JS, "once")
	natstest.Eventually(t, 10*time.Second, "runs of echo", func() bool { return len(echoed()) >= 1 })
	natstest.Eventually(t, 10*time.Second, "a host breaker opens", func() bool { return len(hostOpen()) >= 1 })
	natstest.Eventually(t, 10*time.Second, "bad dead-lettered", func() bool { return len(dead()) >= 1 })
	natstest.Eventually(t, 10*time.Second, "bad's breaker open, then half-open", func() bool {
		b := strings.Join(breakers(), " ")
		return strings.Contains(b, "breaker.open.bad") && strings.Contains(b, "breaker.half-open.bad")
	})

	// Every read.
	for _, path := range []string{
		"/api/v1/tasks", "/api/v1/tasks/ok", "/api/v1/tasks/ok/runs", "/api/v1/tasks/bad/runs",
		"/api/v1/runtime", "/api/v1/scheduler/health", "/api/v1/openapi.json", "/metrics",
	} {
		call("GET", path, "", http.StatusOK)
	}
	var list struct {
		DeadLetters []struct {
			Seq uint64 `json:"seq"`
		} `json:"deadLetters"`
	}
	if err := json.Unmarshal(call("GET", "/api/v1/deadletter", "", http.StatusOK), &list); err != nil || len(list.DeadLetters) == 0 {
		t.Fatalf("dead-letter list: %+v (%v)", list, err)
	}
	seq := fmt.Sprint(list.DeadLetters[0].Seq)
	call("GET", "/api/v1/deadletter/"+seq, "", http.StatusOK)
	call("POST", "/api/v1/deadletter/"+seq+"/retry", "", http.StatusAccepted)

	// Every command through the API, answered by the governor.
	call("PUT", "/api/v1/tasks/ok", fmt.Sprintf(`{"id":"ok","target":{"http":{"url":%q}},"schedule":{"interval":"2s"}}`, good.srv.URL), http.StatusAccepted)
	call("POST", "/api/v1/tasks/ok/pause", `{"reason":"maintenance"}`, http.StatusAccepted)
	call("POST", "/api/v1/tasks/ok/hint", `{"interval":"1s","ttl":"1m"}`, http.StatusAccepted)
	call("POST", "/api/v1/tasks/ok/resume", ``, http.StatusAccepted)
	call("POST", "/api/v1/tasks/ok/run-now", ``, http.StatusAccepted)
	// A request retried with its Idempotency-Key is a duplicate: its
	// answer is read back from TASKS.
	idempotencyKey = "compose-run-now"
	first := call("POST", "/api/v1/tasks/ok/run-now", ``, http.StatusAccepted)
	if again := call("POST", "/api/v1/tasks/ok/run-now", ``, http.StatusAccepted); !bytes.Contains(again, []byte(`"status":"accepted"`)) || !bytes.Equal(again, first) {
		t.Fatalf("run-now retried with its Idempotency-Key: %s, want the first answer %s", again, first)
	}
	idempotencyKey = ""

	// A command from the CLI's user, as `flyball task pause` sends it.
	cliNC, cliJS := srv.Connect(t, "cli")
	cli := control.Client{NC: cliNC, JS: cliJS, Source: "flyball/cli"}
	if _, ans, err := cli.Send(context.Background(), events.VerbPaused, "ok", events.TaskPause{ID: "ok"}, 5*time.Second); err != nil || ans.Accepted == nil {
		t.Fatalf("pause from the cli user: %+v, %v", ans, err)
	}

	// Delete bad: the breaker removes its record.
	kv, err := srv.JS.KeyValue(context.Background(), streams.BucketBreakers)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(context.Background(), "bad"); err != nil {
		t.Fatalf("bad's breaker record before the delete: %v", err)
	}
	call("DELETE", "/api/v1/tasks/bad", "", http.StatusAccepted)
	natstest.Eventually(t, 10*time.Second, "the breaker removes the deleted task's record", func() bool {
		_, err := kv.Get(context.Background(), "bad")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	// An orphan (a record whose task is gone, written here by admin): the
	// sweeper confirms the task is gone with a get, then deletes it.
	if _, err := kv.Put(context.Background(), "orphan", []byte(`{"key":"orphan","state":"open","failures":3}`)); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "the sweeper deletes an orphaned breaker record", func() bool {
		_, err := kv.Get(context.Background(), "orphan")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
}

// skippedAsRun publishes, as admin, a dispatch of a slot of task id that
// has run, fired three minutes after it (a timer that restarted while the
// governor was behind), and waits for the executor, under its compose
// user, to read RUNS and skip it. The slot must stay the task's last
// outcome until the executor reads RUNS, as it does while the governor is
// behind: the executor reads the last run event of each outcome alone
// (slotdone.SlotOnly). A task that runs every second (ok, before) had
// run its next slot by then now and again on a loaded machine: the slot
// dispatched again was not found, and no run.skipped came.
func skippedAsRun(t *testing.T, js jetstream.JetStream, id string) {
	t.Helper()
	runs, err := js.Stream(t.Context(), streams.StreamRuns)
	if err != nil {
		t.Fatal(err)
	}
	m, err := runs.GetLastMsgForSubject(t.Context(), events.RunSubject(events.OutcomeSucceeded, id))
	if err != nil {
		t.Fatal(err)
	}
	e, err := events.Decode(m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	var r events.Run
	if err := events.DecodeRun(e, &r); err != nil {
		t.Fatal(err)
	}
	d := events.Dispatch{
		DispatchID: r.DispatchID, TaskID: id, ScheduledAt: r.ScheduledAt, FiredAt: r.ScheduledAt.Add(3 * time.Minute),
		Source: "baseline-interval", TaskCreatedAt: r.TaskCreatedAt,
	}
	body, err := events.Marshal(events.TypeRunDue, "test", id, d, time.Now().UTC(), d.DispatchID+":again")
	if err != nil {
		t.Fatal(err)
	}
	// DISPATCH holds one pending dispatch per task: the task's own may be
	// there.
	natstest.Eventually(t, 10*time.Second, "the late dispatch stored", func() bool {
		_, err := js.Publish(t.Context(), events.DispatchSubject(id), body)
		return err == nil
	})
	natstest.Eventually(t, 10*time.Second, "the slot skipped as already run", func() bool {
		m, err := runs.GetLastMsgForSubject(t.Context(), events.RunSubject(events.OutcomeSkipped, id))
		if err != nil {
			return false
		}
		e, err := events.Decode(m.Header, m.Data)
		var s events.Run
		return err == nil && events.DecodeRun(e, &s) == nil && s.DispatchID == d.DispatchID && strings.HasPrefix(s.Reason, "already ran")
	})
}

// TestCrashDeadLetterUnderComposeUsers takes the dead-letter service's
// other path under the compose users: an executor dies on a dispatch's
// last permitted delivery, JetStream's MAX_DELIVERIES advisory reaches the
// dead-letter service, which reads the dispatch from DISPATCH, writes the
// entry and deletes the dispatch.
func TestCrashDeadLetterUnderComposeUsers(t *testing.T) {
	t.Parallel()
	srv := natstest.StartCompose(t)
	shortenDispatch(t, srv.JS, 1)
	srv.Each(t, []string{"governor", "breaker", "deadletter", "sweeper", "timer"}, func(name string, js jetstream.JetStream) {
		st, err := stack.Start(context.Background(), stack.Config{JS: js, Services: []string{name}, Instance: name + "1", Guard: executor.Guard{AllowLoopback: true}})
		if err != nil {
			t.Fatalf("start %s as its compose user: %v", name, err)
		}
		t.Cleanup(st.Stop)
	})
	tg := newScripted(t, 200)
	tg.hang = make(chan struct{})
	dls := record(t, srv.NC, "flyball.deadletter.>", func(m *nats.Msg) (string, bool) { return string(m.Data), true })
	crashNC, err := nats.Connect(srv.URL("executor"))
	if err != nil {
		t.Fatal(err)
	}
	crash := crashableExecutorOn(t, crashNC)
	if err := srv.NC.Publish("flyball.task.created.lastgasp", createdEvent("lastgasp", spec("lastgasp", tg.srv.URL, 3, "5s"))); err != nil {
		t.Fatal(err)
	}
	tg.awaitCall(t, "the call of the only permitted delivery")
	crash() // died on its only permitted delivery
	_, js := srv.Connect(t, "executor")
	ex, err := stack.Start(context.Background(), stack.Config{JS: js, Services: []string{"executor"}, Instance: "executor2", Guard: executor.Guard{AllowLoopback: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ex.Stop)
	natstest.Eventually(t, 15*time.Second, "a max-deliveries dead-letter entry", func() bool {
		return len(dls()) == 1 && strings.Contains(dls()[0], events.DeadLetterMaxDeliveries)
	})
}

// TestComposeUsersCannotTouchOtherServicesDurables tries, as each compose
// service and client user (not the provisioner, nor admin), to redefine, pull from and delete
// every durable consumer it does not own: with a consumer's own create
// subject, and with the legacy ephemeral one ($JS.API.CONSUMER.CREATE.<stream>)
// whose consumer name comes from the request body, which would update the
// durable of that name (a filter that matches nothing stalls the executor).
// Each must be refused by the server, and the durable left as it was.
func TestComposeUsersCannotTouchOtherServicesDurables(t *testing.T) {
	t.Parallel()
	srv := natstest.StartCompose(t)
	durables, err := streams.ConsumerConfigs()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var attempts []refusal
	for _, user := range []string{"governor", "timer", "executor", "breaker", "deadletter", "sweeper", "api", "cli"} {
		for stream, cfgs := range durables {
			for _, cfg := range cfgs {
				if cfg.Durable == user {
					continue
				}
				hijack := cfg
				hijack.Durable, hijack.Name = "", cfg.Durable
				hijack.FilterSubject, hijack.MaxAckPending = "nothing.here", 1
				body, err := json.Marshal(map[string]any{"stream_name": stream, "config": hijack})
				if err != nil {
					t.Fatal(err)
				}
				attempts = append(attempts,
					refusal{user, "$JS.API.CONSUMER.CREATE." + stream, string(body)},
					refusal{user, "$JS.API.CONSUMER.CREATE." + stream + "." + cfg.Durable, string(body)},
					refusal{user, "$JS.API.CONSUMER.MSG.NEXT." + stream + "." + cfg.Durable, `{"batch":1,"no_wait":true}`},
					refusal{user, "$JS.API.CONSUMER.DELETE." + stream + "." + cfg.Durable, string(body)},
				)
			}
		}
	}
	expectRefused(t, srv, attempts)
	for stream, cfgs := range durables {
		for _, cfg := range cfgs {
			c, err := srv.JS.Consumer(ctx, stream, cfg.Durable)
			if err != nil {
				t.Errorf("durable %s on %s: %v", cfg.Durable, stream, err)
				continue
			}
			got := c.CachedInfo().Config
			if got.Durable != cfg.Durable || got.FilterSubject != cfg.FilterSubject || got.MaxAckPending != cfg.MaxAckPending {
				t.Errorf("durable %s on %s was changed: durable %q, filter %q, max ack pending %d",
					cfg.Durable, stream, got.Durable, got.FilterSubject, got.MaxAckPending)
			}
		}
	}
}

// TestOnlyTheProvisionerChangesStreams: in compose, no service may create,
// update, delete or purge a stream (a lowered limit discards stored
// data), the governor included, but for the sweeper's purges of the task
// buckets (sweeperPurges) and the governor's of DISPATCH (a deleted
// task's pending run, TestTaskCreatedAgainIsNotHeldBackByTheDeletedTasksRetry); the provisioner, which made them in
// natstest.StartCompose, may create and update them, and nothing else: it
// may not delete or purge a stream, pull or delete a durable, write a KV
// bucket or publish a task command.
func TestOnlyTheProvisionerChangesStreams(t *testing.T) {
	t.Parallel()
	srv := natstest.StartCompose(t)
	cfgs, err := streams.StreamConfigs()
	if err != nil {
		t.Fatal(err)
	}
	var attempts []refusal
	for _, cfg := range cfgs {
		body, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, user := range append([]string{"provisioner"}, stack.All...) {
			for _, op := range []string{"DELETE", "PURGE"} {
				if op == "PURGE" && user == "sweeper" && sweeperPurges[cfg.Name] {
					continue // its marker pass (TestSweeperCompactsOldDeleteMarkers)
				}
				if op == "PURGE" && user == "governor" && cfg.Name == streams.StreamDispatch {
					continue // a deleted task's pending run (governor/commands.go purgeDispatch)
				}
				attempts = append(attempts, refusal{user, "$JS.API.STREAM." + op + "." + cfg.Name, "{}"})
			}
			if user != "provisioner" {
				for _, op := range []string{"CREATE", "UPDATE"} {
					attempts = append(attempts, refusal{user, "$JS.API.STREAM." + op + "." + cfg.Name, string(body)})
				}
			}
		}
	}
	attempts = append(attempts,
		refusal{"provisioner", "$JS.API.CONSUMER.MSG.NEXT.TASKS.governor", `{"batch":1,"no_wait":true}`},
		refusal{"provisioner", "$JS.API.CONSUMER.DELETE.DISPATCH.executor", "{}"},
		refusal{"provisioner", "$JS.API.DIRECT.GET.KV_flyball-tasks", `{"last_by_subj":"$KV.flyball-tasks.x"}`},
		refusal{"provisioner", "$KV.flyball-schedules.x", "{}"},
		refusal{"provisioner", "flyball.task.deleted.x", "{}"},
	)
	expectRefused(t, srv, attempts)
	// What the provisioner may do, it can do again: a second run of
	// flyball provision on a stack that matches changes nothing and
	// succeeds.
	_, prov := srv.Connect(t, "provisioner")
	if err := streams.Ensure(t.Context(), prov); err != nil {
		t.Fatalf("ensure again as the provisioner: %v", err)
	}
	for _, cfg := range cfgs {
		st, err := srv.JS.Stream(t.Context(), cfg.Name)
		if err != nil {
			t.Fatalf("stream %s: %v", cfg.Name, err)
		}
		if got := st.CachedInfo().Config.Subjects; len(got) != len(cfg.Subjects) {
			t.Errorf("stream %s has subjects %v, want %v", cfg.Name, got, cfg.Subjects)
		}
	}
}

// TestProvisionerCreatesOnlyTheDurables: the provisioner could create
// any consumer on any stream ($JS.API.CONSUMER.CREATE.*.*[.>]), so a push
// consumer on KV_flyball-tasks delivering to _INBOX.x, which it may
// subscribe to, handed it every task spec with its unredacted headers. It
// may now create only the durables flyball provision makes, each on its
// own stream: any other name, or a durable's name on another stream, is
// refused, with either create subject, and no consumer is left behind.
func TestProvisionerCreatesOnlyTheDurables(t *testing.T) {
	t.Parallel()
	srv := natstest.StartCompose(t)
	natstest.PutJSON(t, srv.JS, streams.BucketTasks, "victim", map[string]any{
		"target": map[string]any{"headers": map[string]string{"Authorization": "Bearer victim-secret"}},
	})
	cfgs, err := streams.StreamConfigs()
	if err != nil {
		t.Fatal(err)
	}
	durables, err := streams.ConsumerConfigs()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, cs := range durables {
		for _, c := range cs {
			names[c.Durable] = true
		}
	}
	var attempts []refusal
	for _, st := range cfgs {
		own := map[string]bool{}
		for _, c := range durables[st.Name] {
			own[c.Durable] = true
		}
		for _, name := range append([]string{"snoop"}, slices.Sorted(maps.Keys(names))...) {
			if own[name] {
				continue
			}
			body, err := json.Marshal(map[string]any{"stream_name": st.Name, "config": map[string]any{
				"name": name, "durable_name": name, "deliver_subject": "_INBOX.snoop",
				"deliver_policy": "all", "ack_policy": "none", "filter_subject": st.Subjects[0],
			}})
			if err != nil {
				t.Fatal(err)
			}
			attempts = append(attempts,
				refusal{"provisioner", "$JS.API.CONSUMER.CREATE." + st.Name + "." + name, string(body)},
				refusal{"provisioner", "$JS.API.CONSUMER.CREATE." + st.Name + "." + name + "." + st.Subjects[0], string(body)},
			)
		}
	}
	expectRefused(t, srv, attempts)
	for _, st := range cfgs {
		s, err := srv.JS.Stream(t.Context(), st.Name)
		if err != nil {
			t.Fatalf("stream %s: %v", st.Name, err)
		}
		if got, want := s.CachedInfo().State.Consumers, len(durables[st.Name]); got != want {
			t.Errorf("stream %s has %d consumers, want its %d durables", st.Name, got, want)
		}
	}
}

// TestSysUserCannotPurgeFlyball: the system account's user `sys` is for
// monitoring (`nats --user sys server report jetstream`), but it could
// send every request the system account may: $JS.API.ACCOUNT.PURGE.FLYBALL
// answered {"initiated":true} and deleted every flyball stream and KV
// bucket, and the other system JetStream and server requests (remove a
// peer, step the meta leader down, move or cancel-move a stream, kick a
// client, reload the config) were open too. It may now send only the
// server's and the accounts' monitoring requests: those are refused,
// the streams stay, and a JSZ request is still answered.
func TestSysUserCannotPurgeFlyball(t *testing.T) {
	t.Parallel()
	srv := natstest.StartCompose(t)
	id := srv.Server.Server.ID()
	expectRefused(t, srv, []refusal{
		{"sys", "$JS.API.ACCOUNT.PURGE.FLYBALL", ""},
		{"sys", "$JS.API.SERVER.REMOVE", `{"peer":"` + srv.Server.Server.Name() + `"}`},
		{"sys", "$JS.API.SERVER.EVACUATE", ""},
		{"sys", "$JS.API.META.LEADER.STEPDOWN", ""},
		{"sys", "$JS.API.ACCOUNT.STREAM.MOVE.FLYBALL.TASKS", "{}"},
		{"sys", "$JS.API.ACCOUNT.STREAM.CANCEL_MOVE.FLYBALL.TASKS", ""},
		{"sys", "$SYS.REQ.SERVER." + id + ".KICK", `{"cid":999999}`},
		{"sys", "$SYS.REQ.SERVER." + id + ".RELOAD", ""},
	})
	cfgs, err := streams.StreamConfigs()
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range cfgs {
		if _, err := srv.JS.Stream(t.Context(), cfg.Name); err != nil {
			t.Errorf("stream %s after the sys user's requests: %v", cfg.Name, err)
		}
	}
	// What it is for: the servers' JetStream report.
	nc, _ := srv.Connect(t, "sys")
	m, err := nc.Request("$SYS.REQ.SERVER.PING.JSZ", []byte(`{"accounts":true}`), 5*time.Second)
	if err != nil {
		t.Fatalf("JSZ request as sys: %v", err)
	}
	if !bytes.Contains(m.Data, []byte(`"FLYBALL"`)) {
		t.Errorf("JSZ as sys answered %.300s, want the FLYBALL account's JetStream usage", m.Data)
	}
}

// sweeperPurges are the streams the sweeper may purge: the task buckets,
// whose delete markers older than a day it removes (sweeper/compact.go).
// A purge request's scope travels in its body, where permissions cannot
// see it, so the sweeper could purge these streams whole;
// docs/security.md says so. No other service may purge a stream.
var sweeperPurges = map[string]bool{"KV_flyball-tasks": true, "KV_flyball-schedules": true, "KV_flyball-breakers": true}

// refusal is a request a compose user must be refused.
type refusal struct{ user, subject, body string }

// expectRefused sends every request as its user and fails the test for
// each one the server answers. A refused request is dropped by the
// server, so it times out: all are sent at once, and the test waits one
// timeout, not one per request. The violations they cause are expected.
func expectRefused(t *testing.T, srv *natstest.Compose, reqs []refusal) {
	t.Helper()
	conns := map[string]*nats.Conn{}
	for _, r := range reqs {
		srv.ExpectViolation(r.subject)
		if conns[r.user] == nil {
			// Quiet: nats.go's default handler prints every refusal.
			conns[r.user], _ = srv.Connect(t, r.user, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		}
	}
	var wg sync.WaitGroup
	for _, r := range reqs {
		wg.Go(func() {
			if m, err := conns[r.user].Request(r.subject, []byte(r.body), 2*time.Second); err == nil {
				t.Errorf("user %s: %s was not refused: %.200s", r.user, r.subject, m.Data)
			}
		})
	}
	wg.Wait()
}

// TestSweeperReportsEveryBacklogAsItsComposeUser: the sweeper reads the
// state of every durable consumer, its own or not, and the account's
// JetStream usage, under its compose user: one flyball_consumer_pending
// series per durable and no failed read.
func TestSweeperReportsEveryBacklogAsItsComposeUser(t *testing.T) {
	t.Parallel()
	srv := natstest.StartCompose(t)
	_, js := srv.Connect(t, "sweeper")
	st, err := stack.Start(t.Context(), stack.Config{JS: js, Services: []string{"sweeper"}, Instance: "sweeper1", SweepInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	<-st.Sweeper.Swept()
	defs, err := streams.ConsumerConfigs()
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, cs := range defs {
		want += len(cs)
	}
	m := st.Metrics()
	if got := testutil.CollectAndCount(m.ConsumerPending); got != want {
		t.Errorf("flyball_consumer_pending has %d series, want one per durable (%d)", got, want)
	}
	for _, read := range []string{"consumer", "account"} {
		if got := testutil.ToFloat64(m.BacklogReadFailures.WithLabelValues(read)); got != 0 {
			t.Errorf("%s reads failed %v times as the sweeper's compose user", read, got)
		}
	}
	if got := testutil.CollectAndCount(m.JetStreamStorage); got != 2 {
		t.Errorf("flyball_jetstream_storage_bytes has %d series, want file and memory", got)
	}
}

// TestDeadLetterUserCreatesOnlyFailedRunLookups: the deadletter user
// reads a dispatch's attempt history with an ordered consumer on RUNS
// filtered on the task's failed runs (flyball.run.failed.<task>). Its
// rules allowed any consumer on RUNS but the three durables, so it could
// create one over every outcome (or a push consumer copying them
// elsewhere). It may now create a consumer only with the filtered create
// subject, whose filter the server holds the consumer's to, and only on
// one task's failed runs; its own lookup still works.
func TestDeadLetterUserCreatesOnlyFailedRunLookups(t *testing.T) {
	t.Parallel()
	srv := natstest.StartCompose(t)
	req := func(name, filter string) string {
		b, err := json.Marshal(map[string]any{"stream_name": streams.StreamRuns, "config": map[string]any{
			"name": name, "filter_subject": filter, "ack_policy": "none", "mem_storage": true, "num_replicas": 1,
		}})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	pre := "$JS.API.CONSUMER.CREATE." + streams.StreamRuns + "."
	expectRefused(t, srv, []refusal{
		{"deadletter", pre + "snoop1", req("snoop1", "flyball.run.>")},
		{"deadletter", pre + "snoop2", req("snoop2", "")},
		{"deadletter", pre + "snoop3.flyball.run.>", req("snoop3", "flyball.run.>")},
		{"deadletter", pre + "snoop4.flyball.run.succeeded.t1", req("snoop4", "flyball.run.succeeded.t1")},
		{"deadletter", pre + "snoop5.flyball.run.*.t1", req("snoop5", "flyball.run.*.t1")},
		{"deadletter", pre + "snoop6.flyball.task.created.t1", req("snoop6", "flyball.task.created.t1")},
		{"deadletter", pre + "breaker.flyball.run.failed.t1", req("breaker", "flyball.run.failed.t1")},
		{"deadletter", pre + "governor.flyball.run.failed.t1", req("governor", "flyball.run.failed.t1")},
	})
	// What the service does (deadletter.attemptErrors): an ordered consumer
	// on one task's failed runs, fetched and deleted.
	if _, err := srv.JS.Publish(t.Context(), events.RunSubject(events.OutcomeFailed, "t1"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	_, js := srv.Connect(t, "deadletter")
	cons, err := js.OrderedConsumer(t.Context(), streams.StreamRuns, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.RunSubject(events.OutcomeFailed, "t1")},
	})
	if err != nil {
		t.Fatalf("ordered consumer on t1's failed runs as deadletter: %v", err)
	}
	batch, err := cons.FetchNoWait(10)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range batch.Messages() {
		n++
	}
	if err := batch.Error(); err != nil || n != 1 {
		t.Fatalf("fetched %d failed runs of t1 as deadletter (%v), want 1", n, err)
	}
	if err := js.DeleteConsumer(t.Context(), streams.StreamRuns, cons.CachedInfo().Name); err != nil {
		t.Fatalf("delete the lookup as deadletter: %v", err)
	}
}

// TestSweeperAnnouncesOfflineButCannotForgeOnline: the sweeper's user
// published anything under flyball.runtime.>, so a compromised sweeper
// could forge another service's runtime.online. It may now publish only
// runtime.offline (of the instances it marks offline) and its own
// heartbeat events: it still marks a silent executor offline and
// announces it, as its compose user, one whose name holds a dot too
// (flyball.runtime.offline.*.* refused that one), and another's online
// is refused.
func TestSweeperAnnouncesOfflineButCannotForgeOnline(t *testing.T) {
	t.Parallel()
	srv := natstest.StartCompose(t)
	ctx := t.Context()
	natstest.PutJSON(t, srv.JS, streams.BucketRuntime, "executor.gone", events.Heartbeat{
		Kind: "executor", Name: "gone", Status: events.RuntimeOnline, LastBeat: time.Now().Add(-time.Hour).UTC(),
	})
	// A name with a dot: any service user may write such a key, and its
	// mark goes to a subject of six tokens (refused under offline.*.*).
	natstest.PutJSON(t, srv.JS, streams.BucketRuntime, "executor.a.b", events.Heartbeat{
		Kind: "executor", Name: "a.b", Status: events.RuntimeOnline, LastBeat: time.Now().Add(-time.Hour).UTC(),
	})
	_, js := srv.Connect(t, "sweeper")
	st, err := stack.Start(ctx, stack.Config{
		JS: js, Services: []string{"sweeper"}, Instance: "sweeper1",
		HeartbeatInterval: 100 * time.Millisecond, OfflineAfter: 2 * time.Second, SweepInterval: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	health, err := srv.JS.Stream(ctx, streams.StreamHealth)
	if err != nil {
		t.Fatal(err)
	}
	for _, subject := range []string{
		events.RuntimeSubject(events.RuntimeOffline, "executor", "gone"),
		events.RuntimeSubject(events.RuntimeOffline, "executor", "a.b"),
		events.RuntimeSubject(events.RuntimeOnline, "sweeper", "sweeper1"),
	} {
		natstest.Eventually(t, 30*time.Second, subject+" published by the sweeper's user", func() bool {
			_, err := health.GetLastMsgForSubject(ctx, subject)
			return err == nil
		})
	}
	expectRefused(t, srv, []refusal{
		{"sweeper", events.RuntimeSubject(events.RuntimeOnline, "executor", "gone"), "{}"},
		{"sweeper", events.RuntimeSubject(events.RuntimeOnline, "governor", "governor1"), "{}"},
		{"sweeper", events.RuntimeSubject(events.RuntimeOnline, "executor", "a.b"), "{}"},
		{"sweeper", "flyball.runtime.other", "{}"},
	})
}
