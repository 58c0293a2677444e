package events

import (
	"errors"
	"strconv"
	"strings"
)

// ErrMalformed is wrapped by every error that Decode and DecodeData return,
// so callers can tell bad input (terminate and count) from other failures.
var ErrMalformed = errors.New("malformed event")

// FieldError names one field of an event or task spec and the rule it broke.
// Field is a dotted JSON path ("schedule.interval", "target.http.url"); an
// empty Field means the problem concerns the whole document.
type FieldError struct {
	Field string `json:"field,omitempty"`
	Rule  string `json:"reason"`
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Rule
	}
	return e.Field + ": " + e.Rule
}

// ValidationError holds every problem found in one document.
type ValidationError struct {
	Errors []FieldError
}

func (e *ValidationError) Error() string {
	msgs := make([]string, len(e.Errors))
	for i := range e.Errors {
		msgs[i] = e.Errors[i].Error()
	}
	return strings.Join(msgs, "; ")
}

// Unwrap lets errors.Is(err, ErrMalformed) match validation errors too.
func (e *ValidationError) Unwrap() error { return ErrMalformed }

// Reasons returns the field errors of err: all of them for a
// *ValidationError, the one for a *FieldError, and otherwise a single
// whole-document reason with err's text.
func Reasons(err error) []FieldError {
	if err == nil {
		return nil
	}
	var ve *ValidationError
	if errors.As(err, &ve) {
		return append([]FieldError(nil), ve.Errors...)
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return []FieldError{*fe}
	}
	return []FieldError{{Rule: err.Error()}}
}

// MaxReasons bounds the problems one ValidationError lists; a last,
// whole-document reason counts the rest ("and 199900 more problems"). A
// document can break a rule many times in little space (each entry "x"
// of a long expectStatus list), and the task.rejected answer listing
// them must still fit in a NATS message.
const MaxReasons = 100

// collector accumulates field errors under a path prefix.
type collector struct {
	errs []FieldError
	more int // problems beyond MaxReasons
	// stored checks a spec already stored (TaskSpec.ValidateStored): the
	// rules for new specs only are left out.
	stored bool
}

func (c *collector) add(field, rule string) {
	if len(c.errs) >= MaxReasons {
		c.more++
		return
	}
	c.errs = append(c.errs, FieldError{Field: field, Rule: rule})
}

func (c *collector) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	if c.more > 0 {
		return &ValidationError{Errors: append(c.errs, FieldError{Rule: "and " + strconv.Itoa(c.more) + " more problems"})}
	}
	return &ValidationError{Errors: c.errs}
}
