package events

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// DecodeRun decodes the data of a run.* event. It accepts exactly what
// DecodeData accepts, with the same result and errors, but takes a fast
// path for the flat object the executor writes. The governor decodes one
// run per completed run, and encoding/json's strict decoder was half of
// its CPU per outcome.
func DecodeRun(e Event, r *Run) error {
	if ct := e.DataContentType(); (ct == "" || ct == ContentTypeJSON) && fastRun(e.Data(), r) {
		return nil
	}
	return DecodeData(e, r)
}

// fastRun decodes b into r when b is an object whose keys are Run field
// names (exact case, each once) and whose values have the field's JSON
// type. Scalars are converted here; the nested values (request, dispatch,
// trail) and strings with escapes go to encoding/json one value at a time,
// which keeps its exact rules for them. It reports false, leaving r alone,
// for anything else, and the caller then takes the reference path.
func fastRun(b []byte, r *Run) bool {
	var out Run
	var seen uint32
	ok := eachMember(b, func(key, raw []byte) bool {
		bit, ok := out.setField(string(key), raw)
		if !ok || seen&bit != 0 {
			return false // a repeated key: encoding/json's rules decide
		}
		seen |= bit
		return true
	})
	if ok {
		*r = out
	}
	return ok
}

// setField sets the field named key from its raw JSON value and returns the
// field's bit. ok is false for an unknown key or a value that is not the
// field's type (null included: encoding/json's handling of it varies).
func (r *Run) setField(key string, raw []byte) (bit uint32, ok bool) {
	switch key {
	case "dispatchId":
		return 1 << 0, rawString(raw, &r.DispatchID)
	case "taskId":
		return 1 << 1, rawString(raw, &r.TaskID)
	case "scheduledAt":
		return 1 << 2, isQuoted(raw) && r.ScheduledAt.UnmarshalJSON(raw) == nil
	case "attempt":
		return 1 << 3, rawInt(raw, &r.Attempt)
	case "startedAt":
		return 1 << 4, isQuoted(raw) && r.StartedAt.UnmarshalJSON(raw) == nil
	case "finishedAt":
		return 1 << 5, isQuoted(raw) && r.FinishedAt.UnmarshalJSON(raw) == nil
	case "duration":
		return 1 << 6, isQuoted(raw) && r.Duration.UnmarshalJSON(raw) == nil
	case "status":
		return 1 << 7, rawInt(raw, &r.Status)
	case "body":
		return 1 << 8, rawString(raw, &r.Body)
	case "bodyTruncated":
		return 1 << 9, rawBool(raw, &r.BodyTruncated)
	case "fingerprint":
		return 1 << 10, rawString(raw, &r.Fingerprint)
	case "request":
		if raw[0] != '{' {
			return 1 << 11, false
		}
		var rec RequestRecord
		if !fastRequest(raw, &rec) && decodeStrict(raw, &rec) != nil {
			return 1 << 11, false
		}
		r.Request = &rec
		return 1 << 11, true
	case "error":
		return 1 << 12, rawString(raw, &r.Error)
	case "errorKind":
		return 1 << 13, rawString(raw, &r.ErrorKind)
	case "final":
		return 1 << 14, rawBool(raw, &r.Final)
	case "retryIn":
		return 1 << 15, isQuoted(raw) && r.RetryIn.UnmarshalJSON(raw) == nil
	case "reason":
		return 1 << 16, rawString(raw, &r.Reason)
	case "source":
		return 1 << 17, rawString(raw, &r.Source)
	case "trail":
		return 1 << 18, raw[0] == '[' && decodeStrict(raw, &r.Trail) == nil
	case "breakerKey":
		return 1 << 19, rawString(raw, &r.BreakerKey)
	case "dispatch":
		if raw[0] != '{' {
			return 1 << 20, false
		}
		var d Dispatch
		if !fastDispatch(raw, &d) && decodeStrict(raw, &d) != nil {
			return 1 << 20, false
		}
		r.Dispatch = &d
		return 1 << 20, true
	}
	return 0, false
}

// fastRequest decodes a RequestRecord object whose values are strings
// (headers: an object of strings), as the executor writes it. A repeated
// header name keeps its last value, as encoding/json does for maps.
func fastRequest(b []byte, rec *RequestRecord) bool {
	var out RequestRecord
	var seen uint8
	ok := eachMember(b, func(key, raw []byte) bool {
		var bit uint8
		var ok bool
		switch string(key) {
		case "method":
			bit, ok = 1, rawString(raw, &out.Method)
		case "url":
			bit, ok = 2, rawString(raw, &out.URL)
		case "subject":
			bit, ok = 4, rawString(raw, &out.Subject)
		case "headers":
			bit = 8
			if raw[0] != '{' {
				return false
			}
			out.Headers = map[string]string{}
			ok = eachMember(raw, func(name, v []byte) bool {
				var val string
				if !rawString(v, &val) {
					return false
				}
				out.Headers[string(name)] = val
				return true
			})
		}
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	})
	if ok {
		*rec = out
	}
	return ok
}

// eachMember calls f with every key (plain: no escapes, ASCII) and raw
// value of the JSON object that is all of b. It reports false as soon as
// f does, or when b is not such an object.
func eachMember(b []byte, f func(key, raw []byte) bool) bool {
	s := jsonScanner{b: b}
	s.ws()
	if !s.consume('{') {
		return false
	}
	s.ws()
	if s.consume('}') {
		s.ws()
		return s.i == len(b)
	}
	for {
		s.ws()
		key, ok := s.plainString()
		if !ok {
			return false
		}
		s.ws()
		if !s.consume(':') {
			return false
		}
		s.ws()
		start := s.i
		if !s.value(0) || !f(key, b[start:s.i]) {
			return false
		}
		s.ws()
		if s.consume(',') {
			continue
		}
		if !s.consume('}') {
			return false
		}
		s.ws()
		return s.i == len(b)
	}
}

// isQuoted reports a JSON string value (already checked by the scanner).
func isQuoted(raw []byte) bool { return raw[0] == '"' }

// rawString sets *dst from a JSON string value. A string without escapes
// whose bytes are valid UTF-8 is its own content; anything else is left to
// encoding/json (which replaces invalid UTF-8, for one).
func rawString(raw []byte, dst *string) bool {
	if !isQuoted(raw) {
		return false
	}
	if body := raw[1 : len(raw)-1]; bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
		*dst = string(body)
		return true
	}
	return json.Unmarshal(raw, dst) == nil
}

// rawInt sets *dst from a JSON number the way encoding/json fills an int:
// strconv.ParseInt of the literal, so "1.0" and "1e2" are refused.
func rawInt(raw []byte, dst *int) bool {
	n, err := strconv.ParseInt(string(raw), 10, strconv.IntSize)
	if err != nil {
		return false
	}
	*dst = int(n)
	return true
}

func rawBool(raw []byte, dst *bool) bool {
	switch string(raw) {
	case "true":
		*dst = true
	case "false":
		*dst = false
	default:
		return false
	}
	return true
}
