package stack_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/executor"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/stack"
	"github.com/flyballhq/flyball/streams"
)

// storedSpec reports whether KV flyball-tasks holds task id.
func (e *env) storedSpec(id string) bool {
	e.t.Helper()
	kv, err := e.srv.JS.KeyValue(e.t.Context(), streams.BucketTasks)
	if err != nil {
		e.t.Fatal(err)
	}
	_, err = kv.Get(e.t.Context(), id)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		e.t.Fatal(err)
	}
	return err == nil
}

// guardCase is a task whose target.http.url the governor must reject,
// with a rule containing why.
type guardCase struct{ id, url, why string }

// wantRejected publishes a task.created for each case, as `nats pub`
// does, and checks that each is answered with one task.rejected reason
// naming target.http.url whose rule contains the case's why (and rule,
// if not empty), and that none is stored. A task accepted instead is
// reported by name.
func (e *env) wantRejected(cases []guardCase, rule string) {
	t := e.t
	t.Helper()
	accepted := e.collect("flyball.task.accepted.>")
	rejected := e.collect("flyball.task.rejected.>")
	for _, c := range cases {
		e.create(c.id, fmt.Sprintf(`{"id":%q,"target":{"http":{"url":%q}},"schedule":{"interval":"1m"}}`, c.id, c.url))
	}
	natstest.Eventually(t, 10*time.Second, "an answer per task", func() bool { return len(accepted())+len(rejected()) == len(cases) })
	for _, ev := range accepted() {
		t.Errorf("task %s accepted; every run of it would fail", ev.Subject())
	}
	got := map[string]events.TaskRejected{}
	for _, ev := range rejected() {
		var r events.TaskRejected
		if err := events.DecodeData(ev, &r); err != nil {
			t.Fatal(err)
		}
		got[r.ID] = r
	}
	for _, c := range cases {
		r, ok := got[c.id]
		if !ok {
			continue // reported as accepted
		}
		if len(r.Reasons) != 1 || r.Reasons[0].Field != "target.http.url" || !strings.Contains(r.Reasons[0].Rule, rule) || !strings.Contains(r.Reasons[0].Rule, c.why) {
			t.Errorf("%s: reasons %+v, want one naming target.http.url, %q and %q", c.id, r.Reasons, rule, c.why)
		}
		if e.storedSpec(c.id) {
			t.Errorf("%s: the rejected task was stored", c.id)
		}
	}
}

// TestGovernorRejectsATargetTheGuardBlocks: a task.created published
// straight to NATS (as `nats pub` does) whose target.http.url is a literal
// address the SSRF guard refuses, or a well-known metadata hostname, is
// answered with task.rejected naming the field and the rule, counted, and
// not stored. It used to be accepted, and every run failed at the
// executor.
func TestGovernorRejectsATargetTheGuardBlocks(t *testing.T) {
	t.Parallel()
	e := &env{t: t, srv: natstest.StartWithStreams(t)}
	e.st = e.startWith(func(c *stack.Config) { c.Guard = executor.Guard{} }, "governor") // production default
	cases := []guardCase{
		{"imds", "http://169.254.169.254/latest/meta-data/", "169.254.169.254 is link-local or a cloud metadata address"},
		{"imds6", "http://[fd00:ec2::254]/latest/meta-data/", "fd00:ec2::254 is link-local or a cloud metadata address"},
		{"oci6", "http://[fd00:c1::a9fe:a9fe]/opc/v2/identity/key.pem", "fd00:c1::a9fe:a9fe is link-local or a cloud metadata address"},
		{"scw6", "http://[fd00:42::42]/conf", "fd00:42::42 is link-local or a cloud metadata address"},
		{"wire", "http://168.63.129.16:32526/vmSettings", "168.63.129.16 is link-local or a cloud metadata address"},
		{"gcp", "http://Metadata.Google.Internal./computeMetadata/v1/", "metadata.google.internal is a cloud metadata hostname"},
		{"loop", "http://127.0.0.1:8080/", "127.0.0.1 is a loopback address"},
	}
	e.wantRejected(cases, "SSRF guard")
	// The governor counts a rejection once its publish returns, which can
	// be after the subscriber above has the event.
	counted := e.st.Metrics().RejectedEvents.WithLabelValues("field:target.http.url")
	natstest.Eventually(t, 10*time.Second, "every rejection counted", func() bool { return testutil.ToFloat64(counted) >= float64(len(cases)) })
	if n := testutil.ToFloat64(counted); n != float64(len(cases)) {
		t.Errorf("flyball_rejected_events_total{reason=field:target.http.url} = %v, want %d", n, len(cases))
	}
}

