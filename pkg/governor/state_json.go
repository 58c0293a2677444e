package governor

import (
	"encoding/json"
	"strconv"
	"time"
)

// AppendJSON appends the JSON encoding of s to b: byte for byte what
// json.Marshal(s) writes, and an error where json.Marshal fails (a time
// outside years 0-9999). The governor stores one state per decision, and
// json.Marshal's reflection was a third of a decision's CPU.
func (s *State) AppendJSON(b []byte) ([]byte, error) {
	w := jsonWriter{b: b}
	w.b = append(w.b, `{"taskId":`...)
	w.str(s.TaskID)
	w.timeOmitZero(`,"nextRunAt":`, s.NextRunAt)
	w.strOmitEmpty(`,"source":`, string(s.Source))
	if len(s.Trail) > 0 {
		w.b = append(w.b, `,"trail":[`...)
		for i, t := range s.Trail {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.str(t)
		}
		w.b = append(w.b, ']')
	}
	w.timeOmitZero(`,"decidedAt":`, s.DecidedAt)
	w.timeOmitZero(`,"createdAt":`, s.CreatedAt)
	w.strOmitEmpty(`,"input":`, string(s.Input))
	w.intOmitEmpty(`,"failures":`, int64(s.Failures))
	if s.Runs != 0 {
		w.b = append(w.b, `,"runs":`...)
		w.b = strconv.AppendUint(w.b, s.Runs, 10)
	}
	w.timeOmitZero(`,"lastScheduledAt":`, s.LastScheduledAt)
	w.strOmitEmpty(`,"lastDispatchId":`, s.LastDispatchID)
	w.strOmitEmpty(`,"lastOutcome":`, s.LastOutcome)
	w.timeOmitZero(`,"lastSuccessAt":`, s.LastSuccessAt)
	w.timeOmitZero(`,"lastFailureAt":`, s.LastFailureAt)
	if s.Paused {
		w.b = append(w.b, `,"paused":true`...)
	}
	w.timeOmitZero(`,"pausedUntil":`, s.PausedUntil)
	w.strOmitEmpty(`,"pauseReason":`, s.PauseReason)
	if h := s.IntervalHint; h != nil {
		w.b = append(w.b, `,"intervalHint":{"interval":`...)
		w.b = strconv.AppendInt(w.b, int64(h.Interval), 10)
		w.b = append(w.b, `,"expiresAt":`...)
		w.time(h.ExpiresAt)
		w.strOmitEmpty(`,"reason":`, h.Reason)
		w.b = append(w.b, '}')
	}
	if h := s.OneShotHint; h != nil {
		w.b = append(w.b, `,"oneShotHint":{"at":`...)
		w.time(h.At)
		w.b = append(w.b, `,"expiresAt":`...)
		w.time(h.ExpiresAt)
		w.strOmitEmpty(`,"reason":`, h.Reason)
		w.b = append(w.b, '}')
	}
	w.strOmitEmpty(`,"lastCommandId":`, s.LastCommandID)
	if s.Deleted {
		w.b = append(w.b, `,"deleted":true`...)
	}
	w.timeOmitZero(`,"lastActivityAt":`, s.LastActivityAt)
	w.strOmitEmpty(`,"lastFingerprint":`, s.LastFingerprint)
	w.intOmitEmpty(`,"unchangedRuns":`, int64(s.UnchangedRuns))
	w.intOmitEmpty(`,"adaptiveInterval":`, int64(s.AdaptiveInterval))
	w.timeOmitZero(`,"breakerOpenUntil":`, s.BreakerOpenUntil)
	if d := s.DeadLetter; d != nil {
		w.b = append(w.b, `,"deadLetter":{`...)
		comma := false
		if d.DispatchID != "" {
			w.b = append(w.b, `"dispatchId":`...)
			w.str(d.DispatchID)
			comma = true
		}
		if d.Reason != "" {
			if comma {
				w.b = append(w.b, ',')
			}
			w.b = append(w.b, `"reason":`...)
			w.str(d.Reason)
			comma = true
		}
		if comma {
			w.b = append(w.b, ',')
		}
		w.b = append(w.b, `"at":`...)
		w.time(d.At)
		w.b = append(w.b, `,"recheckAt":`...)
		w.time(d.RecheckAt)
		w.b = append(w.b, '}')
	}
	w.timeOmitZero(`,"requeuedAt":`, s.RequeuedAt)
	w.intOmitEmpty(`,"catchUpPending":`, int64(s.CatchUpPending))
	if s.Budget != (RunLedger{}) {
		w.b = append(w.b, `,"budget":{`...)
		if s.Budget.Hour != 0 {
			w.b = append(w.b, `"hour":`...)
			w.b = strconv.AppendInt(w.b, s.Budget.Hour, 10)
			w.b = append(w.b, ',')
		}
		w.b = append(w.b, `"counts":[`...)
		for i, c := range s.Budget.Counts {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.b = strconv.AppendUint(w.b, uint64(c), 10)
		}
		w.b = append(w.b, "]}"...)
	}
	w.b = append(w.b, '}')
	return w.b, w.err
}

// jsonWriter appends JSON values, keeping the first error.
type jsonWriter struct {
	b   []byte
	err error
}

// str appends s as a JSON string. Printable ASCII that encoding/json
// writes as it stands is copied; anything else (quotes, backslashes,
// control characters, <, > and &, which it escapes for HTML, and non-ASCII
// text) is left to encoding/json.
func (w *jsonWriter) str(s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			w.b = append(w.b, q...)
			return
		}
	}
	w.b = append(w.b, '"')
	w.b = append(w.b, s...)
	w.b = append(w.b, '"')
}

func (w *jsonWriter) strOmitEmpty(key, s string) {
	if s != "" {
		w.b = append(w.b, key...)
		w.str(s)
	}
}

func (w *jsonWriter) intOmitEmpty(key string, n int64) {
	if n != 0 {
		w.b = append(w.b, key...)
		w.b = strconv.AppendInt(w.b, n, 10)
	}
}

// time appends t as time.Time.MarshalJSON does (RFC 3339 with nanoseconds,
// and an error outside years 0-9999).
func (w *jsonWriter) time(t time.Time) {
	w.b = append(w.b, '"')
	b, err := t.AppendText(w.b)
	if err != nil {
		if w.err == nil {
			w.err = err
		}
		return
	}
	w.b = append(b, '"')
}

func (w *jsonWriter) timeOmitZero(key string, t time.Time) {
	if !t.IsZero() {
		w.b = append(w.b, key...)
		w.time(t)
	}
}
