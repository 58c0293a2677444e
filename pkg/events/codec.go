package events

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/google/uuid"
)

// Content types.
const (
	ContentTypeStructured = "application/cloudevents+json"
	ContentTypeJSON       = "application/json"
)

// Event is a CloudEvents 1.0 event (an alias of the sdk's type, so values
// flow freely between flyball and CloudEvents tooling).
type Event = event.Event

// New builds an event with JSON data. An empty id gets a random UUID; pass a
// deterministic id when the event must deduplicate.
func New(typ, source, subject string, data any, at time.Time, id string) (Event, error) {
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

// Encode renders the event in structured mode.
func Encode(e Event) ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode event %s: %w", e.ID(), err)
	}
	return b, nil
}

// Marshal builds and encodes an event in one step: the bytes are those of
// Encode(New(...)), rendered directly (see marshal.go).
func Marshal(typ, source, subject string, data any, at time.Time, id string) ([]byte, error) {
	return marshalStructured(typ, source, subject, data, at, id)
}

// Decode reads an event in structured mode (a JSON body with
// "specversion", content type application/cloudevents+json or none) or in
// binary mode (ce-* headers, the body is the data). header may be nil.
// Errors wrap ErrMalformed.
//
// The event's data may share body's memory (in binary mode it is body):
// don't modify body while the event is in use. A message nats.go delivers
// owns its data, so decoding m.Data() is safe.
func Decode(header map[string][]string, body []byte) (Event, error) {
	if headerValue(header, "ce-specversion") != "" {
		return decodeBinary(header, body)
	}
	ct := headerValue(header, "content-type")
	if ct != "" && !mediaTypeIs(ct, ContentTypeStructured) && !mediaTypeIs(ct, ContentTypeJSON) {
		return Event{}, malformed("", fmt.Sprintf("content type %q is neither %s nor binary mode (ce-* headers)", truncate(ct, 64), ContentTypeStructured))
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		if a, ok := scanStructured(trimmed); ok {
			if e, ok := a.event(); ok {
				return e, validate(e)
			}
		}
	}
	return decodeStructuredSDK(trimmed)
}

// mediaTypeIs reports whether the Content-Type value ct names the media
// type want, whatever its case and parameters ("Application/JSON;
// charset=utf-8" is application/json; "application/jsonx" is not).
func mediaTypeIs(ct, want string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), want)
}

// decodeStructuredSDK decodes a trimmed structured-mode body with the sdk:
// the reference path, for every message the fast path (structured.go) does
// not take. It produces every structured-mode error message.
func decodeStructuredSDK(trimmed []byte) (Event, error) {
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
	// The sdk keeps the last of a repeated attribute and replaces bytes
	// that are not UTF-8: refuse both before it reads the message.
	members, field, rule := envelopeMembers(trimmed)
	if field != "" {
		return Event{}, malformed(field, rule)
	}
	var e Event
	if err := unmarshalEvent(trimmed, &e); err != nil {
		if e, ok := decodeFoldedJSON(members); ok {
			return e, validate(e)
		}
		if problems := attributeProblems(trimmed); len(problems) > 0 {
			return Event{}, malformedAll(problems)
		}
		return Event{}, malformed("", "invalid CloudEvent: "+err.Error())
	}
	// The sdk reads a JSON media type case-sensitively but renders it
	// case-insensitively: with "Application/JSON" it takes data as a string,
	// which Encode would then embed as JSON. Hold such data to the rule
	// binary mode applies (null is no data).
	if isJSONMediaType(e.DataContentType()) && e.DataEncoded != nil && !e.DataBase64 {
		if len(e.DataEncoded) == 0 {
			e.DataEncoded = nil
		} else if !json.Valid(e.DataEncoded) {
			return Event{}, malformed("data", fmt.Sprintf("not valid JSON for content type %q", truncate(e.DataContentType(), 64)))
		}
	}
	return e, validate(e)
}

