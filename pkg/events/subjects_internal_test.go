package events

import (
	"testing"
	"time"
)

// TestCheckTypeMatchesTypeWithoutAllocating: CheckType's comparison
// agrees with Subject.Type for every family, and costs no allocation for
// a matching event (it runs on every run event).
func TestCheckTypeMatchesTypeWithoutAllocating(t *testing.T) {
	subjects := []string{
		TaskSubject(VerbCreated, "t"), TaskSubject(VerbHinted, "t"), DispatchSubject("t"),
		RunSubject(OutcomeSucceeded, "t"), RunSubject(OutcomeFailed, "t"), RunSubject(OutcomeSkipped, "t"),
		RunSubject(OutcomeRecovered, "t"),
		DeadLetterSubject("t"), BreakerSubject(BreakerOpen, "t"), BreakerSubject(BreakerHalfOpen, "host_x"),
		RuntimeSubject(RuntimeOffline, "executor", "ip-10-0"),
	}
	for _, raw := range subjects {
		s, err := ParseSubject(raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		for _, other := range subjects {
			o, _ := ParseSubject(other)
			if got, want := s.isType(o.Type()), s.Type() == o.Type(); got != want {
				t.Errorf("subject %s, type %q: isType %v, want %v", raw, o.Type(), got, want)
			}
		}
		for _, bad := range []string{"", TypePrefix, TypePrefix + "run.", "x" + s.Type(), s.Type() + "x"} {
			if s.isType(bad) {
				t.Errorf("subject %s: isType(%q) is true", raw, bad)
			}
		}
	}
	s, _ := ParseSubject(RunSubject(OutcomeSucceeded, "t"))
	e, err := New(TypeRunSucceeded, "test", "t", nil, time.Now(), "id")
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = CheckType(s, e) }); n != 0 {
		t.Errorf("CheckType of a matching run event: %v allocations, want 0", n)
	}
}
