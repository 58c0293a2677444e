package events

import (
	"bytes"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
)

// The structured-mode fast path. The reference path (decodeStructuredSDK)
// reads a message five times: json.Valid, a probe for specversion (which
// encoding/json validates first, then decodes), the sdk's jsoniter decoder
// (after encoding/json validates again). Nearly every
// message flyball sees is plain: the core attributes as escape-free
// strings, each once, and JSON data. For those, one scan of the body
// validates it and locates every attribute, and the event is built exactly
// as the sdk builds it. Anything else (extensions, data_base64, escapes,
// duplicates, non-JSON data, any error) takes the reference path, so error
// messages and the handling of odd input stay the sdk's.

// Attribute bits, to spot duplicates: the sdk lets a repeated attribute
// win or fail depending on where specversion sits, so repeats fall back.
const (
	attrSpecVersion uint16 = 1 << iota
	attrID
	attrSource
	attrType
	attrSubject
	attrTime
	attrDataContentType
	attrDataSchema
	attrData
)

// structuredAttrs are the attributes of a plain structured-mode message.
// String attributes are the bytes between the quotes (escape-free, so equal
// to their content); data is the raw value.
type structuredAttrs struct {
	seen                                                         uint16
	specVersion, id, source, typ, subject, time, dct, dataSchema []byte
	data                                                         []byte
}

// scanStructured validates b, a trimmed JSON text starting with '{', and
// collects its attributes. ok is false when b is not a plain message (or
// not valid JSON): the caller must then use the reference path.
func scanStructured(b []byte) (a structuredAttrs, ok bool) {
	s := jsonScanner{b: b, i: 1}
	s.ws()
	if !s.consume('}') {
		for {
			key, ok := s.key()
			if !ok {
				return a, false
			}
			// The sdk keeps the whitespace between the colon and the data
			// value (jsoniter's SkipAndReturnBytes captures from there).
			start := s.i
			s.ws()
			tok := s.i
			if !s.value(1) || !a.set(key, b[start:s.i], b[tok:s.i]) {
				return a, false
			}
			s.ws()
			if s.consume('}') {
				break
			}
			if !s.consume(',') {
				return a, false
			}
			s.ws()
		}
	}
	s.ws()
	return a, s.i == len(b) && !s.floatOverflow
}

// key reads an escape-free object key and the colon after it. The sdk
// unescapes keys and stops at an empty one: both take the reference path.
func (s *jsonScanner) key() ([]byte, bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	start := s.i + 1
	if escaped, ok := s.str(); !ok || escaped || s.i-1 == start {
		return nil, false
	}
	key := s.b[start : s.i-1]
	s.ws()
	return key, s.consume(':')
}

// set records one member. raw is the value with its leading whitespace,
// tok the value alone. It refuses unknown keys (extensions, data_base64,
// v0.3 attributes), repeats, and non-string or escaped attribute values.
func (a *structuredAttrs) set(key, raw, tok []byte) bool {
	var bit uint16
	var dst *[]byte
	switch string(key) {
	case "specversion":
		bit, dst = attrSpecVersion, &a.specVersion
	case "id":
		bit, dst = attrID, &a.id
	case "source":
		bit, dst = attrSource, &a.source
	case "type":
		bit, dst = attrType, &a.typ
	case "subject":
		bit, dst = attrSubject, &a.subject
	case "time":
		bit, dst = attrTime, &a.time
	case "datacontenttype":
		bit, dst = attrDataContentType, &a.dct
	case "dataschema":
		bit, dst = attrDataSchema, &a.dataSchema
	case "data":
		bit, dst = attrData, &a.data
	default:
		return false
	}
	if a.seen&bit != 0 {
		return false
	}
	a.seen |= bit
	if bit == attrData {
		*dst = raw
		return true
	}
	// The scanner validated tok: a string starts with a quote, and without
	// a backslash its bytes are its content, as jsoniter reads them too.
	if tok[0] != '"' || bytes.IndexByte(tok, '\\') >= 0 {
		return false
	}
	*dst = tok[1 : len(tok)-1]
	return true
}