// envelopeMembers reads the members of the structured-mode message b (a
// valid JSON object), and names the first one given twice (an escaped key
// included: "\u0069d" is "id") or holding a string that is not UTF-8. The
// sdk would keep the last of a repeated attribute and replace the bytes
// with U+FFFD (an answer then named another command id). Object and
// array values are data or refused extensions: their strings are left to
// DecodeData and to attributeProblem. members is nil when b does not read
// as an object, which the sdk then reports.
func envelopeMembers(b []byte) (members map[string]json.RawMessage, field, rule string) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, "", ""
	}
	members = map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, "", ""
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, "", ""
		}
		if len(raw) > 0 && raw[0] == '"' {
			if i := invalidUTF8(raw); i >= 0 {
				return nil, key, "not valid UTF-8" + byteAt(raw[1:len(raw)-1], i-1) + ": JSON text must be UTF-8, and the bytes would be replaced by U+FFFD"
			}
		}
		// A key that is not UTF-8 reads with U+FFFD: two such keys may
		// differ, and neither names an attribute (the sdk refuses it).
		if _, ok := members[key]; ok && !strings.ContainsRune(key, utf8.RuneError) {
			return nil, key, "given twice: each attribute appears once"
		}
		members[key] = raw
	}
	return members, "", ""
}

// decodeFoldedJSON decodes a message whose datacontenttype is a JSON media
// type the sdk's decoder does not know as one, in another case
// ("Application/JSON") or a +json type ("application/vnd.x+json"), and
// whose data is not a string. The sdk's decoder compares the media type
// case-sensitively against four names and wants any other type's data as a
// JSON string, while binary mode, its encoder and DecodeData fold the case
// and take +json types as JSON (isJSONMediaType): the data is read as JSON,
// as for "application/json". ok is false for any other message.
func decodeFoldedJSON(members map[string]json.RawMessage) (e Event, ok bool) {
	var dct string
	data, hasData := members["data"]
	if !hasData || json.Unmarshal(members["datacontenttype"], &dct) != nil {
		return Event{}, false
	}
	mt, _, _ := strings.Cut(dct, ";")
	if isSDKJSON(mt) || mt == "" || !isJSONMediaType(dct) || jsonKind(data) == "string" {
		return Event{}, false
	}
	rest := make(map[string]json.RawMessage, len(members))
	for k, v := range members {
		if k != "data" {
			rest[k] = v
		}
	}
	b, err := json.Marshal(rest)
	if err != nil || unmarshalEvent(b, &e) != nil {
		return Event{}, false
	}
	if jsonKind(data) != "null" { // null is no data
		e.DataEncoded = data
	}
	return e, true
}

// unmarshalEvent runs the sdk's structured-mode decoder, turning a panic into
// an error: the sdk slices a non-string data_base64 that precedes
// specversion without checking it (`{"data_base64":1,"specversion":"1.0"}`),
// and one hostile message must not take a consumer down.
func unmarshalEvent(b []byte, e *Event) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return json.Unmarshal(b, e)
}

// decodeBinary reads a binary-mode message. It lists every problem of
// the envelope it can tell apart (an attribute given twice or not UTF-8,
// a bad source or time, data that is not the JSON its content type
// says), with the sdk's own checks of the attributes not already named,
// rather than stopping at the first: a sender fixed one to learn of the
// next.
func decodeBinary(header map[string][]string, body []byte) (Event, error) {
	if v := headerValue(header, "ce-specversion"); v != event.CloudEventsVersionV1 {
		return Event{}, malformed("specversion", fmt.Sprintf("must be %q, got %q", event.CloudEventsVersionV1, truncate(v, 16)))
	}
	problems := binaryAttributeProblems(header)
	add := func(field, rule string) { problems = append(problems, FieldError{Field: field, Rule: rule}) }
	e := event.New(event.CloudEventsVersionV1)
	e.SetID(headerValue(header, "ce-id"))
	e.SetType(headerValue(header, "ce-type"))
	source := headerValue(header, "ce-source")
	if source != "" {
		// SetSource records a parse failure as a field error that
		// Validate reports as "source: is required".
		if _, err := url.Parse(source); err != nil {
			add("source", fmt.Sprintf("must be a URI reference, got %q", truncate(source, 64)))
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
			add("time", fmt.Sprintf("must be RFC 3339, got %q", truncate(s, 40)))
		case !TimeInRange(t):
			add("time", TimeRangeRule(t))
		default:
			e.SetTime(t)
		}
	}
	ct := headerValue(header, "content-type")
	if ct == "" {
		ct = ContentTypeJSON
	}
	e.SetDataContentType(ct)
	// An empty body is an event without data. A JSON body must be JSON:
	// structured mode embeds it verbatim, so Encode could not re-render it.
	if len(body) > 0 {
		if isJSONMediaType(ct) && !json.Valid(body) {
			add("data", fmt.Sprintf("not valid JSON for content type %q", truncate(ct, 64)))
		}
		e.DataEncoded = body
	}
	if len(problems) == 0 {
		return e, validate(e)
	}
	named := make(map[string]bool, len(problems))
	for _, fe := range problems {
		named[fe.Field] = true
	}
	// The sdk's checks, for the attributes not named already (a source
	// refused above is not "required" as well).
	if err := validate(e); err != nil {
		for _, fe := range Reasons(err) {
			if !named[fe.Field] {
				add(fe.Field, fe.Rule)
			}
		}
	}
	slices.SortStableFunc(problems, func(a, b FieldError) int { return strings.Compare(a.Field, b.Field) })
	return Event{}, malformedAll(problems)
}

