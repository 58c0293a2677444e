package control

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/flyballhq/flyball/pkg/events"
)

// DecodeJSON decodes one JSON document strictly into v, the way the
// governor decodes command data: unknown fields and wrongly typed values
// are refused, and errors are *events.ValidationError naming the field
// ("schedule.interval: wrong type: got number, want a duration string").
// Bytes that are not UTF-8 are refused too, naming the field (the
// strict decoder checks them), where encoding/json would replace them.
// The HTTP API decodes request bodies and the CLI decodes task files with
// it, so a file that passes here is not rejected later for its shape.
func DecodeJSON(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return &events.ValidationError{Errors: []events.FieldError{{Rule: "empty document: want a JSON object"}}}
	}
	if !json.Valid(data) {
		var probe any
		err := json.Unmarshal(data, &probe)
		return &events.ValidationError{Errors: []events.FieldError{{Rule: "not valid JSON: " + strings.TrimPrefix(err.Error(), "json: ")}}}
	}
	e := event.New()
	e.SetDataContentType(events.ContentTypeJSON)
	e.DataEncoded = data
	err := events.DecodeData(e, v)
	if err == nil {
		return nil
	}
	// DecodeData names the whole document "data"; here it is the document.
	reasons := events.Reasons(err)
	for i := range reasons {
		if reasons[i].Field == "data" {
			reasons[i].Field = ""
		}
	}
	return &events.ValidationError{Errors: reasons}
}

// DecodeSpec decodes and validates a task spec, returning the problems as
// an *events.ValidationError: every unknown or repeated field and value of
// the wrong type at once, and once the spec decodes, every rule it breaks.
// The spec is not normalized: the governor stores the defaults in force.
func DecodeSpec(data []byte) (events.TaskSpec, error) {
	var spec events.TaskSpec
	if err := DecodeJSON(data, &spec); err != nil {
		return events.TaskSpec{}, err
	}
	if err := spec.Validate(); err != nil {
		return events.TaskSpec{}, err
	}
	return spec, nil
}

// MaxHintTTL bounds a hint's lifetime.
const MaxHintTTL = 7 * 24 * time.Hour

// ValidateHint checks a task.hinted command before it is sent, with the
// governor's rules: an interval, a one-shot time, or both; an interval of
// at least 1s; a one-shot time in years 1-9999 (UTC); a TTL in [0, 168h]
// (0 takes the default); a reason of at most events.MaxReasonBytes.
func ValidateHint(h *events.TaskHint) error {
	var errs []events.FieldError
	add := func(field, rule string) { errs = append(errs, events.FieldError{Field: field, Rule: rule}) }
	if h.Interval == 0 && h.At == nil {
		add("interval", "a hint needs interval, at, or both")
	}
	if h.Interval != 0 && (h.Interval.D() < events.MinInterval || h.Interval.D() > events.MaxInterval) {
		add("interval", fmt.Sprintf("must be in [%s, %s], got %s", events.MinInterval, events.MaxInterval, h.Interval))
	}
	if h.At != nil && !events.TimeInRange(*h.At) {
		add("at", events.TimeRangeRule(*h.At))
	}
	if h.TTL < 0 || h.TTL.D() > MaxHintTTL {
		add("ttl", fmt.Sprintf("must be in [0, %s] (0 takes the default), got %s", MaxHintTTL, h.TTL))
	}
	if h.ID != "" && !events.ValidToken(h.ID) {
		add("id", fmt.Sprintf("must be 1-%d characters of [A-Za-z0-9_-]", events.MaxIDLength))
	}
	if len(h.Reason) > events.MaxReasonBytes {
		add("reason", reasonRule(h.Reason))
	}
	if len(errs) > 0 {
		return &events.ValidationError{Errors: errs}
	}
	return nil
}

// ValidatePause checks a task.paused command with the governor's rules: a
// reason of at most events.MaxReasonBytes and an until in years 1-9999
// (UTC). Whether until lies in the future is the sender's business: the
// governor ends a pause whose until has passed at once.
func ValidatePause(p *events.TaskPause) error {
	var errs []events.FieldError
	if p.Until != nil && !events.TimeInRange(*p.Until) {
		errs = append(errs, events.FieldError{Field: "until", Rule: events.TimeRangeRule(*p.Until)})
	}
	if len(p.Reason) > events.MaxReasonBytes {
		errs = append(errs, events.FieldError{Field: "reason", Rule: reasonRule(p.Reason)})
	}
	if len(errs) > 0 {
		return &events.ValidationError{Errors: errs}
	}
	return nil
}

// ValidateReason checks the reason of a task.deleted, task.resumed or
// task.requeued command with the governor's rule: at most
// events.MaxReasonBytes, as for a pause or a hint. The command stays in
// TASKS as history, where a reason without a bound could take up a whole
// NATS payload.
func ValidateReason(reason string) error {
	if len(reason) > events.MaxReasonBytes {
		return &events.ValidationError{Errors: []events.FieldError{{Field: "reason", Rule: reasonRule(reason)}}}
	}
	return nil
}

func reasonRule(reason string) string {
	return fmt.Sprintf("must be at most %d bytes, got %d", events.MaxReasonBytes, len(reason))
}

// RunNow is the task.hinted data of "run now": a one-shot hint valid for
// ttl (0 takes the governor's default), with reason "run-now" unless one
// is given. Its at is the zero time, which the governor takes as the time
// TASKS stored the command, on the NATS server's clock: the sender's
// clock, which may be off from it, was compared with the server's, and a
// sender ahead by Δ ran the task Δ late, or had it rejected as never
// running with a ttl of Δ or less.
func RunNow(id string, ttl time.Duration, reason string) events.TaskHint {
	var at time.Time
	if reason == "" {
		reason = "run-now"
	}
	return events.TaskHint{ID: id, At: &at, TTL: events.Duration(ttl), Reason: reason}
}
