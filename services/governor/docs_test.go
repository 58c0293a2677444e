package governor

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/docexamples"
)

// The docs every user copies from: each `nats pub` command in them must be
// a command the governor applies, and each marked JSON example of the
// event catalog must decode with the decoder of its kind.
var (
	pubDocs     = []string{"README.md", "docs/events.md", "docs/operations.md", "docs/architecture.md", "docs/governor.md", "docs/security.md"}
	catalogDocs = []string{"docs/events.md"}
)

// Kinds checked by another package's test, where their types live.
var kindsCheckedElsewhere = map[string]string{
	"BreakerRecord": "services/executor",
	"Attempt":       "services/executor",
	"ProbeClaim":    "services/executor",
}

func docBlocks(t *testing.T, files []string) []docexamples.Block {
	t.Helper()
	root := docexamples.Root(t)
	all, err := docexamples.BlocksOf(root, files...)
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// TestDocsPubCommandsAreApplied: every `nats pub flyball.task...` in the
// docs is translated by the governor without a rejection, and names the
// task its subject names.
func TestDocsPubCommandsAreApplied(t *testing.T) {
	t.Parallel()
	pubs, err := docexamples.Pubs(docBlocks(t, pubDocs))
	if err != nil {
		t.Fatal(err)
	}
	if len(pubs) < 10 {
		t.Fatalf("found %d nats pub examples, want at least 10: is the parser still finding them?", len(pubs))
	}
	for _, p := range pubs {
		if !strings.HasPrefix(p.Subject, "flyball.task.") {
			t.Errorf("%s: nats pub to %s: only task commands are expected in the docs", p.Block.Where(), p.Subject)
			continue
		}
		step, err := Translate(p.Subject, p.Header, p.Body, time.Now())
		if err != nil {
			t.Errorf("%s: nats pub %s: %v", p.Block.Where(), p.Subject, err)
			continue
		}
		subj, _ := events.ParseSubject(p.Subject)
		if step.TaskID != subj.ID || step.CommandType != events.Verb(subj.Action).Type() {
			t.Errorf("%s: nats pub %s: translated to task %q type %q", p.Block.Where(), p.Subject, step.TaskID, step.CommandType)
		}
	}
}

// TestDocsCatalogExamplesDecode: every JSON example of the event catalog
// carries a <!-- check:Kind --> marker and decodes with that kind's decoder.
func TestDocsCatalogExamplesDecode(t *testing.T) {
	t.Parallel()
	checked := 0
	for _, b := range docBlocks(t, catalogDocs) {
		if b.Lang != "json" {
			continue
		}
		if b.Kind == "" {
			t.Errorf("%s: JSON example without a <!-- check:Kind --> marker", b.Where())
			continue
		}
		if _, ok := kindsCheckedElsewhere[b.Kind]; ok {
			continue
		}
		check, ok := exampleChecks[b.Kind]
		if !ok {
			t.Errorf("%s: unknown marker kind %q", b.Where(), b.Kind)
			continue
		}
		if err := check([]byte(b.Body)); err != nil {
			t.Errorf("%s: %s example: %v", b.Where(), b.Kind, err)
		}
		checked++
	}
	if checked < 20 {
		t.Fatalf("checked %d examples, want at least 20: is the parser still finding them?", checked)
	}
}

var docsAt = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

var exampleChecks = map[string]func([]byte) error{
	"event": checkEvent,
	"TaskSpec": func(b []byte) error {
		return checkCommandData(events.VerbCreated, b)
	},
	"TaskUpdate":  func(b []byte) error { return checkCommandData(events.VerbUpdated, b) },
	"TaskRef":     func(b []byte) error { return checkCommandData(events.VerbResumed, b) },
	"TaskDelete":  func(b []byte) error { return checkCommandData(events.VerbDeleted, b) },
	"TaskPause":   func(b []byte) error { return checkCommandData(events.VerbPaused, b) },
	"TaskHint":    func(b []byte) error { return checkCommandData(events.VerbHinted, b) },
	"TaskRequeue": func(b []byte) error { return checkCommandData(events.VerbRequeued, b) },
	"TaskRejected": func(b []byte) error {
		return docexamples.DecodeStrict(b, &events.TaskRejected{})
	},
	"Run": func(b []byte) error {
		e, err := envelope(events.OutcomeFailed.Type(), "", b)
		if err != nil {
			return err
		}
		var r events.Run
		return events.DecodeRun(e, &r)
	},
	"State": checkState,
	"StoredSpec": func(b []byte) error {
		var stored gov.StoredSpec
		if err := docexamples.DecodeStrict(b, &stored); err != nil {
			return err
		}
		if stored.TaskSpec == nil || stored.CreatedAt.IsZero() {
			return errors.New("a stored spec needs the spec's fields and createdAt")
		}
		return stored.Validate()
	},
	"Pause": func(b []byte) error { return docexamples.DecodeStrict(b, &pauseHint{}) },
}

// checkEvent decodes a whole CloudEvent with the decoder of its type, and
// gives commands to the governor on the subject they would be published on.
func checkEvent(b []byte) error {
	e, err := events.Decode(nil, b)
	if err != nil {
		return err
	}
	typ := e.Type()
	switch {
	case typ == events.TypeTaskAccepted:
		return events.DecodeData(e, &events.TaskAccepted{})
	case typ == events.TypeTaskRejected:
		return events.DecodeData(e, &events.TaskRejected{})
	case strings.HasPrefix(typ, events.TypePrefix+"task."):
		verb := events.Verb(strings.TrimPrefix(typ, events.TypePrefix+"task."))
		_, err := Translate(events.TaskSubject(verb, e.Subject()), nil, b, docsAt)
		return err
	case typ == events.TypeRunDue:
		return events.DecodeDispatch(e, &events.Dispatch{})
	case strings.HasPrefix(typ, events.TypePrefix+"run."):
		if err := events.DecodeRun(e, &events.Run{}); err != nil {
			return err
		}
		// Stored when it was published: a run ends after its slot.
		at := docsAt
		if !e.Time().IsZero() {
			at = e.Time()
		}
		_, err := Translate(events.RunSubject(events.Outcome(strings.TrimPrefix(typ, events.TypePrefix+"run.")), e.Subject()), nil, b, at)
		if errors.Is(err, ErrNoEffect) {
			err = nil
		}
		return err
	case typ == events.TypeDeadLettered:
		_, err := Translate(events.DeadLetterSubject(e.Subject()), nil, b, docsAt)
		return err
	case strings.HasPrefix(typ, events.TypePrefix+"breaker."):
		var tr events.BreakerTransition
		if err := events.DecodeData(e, &tr); err != nil {
			return err
		}
		_, err := Translate(events.BreakerSubject(tr.To, e.Subject()), nil, b, docsAt)
		if errors.Is(err, ErrNoEffect) {
			err = nil
		}
		return err
	case strings.HasPrefix(typ, events.TypePrefix+"runtime."):
		return events.DecodeData(e, &events.Heartbeat{})
	}
	return errors.New("no check for event type " + typ)
}

// checkCommandData publishes b as the data of a verb command for the task
// its "id" names, through the governor's translation.
func checkCommandData(verb events.Verb, b []byte) error {
	var ref struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		return err
	}
	if ref.ID == "" {
		return errors.New(`the example sets no "id" (the check needs it to pick the subject)`)
	}
	msg, err := events.Marshal(verb.Type(), "docs", ref.ID, json.RawMessage(b), docsAt, "docs-example")
	if err != nil {
		return err
	}
	_, err = Translate(events.TaskSubject(verb, ref.ID), nil, msg, docsAt)
	return err
}

// checkState decodes a flyball-schedules value strictly, and checks that
// the governor's own encoder writes it back with nothing lost.
func checkState(b []byte) error {
	var s gov.State
	if err := docexamples.DecodeStrict(b, &s); err != nil {
		return err
	}
	out, err := s.AppendJSON(nil)
	if err != nil {
		return err
	}
	var again gov.State
	if err := docexamples.DecodeStrict(out, &again); err != nil {
		return err
	}
	if !reflect.DeepEqual(s, again) {
		return errors.New("the state does not survive AppendJSON: " + string(out))
	}
	return nil
}

func envelope(typ, subject string, data []byte) (events.Event, error) {
	msg, err := events.Marshal(typ, "docs", subject, json.RawMessage(data), docsAt, "docs-example")
	if err != nil {
		return events.Event{}, err
	}
	return events.Decode(nil, msg)
}