// binaryAttributeProblems names every ce-* header of a binary-mode
// message that is given twice (two values, or two names that differ only
// in case) or whose value is not UTF-8, sorted by attribute name, as
// structured mode refuses a repeated member or a string that is not
// UTF-8. Before, the first value was taken, and one that was not UTF-8
// came back in the answer with U+FFFD, an id the sender could not match.
func binaryAttributeProblems(header map[string][]string) []FieldError {
	var problems []FieldError
	seen := make(map[string]bool, len(header))
	for k, v := range header {
		if len(v) == 0 || len(k) < 3 || !strings.EqualFold(k[:3], "ce-") {
			continue // a name with no value is not given
		}
		name := strings.ToLower(k[3:])
		if reported, dup := seen[name]; dup || len(v) > 1 {
			if !reported {
				problems = slices.DeleteFunc(problems, func(fe FieldError) bool { return fe.Field == name })
				problems = append(problems, FieldError{Field: name, Rule: "given twice: each attribute appears once"})
				seen[name] = true
			}
			continue
		}
		seen[name] = false
		for _, s := range v {
			if i := invalidUTF8([]byte(s)); i >= 0 {
				problems = append(problems, FieldError{Field: name, Rule: "not valid UTF-8" + byteAt([]byte(s), i) + ": attribute values must be UTF-8"})
				break
			}
		}
	}
	slices.SortFunc(problems, func(a, b FieldError) int { return strings.Compare(a.Field, b.Field) })
	return problems
}

