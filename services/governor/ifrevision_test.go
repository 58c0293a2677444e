package governor

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// updateIf is a task.updated's data: spec, with ifRevision rev.
func updateIf(t *testing.T, spec *events.TaskSpec, rev uint64) map[string]any {
	t.Helper()
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	m["ifRevision"] = rev
	return m
}

// TestAnUpdateWithIfRevisionAppliesOnlyToThatRevision: task.updated
// replaced the spec whatever it was, so two clients that each read,
// changed and wrote back a task lost one change. An update may name the
// revision it replaces (ifRevision, the API's If-Match): applied when the
// stored spec is still that revision, rejected naming ifRevision when it
// is not. Without ifRevision an update applies as before.
func TestAnUpdateWithIfRevisionAppliesOnlyToThatRevision(t *testing.T) {
	s, js := startGovernor(t)
	command(t, js, events.VerbCreated, events.TypeTaskCreated, "web", "create-web", *minuteSpec("web"))
	revision := func() uint64 { return specRevisionOf(t, s, "web") }
	read := revision()
	first := minuteSpec("web")
	first.Job = "first"
	command(t, js, events.VerbUpdated, events.TypeTaskUpdated, "web", "update-1", updateIf(t, first, read))
	if st, _, _, err := s.readState(t.Context(), "web"); err != nil || st.LastCommandID != "update-1" {
		t.Fatalf("an update naming the stored revision %d: state %+v, %v; want it applied (update-1)", read, st, err)
	}
	second := minuteSpec("web")
	second.Job = "second"
	command(t, js, events.VerbUpdated, events.TypeTaskUpdated, "web", "update-2", updateIf(t, second, read))
	reasons := lastRejection(t, js, "web")
	if len(reasons) != 1 || reasons[0].Field != "ifRevision" || !strings.Contains(reasons[0].Rule, "revision") {
		t.Fatalf("an update naming a replaced revision: rejected with %+v, want field ifRevision naming the revisions", reasons)
	}
	spec, err := s.loadSpec(t.Context(), "web")
	if err != nil || spec.Job != "first" {
		t.Fatalf("after the stale update: spec %+v, %v; want the first update's", spec, err)
	}
	command(t, js, events.VerbUpdated, events.TypeTaskUpdated, "web", "update-3", *second)
	if spec, err := s.loadSpec(t.Context(), "web"); err != nil || spec.Job != "second" {
		t.Fatalf("an update without ifRevision: spec %+v, %v; want it applied", spec, err)
	}
}

