package governor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	governor "github.com/flyballhq/flyball/pkg/governor"
)

// A spec update may change what a fingerprint is taken of (the URL, the
// method, maxResponseBytes, a NATS subject): the first run after it was
// compared with the old spec's fingerprint, so an unchanged target read
// as "response changed" (tightening the cadence and waking a dormant
// task), and the unchanged runs counted before the update relaxed it at
// once. The first fingerprint after an update only records, as the first
// one of a new task does.
func TestDecideFirstFingerprintAfterAnUpdateOnlyRecords(t *testing.T) {
	spec := withActivity(changeSpec())
	idleSince := t0.Add(-48 * time.Hour)
	st := stateWith(ran(t0), fingerprint("old-spec"), unchangedRuns(9), lastActivity(idleSince))

	up := governor.Decide(t0.Add(time.Second), spec, st, updated)
	if up.State.LastFingerprint != "" || up.State.UnchangedRuns != 0 {
		t.Fatalf("after the update: lastFingerprint %q, unchangedRuns %d; want both cleared", up.State.LastFingerprint, up.State.UnchangedRuns)
	}

	slot := up.NextRunAt
	d := governor.Decide(slot.Add(50*time.Millisecond), spec, up.State, outcomeFP("succeeded", slot, "new-spec"))
	trail := strings.Join(d.Trail, "\n")
	if strings.Contains(trail, "response changed") {
		t.Fatalf("the first run after an update was taken as a change:\n%s", trail)
	}
	if !d.State.LastActivityAt.Equal(idleSince) {
		t.Fatalf("lastActivityAt %s, want %s kept: an update is not activity of the target", d.State.LastActivityAt, idleSince)
	}
	if d.State.LastFingerprint != "new-spec" {
		t.Fatalf("lastFingerprint %q, want the first fingerprint after the update recorded", d.State.LastFingerprint)
	}
}

// The run in flight when the update came was made under the old spec
// (the URL it called was the old one): its fingerprint, applied after
// the update, became the first "recorded", and the first run under the
// new spec was compared with it and read as a change. It counts for
// nothing now; the first run that started after the update records.
func TestDecideARunInFlightAtAnUpdateDoesNotRecordItsFingerprint(t *testing.T) {
	spec := withActivity(changeSpec())
	idleSince := t0.Add(-48 * time.Hour)
	slot := t0.Add(time.Minute) // in flight: started, its outcome not in yet
	st := stateWith(ran(t0), fingerprint("old-url"), lastActivity(idleSince), planned(slot, governor.SourceBaselineInterval))

	up := governor.Decide(slot.Add(500*time.Millisecond), spec, st, updated)
	old := outcomeFP("succeeded", slot, "old-url")
	old.Outcome.StartedAt = slot.Add(10 * time.Millisecond)
	d := governor.Decide(slot.Add(2*time.Second), spec, up.State, old)
	if d.State.LastFingerprint != "" {
		t.Fatalf("the run started before the update recorded its fingerprint %q; want none recorded", d.State.LastFingerprint)
	}
	if tr := strings.Join(d.Trail, "\n"); !strings.Contains(tr, "the run started before the spec update") || strings.Contains(tr, "first fingerprint recorded") {
		t.Fatalf("the trail does not say why the fingerprint was not used, or says it was recorded:\n%s", strings.Join(d.Trail, "\n"))
	}

	next := outcomeFP("succeeded", d.NextRunAt, "new-url")
	next.Outcome.StartedAt = d.NextRunAt.Add(10 * time.Millisecond)
	d2 := governor.Decide(d.NextRunAt.Add(time.Second), spec, d.State, next)
	trail := strings.Join(d2.Trail, "\n")
	if strings.Contains(trail, "response changed") || !d2.State.LastActivityAt.Equal(idleSince) {
		t.Fatalf("the first run under the new spec was taken as a change (lastActivityAt %s):\n%s", d2.State.LastActivityAt, trail)
	}
	if d2.State.LastFingerprint != "new-url" || !d2.State.FingerprintFrom.IsZero() {
		t.Fatalf("lastFingerprint %q, fingerprintFrom %s; want the new run's recorded and the mark cleared", d2.State.LastFingerprint, d2.State.FingerprintFrom)
	}
}