// isJSONMediaType reports whether ct is JSON, as the sdk decides it when it
// renders structured mode (case-insensitive, parameters ignored), plus any
// +json suffix.
func isJSONMediaType(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == ContentTypeJSON || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

// coreAttribute reports whether name is a CloudEvents context attribute
// other than data.
func coreAttribute(name string) bool {
	switch name {
	case "specversion", "id", "source", "type", "subject", "time", "datacontenttype", "dataschema", "data_base64":
		return true
	}
	return false
}

// IsContextAttribute reports whether name is a CloudEvents context
// attribute other than data (specversion, id, source, type, subject, time,
// datacontenttype, dataschema, data_base64): any other attribute of an
// envelope is an extension, named by whoever sent it.
func IsContextAttribute(name string) bool { return coreAttribute(name) }

// attributeProblems names the attributes of the structured-mode message
// b (a JSON object with specversion "1.0") that the sdk's decoder failed
// on, each with the rule it breaks, in document order; it is empty when
// no attribute explains the failure. The sdk's errors name no attribute
// ("cannot parse uri ref: ::", "ReadString: expects \" or n, but found
// 5") and stop at the first; binary mode always named one. Every member
// is checked, repeats included, as the sdk reads them, and every problem
// is listed: source "::" with time "yesterday" named source alone.
func attributeProblems(b []byte) []FieldError {
	var problems []FieldError
	add := func(field, rule string) { problems = append(problems, FieldError{Field: field, Rule: rule}) }
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil { // '{'
		return nil
	}
	var dct string
	var data json.RawMessage
	specVersion := false
	seen := map[string]bool{}
	values := map[string]string{} // of id and type
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil
		}
		if seen[key] {
			if key == "" {
				add(`""`, "given twice: each attribute appears once")
			} else {
				add(key, "given twice: each attribute appears once")
			}
			continue
		}
		seen[key] = true
		kind := jsonKind(raw)
		switch {
		case key == "data":
			data = raw
			continue
		case !coreAttribute(key):
			if lower := strings.ToLower(key); lower == "data" || coreAttribute(lower) {
				add(key, "unknown attribute (attribute names are case-sensitive: did you mean "+strconv.Quote(lower)+"?)")
				continue
			}
			if !event.IsExtensionNameValid(key) {
				if key == "" {
					key = `""`
				}
				add(key, "unknown attribute: an extension attribute's name must be ASCII letters and digits only")
				continue
			}
			if kind == "object" || kind == "array" {
				add(key, "an extension attribute must be a string, number or boolean, got "+kind)
				continue
			}
			if kind == "number" {
				if f, err := strconv.ParseFloat(string(raw), 64); err != nil || f > math.MaxInt32 || f < math.MinInt32 {
					add(key, fmt.Sprintf("an extension attribute's number must be from %d to %d, got %s", math.MinInt32, math.MaxInt32, truncate(string(raw), 32)))
					continue
				}
			}
			continue
		}
		if kind == "null" {
			if key == "source" {
				add(key, "is required: a non-empty URI reference")
				continue
			}
			continue
		}
		if kind != "string" {
			add(key, "wrong type: got "+kind+", want string")
			continue
		}
		var v string
		if json.Unmarshal(raw, &v) != nil {
			return nil
		}
		values[key] = v
		switch key {
		case "source":
			if v == "" {
				add(key, "is required: a non-empty URI reference")
				continue
			}
			if _, err := url.Parse(v); err != nil {
				add(key, fmt.Sprintf("must be a URI reference, got %q", truncate(v, 64)))
				continue
			}
		case "time":
			if _, err := types.ParseTime(v); err != nil {
				add(key, fmt.Sprintf("must be an RFC 3339 time such as \"2026-03-02T11:00:00Z\", got %q", truncate(v, 40)))
				continue
			}
		case "data_base64":
			if _, err := base64.StdEncoding.DecodeString(v); err != nil {
				add(key, "not valid base64: "+err.Error())
				continue
			}
		case "datacontenttype":
			dct = v
		case "specversion":
			specVersion = true
		}
	}
	// Validate, which names a missing id, type or source, runs on what
	// the sdk decoded: after a failure above it does not run.
	if len(problems) > 0 {
		for _, key := range []string{"id", "source", "type"} {
			if slices.ContainsFunc(problems, func(fe FieldError) bool { return fe.Field == key }) {
				continue
			}
			if key == "source" && !seen[key] {
				add(key, "is required: a non-empty URI reference")
			} else if key != "source" && strings.TrimSpace(values[key]) == "" {
				add(key, "is required")
			}
		}
	}
	if !specVersion {
		// The probe before the sdk matched a key such as "SpecVersion"
		// (encoding/json ignores case); the sdk wants it exact.
		add("specversion", `is required (structured mode, exactly "specversion") or send ce-* headers (binary mode)`)
	}
	if data != nil && dct != "" {
		if mt, _, _ := strings.Cut(dct, ";"); !isSDKJSON(strings.TrimSpace(mt)) && !isJSONMediaType(dct) && jsonKind(data) != "string" {
			add("data", fmt.Sprintf("must be a JSON string for content type %q, got %s", truncate(dct, 64), jsonKind(data)))
		}
	}
	return problems
}

func validate(e Event) error {
	if err := sdkValidate(e); err != nil {
		// The sdk reports "attr: REQUIRED" lines; keep them as field errors.
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
		// The sdk builds its message from a map: sort for stable reasons.
		slices.SortFunc(c.errs, func(a, b FieldError) int { return strings.Compare(a.Field, b.Field) })
		return c.err()
	}
	if !strings.HasPrefix(e.Type(), TypePrefix) {
		return malformed("type", fmt.Sprintf("must start with %q, got %q", TypePrefix, truncate(e.Type(), 64)))
	}
	// A time past year 9999 (with its offset) cannot be encoded again:
	// json.Marshal writes year 10000, which no decoder reads.
	if t := e.Time(); !TimeInRange(t) {
		return malformed("time", TimeRangeRule(t))
	}
	return nil
}

// sdkValidate is e.Validate(), skipped when the event plainly passes it:
// the sdk builds a map, renders the source URL and parses the media type
// on every call, which shows in the decode profile.
func sdkValidate(e Event) error {
	if plainlyValid(e) {
		return nil
	}
	return e.Validate()
}

