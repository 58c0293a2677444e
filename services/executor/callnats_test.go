package executor

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// startExecutor starts an executor on its own connection to srv, with
// the given task specs stored (as a hand-written value would be, without
// the governor's validation).
func startExecutor(t *testing.T, srv *natstest.Server, logs logLines, specs ...events.TaskSpec) *Service {
	t.Helper()
	for _, spec := range specs {
		natstest.PutJSON(t, srv.JS, streams.BucketTasks, spec.ID, spec)
	}
	nc, _ := srv.Connect(t)
	js, err := jsutil.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := New(Config{JS: js, Guard: Guard{AllowLoopback: true}, Logger: slog.New(logs), ShutdownGrace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := ex.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ex.Stop)
	return ex
}

// TestNATSTargetCannotReachFlyballsOwnSubjects: the executor's own
// connection sends a NATS target's request, and the executor must be
// able to publish run events, write attempt records and ack dispatches
// (in the compose stack as much as in flyball dev). A task whose subject
// names one of those, or the JetStream API, would forge them: a stored
// run.succeeded of another task, a KV write, a purged stream. Such a
// task must be refused, and its runs skipped without a request.
func TestNATSTargetCannotReachFlyballsOwnSubjects(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	ctx := t.Context()
	forged, err := events.Marshal(events.TypeRunSucceeded, "forger", "victim",
		events.Run{DispatchID: "victim:1", TaskID: "victim", ScheduledAt: time.Unix(1, 0).UTC(), Attempt: 1}, time.Now().UTC(), "forged-1")
	if err != nil {
		t.Fatal(err)
	}
	subjects := map[string]string{
		"forge-run":  events.RunSubject(events.OutcomeSucceeded, "victim"),
		"forge-kv":   "$KV." + streams.BucketAttempts + ".victim",
		"purge-runs": "$JS.API.STREAM.PURGE." + streams.StreamRuns,
	}
	var specs []events.TaskSpec
	for id, subj := range subjects {
		payload := string(forged)
		if id == "purge-runs" {
			payload = "" // purge everything
		}
		specs = append(specs, events.TaskSpec{
			ID:       id,
			Target:   events.Target{NATS: &events.NATSTarget{Subject: subj, Payload: payload, Timeout: events.Duration(2 * time.Second)}},
			Schedule: events.Schedule{Interval: events.Duration(time.Hour)},
		})
	}
	// A stored run of an honest task, which a purge would remove.
	if _, err := srv.JS.Publish(ctx, events.RunSubject(events.OutcomeFailed, "honest"), forged); err != nil {
		t.Fatal(err)
	}
	startExecutor(t, srv, newLogLines(), specs...)
	for id := range subjects {
		dispatchNow(t, srv.JS, id)
	}
	runs, err := srv.JS.Stream(ctx, streams.StreamRuns)
	if err != nil {
		t.Fatal(err)
	}
	// Each task settles its run (skipped as an invalid spec).
	for id := range subjects {
		natstest.Eventually(t, 20*time.Second, "a run event of "+id, func() bool {
			_, err := runs.GetLastMsgForSubject(ctx, "flyball.run.*."+id)
			return err == nil
		})
		msg, _ := runs.GetLastMsgForSubject(ctx, "flyball.run.*."+id)
		if msg.Subject != events.RunSubject(events.OutcomeSkipped, id) {
			t.Errorf("task %s (subject %s) ended in %s, want run.skipped", id, subjects[id], msg.Subject)
		}
	}
	if _, err := runs.GetLastMsgForSubject(ctx, events.RunSubject(events.OutcomeSucceeded, "victim")); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("a task forged a run.succeeded of another task on RUNS (err %v)", err)
	}
	if _, err := runs.GetLastMsgForSubject(ctx, events.RunSubject(events.OutcomeFailed, "honest")); err != nil {
		t.Errorf("a task purged RUNS: the honest task's run is gone (%v)", err)
	}
	attempts, err := srv.JS.KeyValue(ctx, streams.BucketAttempts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := attempts.Get(ctx, "victim"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("a task wrote flyball-attempts (err %v)", err)
	}
}

// TestNATSTargetOutcomes: how a NATS request's outcome is classified. No
// subscriber (no responders) and no reply within the timeout are
// transient; a Nats-Service-Error-Code in 400-499 other than 408 and 429
// is permanent, any other code transient; any other reply succeeds.
func TestNATSTargetOutcomes(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	s, err := New(Config{JS: srv.JS, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	reply := func(subject, code string) {
		t.Helper()
		natstest.Subscribe(t, srv.NC, subject, func(m *nats.Msg) {
			r := nats.NewMsg(m.Reply)
			r.Data = []byte("answer")
			if code != "" {
				r.Header.Set("Nats-Service-Error-Code", code)
				r.Header.Set("Nats-Service-Error", "nope")
			}
			_ = m.RespondMsg(r)
		})
	}
	reply("svc.ok", "")
	reply("svc.404", "404")
	reply("svc.429", "429")
	reply("svc.503", "503")
	natstest.Subscribe(t, srv.NC, "svc.silent", func(*nats.Msg) {})
	d := &events.Dispatch{DispatchID: "t:1", TaskID: "t", ScheduledAt: time.Now()}
	for _, c := range []struct {
		subject   string
		ok, perm  bool
		status    int
		errSubstr string
	}{
		{"svc.ok", true, false, 0, ""},
		{"svc.404", false, true, 404, "service error 404: nope"},
		{"svc.429", false, false, 429, "service error 429"},
		{"svc.503", false, false, 503, "service error 503"},
		{"svc.nobody", false, false, 0, "no responders"},
		{"svc.silent", false, false, 0, "no reply within 200ms"},
	} {
		res := s.callNATS(t.Context(), &events.NATSTarget{Subject: c.subject, Timeout: events.Duration(200 * time.Millisecond)}, nil, d, 1)
		if res.ok() != c.ok || res.permanent != c.perm || res.status != c.status {
			t.Errorf("%s: ok %v permanent %v status %d (err %v), want %v %v %d", c.subject, res.ok(), res.permanent, res.status, res.err, c.ok, c.perm, c.status)
		}
		if c.errSubstr != "" && (res.err == nil || !strings.Contains(res.err.Error(), c.errSubstr)) {
			t.Errorf("%s: err %v, want it to say %q", c.subject, res.err, c.errSubstr)
		}
	}
}
