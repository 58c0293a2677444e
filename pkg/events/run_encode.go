package events

import (
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// sizeHint is about how many bytes AppendJSON writes for r: its keys,
// times and numbers at their longest, plus its strings unescaped. Marshal
// starts the payload at this capacity; grown from nil it took six
// allocations and about twice the bytes per run event.
func (r *Run) sizeHint() int {
	n := runJSONFixed + len(r.DispatchID) + len(r.TaskID) + len(r.Body) + len(r.Fingerprint) +
		len(r.Error) + len(r.ErrorKind) + len(r.Reason) + len(r.Source) + len(r.BreakerKey)
	for _, s := range r.Trail {
		n += len(s) + 3
	}
	if q := r.Request; q != nil {
		n += len(`,"request":{"method":"","url":"","subject":"","headers":{}}`) + len(q.Method) + len(q.URL) + len(q.Subject)
		for k, v := range q.Headers {
			n += len(k) + len(v) + 6
		}
	}
	if d := r.Dispatch; d != nil {
		n += len(`,"dispatch":{"dispatchId":"","taskId":"","scheduledAt":"","firedAt":"","source":"","reason":"","taskCreatedAt":""}`) +
			3*len(time.RFC3339Nano) + len(d.DispatchID) + len(d.TaskID) + len(d.Source) + len(d.Reason)
	}
	return n
}

// runJSONFixed bounds what every run's encoding holds besides its strings:
// the keys and quotes of its scalar members, four times and two durations
// at their longest, and the integers.
const runJSONFixed = len(`{"dispatchId":"","taskId":"","scheduledAt":"","attempt":,"startedAt":"","finishedAt":"","duration":"","status":,"body":"","bodyTruncated":true,"fingerprint":"","error":"","errorKind":"","final":true,"retryIn":"","reason":"","source":"","trail":[],"breakerKey":"","taskCreatedAt":""}`) +
	4*len(time.RFC3339Nano) + 2*len("-2562047h47m16.854775808s") + 2*20

// AppendJSON appends the JSON encoding of r to b: byte for byte what
// json.Marshal(r) writes. It fails where json.Marshal does (a time outside
// years 0-9999), with a different error; Marshal then asks json.Marshal
// for its own. The executor encodes one run per attempt, and reflection
// was most of that.
func (r *Run) AppendJSON(b []byte) ([]byte, error) {
	w := JSONWriter{B: b}
	w.Raw(`{"dispatchId":`)
	w.String(r.DispatchID)
	w.Raw(`,"taskId":`)
	w.String(r.TaskID)
	w.Raw(`,"scheduledAt":`)
	w.Time(r.ScheduledAt)
	w.Int(`,"attempt":`, int64(r.Attempt))
	w.TimeOmitZero(`,"startedAt":`, r.StartedAt)
	w.TimeOmitZero(`,"finishedAt":`, r.FinishedAt)
	w.Duration(`,"duration":`, r.Duration)
	w.Int(`,"status":`, int64(r.Status))
	w.Str(`,"body":`, r.Body)
	w.Bool(`,"bodyTruncated":`, r.BodyTruncated)
	w.Str(`,"fingerprint":`, r.Fingerprint)
	if q := r.Request; q != nil {
		w.Raw(`,"request":{`)
		n := len(w.B)
		w.Str(`,"method":`, q.Method)
		w.Str(`,"url":`, q.URL)
		w.Str(`,"subject":`, q.Subject)
		if len(q.Headers) > 0 {
			w.Raw(`,"headers":{`)
			var buf [16]string // no allocation for up to 16 headers
			keys := buf[:0]
			for k := range q.Headers {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for i, k := range keys {
				if i > 0 {
					w.Raw(",")
				}
				w.String(k)
				w.Raw(":")
				w.String(q.Headers[k])
			}
			w.Raw("}")
		}
		if len(w.B) > n {
			w.B = append(w.B[:n], w.B[n+1:]...) // the first member's comma
		}
		w.Raw("}")
	}
	w.Str(`,"error":`, r.Error)
	w.Str(`,"errorKind":`, r.ErrorKind)
	w.Bool(`,"final":`, r.Final)
	w.Duration(`,"retryIn":`, r.RetryIn)
	w.Str(`,"reason":`, r.Reason)
	w.Str(`,"source":`, r.Source)
	w.Strings(`,"trail":`, r.Trail)
	w.Str(`,"breakerKey":`, r.BreakerKey)
	w.TimeOmitZero(`,"taskCreatedAt":`, r.TaskCreatedAt)
	if d := r.Dispatch; d != nil {
		w.Raw(`,"dispatch":{"dispatchId":`)
		w.String(d.DispatchID)
		w.Raw(`,"taskId":`)
		w.String(d.TaskID)
		w.Raw(`,"scheduledAt":`)
		w.Time(d.ScheduledAt)
		w.Raw(`,"firedAt":`)
		w.Time(d.FiredAt)
		w.Str(`,"source":`, d.Source)
		w.Str(`,"reason":`, d.Reason)
		w.TimeOmitZero(`,"taskCreatedAt":`, d.TaskCreatedAt)
		w.Raw("}")
	}
	w.Raw("}")
	return w.B, w.Err
}

// JSONWriter appends the members of a JSON object the way encoding/json
// writes them, and keeps the first error. Key arguments include the
// leading comma and the colon (`,"source":`). The hand-written encoders of
// hot payloads (Run here, the governor's State) are built on it.
type JSONWriter struct {
	B   []byte
	Err error
}

// Raw appends s as it stands.
func (w *JSONWriter) Raw(s string) { w.B = append(w.B, s...) }

// String appends s as a JSON string.
func (w *JSONWriter) String(s string) { w.B = AppendJSONString(w.B, s) }

// Str appends an omitempty string member.
func (w *JSONWriter) Str(key, s string) {
	if s != "" {
		w.B = append(w.B, key...)
		w.B = AppendJSONString(w.B, s)
	}
}

// Strings appends an omitempty array-of-strings member.
func (w *JSONWriter) Strings(key string, v []string) {
	if len(v) == 0 {
		return
	}
	w.B = append(w.B, key...)
	for i, s := range v {
		if i == 0 {
			w.B = append(w.B, '[')
		} else {
			w.B = append(w.B, ',')
		}
		w.B = AppendJSONString(w.B, s)
	}
	w.B = append(w.B, ']')
}

// Int appends an omitempty integer member.
func (w *JSONWriter) Int(key string, n int64) {
	if n != 0 {
		w.B = append(w.B, key...)
		w.B = strconv.AppendInt(w.B, n, 10)
	}
}

// Bool appends an omitempty bool member.
func (w *JSONWriter) Bool(key string, v bool) {
	if v {
		w.B = append(w.B, key...)
		w.B = append(w.B, "true"...)
	}
}

// Duration appends an omitempty Duration member, as its MarshalJSON does.
func (w *JSONWriter) Duration(key string, d Duration) {
	if d != 0 {
		w.B = append(w.B, key...)
		w.B = d.appendJSON(w.B)
	}
}

// Time appends t as time.Time.MarshalJSON does.
func (w *JSONWriter) Time(t time.Time) {
	var err error
	if w.B, err = AppendJSONTime(w.B, t); err != nil && w.Err == nil {
		w.Err = err
	}
}

// TimeOmitZero appends an omitzero time member.
func (w *JSONWriter) TimeOmitZero(key string, t time.Time) {
	if !t.IsZero() {
		w.B = append(w.B, key...)
		w.Time(t)
	}
}

// AppendJSONTime appends t as time.Time.MarshalJSON writes it: RFC 3339
// with nanoseconds, quoted. Outside years 0-9999 it fails, as that does,
// and returns dst unchanged.
func AppendJSONTime(dst []byte, t time.Time) ([]byte, error) {
	b, err := t.AppendText(append(dst, '"'))
	if err != nil {
		return dst, err
	}
	return append(b, '"'), nil
}

// JSONStringPrefix returns the longest prefix of s that AppendJSONString
// writes in at most n bytes, its quotes not counted, and that length:
// width is the encoded length of s when the prefix is s whole. The cut
// never splits a character (each byte of invalid UTF-8 counts as one,
// written \ufffd), so the prefix's encoding is the start of s's. Only as
// much of s is read as the prefix holds, plus one character.
func JSONStringPrefix(s string, n int) (prefix string, width int) {
	for i := 0; i < len(s); {
		size, w := 1, 1
		if c := s[i]; c < utf8.RuneSelf {
			switch {
			case c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&':
			case c == '"', c == '\\', c == '\b', c == '\f', c == '\n', c == '\r', c == '\t':
				w = 2
			default:
				w = 6 // \u00XX
			}
		} else {
			var r rune
			r, size = utf8.DecodeRuneInString(s[i:])
			w = size
			if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
				w = 6 // \ufffd, \u2028, \u2029
			}
		}
		if width+w > n {
			return s[:i], width
		}
		width += w
		i += size
	}
	return s, width
}

// AppendJSONString appends s as a JSON string exactly as encoding/json
// writes it by default: ", \ and control characters escaped (\b \f \n \r
// \t short), <, > and & as \u003c \u003e \u0026, U+2028 and U+2029
// escaped, and each byte of invalid UTF-8 as \ufffd. (The envelope's
// appendJSONString follows the sdk's jsoniter rules instead, which differ
// for \b, \f and invalid UTF-8.)
func AppendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '\\', '"':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
