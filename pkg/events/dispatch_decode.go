package events

// DecodeDispatch decodes the data of a run.due event. It accepts exactly
// what DecodeData accepts, with the same result and errors, but takes a
// fast path for what the timer writes: one flat object of the Dispatch
// fields, each a plain ASCII string without escapes. The executor decodes
// one dispatch per run, and encoding/json's strict decoder (reflection,
// a Decoder per call, time.Time through its Unmarshaler) was most of that.
func DecodeDispatch(e Event, d *Dispatch) error {
	if ct := e.DataContentType(); (ct == "" || ct == ContentTypeJSON) && fastDispatch(e.Data(), d) {
		return nil
	}
	return DecodeData(e, d)
}

// fastDispatch decodes b into d when b is a flat object whose keys are
// Dispatch field names (exact case, each once) with plain string values.
// It reports false, leaving d alone, for anything else.
func fastDispatch(b []byte, d *Dispatch) bool {
	s := jsonScanner{b: b}
	s.ws()
	if !s.consume('{') {
		return false
	}
	var out Dispatch
	var seen uint8
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
		val, ok := s.plainString()
		if !ok {
			return false
		}
		quoted := b[start:s.i]
		var bit uint8
		switch string(key) {
		case "dispatchId":
			bit, out.DispatchID = 1, string(val)
		case "taskId":
			bit, out.TaskID = 2, string(val)
		case "scheduledAt":
			bit = 4
			if out.ScheduledAt.UnmarshalJSON(quoted) != nil {
				return false
			}
		case "firedAt":
			bit = 8
			if out.FiredAt.UnmarshalJSON(quoted) != nil {
				return false
			}
		case "source":
			bit, out.Source = 16, string(val)
		case "reason":
			bit, out.Reason = 32, string(val)
		default:
			return false
		}
		if seen&bit != 0 {
			return false // a repeated key: encoding/json's rules decide
		}
		seen |= bit
		s.ws()
		if s.consume(',') {
			continue
		}
		if !s.consume('}') {
			return false
		}
		break
	}
	s.ws()
	if s.i != len(b) {
		return false
	}
	*d = out
	return true
}

// plainString reads the string at s.i and returns its content when it is
// printable ASCII without escapes, whose bytes are its value as they stand.
func (s *jsonScanner) plainString() ([]byte, bool) {
	if !s.consume('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c < 0x20 || c >= 0x80 || c == '\\':
			return nil, false
		}
		s.i++
	}
	return nil, false
}
