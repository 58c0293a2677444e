package events

// The codec as it was before the fast paths (structured.go, marshal.go),
// kept verbatim as the reference the differential tests and fuzz targets
// compare against. Do not "fix" it: its behaviour is the specification.
// A deliberate change of behaviour goes in both (and is marked here).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
)

func refNew(typ, source, subject string, data any, at time.Time, id string) (Event, error) {
	if id == "" {
		id = uuid.NewString()
	}
	e := event.New(event.CloudEventsVersionV1)
	e.SetID(id)
	e.SetType(typ)
	e.SetSource(source)
	e.SetSubject(subject)
	e.SetTime(at)
	if err := e.SetData(ContentTypeJSON, data); err != nil {
		return Event{}, fmt.Errorf("encode %s data: %w", typ, err)
	}
	if err := e.Validate(); err != nil {
		return Event{}, fmt.Errorf("build %s: %w", typ, err)
	}
	return e, nil
}

func refEncode(e Event) ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode event %s: %w", e.ID(), err)
	}
	return b, nil
}

func refMarshal(typ, source, subject string, data any, at time.Time, id string) ([]byte, error) {
	e, err := refNew(typ, source, subject, data, at, id)
	if err != nil {
		return nil, err
	}
	return refEncode(e)
}

func refDecode(header map[string][]string, body []byte) (Event, error) {
	if headerValue(header, "ce-specversion") != "" {
		return refDecodeBinary(header, body)
	}
	ct := headerValue(header, "content-type")
	// Deliberate change: the media type is compared whole and without
	// regard to case (it was a case-sensitive prefix match, which refused
	// "Application/JSON" and took "application/jsonx").
	if mt, _, _ := strings.Cut(ct, ";"); ct != "" && !strings.EqualFold(strings.TrimSpace(mt), ContentTypeStructured) && !strings.EqualFold(strings.TrimSpace(mt), ContentTypeJSON) {
		return Event{}, malformed("", fmt.Sprintf("content type %q is neither %s nor binary mode (ce-* headers)", truncate(ct, 64), ContentTypeStructured))
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return Event{}, malformed("", "empty message: want a CloudEvents JSON object")
	}
	if !json.Valid(trimmed) {
		return Event{}, malformed("", "not valid JSON: want a CloudEvents JSON object")
	}
	if trimmed[0] != '{' {
		return Event{}, malformed("", fmt.Sprintf("want a CloudEvents JSON object, got %s", jsonKind(trimmed)))
	}
	var probe struct {
		SpecVersion *string `json:"specversion"`
	}
	if err := json.Unmarshal(trimmed, &probe); err != nil || probe.SpecVersion == nil {
		return Event{}, malformed("specversion", "is required (structured mode) or send ce-* headers (binary mode)")
	}
	if *probe.SpecVersion != event.CloudEventsVersionV1 {
		return Event{}, malformed("specversion", fmt.Sprintf("must be %q, got %q", event.CloudEventsVersionV1, truncate(*probe.SpecVersion, 16)))
	}
	// Deliberate change: an attribute given twice, or holding bytes that
	// are not UTF-8, is refused (the sdk kept the last one, and replaced
	// the bytes with U+FFFD).
	members, field, rule := envelopeMembers(trimmed)
	if field != "" {
		return Event{}, malformed(field, rule)
	}
	var e Event
	if err := unmarshalEvent(trimmed, &e); err != nil {
		// Deliberate change: non-string data under a JSON media type in
		// another case ("Application/JSON") or a +json type
		// ("application/vnd.x+json") is JSON, as binary mode and
		// DecodeData read that type (the sdk's decoder wanted a string).
		if e, ok := decodeFoldedJSON(members); ok {
			return e, refValidate(e)
		}
		// Deliberate change: the attribute the sdk failed on is named
		// (the sdk's message named none; binary mode always did).
		// Deliberate change: every attribute problem is listed, in
		// document order, not only the first.
		if problems := attributeProblems(trimmed); len(problems) > 0 {
			return Event{}, malformedAll(problems)
		}
		return Event{}, malformed("", "invalid CloudEvent: "+err.Error())
	}
	// A rule added on purpose after the fast paths (e545394): JSON data
	// under a mixed-case JSON media type must be JSON. Without it here,
	// the differential tests compared Decode with a reference that no
	// longer specified it.
	if isJSONMediaType(e.DataContentType()) && e.DataEncoded != nil && !e.DataBase64 {
		if len(e.DataEncoded) == 0 {
			e.DataEncoded = nil
		} else if !json.Valid(e.DataEncoded) {
			return Event{}, malformed("data", fmt.Sprintf("not valid JSON for content type %q", truncate(e.DataContentType(), 64)))
		}
	}
	return e, refValidate(e)
}