// plainlyValid reports whether e.Validate() surely passes, checking the
// same rules (eventcontext_v1.go, Validate) on the common shapes only. false
// means "ask the sdk", not "invalid".
func plainlyValid(e Event) bool {
	ctx, ok := e.Context.(*event.EventContextV1)
	if !ok || e.FieldErrors != nil {
		return false
	}
	// A parsed source with a scheme, host or path renders to a string with
	// a non-space byte (url.URL.String escapes spaces and non-ASCII bytes);
	// the sdk requires exactly that.
	sourceOK := ctx.Source.Scheme != "" || ctx.Source.Host != "" || ctx.Source.Path != ""
	return strings.TrimSpace(ctx.ID) != "" &&
		strings.TrimSpace(ctx.Type) != "" &&
		sourceOK &&
		(ctx.DataContentType == nil || *ctx.DataContentType == ContentTypeJSON) &&
		ctx.DataSchema == nil &&
		(ctx.Subject == nil || strings.TrimSpace(*ctx.Subject) != "")
}

// DecodeData decodes the event's JSON data into v, refusing unknown fields
// and wrongly typed values. Errors are *ValidationError (wrapping
// ErrMalformed) naming the field.
func DecodeData(e Event, v any) error {
	if ct := e.DataContentType(); ct != "" && !jsonDataType(ct) {
		return malformed("datacontenttype", fmt.Sprintf("must be %s, got %q", ContentTypeJSON, truncate(ct, 64)))
	}
	data := e.Data()
	if len(bytes.TrimSpace(data)) == 0 {
		return malformed("data", "is required")
	}
	return decodeStrict(data, v)
}

// jsonDataType reports whether the content type ct names
// application/json or a +json media type ("application/vnd.x+json;
// charset=utf-8"), whatever its case and parameters. It compares the media
// type, not a prefix: "application/jsonx" is not JSON.
func jsonDataType(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.TrimSpace(mt)
	if strings.EqualFold(mt, ContentTypeJSON) {
		return true
	}
	typ, sub, ok := strings.Cut(mt, "/")
	const suffix = "+json"
	return ok && typ != "" && len(sub) > len(suffix) &&
		strings.EqualFold(sub[len(sub)-len(suffix):], suffix)
}

// decodeStrict decodes data into v with the strict rules of DecodeData:
// keys exactly as documented, each once (strictShape), no unknown fields,
// no trailing content.
func decodeStrict(data []byte, v any) error {
	data, err := walkShape(data, v) // times with escapes rewritten
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return dataError(err)
	}
	// Not dec.More(): it reports false for a stray '}' or ']'.
	if len(bytes.TrimSpace(data[dec.InputOffset():])) > 0 {
		return malformed("data", "has trailing content after the JSON value")
	}
	return nil
}

func dataError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		return typeError(te.Field, te)
	case errors.As(err, &se):
		return malformed("data", "not valid JSON: "+se.Error())
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return malformed(name, "unknown field")
	default:
		return malformed("data", err.Error())
	}
}

// typeError is the error for te, a value of the wrong type (or a duration
// out of range) at field ("": the whole document).
func typeError(field string, te *json.UnmarshalTypeError) error {
	if field == "" {
		return malformed("data", fmt.Sprintf("must be a JSON object, got %s", te.Value))
	}
	if v, ok := strings.CutSuffix(te.Value, outOfRange); ok {
		if te.Type == durationType {
			return malformed(field, fmt.Sprintf("out of range: got %s, want a duration of at most %s", v, time.Duration(math.MaxInt64)))
		}
		return malformed(field, fmt.Sprintf("out of range: got %s, want %s", v, numberRange(te.Type)))
	}
	return malformed(field, fmt.Sprintf("wrong type: got %s, want %s", te.Value, typeName(te)))
}

// numberRange describes the numbers a numeric type t holds.
func numberRange(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return fmt.Sprintf("an integer from %d to %d", int64(-1)<<(t.Bits()-1), int64(1)<<(t.Bits()-1)-1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return fmt.Sprintf("an integer from 0 to %d", uint64(math.MaxUint64)>>(64-t.Bits()))
	case reflect.Float32:
		return fmt.Sprintf("a number of magnitude at most %g", math.MaxFloat32)
	}
	return fmt.Sprintf("a number of magnitude at most %g", math.MaxFloat64)
}

func typeName(te *json.UnmarshalTypeError) string {
	switch te.Type.Name() {
	case "Duration":
		return `a duration string such as "30s"`
	case "Time":
		return "an RFC 3339 time string"
	}
	switch te.Type.Kind().String() {
	case "string":
		return "string"
	case "int", "int64", "int32":
		return "integer"
	case "uint64", "uint32", "uint":
		return "a non-negative integer"
	case "float64", "float32":
		return "number"
	case "bool":
		return "boolean"
	case "slice":
		return "array"
	case "map", "struct", "ptr":
		return "object"
	}
	return te.Type.String()
}

