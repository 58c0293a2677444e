package events

import (
	"fmt"
	"strings"
)

// Subject roots. Every flyball subject starts with "flyball.".
const (
	SubjectRoot       = "flyball"
	SubjectTasks      = "flyball.task.>"
	SubjectDispatch   = "flyball.dispatch.*"
	SubjectRuns       = "flyball.run.>"
	SubjectDeadLetter = "flyball.deadletter.*"
	SubjectBreakers   = "flyball.breaker.>"
	SubjectRuntime    = "flyball.runtime.>"
)

// MaxIDLength bounds task IDs, breaker keys and runtime names.
const MaxIDLength = 128

// HostKeyPrefix starts the flyball-breakers key of a host-scoped breaker
// (host_ plus the host, one key per host: executor's hostKey, e.g.
// host_api_example_com or host_api_example_com_P8443). No task ID may
// start with it, so a task's own breaker key never names a host's.
const HostKeyPrefix = "host_"

// ValidToken reports whether s can be used as a task ID or any other single
// subject token: 1 to 128 characters from [A-Za-z0-9_-].
func ValidToken(s string) bool {
	if len(s) == 0 || len(s) > MaxIDLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

func tokenError(field, s string) error {
	return &FieldError{Field: field, Rule: fmt.Sprintf("must be 1-%d characters of [A-Za-z0-9_-], got %q", MaxIDLength, truncate(s, 64))}
}

// HeaderBreakerKey is a NATS header on run.succeeded and run.failed
// messages carrying data.breakerKey, so the breaker service can settle the
// common case (a success for a closed breaker) without decoding the event.
const HeaderBreakerKey = "Flyball-Breaker-Key"

// TaskSubject is the subject of a control-plane event: flyball.task.<verb>.<id>.
func TaskSubject(verb Verb, id string) string { return "flyball.task." + string(verb) + "." + id }

// DispatchSubject is the subject of a due run: flyball.dispatch.<id>.
func DispatchSubject(id string) string { return "flyball.dispatch." + id }

// RunSubject is the subject of a run outcome: flyball.run.<outcome>.<id>.
func RunSubject(o Outcome, id string) string { return "flyball.run." + string(o) + "." + id }

// DeadLetterSubject is the subject of a dead-letter entry: flyball.deadletter.<id>.
func DeadLetterSubject(id string) string { return "flyball.deadletter." + id }

// BreakerSubject is the subject of a breaker transition: flyball.breaker.<state>.<key>.
func BreakerSubject(s BreakerState, key string) string {
	return "flyball.breaker." + string(s) + "." + key
}

// RuntimeSubject is the subject of a runtime event: flyball.runtime.<status>.<kind>.<name>.
func RuntimeSubject(s RuntimeStatus, kind, name string) string {
	return "flyball.runtime." + string(s) + "." + kind + "." + name
}

// Family names the kind of subject that ParseSubject recognised.
type Family string

// Subject families.
const (
	FamilyTask       Family = "task"
	FamilyDispatch   Family = "dispatch"
	FamilyRun        Family = "run"
	FamilyDeadLetter Family = "deadletter"
	FamilyBreaker    Family = "breaker"
	FamilyRuntime    Family = "runtime"
)

// Subject is a parsed flyball subject.
type Subject struct {
	Family Family
	// Action is the verb (task), outcome (run), state (breaker) or status
	// (runtime). Empty for dispatch and deadletter.
	Action string
	// ID is the task ID, breaker key or, for runtime subjects, the instance name.
	ID string
	// Kind is the service kind of a runtime subject.
	Kind string
}

// Type is the CloudEvents type of the events published on the subject
// (run.due on a dispatch subject), or "" for an unknown family.
func (s Subject) Type() string {
	switch s.Family {
	case FamilyTask:
		return Verb(s.Action).Type()
	case FamilyDispatch:
		return TypeRunDue
	case FamilyRun:
		return Outcome(s.Action).Type()
	case FamilyDeadLetter:
		return TypeDeadLettered
	case FamilyBreaker:
		return BreakerState(s.Action).Type()
	case FamilyRuntime:
		return RuntimeStatus(s.Action).Type()
	}
	return ""
}

// CheckType reports an event whose type is not the one of the subject it
// was stored on: the type and the subject would say different things
// (a run.failed on flyball.run.succeeded.<id>). The error wraps
// ErrMalformed and names the field "type".
func CheckType(s Subject, e Event) error {
	if t := e.Type(); !s.isType(t) {
		return malformed("type", fmt.Sprintf("must be %q on subject %s, got %q", s.Type(), s, truncate(t, 64)))
	}
	return nil
}

// isType reports whether t is s.Type() without building it: CheckType
// runs on every run event, and the concatenation was an allocation each.
func (s Subject) isType(t string) bool {
	var family string
	switch s.Family {
	case FamilyDispatch:
		return t == TypeRunDue
	case FamilyDeadLetter:
		return t == TypeDeadLettered
	case FamilyTask:
		family = "task."
	case FamilyRun:
		family = "run."
	case FamilyBreaker:
		family = "breaker."
	case FamilyRuntime:
		family = "runtime."
	default:
		return t == ""
	}
	rest, ok := strings.CutPrefix(t, TypePrefix)
	if !ok {
		return false
	}
	rest, ok = strings.CutPrefix(rest, family)
	return ok && rest == s.Action
}

// String rebuilds the subject.
func (s Subject) String() string {
	switch s.Family {
	case FamilyDispatch, FamilyDeadLetter:
		return SubjectRoot + "." + string(s.Family) + "." + s.ID
	case FamilyRuntime:
		return RuntimeSubject(RuntimeStatus(s.Action), s.Kind, s.ID)
	default:
		return SubjectRoot + "." + string(s.Family) + "." + s.Action + "." + s.ID
	}
}

// ParseSubject parses any flyball subject, checking that the action is known
// and that the ID is a valid token.
func ParseSubject(subject string) (Subject, error) {
	parts := strings.Split(subject, ".")
	if len(parts) < 3 || parts[0] != SubjectRoot {
		return Subject{}, fmt.Errorf("subject %q: not a flyball subject", truncate(subject, 200))
	}
	want := map[Family]int{
		FamilyTask: 4, FamilyDispatch: 3, FamilyRun: 4, FamilyDeadLetter: 3,
		FamilyBreaker: 4, FamilyRuntime: 5,
	}
	fam := Family(parts[1])
	n, ok := want[fam]
	if !ok {
		return Subject{}, fmt.Errorf("subject %q: unknown family %q", truncate(subject, 200), truncate(parts[1], 64))
	}
	if len(parts) != n {
		return Subject{}, fmt.Errorf("subject %q: %s subjects have %d tokens, got %d", truncate(subject, 200), fam, n, len(parts))
	}
	s := Subject{Family: fam, ID: parts[n-1]}
	if n >= 4 {
		s.Action = parts[2]
	}
	var known bool
	switch fam {
	case FamilyTask:
		known = Verb(s.Action).Valid()
	case FamilyRun:
		known = Outcome(s.Action).Valid()
	case FamilyBreaker:
		known = BreakerState(s.Action).Valid()
	case FamilyRuntime:
		known = s.Action == string(RuntimeOnline) || s.Action == string(RuntimeOffline)
		s.Kind = parts[3]
		if !ValidToken(s.Kind) {
			return Subject{}, fmt.Errorf("subject %q: %w", truncate(subject, 200), tokenError("kind", s.Kind))
		}
	default:
		known = true
	}
	if !known {
		return Subject{}, fmt.Errorf("subject %q: unknown %s action %q", truncate(subject, 200), fam, truncate(s.Action, 64))
	}
	if !ValidToken(s.ID) {
		return Subject{}, fmt.Errorf("subject %q: %w", truncate(subject, 200), tokenError("id", s.ID))
	}
	return s, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// SanitizeToken turns s into a valid token by replacing every character
// outside [A-Za-z0-9_-] with '_' and cutting it to 128 characters. Host
// names and instance names (which contain dots) go through it before they
// become subject tokens or KV key parts.
func SanitizeToken(s string) string {
	b := []byte(s)
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '-' && c != '_' {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "_"
	}
	return string(b[:min(len(b), MaxIDLength)])
}