// TestGovernorRejectsANumericHost: a task.created published straight to
// NATS whose target.http.url host is an IPv4 address in a non-canonical
// numeric form is answered with task.rejected naming the field, and not
// stored: with the guard's reason and the address it stands for if that
// is blocked (2852039166 is 169.254.169.254), and otherwise (loopback,
// allowed here) with the address to write instead, since curl or a proxy
// reads the host as that address and Go's resolver as a DNS name. It used
// to be accepted, and every run failed at the executor (or, through a
// proxy, called the metadata service).
func TestGovernorRejectsANumericHost(t *testing.T) {
	t.Parallel()
	e := &env{t: t, srv: natstest.StartWithStreams(t)}
	e.st = e.startWith(func(c *stack.Config) { c.Guard = executor.Guard{AllowLoopback: true} }, "governor")
	cases := []guardCase{
		{"int", "http://2852039166/latest/meta-data/", "169.254.169.254 is link-local or a cloud metadata address (the host 2852039166 is 169.254.169.254"},
		{"hex", "http://0xA9FEA9FE/", "169.254.169.254 is link-local or a cloud metadata address"},
		{"octal", "http://0251.0376.0251.0376/", "169.254.169.254 is link-local or a cloud metadata address"},
		{"short", "http://169.254.43518/", "169.254.169.254 is link-local or a cloud metadata address"},
		{"loop", "http://0x7f.1:8080/", "write the address in dotted-decimal form: 127.0.0.1"},
	}
	e.wantRejected(cases, "")
}

// TestGovernorAcceptsWhatTheGuardAllows: the create-time check reads the
// executor's configuration: an address the operator allows (an
// allow-list prefix, loopback with --allow-loopback) is accepted, as are
// hostnames, which only the executor checks, once DNS has answered.
func TestGovernorAcceptsWhatTheGuardAllows(t *testing.T) {
	t.Parallel()
	e := &env{t: t, srv: natstest.StartWithStreams(t)}
	e.st = e.startWith(func(c *stack.Config) {
		c.Guard = executor.Guard{AllowLoopback: true, Allow: []netip.Prefix{
			netip.MustParsePrefix("169.254.169.254/32"), netip.MustParsePrefix("168.63.129.16/32"),
		}}
	}, "governor")
	accepted := e.collect("flyball.task.accepted.>")
	rejected := e.collect("flyball.task.rejected.>")
	for id, url := range map[string]string{
		"imds": "http://169.254.169.254/latest/meta-data/",
		"gcp":  "http://metadata.google.internal/computeMetadata/v1/", // stands for 169.254.169.254, allowed
		"wire": "http://168.63.129.16/machine/?comp=goalstate",        // Azure WireServer, allowed
		"loop": "http://127.0.0.1:8080/",
		"name": "http://internal.example/",
	} {
		e.create(id, fmt.Sprintf(`{"id":%q,"target":{"http":{"url":%q}},"schedule":{"interval":"1m"}}`, id, url))
	}
	natstest.Eventually(t, 10*time.Second, "five answers", func() bool { return len(accepted())+len(rejected()) == 5 })
	if r := rejected(); len(r) != 0 {
		t.Fatalf("rejected %d allowed targets: %s", len(r), r[0].Data())
	}
	for _, id := range []string{"imds", "gcp", "wire", "loop", "name"} {
		if !e.storedSpec(id) {
			t.Errorf("%s: accepted but not stored", id)
		}
	}
}

