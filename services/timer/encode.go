package timer

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
)

// runDueEncoder renders run.due events.
//
// events.Marshal builds every event through the CloudEvents sdk (event.New,
// SetData, Validate, then two JSON passes): in a burst of dispatches it was
// most of the timer's CPU. A run.due has a fixed shape, so the encoder
// writes it directly when every value is plain (printable ASCII that no
// JSON encoder escapes, years 0-9999), and calls events.Marshal otherwise.
// The output is byte for byte what events.Marshal produces:
// TestRunDueEncoderMatchesMarshal compares them on many inputs, and
// newRunDueEncoder compares them once at start-up and uses events.Marshal
// alone if the codec's rendering ever changes.
type runDueEncoder struct {
	// source is the event source (the timer instance) as events.Marshal
	// renders it, quotes included: the sdk parses it as a URI reference and
	// re-serialises it.
	source []byte
	// raw is the source as given.
	raw  string
	fast bool
}

func newRunDueEncoder(source string) runDueEncoder {
	e := runDueEncoder{raw: source}
	probe := time.Date(2026, time.November, 22, 7, 0, 0, 123456789, time.UTC)
	want, err := marshalRunDue(source, "probe-task", probe.Add(-time.Second), probe, "baseline-interval", probe.Add(-time.Hour))
	if err != nil {
		return e
	}
	var attrs struct {
		Source json.RawMessage `json:"source"`
	}
	if json.Unmarshal(want, &attrs) != nil || len(attrs.Source) == 0 {
		return e
	}
	e.source = bytes.Clone(attrs.Source)
	e.fast = true
	got, err := e.encode("probe-task", probe.Add(-time.Second), probe, "baseline-interval", probe.Add(-time.Hour))
	e.fast = err == nil && bytes.Equal(got, want)
	return e
}

// encode renders the run.due of task id for the slot scheduledAt, fired at
// firedAt (also the event time), of the schedule created at created (zero:
// none). The times must be UTC.
func (e *runDueEncoder) encode(id string, scheduledAt, firedAt time.Time, source string, created time.Time) ([]byte, error) {
	if !e.fast || id == "" || !plain(id) || !plain(source) || !jsonYear(scheduledAt) || !jsonYear(firedAt) || !jsonYear(created) {
		return marshalRunDue(e.raw, id, scheduledAt, firedAt, source, created)
	}
	const (
		timeLen = len(time.RFC3339Nano)
		fixed   = len(`{"specversion":"1.0","id":"","source":,"type":"","subject":"","datacontenttype":"","time":"",`+
			`"data":{"dispatchId":"","taskId":"","scheduledAt":"","firedAt":"","source":"","taskCreatedAt":""}}`) +
			len(events.TypeRunDue) + len(events.ContentTypeJSON)
	)
	ms := scheduledAt.UnixMilli()
	b := make([]byte, 0, fixed+len(e.source)+4*len(id)+2*20+4*timeLen+len(source))
	b = append(b, `{"specversion":"1.0","id":"`...)
	b = appendDispatchID(b, id, ms)
	b = append(b, `","source":`...)
	b = append(b, e.source...)
	b = append(b, `,"type":"`+events.TypeRunDue+`","subject":"`...)
	b = append(b, id...)
	b = append(b, `","datacontenttype":"`+events.ContentTypeJSON+`","time":"`...)
	b = firedAt.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","data":{"dispatchId":"`...)
	b = appendDispatchID(b, id, ms)
	b = append(b, `","taskId":"`...)
	b = append(b, id...)
	b = append(b, `","scheduledAt":"`...)
	b = scheduledAt.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","firedAt":"`...)
	b = firedAt.AppendFormat(b, time.RFC3339Nano)
	if source != "" {
		b = append(b, `","source":"`...)
		b = append(b, source...)
	}
	if !created.IsZero() {
		b = append(b, `","taskCreatedAt":"`...)
		b = created.AppendFormat(b, time.RFC3339Nano)
	}
	b = append(b, `"}}`...)
	return b, nil
}

// appendDispatchID appends events.DispatchID(id, t) for t.UnixMilli() == ms.
func appendDispatchID(b []byte, id string, ms int64) []byte {
	b = append(b, id...)
	b = append(b, ':')
	return strconv.AppendInt(b, ms, 10)
}

// marshalRunDue is the general path: the run.due built by events.Marshal.
func marshalRunDue(eventSource, id string, scheduledAt, firedAt time.Time, source string, created time.Time) ([]byte, error) {
	d := events.Dispatch{
		DispatchID:    events.DispatchID(id, scheduledAt),
		TaskID:        id,
		ScheduledAt:   scheduledAt,
		FiredAt:       firedAt,
		Source:        source,
		TaskCreatedAt: created,
	}
	return events.Marshal(events.TypeRunDue, eventSource, id, d, firedAt, d.DispatchID)
}

// plain reports whether s is written verbatim inside a JSON string by every
// encoder on the way (jsoniter in the sdk, encoding/json with HTML
// escaping): printable ASCII other than the quote, backslash and <, >, &.
func plain(s string) bool {
	for i := range len(s) {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// jsonYear reports whether encoding/json can render t (it refuses years
// outside 0-9999).
func jsonYear(t time.Time) bool {
	y := t.Year()
	return y >= 0 && y <= 9999
}