// has reports whether the attribute was present.
func (a *structuredAttrs) has(bit uint16) bool { return a.seen&bit != 0 }

// contextV1 holds an event context with the values its pointers point
// to, so that building one costs one allocation rather than four.
type contextV1 struct {
	ctx          event.EventContextV1
	subject, dct string
	time         types.Timestamp
}

// event builds the event the sdk's decoder builds from the same message
// (event_unmarshal.go, readJsonFromIterator), or reports false when the
// message needs the sdk: a specversion other than 1.0 (or none), a source
// or time that does not parse, an empty or non-JSON datacontenttype.
func (a *structuredAttrs) event() (Event, bool) {
	if string(a.specVersion) != event.CloudEventsVersionV1 || !a.utf8() {
		return Event{}, false
	}
	c := &contextV1{}
	ctx := &c.ctx
	strs := a.strings()
	ctx.ID, ctx.Type = strs[0], strs[1]
	if a.has(attrSource) {
		// types.ParseURIRef, minus a copy. The sdk refuses an empty or
		// unparsable source with an error of its own: leave those to it.
		if strs[2] == "" {
			return Event{}, false
		}
		u, err := url.Parse(strs[2])
		if err != nil {
			return Event{}, false
		}
		ctx.Source = types.URIRef{URL: *u}
	}
	if c.subject = strs[3]; c.subject != "" { // the sdk reads "" as absent
		ctx.Subject = &c.subject
	}
	if a.has(attrDataContentType) {
		// An empty one is absent or "" depending on where specversion
		// sits: leave that to the sdk.
		if c.dct = strs[4]; c.dct == "" {
			return Event{}, false
		}
		ctx.DataContentType = &c.dct
	}
	if ts := strs[5]; ts != "" { // "" is absent too
		t, err := types.ParseTime(ts) // what types.ParseTimestamp calls
		if err != nil {
			return Event{}, false
		}
		c.time.Time = t
		ctx.Time = &c.time
	}
	if a.has(attrDataSchema) {
		ctx.DataSchema = types.ParseURI(string(a.dataSchema)) // nil when unparsable, as in the sdk
	}
	e := Event{Context: ctx}
	if a.has(attrData) {
		// The sdk stores non-JSON data as the string's content; only JSON
		// data is stored as its raw bytes.
		if mt, _ := ctx.GetDataMediaType(); !isSDKJSON(mt) {
			return Event{}, false
		}
		// The data shares the body's memory, as in binary mode (Decode's
		// contract). The sdk copies it; for the governor's run events
		// that copy was a kilobyte per run.
		e.DataEncoded = a.data
	}
	return e, true
}

// utf8 reports whether every string attribute is UTF-8. One that is not
// takes the reference path, which refuses it (envelopeMembers): the sdk
// would replace its bytes with U+FFFD. Repeats never reach the fast path
// (set refuses them).
func (a *structuredAttrs) utf8() bool {
	return utf8.Valid(a.id) && utf8.Valid(a.typ) && utf8.Valid(a.source) && utf8.Valid(a.subject) &&
		utf8.Valid(a.time) && utf8.Valid(a.dct) && utf8.Valid(a.dataSchema)
}

// strings converts id, type, source, subject, datacontenttype and time
// (in that order) with one allocation: they share a backing array, which
// lives as long as the event does anyway.
func (a *structuredAttrs) strings() [6]string {
	parts := [6][]byte{a.id, a.typ, a.source, a.subject, a.dct, a.time}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	var sb strings.Builder
	sb.Grow(n)
	for _, p := range parts {
		sb.Write(p)
	}
	all := sb.String()
	var out [6]string
	for i, p := range parts {
		out[i], all = all[:len(p)], all[len(p):]
	}
	return out
}

// isSDKJSON is the sdk decoder's test for JSON data (content_type.go,
// isJSON): exact media types, no case folding, no +json suffixes.
func isSDKJSON(mt string) bool {
	switch mt {
	case event.ApplicationJSON, event.TextJSON, event.ApplicationCloudEventsJSON, event.ApplicationCloudEventsBatchJSON, "":
		return true
	}
	return false
}