// observe compares the start the executor reported (reportedStart), not
// runStart's. runStart raises a start to its slot: a run reported as
// started before the update, with its slot after it (a forged start, or
// an executor clock behind), would count as made under the new spec and
// record the old spec's fingerprint.
func TestDecideARunReportedAsStartedBeforeAnUpdateDoesNotRecordItsFingerprintWhateverItsSlot(t *testing.T) {
	spec := withActivity(changeSpec())
	st := stateWith(ran(t0), fingerprint("old-url"))

	up := governor.Decide(t0.Add(time.Second), spec, st, updated)
	from := up.State.FingerprintFrom
	slot := up.NextRunAt
	if from.IsZero() || !slot.After(from.Add(governor.FingerprintMargin)) {
		t.Fatalf("setup: fingerprintFrom %s, next slot %s; want a slot after the update and its margin", from, slot)
	}
	o := outcomeFP("succeeded", slot, "old-url")
	o.Outcome.StartedAt = from.Add(-time.Second) // before its slot and before the update
	d := governor.Decide(slot.Add(2*time.Second), spec, up.State, o)
	if d.State.LastFingerprint != "" || !d.State.FingerprintFrom.Equal(from) {
		t.Fatalf("a run reported as started at %s, before the update of %s, recorded its fingerprint: lastFingerprint %q, fingerprintFrom %s; want none recorded and the mark kept",
			o.Outcome.StartedAt, from, d.State.LastFingerprint, d.State.FingerprintFrom)
	}
	if tr := strings.Join(d.Trail, "\n"); !strings.Contains(tr, "the run started before the spec update") {
		t.Fatalf("the trail does not say why the fingerprint was not used:\n%s", tr)
	}
}

// runStart also lowers a start to now. When this replica's clock is
// behind the executor's, a run reported as started after the update (and
// its margin) would be taken as started at now, before them, and its
// fingerprint dropped. observe takes the reported start as it is.
func TestDecideARunReportedAsStartedAfterAnUpdateRecordsItsFingerprintWhenTheExecutorClockIsAhead(t *testing.T) {
	spec := withActivity(changeSpec())
	slot := t0.Add(time.Minute)
	st := stateWith(ran(t0), fingerprint("old-url"), planned(slot, governor.SourceBaselineInterval))

	up := governor.Decide(slot.Add(100*time.Millisecond), spec, st, updated)
	from := up.State.FingerprintFrom
	now := slot.Add(600 * time.Millisecond) // before the update's margin has passed here
	o := outcomeFP("succeeded", slot, "new-url")
	o.Outcome.StartedAt = slot.Add(3 * time.Second) // after now: the executor's clock is ahead
	if from.IsZero() || !now.Before(from.Add(governor.FingerprintMargin)) || o.Outcome.StartedAt.Before(from.Add(governor.FingerprintMargin)) {
		t.Fatalf("setup: fingerprintFrom %s, now %s, startedAt %s; want now within the update's margin and the start after it", from, now, o.Outcome.StartedAt)
	}
	d := governor.Decide(now, spec, up.State, o)
	if d.State.LastFingerprint != "new-url" || !d.State.FingerprintFrom.IsZero() {
		t.Fatalf("a run reported as started at %s, after the update of %s, decided at %s: lastFingerprint %q, fingerprintFrom %s; want its fingerprint recorded and the mark cleared\n%s",
			o.Outcome.StartedAt, from, now, d.State.LastFingerprint, d.State.FingerprintFrom, strings.Join(d.Trail, "\n"))
	}
}

