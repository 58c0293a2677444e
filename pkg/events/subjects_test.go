package events_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
)

var (
	allVerbs    = []events.Verb{events.VerbCreated, events.VerbUpdated, events.VerbDeleted, events.VerbPaused, events.VerbResumed, events.VerbHinted, events.VerbRequeued, events.VerbAccepted, events.VerbRejected}
	allOutcomes = []events.Outcome{events.OutcomeStarted, events.OutcomeSucceeded, events.OutcomeFailed, events.OutcomeSkipped, events.OutcomeRecovered}
	allStates   = []events.BreakerState{events.BreakerClosed, events.BreakerOpen, events.BreakerHalfOpen}
)

func TestSubjectRoundTrip(t *testing.T) {
	type tc struct {
		name  string
		given string
		want  events.Subject
	}
	id := "Task_01-x"
	var tests []tc
	for _, v := range allVerbs {
		tests = append(tests, tc{"task " + string(v), events.TaskSubject(v, id), events.Subject{Family: events.FamilyTask, Action: string(v), ID: id}})
	}
	for _, o := range allOutcomes {
		tests = append(tests, tc{"run " + string(o), events.RunSubject(o, id), events.Subject{Family: events.FamilyRun, Action: string(o), ID: id}})
	}
	for _, s := range allStates {
		tests = append(tests, tc{"breaker " + string(s), events.BreakerSubject(s, "api-example-com"), events.Subject{Family: events.FamilyBreaker, Action: string(s), ID: "api-example-com"}})
	}
	for _, s := range []events.RuntimeStatus{events.RuntimeOnline, events.RuntimeOffline} {
		tests = append(tests, tc{"runtime " + string(s), events.RuntimeSubject(s, "timer", "timer-1"), events.Subject{Family: events.FamilyRuntime, Action: string(s), Kind: "timer", ID: "timer-1"}})
	}
	tests = append(tests,
		tc{"dispatch", events.DispatchSubject(id), events.Subject{Family: events.FamilyDispatch, ID: id}},
		tc{"deadletter", events.DeadLetterSubject(id), events.Subject{Family: events.FamilyDeadLetter, ID: id}},
		tc{"longest id", events.DispatchSubject(strings.Repeat("a", 128)), events.Subject{Family: events.FamilyDispatch, ID: strings.Repeat("a", 128)}},
	)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := events.ParseSubject(tt.given)
			if err != nil {
				t.Fatalf("ParseSubject(%q) = %v", tt.given, err)
			}
			if got != tt.want {
				t.Errorf("ParseSubject(%q) = %+v, want %+v", tt.given, got, tt.want)
			}
			if s := got.String(); s != tt.given {
				t.Errorf("String() = %q, want %q", s, tt.given)
			}
		})
	}
}