func refDecodeBinary(header map[string][]string, body []byte) (Event, error) {
	if v := headerValue(header, "ce-specversion"); v != event.CloudEventsVersionV1 {
		return Event{}, malformed("specversion", fmt.Sprintf("must be %q, got %q", event.CloudEventsVersionV1, truncate(v, 16)))
	}
	// Deliberate change: every problem below is listed, not only the
	// first (ce-source "::" with ce-time "yesterday" named source
	// alone), with the sdk's checks of the attributes not named, sorted
	// by attribute.
	var problems []FieldError
	// Deliberate change: a ce-* header given twice, or whose value is
	// not UTF-8, is refused, as structured mode refuses such a member
	// (the first value was taken, and bytes not UTF-8 came back as
	// U+FFFD).
	problems = append(problems, binaryAttributeProblems(header)...)
	e := event.New(event.CloudEventsVersionV1)
	e.SetID(headerValue(header, "ce-id"))
	e.SetType(headerValue(header, "ce-type"))
	// Deliberate change: a source that does not parse is named as in
	// structured mode (SetSource's error came out as "is required").
	source := headerValue(header, "ce-source")
	if source != "" {
		if _, err := url.Parse(source); err != nil {
			problems = append(problems, FieldError{Field: "source", Rule: fmt.Sprintf("must be a URI reference, got %q", truncate(source, 64))})
			source = ""
		}
	}
	e.SetSource(source)
	if s := headerValue(header, "ce-subject"); s != "" {
		e.SetSubject(s)
	}
	if s := headerValue(header, "ce-time"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		switch {
		case err != nil:
			problems = append(problems, FieldError{Field: "time", Rule: fmt.Sprintf("must be RFC 3339, got %q", truncate(s, 40))})
		case !TimeInRange(t):
			// Deliberate change: a time past year 9999 is refused (see
			// refValidate).
			problems = append(problems, FieldError{Field: "time", Rule: TimeRangeRule(t)})
		default:
			e.SetTime(t)
		}
	}
	ct := headerValue(header, "content-type")
	if ct == "" {
		ct = ContentTypeJSON
	}
	e.SetDataContentType(ct)
	if len(body) > 0 {
		if isJSONMediaType(ct) && !json.Valid(body) {
			problems = append(problems, FieldError{Field: "data", Rule: fmt.Sprintf("not valid JSON for content type %q", truncate(ct, 64))})
		}
		e.DataEncoded = body
	}
	if len(problems) == 0 {
		return e, refValidate(e)
	}
	for _, fe := range Reasons(refValidate(e)) {
		if !slices.ContainsFunc(problems, func(p FieldError) bool { return p.Field == fe.Field }) {
			problems = append(problems, fe)
		}
	}
	slices.SortStableFunc(problems, func(a, b FieldError) int { return strings.Compare(a.Field, b.Field) })
	return Event{}, malformedAll(problems)
}

func refValidate(e Event) error {
	if err := e.Validate(); err != nil {
		var c collector
		for line := range strings.SplitSeq(strings.TrimSpace(err.Error()), "\n") {
			field, rule, ok := strings.Cut(line, ":")
			if !ok {
				c.add("", strings.TrimSpace(line))
				continue
			}
			rule = strings.ToLower(strings.TrimSpace(rule))
			if rule == "required" {
				rule = "is required"
			}
			c.add(strings.TrimSpace(field), rule)
		}
		slices.SortFunc(c.errs, func(a, b FieldError) int { return strings.Compare(a.Field, b.Field) })
		return c.err()
	}
	if !strings.HasPrefix(e.Type(), TypePrefix) {
		return malformed("type", fmt.Sprintf("must start with %q, got %q", TypePrefix, truncate(e.Type(), 64)))
	}
	// Deliberate change: the event's time is held to TimeInRange, as every
	// time in data is ("9999-12-31T23:30:00-01:00" was encoded as year
	// 10000, which no decoder reads).
	if t := e.Time(); !TimeInRange(t) {
		return malformed("time", TimeRangeRule(t))
	}
	return nil
}

func refDecodeData(e Event, v any) error {
	// Deliberate change: the media type is compared whole and without
	// regard to case (a case-sensitive prefix took "application/jsonx"
	// and refused "Application/JSON").
	if ct := e.DataContentType(); ct != "" && !jsonDataType(ct) {
		return malformed("datacontenttype", fmt.Sprintf("must be %s, got %q", ContentTypeJSON, truncate(ct, 64)))
	}
	data := e.Data()
	if len(bytes.TrimSpace(data)) == 0 {
		return malformed("data", "is required")
	}
	return refDecodeStrict(data, v)
}

func refDecodeStrict(data []byte, v any) error {
	// Changed deliberately (as decodeStrict): a time written with a JSON
	// escape is read as the time it spells, where encoding/json refused
	// it (Go issue 47353). And a string whose bytes are not UTF-8 is
	// refused, naming its field, where encoding/json replaced the bytes.
	data, err := walkShape(data, v)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return dataError(err)
	}
	if len(bytes.TrimSpace(data[dec.InputOffset():])) > 0 {
		return malformed("data", "has trailing content after the JSON value")
	}
	return nil
}