// An update restarts the adaptive cadence and change detection only when
// it changes what they rest on (docs/governor.md, Adaptive cadence): the
// call (target but its timeout), the baseline, bounds, adaptive, or
// whether fingerprints are kept at all. The same spec applied again, or
// one that changes only labels, job, retry or jitter, restarted them: a
// relaxed task went back to its baseline, and the first run after the
// update only recorded its fingerprint, so a change across it was missed.
// An update whose replaced spec is not known restarts, as before.
func TestDecideUpdateRestartsAdaptiveOnlyWhenItsInputsChange(t *testing.T) {
	base := func() *events.TaskSpec {
		s := withActivity(changeSpec())
		s.Labels = map[string]string{"team": "a"}
		return s
	}
	for _, c := range []struct {
		name     string
		edit     func(*events.TaskSpec)
		unknown  bool // the replaced spec is not known (Input.Replaced nil)
		restarts bool
	}{
		{name: "the same spec", edit: func(*events.TaskSpec) {}},
		{name: "labels only", edit: func(s *events.TaskSpec) { s.Labels = map[string]string{"team": "b"} }},
		{name: "job, jitter, retry, timeout", edit: func(s *events.TaskSpec) {
			s.Job, s.Jitter = "nightly", 0.1
			s.Retry = &events.Retry{MaxAttempts: 2}
			s.Target.HTTP.Timeout = events.Duration(5 * time.Second)
		}},
		{name: "activity thresholds", edit: func(s *events.TaskSpec) { s.Activity.IdleAfter = events.Duration(2 * time.Hour) }},
		{name: "the URL", edit: func(s *events.TaskSpec) { s.Target.HTTP.URL = "https://example.com/other" }, restarts: true},
		{name: "the method", edit: func(s *events.TaskSpec) { s.Target.HTTP.Method = "POST" }, restarts: true},
		{name: "a header", edit: func(s *events.TaskSpec) { s.Target.HTTP.Headers = map[string]string{"Accept": "text/plain"} }, restarts: true},
		{name: "maxResponseBytes", edit: func(s *events.TaskSpec) { s.Target.HTTP.MaxResponseBytes = 10 }, restarts: true},
		{name: "expectStatus", edit: func(s *events.TaskSpec) { s.Target.HTTP.ExpectStatus = []string{"301"} }, restarts: true},
		{name: "a NATS target", edit: func(s *events.TaskSpec) {
			s.Target = events.Target{NATS: &events.NATSTarget{Subject: "svc.status"}}
		}, restarts: true},
		{name: "the baseline", edit: func(s *events.TaskSpec) { s.Schedule.Interval = events.Duration(2 * time.Minute) }, restarts: true},
		{name: "bounds", edit: func(s *events.TaskSpec) { s.Bounds = &events.Bounds{Max: events.Duration(10 * time.Minute)} }, restarts: true},
		{name: "adaptive", edit: func(s *events.TaskSpec) { s.Adaptive.Smoothing = 0.2 }, restarts: true},
		{name: "fingerprints no longer kept", edit: func(s *events.TaskSpec) { s.Adaptive, s.Activity = nil, nil }, restarts: true},
		{name: "the replaced spec not known", edit: func(*events.TaskSpec) {}, unknown: true, restarts: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			old, spec := base(), base()
			c.edit(spec)
			spec.Normalize()
			st := stateWith(ran(t0), fingerprint("seen"), unchangedRuns(2), adaptiveInterval(3*time.Minute))
			in := governor.Input{Kind: governor.KindUpdated, Replaced: old}
			if c.unknown {
				in.Replaced = nil
			}
			d := governor.Decide(t0.Add(time.Second), spec, st, in)
			got := d.State
			kept := got.AdaptiveInterval == 3*time.Minute && got.LastFingerprint == "seen" && got.UnchangedRuns == 2 && got.FingerprintFrom.IsZero()
			restarted := got.AdaptiveInterval == 0 && got.LastFingerprint == "" && got.UnchangedRuns == 0
			if c.restarts && !restarted || !c.restarts && !kept {
				t.Fatalf("restarts %v: adaptive interval %s, last fingerprint %q, unchanged runs %d, fingerprintFrom %s\n%s",
					c.restarts, got.AdaptiveInterval, got.LastFingerprint, got.UnchangedRuns, got.FingerprintFrom, strings.Join(d.Trail, "\n"))
			}
		})
	}
}