func malformed(field, rule string) error {
	return &ValidationError{Errors: []FieldError{{Field: field, Rule: rule}}}
}

// malformedAll is the error listing problems, at most MaxReasons of them
// and a last reason counting the rest.
func malformedAll(problems []FieldError) error {
	var c collector
	for _, fe := range problems {
		c.add(fe.Field, fe.Rule)
	}
	return c.err()
}

// PeekAttributes reads the type and id of a message that does not decode as
// a CloudEvent (an unsupported specversion, a missing source), so that an
// answer can name what it answers: the ce-type and ce-id headers in binary
// mode, else the "type" and "id" strings of a JSON body. Each is cut to 256
// bytes (and marked with …); what cannot be read stays empty, and so does
// what cannot be read without doubt: an attribute given twice (two header
// values, two names that differ only in case, a repeated JSON key), one
// whose value is not UTF-8 or not a string, or a JSON key that only
// differs in case ("ID"). An answer's id is built from the id read here:
// it must be the one the sender chose, not one of several.
func PeekAttributes(header map[string][]string, body []byte) (typ, id string) {
	if headerValue(header, "ce-specversion") != "" {
		typ, id = onlyHeader(header, "ce-type"), onlyHeader(header, "ce-id")
	} else {
		typ, id = peekMembers(body)
	}
	return truncate(typ, 256), truncate(id, 256)
}

// onlyHeader is the value of header key (any case) when exactly one
// value is given, under one name, and it is UTF-8; else "".
func onlyHeader(h map[string][]string, key string) string {
	var v []string
	for k, vs := range h {
		if len(vs) == 0 || !strings.EqualFold(k, key) {
			continue
		}
		if v != nil {
			return ""
		}
		v = vs
	}
	if len(v) != 1 || !utf8.ValidString(v[0]) {
		return ""
	}
	return v[0]
}

// peekMembers reads the "type" and "id" members of the JSON object b,
// each when it is given once, as a UTF-8 string; else "".
func peekMembers(b []byte) (typ, id string) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", ""
	}
	var vals [2]string
	var seen [2]int
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", ""
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return "", ""
		}
		i := slices.Index([]string{"type", "id"}, key)
		if i < 0 {
			continue
		}
		seen[i]++
		if len(raw) > 0 && raw[0] == '"' && invalidUTF8(raw) < 0 {
			_ = json.Unmarshal(raw, &vals[i])
		} else {
			vals[i] = ""
		}
	}
	for i := range vals {
		if seen[i] != 1 {
			vals[i] = ""
		}
	}
	return vals[0], vals[1]
}

func headerValue(h map[string][]string, key string) string {
	if h == nil {
		return ""
	}
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

// DecodeTaskSpec decodes and validates the spec carried by a task.created or
// task.updated event, and checks that the event's subject (when set) names
// the same task. The spec is returned normalized.
func DecodeTaskSpec(e Event) (TaskSpec, error) {
	var s TaskSpec
	if err := decodeSpec(e, &s, &s, false); err != nil {
		return TaskSpec{}, err
	}
	return s, nil
}

// DecodeStoredTaskSpec is DecodeTaskSpec with the rules of a spec already
// stored (TaskSpec.ValidateStored) instead of those of a new one. Only
// the sweeper's repair of a task with no schedule, which re-creates the
// spec stored, is decoded so, and the governor applies it only when it
// carries exactly that spec: anyone who may publish a task.created can
// choose its command ID.
func DecodeStoredTaskSpec(e Event) (TaskSpec, error) {
	var s TaskSpec
	if err := decodeSpec(e, &s, &s, true); err != nil {
		return TaskSpec{}, err
	}
	return s, nil
}

// decodeSpec decodes e's data into dst, whose spec is s, then validates
// s (with the stored-spec rules when stored is set), checks the event's
// subject against it and normalizes it.
func decodeSpec(e Event, dst any, s *TaskSpec, stored bool) error {
	if err := DecodeData(e, dst); err != nil {
		return err
	}
	validate := s.Validate
	if stored {
		validate = s.ValidateStored
	}
	if err := validate(); err != nil {
		return err
	}
	if subj := e.Subject(); subj != "" && subj != s.ID {
		return malformed("subject", fmt.Sprintf("must equal data.id %q, got %q", s.ID, truncate(subj, 64)))
	}
	s.Normalize()
	return nil
}