// TestAConditionalUpdateTriedAgainAfterItsSpecWriteIsApplied: an update
// with ifRevision whose schedule write failed after its spec write is
// tried again, and the try found the spec at the revision its own write
// made: it was rejected (the API's 412) while its spec stayed stored, and
// the schedule was never decided with it (a daily task moved to every
// minute kept its slot a day out).
func TestAConditionalUpdateTriedAgainAfterItsSpecWriteIsApplied(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	js := &failingScheduleReads{JetStream: srv.JS, key: "web"}
	s := runGovernorWith(t, Config{JS: js})
	daily := minuteSpec("web")
	daily.Schedule.Interval = events.Duration(24 * time.Hour)
	command(t, srv.JS, events.VerbCreated, events.TypeTaskCreated, "web", "create-web", *daily)
	e, err := s.tasks.Get(t.Context(), "web")
	if err != nil {
		t.Fatal(err)
	}
	js.failUpdate.Store(true)
	command(t, srv.JS, events.VerbUpdated, events.TypeTaskUpdated, "web", "update-1", updateIf(t, minuteSpec("web"), e.Revision()))
	if !js.updateFailed.Load() {
		t.Fatal("the schedule write of update-1 did not fail: the test proves nothing")
	}
	tasks, err := srv.JS.Stream(t.Context(), streams.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := tasks.GetLastMsgForSubject(t.Context(), events.TaskSubject(events.VerbRejected, "web")); err == nil {
		t.Fatalf("update-1, tried again after its spec write: rejected (%s), want it applied", m.Data)
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatal(err)
	}
	st, _, _, err := s.readState(t.Context(), "web")
	if err != nil || st.LastCommandID != "update-1" {
		t.Fatalf("after update-1: state %+v, %v; want it decided with the update (lastCommandId update-1)", st, err)
	}
	if spec, err := s.loadSpec(t.Context(), "web"); err != nil || spec.Schedule.Interval.D() != time.Minute {
		t.Fatalf("after update-1: spec %+v, %v; want the 1m interval", spec, err)
	}
	// The try found its own write and kept it: the answer names the
	// revision of that write (the next of the bucket, which nothing else
	// writes here), as the first try's would have.
	written := e.Revision() + 1
	now, err := s.tasks.Get(t.Context(), "web")
	if err != nil {
		t.Fatal(err)
	}
	if now.Revision() != written {
		t.Fatalf("after update-1 tried again: spec at revision %d, want the revision of its first write, %d", now.Revision(), written)
	}
	var acc events.TaskAccepted
	natstest.LastData(t, srv.JS, streams.StreamTasks, events.TaskSubject(events.VerbAccepted, "web"), &acc)
	if acc.CommandID != "update-1" || acc.SpecRevision != written {
		t.Fatalf("update-1 tried again: accepted %s with specRevision %d, want update-1 at %d", acc.CommandID, acc.SpecRevision, written)
	}
}

// TestACreationTriedAgainAfterItsSpecWriteKeepsTheSpecRevision: a
// task.created whose schedule write failed after its spec write is tried
// again, and so is one delivered again after it was applied (its ack
// lost, a crash before the ack). Each try wrote the same spec again at a
// new flyball-tasks revision, so a client holding the revision of the
// first write (the ETag of GET, the answer's specRevision) had its
// If-Match refused as stale though nothing had changed. The spec written
// first is kept, and the answer names its revision.
func TestACreationTriedAgainAfterItsSpecWriteKeepsTheSpecRevision(t *testing.T) {
	srv := natstest.StartWithStreams(t)
	js := &failingScheduleReads{JetStream: srv.JS, key: "web"}
	s := runGovernorWith(t, Config{JS: js})
	// The bucket's next revision is the creation's spec write: nothing
	// else writes flyball-tasks here.
	bucket, err := srv.JS.Stream(t.Context(), "KV_"+streams.BucketTasks)
	if err != nil {
		t.Fatal(err)
	}
	info, err := bucket.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	written := info.State.LastSeq + 1
	js.failCreate.Store(true)
	command(t, srv.JS, events.VerbCreated, events.TypeTaskCreated, "web", "create-web", *minuteSpec("web"))
	if !js.createFailed.Load() {
		t.Fatal("the schedule write of create-web did not fail: the test proves nothing")
	}
	if now := specRevisionOf(t, s, "web"); now != written {
		t.Fatalf("create-web tried again after its spec write: flyball-tasks at revision %d, want %d, the revision of its first write, kept", now, written)
	}
	var acc events.TaskAccepted
	natstest.LastData(t, srv.JS, streams.StreamTasks, events.TaskSubject(events.VerbAccepted, "web"), &acc)
	if acc.CommandID != "create-web" || acc.SpecRevision != written {
		t.Fatalf("create-web tried again: accepted %s with specRevision %d, want create-web at %d", acc.CommandID, acc.SpecRevision, written)
	}
	st, _, _, err := s.readState(t.Context(), "web")
	if err != nil || st.LastCommandID != "create-web" || st.SpecRevision != written {
		t.Fatalf("after create-web: state %+v, %v; want it decided (create-web) at specRevision %d", st, err, written)
	}

	// Delivered again once applied: its answer is dropped as a duplicate
	// of the first (TASKS's duplicate window), so the revision is all a
	// client sees change.
	s.handleCommand(t.Context(), redeliver(t, srv.JS, streams.StreamTasks, events.TaskSubject(events.VerbCreated, "web")))
	if now := specRevisionOf(t, s, "web"); now != written {
		t.Fatalf("create-web delivered again after it was applied: flyball-tasks at revision %d, want %d kept", now, written)
	}
	// A conditional update on the revision the first answer named applies.
	changed := minuteSpec("web")
	changed.Job = "changed"
	command(t, srv.JS, events.VerbUpdated, events.TypeTaskUpdated, "web", "update-1", updateIf(t, changed, acc.SpecRevision))
	if spec, err := s.loadSpec(t.Context(), "web"); err != nil || spec.Job != "changed" {
		t.Fatalf("an update naming revision %d, the creation's answer's: spec %+v, %v; want it applied", acc.SpecRevision, spec, err)
	}
}

// TestADeleteWithIfRevisionAppliesOnlyToThatRevision: task.deleted took
// no precondition, so the API's DELETE with If-Match deleted a task
// updated since it was read. A delete may name the revision it was
// decided on (ifRevision): rejected naming ifRevision, the task kept,
// when the stored spec is at another; applied at that revision. A delete
// of a task already gone applies whatever it names: no change is lost.
func TestADeleteWithIfRevisionAppliesOnlyToThatRevision(t *testing.T) {
	s, js := startGovernor(t)
	command(t, js, events.VerbCreated, events.TypeTaskCreated, "web", "create-web", *minuteSpec("web"))
	revision := func() uint64 { return specRevisionOf(t, s, "web") }
	read := revision()
	moved := minuteSpec("web")
	moved.Job = "moved"
	command(t, js, events.VerbUpdated, events.TypeTaskUpdated, "web", "update-1", *moved)
	command(t, js, events.VerbDeleted, events.TypeTaskDeleted, "web", "delete-1", events.TaskDelete{TaskRef: events.TaskRef{ID: "web"}, IfRevision: read})
	reasons := lastRejection(t, js, "web")
	if len(reasons) != 1 || reasons[0].Field != "ifRevision" || !strings.HasPrefix(reasons[0].Rule, events.StaleRevision) {
		t.Fatalf("a delete naming a replaced revision: rejected with %+v, want field ifRevision, a stale revision", reasons)
	}
	// The rejection names the revision the spec is at, for the next try.
	var rej events.TaskRejected
	natstest.LastData(t, js, streams.StreamTasks, events.TaskSubject(events.VerbRejected, "web"), &rej)
	if now := revision(); !rej.Stale() || rej.SpecRevision != now {
		t.Fatalf("the stale delete's task.rejected: stale %v, specRevision %d; want the stored spec's %d", rej.Stale(), rej.SpecRevision, now)
	}
	if spec, err := s.loadSpec(t.Context(), "web"); err != nil || spec.Job != "moved" {
		t.Fatalf("after the stale delete: spec %+v, %v; want the task kept", spec, err)
	}
	command(t, js, events.VerbDeleted, events.TypeTaskDeleted, "web", "delete-2", events.TaskDelete{TaskRef: events.TaskRef{ID: "web"}, IfRevision: revision()})
	if _, err := s.tasks.Get(t.Context(), "web"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("a delete naming the stored revision: spec read %v, want it deleted", err)
	}
	command(t, js, events.VerbDeleted, events.TypeTaskDeleted, "web", "delete-3", events.TaskDelete{TaskRef: events.TaskRef{ID: "web"}, IfRevision: read})
	if _, cmds := answers(t, js, "web"); len(cmds) == 0 || cmds[len(cmds)-1] != "delete-3" {
		t.Fatalf("a conditional delete of a task already gone: accepted %v, want delete-3 last", cmds)
	}
}

// TestAnIdenticalUpdateKeepsTheSpecRevision: an update whose spec is the
// one stored (an operator applying the same file again, a retried
// command) wrote it again, and the new flyball-tasks revision made every
// other client's If-Match on the revision it had read fail as stale,
// though nothing had changed. It is accepted at the stored revision
// now, without a write: a conditional update at that revision still
// applies, and a changed update still moves the revision on.
func TestAnIdenticalUpdateKeepsTheSpecRevision(t *testing.T) {
	s, js := startGovernor(t)
	command(t, js, events.VerbCreated, events.TypeTaskCreated, "web", "create-web", *minuteSpec("web"))
	revision := func() uint64 { return specRevisionOf(t, s, "web") }
	accepted := func() events.TaskAccepted {
		var acc events.TaskAccepted
		natstest.LastData(t, js, streams.StreamTasks, events.TaskSubject(events.VerbAccepted, "web"), &acc)
		return acc
	}
	read := revision()
	command(t, js, events.VerbUpdated, events.TypeTaskUpdated, "web", "same-1", *minuteSpec("web"))
	if now := revision(); now != read {
		t.Fatalf("an update with the stored spec: flyball-tasks at revision %d, want %d kept", now, read)
	}
	if acc := accepted(); acc.CommandID != "same-1" || acc.SpecRevision != read {
		t.Fatalf("an update with the stored spec: accepted %s with specRevision %d, want same-1 at %d", acc.CommandID, acc.SpecRevision, read)
	}
	if st, _, _, err := s.readState(t.Context(), "web"); err != nil || st.LastCommandID != "same-1" || st.SpecRevision != read {
		t.Fatalf("after the identical update: state %+v, %v; want it decided (same-1) at specRevision %d", st, err, read)
	}
	// Another client's conditional update on the revision it read before.
	changed := minuteSpec("web")
	changed.Job = "changed"
	command(t, js, events.VerbUpdated, events.TypeTaskUpdated, "web", "update-1", updateIf(t, changed, read))
	if spec, err := s.loadSpec(t.Context(), "web"); err != nil || spec.Job != "changed" {
		t.Fatalf("an update naming revision %d after an identical update: spec %+v, %v; want it applied", read, spec, err)
	}
	moved := revision()
	if moved <= read {
		t.Fatalf("a changed update: flyball-tasks at revision %d, want past %d", moved, read)
	}
	if acc := accepted(); acc.CommandID != "update-1" || acc.SpecRevision != moved {
		t.Fatalf("a changed update: accepted %s with specRevision %d, want update-1 at %d", acc.CommandID, acc.SpecRevision, moved)
	}
	// The same spec again naming the replaced revision: it changes
	// nothing, so it loses nothing, and is accepted at the stored one
	// (as the same command tried again after its own write is).
	command(t, js, events.VerbUpdated, events.TypeTaskUpdated, "web", "same-2", updateIf(t, changed, read))
	if now := revision(); now != moved {
		t.Fatalf("an identical update naming a replaced revision: flyball-tasks at revision %d, want %d kept", now, moved)
	}
	if acc := accepted(); acc.CommandID != "same-2" || acc.SpecRevision != moved {
		t.Fatalf("an identical update naming a replaced revision: accepted %s with specRevision %d, want same-2 at %d", acc.CommandID, acc.SpecRevision, moved)
	}
}

// specRevisionOf is the flyball-tasks revision of task id's stored spec.
func specRevisionOf(t *testing.T, s *Service, id string) uint64 {
	t.Helper()
	e, err := s.tasks.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return e.Revision()
}
