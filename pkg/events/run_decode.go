package events

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// DecodeRun decodes the data of a run.* event. It accepts exactly what
// DecodeData accepts, with the same result and errors, but takes a fast
// path for the flat object the executor writes. The governor decodes one
// run per completed run, and encoding/json's strict decoder was half of
// its CPU per outcome.
func DecodeRun(e Event, r *Run) error {
	if fastPathApplies(e) && fastRun(e.Data(), r) {
		return nil
	}
	return decodeRunSlow(e, r)
}

// decodeRunSlow is DecodeRun's reference path, apart so that only it
// moves a Run to the heap: handing r itself to DecodeData (an any) made
// every caller's Run escape, one 352-byte allocation per decoded run on
// the fast path too. Like the fast path, it replaces *r.
func decodeRunSlow(e Event, r *Run) error {
	var slow Run
	err := DecodeData(e, &slow)
	*r = slow
	return err
}

// fastPathApplies reports data the fast paths may read: JSON, stated or
// implied. Anything else goes to DecodeData, which has the exact rules.
func fastPathApplies(e Event) bool {
	ct := e.DataContentType()
	return ct == "" || ct == ContentTypeJSON
}

// Each fast path below decodes one payload type when its data is an object
// whose keys are the type's field names (exact case, each once) and whose
// values setField accepts; it reports false, leaving the destination
// alone, for anything else, and the caller then takes the reference path.
// setField sets the field named key from its raw JSON value and returns
// the field's bit, with ok false for an unknown key or a value that is not
// the field's JSON type (null included: encoding/json's handling of it
// varies). The loops are written out per type: a generic loop calls
// setField through a dictionary and a loop taking setField as a func value
// is not inlined; either way every key string and the result go to the
// heap (31 allocations per run instead of 18).

// fastRun is the fast path of DecodeRun. Scalars are converted here; the
// nested values (request, dispatch, trail) and strings with escapes go to
// encoding/json one value at a time, which keeps its exact rules for them.
func fastRun(b []byte, r *Run) bool {
	var out Run
	var seen uint32
	m := members{s: jsonScanner{b: b}}
	for m.next() {
		bit, ok := out.setField(string(m.key), m.raw)
		if !once(&seen, bit, ok) {
			return false
		}
	}
	if !m.complete() {
		return false
	}
	*r = out
	return true
}

// once records a field's bit in seen. It reports false for a value
// setField refused, and for a repeated key, whose handling is left to
// encoding/json's rules.
func once(seen *uint32, bit uint32, ok bool) bool {
	if !ok || *seen&bit != 0 {
		return false
	}
	*seen |= bit
	return true
}

// setField sets one Run field.
func (r *Run) setField(key string, raw []byte) (bit uint32, ok bool) {
	switch key {
	case "dispatchId":
		return 1 << 0, setString(raw, &r.DispatchID)
	case "taskId":
		return 1 << 1, setString(raw, &r.TaskID)
	case "scheduledAt":
		return 1 << 2, setTime(raw, &r.ScheduledAt)
	case "attempt":
		return 1 << 3, rawInt(raw, &r.Attempt)
	case "startedAt":
		return 1 << 4, setTime(raw, &r.StartedAt)
	case "finishedAt":
		return 1 << 5, setTime(raw, &r.FinishedAt)
	case "duration":
		return 1 << 6, isQuoted(raw) && r.Duration.UnmarshalJSON(raw) == nil
	case "status":
		return 1 << 7, rawInt(raw, &r.Status)
	case "body":
		return 1 << 8, setString(raw, &r.Body)
	case "bodyTruncated":
		return 1 << 9, rawBool(raw, &r.BodyTruncated)
	case "fingerprint":
		return 1 << 10, setString(raw, &r.Fingerprint)
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
		return 1 << 12, setString(raw, &r.Error)
	case "errorKind":
		return 1 << 13, setString(raw, &r.ErrorKind)
	case "final":
		return 1 << 14, rawBool(raw, &r.Final)
	case "retryIn":
		return 1 << 15, isQuoted(raw) && r.RetryIn.UnmarshalJSON(raw) == nil
	case "reason":
		return 1 << 16, setString(raw, &r.Reason)
	case "source":
		return 1 << 17, setString(raw, &r.Source)
	case "trail":
		var trail []string // apart: decodeStrict's argument escapes
		if raw[0] != '[' || decodeStrict(raw, &trail) != nil {
			return 1 << 18, false
		}
		r.Trail = trail
		return 1 << 18, true
	case "breakerKey":
		return 1 << 19, setString(raw, &r.BreakerKey)
	case "taskCreatedAt":
		return 1 << 21, setTime(raw, &r.TaskCreatedAt)
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

// fastRequest decodes a request record.
func fastRequest(b []byte, q *RequestRecord) bool {
	var out RequestRecord
	var seen uint32
	m := members{s: jsonScanner{b: b}}
	for m.next() {
		bit, ok := out.setField(string(m.key), m.raw)
		if !once(&seen, bit, ok) {
			return false
		}
	}
	if !m.complete() {
		return false
	}
	*q = out
	return true
}

// setField sets one RequestRecord field.
func (q *RequestRecord) setField(key string, raw []byte) (bit uint32, ok bool) {
	switch key {
	case "method":
		return 1, setString(raw, &q.Method)
	case "url":
		return 2, setString(raw, &q.URL)
	case "subject":
		return 4, setString(raw, &q.Subject)
	case "headers":
		return 8, raw[0] == '{' && fastHeaders(raw, &q.Headers)
	}
	return 0, false
}

// fastHeaders decodes an object of strings. A repeated name is left to
// DecodeData, which refuses it.
func fastHeaders(b []byte, dst *map[string]string) bool {
	h := map[string]string{}
	n := 0
	m := members{s: jsonScanner{b: b}}
	for m.next() {
		var v string
		if !setString(m.raw, &v) {
			return false
		}
		h[string(m.key)] = v
		n++
	}
	if !m.complete() || len(h) != n {
		return false
	}
	*dst = h
	return true
}

// isQuoted reports a JSON string value (already checked by the scanner).
func isQuoted(raw []byte) bool { return raw[0] == '"' }

// rawString returns the content of a JSON string value. A string without
// escapes is its own content; one with escapes goes to encoding/json. One
// whose bytes are not UTF-8 is left to DecodeData, which refuses it
// (encoding/json would replace the bytes with U+FFFD).
func rawString(raw []byte) (string, bool) {
	if !isQuoted(raw) {
		return "", false
	}
	body := raw[1 : len(raw)-1]
	if !utf8.Valid(body) {
		return "", false
	}
	if bytes.IndexByte(body, '\\') < 0 {
		return string(body), true
	}
	return unquote(raw)
}

// unquote is rawString's slow path, apart so that only it allocates the
// string encoding/json decodes into.
func unquote(raw []byte) (string, bool) {
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err == nil
}

// setString sets *dst from a JSON string value.
func setString(raw []byte, dst *string) bool {
	s, ok := rawString(raw)
	if ok {
		*dst = s
	}
	return ok
}

// setTime sets *dst from a JSON time string in range (TimeInRange);
// anything else is left to DecodeData, which names the problem.
func setTime(raw []byte, dst *time.Time) bool {
	return isQuoted(raw) && dst.UnmarshalJSON(raw) == nil && TimeInRange(*dst)
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
