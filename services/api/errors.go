package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/control"
)

// apiError is every error body: error is the HTTP status text, field names
// the offending input (a JSON path, a query or path parameter), detail
// says what is wrong. Validation failures list every problem in errors;
// command rejections also carry the command's id and status "rejected".
type apiError struct {
	Error     string               `json:"error"`
	Field     string               `json:"field,omitempty"`
	Detail    string               `json:"detail"`
	Errors    []events.FieldError  `json:"errors,omitempty"`
	CommandID string               `json:"commandId,omitempty"`
	Status    string               `json:"status,omitempty"`
	Rejected  *events.TaskRejected `json:"rejected,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, field, detail string) {
	writeJSON(w, code, errorBody(code, field, detail))
}

// errorReply is writeError's status and body.
func errorReply(code int, field, detail string) (int, any) {
	return code, errorBody(code, field, detail)
}

func errorBody(code int, field, detail string) apiError {
	e := apiError{Error: http.StatusText(code), Field: field, Detail: detail}
	if code == http.StatusBadRequest && field != "" {
		// A client reads every 400's problems from errors, as it does a
		// validation failure's; {"for": "-1h"} came with field alone.
		e.Errors = []events.FieldError{{Field: field, Rule: detail}}
	}
	return e
}

// unavailable answers 503 to a request whose read of NATS (or command)
// failed with err. When the request ran out of its time (withTimeLimit),
// it says which request did not finish in how long, and why it has no
// longer, then hint, if any: what to ask for instead.
func (s *Service) unavailable(w http.ResponseWriter, r *http.Request, err error, hint string) {
	detail := err.Error()
	if errors.Is(context.Cause(r.Context()), errOutOfTime) {
		detail = fmt.Sprintf("%s %s did not finish within %s, the time a request has to answer before the API's write timeout (%s) cuts its connection: %v",
			r.Method, r.URL.Path, s.cfg.handlerTimeout(), s.cfg.WriteTimeout, err)
		if hint != "" {
			detail += "; " + hint
		}
	}
	writeError(w, http.StatusServiceUnavailable, "", detail)
}

// writeInvalid answers 400 with every reason of a validation error.
func writeInvalid(w http.ResponseWriter, err error) {
	reasons := events.Reasons(err)
	writeJSON(w, http.StatusBadRequest, apiError{
		Error: http.StatusText(http.StatusBadRequest), Field: reasons[0].Field, Detail: err.Error(), Errors: reasons,
	})
}

// readBody reads the capped request body. It answers 413 itself and
// returns false when the body is too large, 408 when it did not arrive
// within Config.ReadTimeout.
func (s *Service) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		writeError(w, http.StatusRequestEntityTooLarge, "", fmt.Sprintf("body exceeds %d bytes", s.cfg.MaxBodyBytes))
		return nil, false
	case errors.Is(err, os.ErrDeadlineExceeded):
		writeError(w, http.StatusRequestTimeout, "", fmt.Sprintf("the body did not arrive within %s", s.cfg.ReadTimeout))
		return nil, false
	case err != nil:
		writeError(w, http.StatusBadRequest, "", "reading the body: "+err.Error())
		return nil, false
	}
	if raw, ok := r.Context().Value(rawBodyKey{}).(*[]byte); ok {
		*raw = body
	}
	return body, true
}

// decodeBody strictly decodes the JSON body into v, answering 400 (naming
// the field) or 413 itself. An empty body, or one of white space alone (as
// DELETE takes it), leaves v alone when optional.
func (s *Service) decodeBody(w http.ResponseWriter, r *http.Request, v any, optional bool) bool {
	body, ok := s.readBody(w, r)
	if !ok {
		return false
	}
	if optional && len(bytes.TrimSpace(body)) == 0 {
		return true
	}
	if err := control.DecodeJSON(body, v); err != nil {
		writeInvalid(w, err)
		return false
	}
	return true
}

// pathID returns the {id} path value, answering 400 if it is not a task ID.
func pathID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if !events.ValidToken(id) {
		writeError(w, http.StatusBadRequest, "id", fmt.Sprintf("must be 1-%d characters of [A-Za-z0-9_-], got %q", events.MaxIDLength, id))
		return "", false
	}
	return id, true
}

// intParam parses an optional integer query parameter in [lo, hi].
func intParam(w http.ResponseWriter, r *http.Request, name string, def, lo, hi int) (int, bool) {
	q := r.URL.Query()
	if !q.Has(name) {
		return def, true
	}
	v := q.Get(name) // given empty ("?limit="): refused, not the default
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		writeError(w, http.StatusBadRequest, name, fmt.Sprintf("must be an integer in [%d, %d], got %q", lo, hi, v))
		return 0, false
	}
	return n, true
}

// seqParam reads the stream-sequence cursor name (zero when absent),
// answering 400 itself.
func seqParam(w http.ResponseWriter, r *http.Request, name string) (uint64, bool) {
	q := r.URL.Query()
	if !q.Has(name) {
		return 0, true
	}
	v := q.Get(name) // given empty: refused, not the first page
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n == 0 {
		writeError(w, http.StatusBadRequest, name, fmt.Sprintf("must be a stream sequence (a positive integer, the \"next\" of the page before), got %q", v))
		return 0, false
	}
	return n, true
}
