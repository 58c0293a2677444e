package events

// DecodeDispatch decodes the data of a run.due event. It accepts exactly
// what DecodeData accepts, with the same result and errors, but takes a
// fast path for what the timer writes: one flat object of the Dispatch
// fields. The executor decodes
// one dispatch per run, and encoding/json's strict decoder (reflection,
// a Decoder per call, time.Time through its Unmarshaler) was most of that.
func DecodeDispatch(e Event, d *Dispatch) error {
	if fastPathApplies(e) && fastDispatch(e.Data(), d) {
		return nil
	}
	return DecodeData(e, d)
}

// fastDispatch is the fast path of DecodeDispatch (see fastRun).
func fastDispatch(b []byte, d *Dispatch) bool {
	var out Dispatch
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
	*d = out
	return true
}

// setField sets one Dispatch field (see fastRun).
func (d *Dispatch) setField(key string, raw []byte) (bit uint32, ok bool) {
	switch key {
	case "dispatchId":
		return 1, setString(raw, &d.DispatchID)
	case "taskId":
		return 2, setString(raw, &d.TaskID)
	case "scheduledAt":
		return 4, setTime(raw, &d.ScheduledAt)
	case "firedAt":
		return 8, setTime(raw, &d.FiredAt)
	case "source":
		return 16, setString(raw, &d.Source)
	case "reason":
		return 32, setString(raw, &d.Reason)
	case "taskCreatedAt":
		return 64, setTime(raw, &d.TaskCreatedAt)
	}
	return 0, false
}

// plainString reads the string at s.i and returns its content when it is
// printable ASCII without escapes, whose bytes are its value as they stand.
func (s *jsonScanner) plainString() ([]byte, bool) {
	if !s.consume('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) && s.b[s.i] < 0x80 && strPlain[s.b[s.i]] {
		s.i++
	}
	if s.i < len(s.b) && s.b[s.i] == '"' {
		s.i++
		return s.b[start : s.i-1], true
	}
	return nil, false
}