// TestGovernorRejectsAnUpdateToATargetTheGuardBlocks: a task.updated
// published straight to NATS that points an existing task at a metadata
// address is rejected naming target.http.url, and the stored spec keeps
// its old target.
func TestGovernorRejectsAnUpdateToATargetTheGuardBlocks(t *testing.T) {
	t.Parallel()
	e := &env{t: t, srv: natstest.StartWithStreams(t)}
	e.st = e.startWith(func(c *stack.Config) { c.Guard = executor.Guard{} }, "governor") // production default
	const good = "http://api.example.invalid/health"
	e.create("up", fmt.Sprintf(`{"id":"up","target":{"http":{"url":%q}},"schedule":{"interval":"1m"}}`, good))
	natstest.Eventually(t, 10*time.Second, "the task stored", func() bool { return e.storedSpec("up") })
	rejected := e.collect("flyball.task.rejected.up")
	update := strings.Replace(string(createdEvent("up", `{"id":"up","target":{"http":{"url":"http://169.254.169.254/latest/meta-data/"}},"schedule":{"interval":"1m"}}`)),
		`"io.flyball.task.created"`, `"io.flyball.task.updated"`, 1)
	update = strings.Replace(update, `"id":"cmd-up"`, `"id":"cmd-up-2"`, 1)
	if err := e.srv.NC.Publish("flyball.task.updated.up", []byte(update)); err != nil {
		t.Fatal(err)
	}
	rejectedForItsURL(t, rejected, "the update")
	kv, err := e.srv.JS.KeyValue(t.Context(), streams.BucketTasks)
	if err != nil {
		t.Fatal(err)
	}
	ent, err := kv.Get(t.Context(), "up")
	if err != nil {
		t.Fatal(err)
	}
	var spec events.TaskSpec
	if err := json.Unmarshal(ent.Value(), &spec); err != nil || spec.Target.HTTP == nil || spec.Target.HTTP.URL != good {
		t.Errorf("stored spec %s (%v), want the old target %s kept", ent.Value(), err, good)
	}
}

