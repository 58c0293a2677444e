package events

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
)

// marshalStructured renders the bytes of Encode(New(...)) without building
// an sdk Event. The reference path costs a json.Marshal of the data, the
// sdk's jsoniter writer, and encoding/json re-scanning the whole result to
// compact it (Event implements json.Marshaler); here the data is marshaled
// once and the attributes are appended around it.
//
// What the reference path does, and is mirrored below:
//   - New trims id, type and subject (EventContextV1 setters), drops an
//     empty subject and a zero time, and sets datacontenttype
//     application/json;
//   - SetData stores nil as no data, a []byte as data_base64, and anything
//     else as json.Marshal's output;
//   - Validate requires id, source and type (eventcontext_v1.go);
//   - WriteJson (event_marshal.go) writes specversion, id, source, type,
//     subject, datacontenttype, time, data in that order, strings with
//     jsoniter's ConfigFastest, then encoding/json's compaction escapes
//     HTML characters (appendJSONString does both at once).
func marshalStructured(typ, source, subject string, data any, at time.Time, id string) ([]byte, error) {
	if id == "" {
		id = uuid.NewString()
	}
	payload, isBase64, err := marshalData(data)
	if err != nil {
		return nil, fmt.Errorf("encode %s data: %w", typ, err)
	}
	m := structuredMessage{
		id:      strings.TrimSpace(id),
		source:  renderSource(source),
		typ:     strings.TrimSpace(typ),
		subject: strings.TrimSpace(subject),
		at:      at,
		payload: payload, isBase64: isBase64,
	}
	if err := checkRequired(m.id, m.source, m.typ); err != nil {
		return nil, fmt.Errorf("build %s: %w", typ, err)
	}
	return m.appendTo(make([]byte, 0, m.size())), nil
}

// structuredMessage is an event as the reference path holds it just
// before rendering: attributes trimmed, source re-rendered, data encoded.
type structuredMessage struct {
	id, source, typ, subject string
	at                       time.Time
	payload                  []byte
	isBase64                 bool
}

// appendTo renders the message in WriteJson's attribute order.
func (m *structuredMessage) appendTo(b []byte) []byte {
	b = append(b, `{"specversion":"1.0","id":`...)
	b = appendJSONString(b, m.id)
	b = append(b, `,"source":`...)
	b = appendJSONString(b, m.source)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, m.typ)
	if m.subject != "" {
		b = append(b, `,"subject":`...)
		b = appendJSONString(b, m.subject)
	}
	b = append(b, `,"datacontenttype":"`+ContentTypeJSON+`"`...)
	if !m.at.IsZero() {
		// types.FormatTime; RFC 3339 output needs no escaping.
		b = append(b, `,"time":"`...)
		b = m.at.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	switch {
	case m.payload == nil:
	case m.isBase64:
		b = append(b, `,"data_base64":"`...)
		b = base64.StdEncoding.AppendEncode(b, m.payload)
		b = append(b, '"')
	default:
		// json.Marshal output is compact and HTML-escaped already:
		// the reference path's compaction leaves it unchanged.
		b = append(b, `,"data":`...)
		b = append(b, m.payload...)
	}
	return append(b, '}')
}

// size is the rendered size when no string needs escaping, so that the
// output is allocated once in the common case.
func (m *structuredMessage) size() int {
	n := len(`{"specversion":"1.0","id":"","source":"","type":"","subject":"","datacontenttype":"application/json","time":"2006-01-02T15:04:05.999999999+07:00","data_base64":""}`)
	n += len(m.id) + len(m.source) + len(m.typ) + len(m.subject)
	if m.isBase64 {
		return n + base64.StdEncoding.EncodedLen(len(m.payload))
	}
	return n + len(m.payload)
}

// marshalData encodes the data as SetData(application/json, data) does.
func marshalData(data any) (payload []byte, isBase64 bool, err error) {
	switch d := data.(type) {
	case nil:
		return nil, false, nil
	case []byte:
		return d, true, nil
	case *Run:
		if d == nil {
			break // json.Marshal writes null
		}
		if payload, err = d.AppendJSON(make([]byte, 0, d.sizeHint())); err == nil {
			return payload, false, nil
		}
	case Run:
		return marshalData(&d)
	}
	// The reference encoding, and its error for a Run that fails above.
	payload, err = json.Marshal(data)
	return payload, false, err
}

// renderSource returns the source as the sdk renders it: parsed as a URL
// and printed again, or "" when it does not parse.
func renderSource(s string) string {
	if isPlainPath(s) {
		return s // what url.Parse(s).String() returns, without the work
	}
	u, err := url.Parse(s)
	if err != nil {
		return ""
	}
	return u.String()
}

// isPlainPath reports a relative path made of unreserved characters and
// slashes ("flyball/timer/timer-1"): url.Parse reads it as a path with no
// scheme (no colon), no authority (no leading //), no query or fragment,
// and nothing to escape, so it renders unchanged.
func isPlainPath(s string) bool {
	if s == "" || strings.HasPrefix(s, "//") {
		return false
	}
	for i := range len(s) {
		if !isPlainPathByte(s[i]) {
			return false
		}
	}
	return true
}

// isPlainPathByte reports an unreserved character (RFC 3986) or a slash.
func isPlainPathByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return c == '-' || c == '.' || c == '_' || c == '~' || c == '/'
}

// checkRequired is what Validate refuses in an event built by New: an
// empty id, source or type. The error is the sdk's (a map, so the same
// errors.As and message text), with the messages Validate gives.
func checkRequired(id, source, typ string) error {
	sourceOK := strings.TrimSpace(source) != ""
	if id != "" && sourceOK && typ != "" {
		return nil
	}
	errs := event.ValidationError{}
	if id == "" {
		errs["id"] = errors.New("MUST be a non-empty string")
	}
	if !sourceOK {
		errs["source"] = errors.New("REQUIRED")
	}
	if typ == "" {
		errs["type"] = errors.New("MUST be a non-empty string")
	}
	return errs
}

// appendJSONString appends s as a JSON string, byte for byte as the
// reference path renders it: jsoniter's ConfigFastest writer (\", \\, \n,
// \r, \t, \u00XX for other control bytes, everything else verbatim,
// invalid UTF-8 included), then encoding/json's compaction with HTML
// escaping (<, >, & as \u003c, \u003e, \u0026; U+2028 and U+2029 as
// \u2028 and \u2029).
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c == 0xE2 && i+2 < len(s) && s[i+1] == 0x80 && s[i+2]&^1 == 0xA8 {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[s[i+2]&0xF])
			i += 3
			start = i
			continue
		}
		if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
			i++
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default: // other control bytes, and <, >, &
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