func TestSubjectBuilders(t *testing.T) {
	tests := []struct{ got, want string }{
		{events.TaskSubject(events.VerbCreated, "a"), "flyball.task.created.a"},
		{events.DispatchSubject("a"), "flyball.dispatch.a"},
		{events.RunSubject(events.OutcomeFailed, "a"), "flyball.run.failed.a"},
		{events.DeadLetterSubject("a"), "flyball.deadletter.a"},
		{events.BreakerSubject(events.BreakerHalfOpen, "k"), "flyball.breaker.half-open.k"},
		{events.RuntimeSubject(events.RuntimeOffline, "executor", "e1"), "flyball.runtime.offline.executor.e1"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
	// Every concrete subject falls under its stream's filter.
	filters := map[string]string{
		"flyball.task.created.a":               events.SubjectTasks,
		"flyball.dispatch.a":                   events.SubjectDispatch,
		"flyball.run.failed.a":                 events.SubjectRuns,
		"flyball.deadletter.a":                 events.SubjectDeadLetter,
		"flyball.breaker.half-open.k":          events.SubjectBreakers,
		"flyball.runtime.offline.executor.e1":  events.SubjectRuntime,
		"flyball.runtime.online.governor.g-01": events.SubjectRuntime,
	}
	for subj, filter := range filters {
		if !subjectMatches(filter, subj) {
			t.Errorf("%q does not match filter %q", subj, filter)
		}
	}
}

// subjectMatches implements NATS wildcard matching, enough for the filters.
func subjectMatches(filter, subject string) bool {
	f, s := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, tok := range f {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) {
			return false
		}
	}
	return len(f) == len(s)
}

func TestParseSubjectRejects(t *testing.T) {
	tests := []struct {
		name  string
		given string
		words []string
	}{
		{"empty", "", []string{"not a flyball subject"}},
		{"root only", "flyball", []string{"not a flyball subject"}},
		{"two tokens", "flyball.task", []string{"not a flyball subject"}},
		{"foreign root", "nats.task.created.a", []string{"not a flyball subject"}},
		{"root case", "Flyball.task.created.a", []string{"not a flyball subject"}},
		{"unknown family", "flyball.job.created.a", []string{`unknown family "job"`}},
		{"family case", "flyball.Task.created.a", []string{"unknown family"}},
		{"task too few tokens", "flyball.task.created", []string{"task subjects have 4 tokens, got 3"}},
		{"task too many tokens", "flyball.task.created.a.b", []string{"task subjects have 4 tokens, got 5"}},
		{"dispatch too many tokens", "flyball.dispatch.a.b", []string{"dispatch subjects have 3 tokens, got 4"}},
		{"deadletter too many tokens", "flyball.deadletter.a.b", []string{"deadletter subjects have 3 tokens"}},
		{"run too few tokens", "flyball.run.a", []string{"run subjects have 4 tokens"}},
		{"breaker too many tokens", "flyball.breaker.open.a.b", []string{"breaker subjects have 4 tokens"}},
		{"runtime too few tokens", "flyball.runtime.online.timer", []string{"runtime subjects have 5 tokens, got 4"}},
		{"runtime too many tokens", "flyball.runtime.online.timer.t.1", []string{"runtime subjects have 5 tokens, got 6"}},
		{"unknown verb", "flyball.task.launched.a", []string{`unknown task action "launched"`}},
		{"verb case", "flyball.task.Created.a", []string{"unknown task action"}},
		{"unknown outcome", "flyball.run.exploded.a", []string{`unknown run action "exploded"`}},
		{"run due is not an outcome", "flyball.run.due.a", []string{"unknown run action"}},
		{"unknown breaker state", "flyball.breaker.ajar.k", []string{`unknown breaker action "ajar"`}},
		{"unknown runtime status", "flyball.runtime.sleeping.timer.t1", []string{`unknown runtime action "sleeping"`}},
		{"runtime kind wildcard", "flyball.runtime.online.*.t1", []string{"kind: must be 1-128 characters"}},
		{"runtime kind empty", "flyball.runtime.online..t1", []string{"kind:"}},
		{"empty action", "flyball.task..a", []string{"unknown task action"}},
		{"wildcard action", "flyball.task.*.a", []string{"unknown task action"}},
		{"id empty", "flyball.task.created.", []string{"id: must be 1-128 characters of [A-Za-z0-9_-]"}},
		{"id star", "flyball.dispatch.*", []string{"id:", `"*"`}},
		{"id gt", "flyball.run.failed.>", []string{"id:", `">"`}},
		{"id with star", "flyball.deadletter.a*b", []string{"id:"}},
		{"id with space", "flyball.task.paused.a b", []string{"id:", `"a b"`}},
		{"id with tab", "flyball.task.paused.a\tb", []string{"id:"}},
		{"id non-ASCII", "flyball.dispatch.tâche", []string{"id:"}},
		{"id of 129 characters", "flyball.dispatch." + strings.Repeat("a", 129), []string{"id:", "…"}},
		{"runtime name invalid", "flyball.runtime.online.timer.t 1", []string{"id:"}},
		{"breaker key invalid", "flyball.breaker.open.a>b", []string{"id:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := events.ParseSubject(tt.given)
			if err == nil {
				t.Fatalf("ParseSubject(%q) = %+v, want an error", tt.given, got)
			}
			if got != (events.Subject{}) {
				t.Errorf("ParseSubject(%q) returned %+v with its error", tt.given, got)
			}
			for _, w := range tt.words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestParseSubjectTruncatesLongInput(t *testing.T) {
	_, err := events.ParseSubject("flyball.job." + strings.Repeat("x", 10000))
	if err == nil || len(err.Error()) > 400 {
		t.Errorf("error of %d bytes, want a short one: %.80v", len(err.Error()), err)
	}
}

func TestValidToken(t *testing.T) {
	tests := []struct {
		given string
		want  bool
	}{
		{"", false},
		{"a", true},
		{"Z", true},
		{"0", true},
		{"-", true},
		{"_", true},
		{"Az09_-", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"a.b", false},
		{".", false},
		{"*", false},
		{">", false},
		{"a*", false},
		{"a>", false},
		{"a b", false},
		{" a", false},
		{"a\t", false},
		{"a\n", false},
		{"a\x00", false},
		{"a/b", false},
		{"a:b", false},
		{"é", false},
		{"ａ", false}, // full-width a
	}
	for _, tt := range tests {
		if got := events.ValidToken(tt.given); got != tt.want {
			t.Errorf("ValidToken(%q) = %v, want %v", tt.given, got, tt.want)
		}
	}
}

func TestTypes(t *testing.T) {
	wantVerb := map[events.Verb]string{
		events.VerbCreated: events.TypeTaskCreated, events.VerbUpdated: events.TypeTaskUpdated,
		events.VerbDeleted: events.TypeTaskDeleted, events.VerbPaused: events.TypeTaskPaused,
		events.VerbResumed: events.TypeTaskResumed, events.VerbHinted: events.TypeTaskHinted,
		events.VerbRequeued: events.TypeTaskRequeued, events.VerbAccepted: events.TypeTaskAccepted,
		events.VerbRejected: events.TypeTaskRejected,
	}
	for _, v := range allVerbs {
		if !v.Valid() || v.Type() != wantVerb[v] {
			t.Errorf("verb %q: Valid=%v Type=%q, want true %q", v, v.Valid(), v.Type(), wantVerb[v])
		}
	}
	if len(events.CommandVerbs) != 7 {
		t.Errorf("CommandVerbs = %v", events.CommandVerbs)
	}
	for _, v := range events.CommandVerbs {
		if !v.Valid() || v == events.VerbAccepted || v == events.VerbRejected {
			t.Errorf("command verb %q", v)
		}
	}
	wantOutcome := map[events.Outcome]string{
		events.OutcomeStarted: events.TypeRunStarted, events.OutcomeSucceeded: events.TypeRunSucceeded,
		events.OutcomeFailed: events.TypeRunFailed, events.OutcomeSkipped: events.TypeRunSkipped,
		events.OutcomeRecovered: events.TypeRunRecovered,
	}
	for _, o := range allOutcomes {
		if !o.Valid() || o.Type() != wantOutcome[o] {
			t.Errorf("outcome %q: Valid=%v Type=%q", o, o.Valid(), o.Type())
		}
	}
	wantState := map[events.BreakerState]string{
		events.BreakerClosed: events.TypeBreakerClosed, events.BreakerOpen: events.TypeBreakerOpen,
		events.BreakerHalfOpen: events.TypeBreakerHalfOpen,
	}
	for _, s := range allStates {
		if !s.Valid() || s.Type() != wantState[s] {
			t.Errorf("breaker state %q: Valid=%v Type=%q", s, s.Valid(), s.Type())
		}
	}
	if events.RuntimeOnline.Type() != events.TypeRuntimeOnline || events.RuntimeOffline.Type() != events.TypeRuntimeOffline {
		t.Error("runtime types")
	}
	if events.Verb("launched").Valid() || events.Outcome("due").Valid() || events.BreakerState("ajar").Valid() || events.Verb("").Valid() {
		t.Error("unknown values must not be valid")
	}
}

// TestSubjectType: each subject of the catalog carries the type the
// catalog names, and CheckType refuses any other.
func TestSubjectType(t *testing.T) {
	for subject, typ := range map[string]string{
		events.TaskSubject(events.VerbCreated, "x"):                         events.TypeTaskCreated,
		events.DispatchSubject("x"):                                         events.TypeRunDue,
		events.RunSubject(events.OutcomeFailed, "x"):                        events.TypeRunFailed,
		events.DeadLetterSubject("x"):                                       events.TypeDeadLettered,
		events.BreakerSubject(events.BreakerHalfOpen, "host_e_com"):         events.TypeBreakerHalfOpen,
		events.RuntimeSubject(events.RuntimeOffline, "executor", "ip-10-0"): events.TypeRuntimeOffline,
	} {
		s, err := events.ParseSubject(subject)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Type(); got != typ {
			t.Fatalf("%s: Type() = %q, want %q", subject, got, typ)
		}
		e, err := events.New(typ, "test", "x", nil, time.Time{}, "ev")
		if err != nil {
			t.Fatal(err)
		}
		if err := events.CheckType(s, e); err != nil {
			t.Fatalf("%s: events.CheckType(%s) = %v", subject, typ, err)
		}
		e.SetType(events.TypeRunSucceeded)
		if err := events.CheckType(s, e); !errors.Is(err, events.ErrMalformed) || events.Reasons(err)[0].Field != "type" {
			t.Fatalf("%s: events.CheckType(%s) = %v, want a malformed type", subject, events.TypeRunSucceeded, err)
		}
	}
}