// TestSweeperRepairOfAStoredTargetSkipsTheCreateTimeGuard: a task stored
// before the create-time check (or under another guard setting) whose
// schedule is missing is re-created by the sweeper's repair, a
// task.created with a repair command ID. The governor must accept it and
// schedule the task, although the guard refuses its target at create
// time: rejected, the stored task would be left with no schedule for
// good. The executor still refuses the target at dial time. The same
// task.created with an ordinary command ID is rejected.
func TestSweeperRepairOfAStoredTargetSkipsTheCreateTimeGuard(t *testing.T) {
	t.Parallel()
	e := &env{t: t, srv: natstest.StartWithStreams(t)}
	e.st = e.startWith(func(c *stack.Config) { c.Guard = executor.Guard{} }, "governor") // production default
	data := `{"id":"old","target":{"http":{"url":"http://127.0.0.1:8080/"}},"schedule":{"interval":"1m"}}`
	natstest.PutJSON(t, e.srv.JS, streams.BucketTasks, "old", json.RawMessage(data)) // stored, never scheduled
	accepted := e.collect("flyball.task.accepted.old")
	rejected := e.collect("flyball.task.rejected.old")
	publish := func(cmdID string) {
		t.Helper()
		body := fmt.Sprintf(`{"specversion":"1.0","type":"io.flyball.task.created","source":"test","id":%q,"subject":"old","datacontenttype":"application/json","data":%s}`, cmdID, data)
		if err := e.srv.NC.Publish("flyball.task.created.old", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	publish("by-hand-1")
	rejectedForItsURL(t, rejected, "the ordinary task.created")
	publish(events.RepairCreatePrefix + "old:1")
	natstest.Eventually(t, 10*time.Second, "the repair accepted", func() bool { return len(accepted()) == 1 })
	if st := e.storedSchedule("old"); st.NextRunAt.IsZero() {
		t.Fatalf("after the repair, schedule %+v: want the task scheduled", st)
	}
}

// rejectedForItsURL waits for the one task.rejected that rejected
// collects, answering what, and checks that its one reason names
// target.http.url.
func rejectedForItsURL(t *testing.T, rejected func() []events.Event, what string) {
	t.Helper()
	natstest.Eventually(t, 10*time.Second, what+" rejected", func() bool { return len(rejected()) == 1 })
	var r events.TaskRejected
	if err := events.DecodeData(rejected()[0], &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Reasons) != 1 || r.Reasons[0].Field != "target.http.url" {
		t.Fatalf("%s rejected with %+v, want one reason naming target.http.url", what, r.Reasons)
	}
}

// TestRepairCommandIDExemptsOnlyTheStoredTarget: the create-time guard
// skipped every command whose ID started with the sweeper's repair
// prefix, whatever its kind and target: a task.updated published by hand
// under such an ID pointed a task at a metadata address, accepted and
// stored (the executor still refused it at dial time, so every run was
// dead-lettered). Only the repair itself is exempt now: a task.created
// carrying the target already stored for the task.
func TestRepairCommandIDExemptsOnlyTheStoredTarget(t *testing.T) {
	t.Parallel()
	e := &env{t: t, srv: natstest.StartWithStreams(t)}
	e.st = e.startWith(func(c *stack.Config) { c.Guard = executor.Guard{} }, "governor") // production default
	const good = "http://api.example.invalid/health"
	const imds = "http://169.254.169.254/latest/meta-data/"
	e.create("up", fmt.Sprintf(`{"id":"up","target":{"http":{"url":%q}},"schedule":{"interval":"1m"}}`, good))
	natstest.Eventually(t, 10*time.Second, "the task stored", func() bool { return e.storedSpec("up") })
	data := fmt.Sprintf(`{"id":"old","target":{"http":{"url":%q}},"schedule":{"interval":"1m"}}`, good)
	natstest.PutJSON(t, e.srv.JS, streams.BucketTasks, "old", json.RawMessage(data)) // stored, never scheduled
	publish := func(typ, id, cmdID, url string) {
		t.Helper()
		body := fmt.Sprintf(`{"specversion":"1.0","type":%q,"source":"test","id":%q,"subject":%q,"datacontenttype":"application/json","data":{"id":%q,"target":{"http":{"url":%q}},"schedule":{"interval":"1m"}}}`,
			typ, cmdID, id, id, url)
		subject := "flyball.task.created." + id
		if typ == events.TypeTaskUpdated {
			subject = "flyball.task.updated." + id
		}
		if err := e.srv.NC.Publish(subject, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ typ, id string }{{events.TypeTaskUpdated, "up"}, {events.TypeTaskCreated, "old"}} {
		rejected := e.collect("flyball.task.rejected." + c.id)
		publish(c.typ, c.id, events.RepairCreatePrefix+c.id+":9", imds)
		rejectedForItsURL(t, rejected, c.typ+" of "+c.id+" under a repair command ID with a metadata target")
	}
	kv, err := e.srv.JS.KeyValue(t.Context(), streams.BucketTasks)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"up", "old"} {
		ent, err := kv.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		var spec events.TaskSpec
		if err := json.Unmarshal(ent.Value(), &spec); err != nil || spec.Target.HTTP == nil || spec.Target.HTTP.URL != good {
			t.Errorf("%s: stored spec %s (%v), want the old target %s kept", id, ent.Value(), err, good)
		}
	}
}

// TestGovernorRejectsAURLWithNoHostNameOrABadPort: a task.created
// published straight to NATS whose target.http.url names a port and no
// host (http://:8080/: url.Parse's host is ":8080", its host name empty,
// which the SSRF guard's create-time check let through) or a port
// outside 1-65535 is answered with task.rejected naming target.http.url,
// and not stored. It used to be accepted, and every run failed at the
// executor for good ("destination blocked by SSRF guard: bad address
// \":8080\"", "invalid port") and was dead-lettered, its rechecks too.
func TestGovernorRejectsAURLWithNoHostNameOrABadPort(t *testing.T) {
	t.Parallel()
	e := &env{t: t, srv: natstest.StartWithStreams(t)}
	e.st = e.startWith(func(c *stack.Config) { c.Guard = executor.Guard{} }, "governor") // production default
	cases := []guardCase{
		{"noname", "http://:8080/", `must have a host name, got ":8080"`},
		{"noname-tls", "https://:443/x", `must have a host name, got ":443"`},
		{"bigport", "https://example.com:99999/", "port must be 1-65535, got 99999"},
		{"port0", "http://example.com:0/", "port must be 1-65535, got 0"},
	}
	e.wantRejected(cases, "")
}
