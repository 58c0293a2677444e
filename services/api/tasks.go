package api

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/control"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/services/internal/query"
)

// CommandResult is the answer to a command the governor accepted (status
// "accepted"), or that was stored but whose verdict is not known (status
// "pending": not answered in time, or the answer could not be read). A
// pending command is accepted or rejected when the governor reads it;
// detail says how to learn which.
type CommandResult struct {
	CommandID string               `json:"commandId"`
	Status    string               `json:"status"`
	Detail    string               `json:"detail,omitempty"`
	Accepted  *events.TaskAccepted `json:"accepted,omitempty"`
}

// send publishes a command and answers with the governor's verdict: 202
// accepted, or pending when it is stored with no verdict known, 422 rejected (naming the fields), 413 when the
// command is over the NATS server's max_payload (no retry mends that), 503
// when NATS refused the command otherwise, or when it may have been
// stored (status "unknown", with its commandId: control.ErrMaybeStored).
//
// With an Idempotency-Key header the command id is derived from the key,
// the command, the task, the URL path, the query, the body and any
// If-Match (idempotentID), so the same request retried within TASKS's
// duplicate window (2 minutes) is stored once and answered with the first
// one's verdict.
func (s *Service) send(w http.ResponseWriter, r *http.Request, verb events.Verb, id string, data any) {
	cmdID, ok := idempotentID(w, r, verb, id)
	if !ok {
		return
	}
	var ans *control.Answer
	var err error
	if cmdID == "" {
		cmdID, ans, err = s.ctl.Send(r.Context(), verb, id, data, s.cfg.AnswerTimeout)
	} else {
		cmdID, ans, err = s.ctl.SendID(r.Context(), verb, id, cmdID, data, s.cfg.AnswerTimeout)
	}
	code, body := commandReply(id, cmdID, ans, err, r.Header.Get("Idempotency-Key") != "", s.cfg.JS.Conn().MaxPayload())
	if res, ok := body.(CommandResult); verb == events.VerbCreated && ok && res.Status == "accepted" {
		// Only once accepted: a refused create points nowhere new, and a
		// pending one may yet be rejected (the task already exists: it
		// pointed at someone else's).
		w.Header().Set("Location", "/api/v1/tasks/"+id)
	}
	writeJSON(w, code, body)
}

// commandReply is the status and body answering command cmdID of task
// id, sent with an Idempotency-Key when keyed, given what
// control.Client.SendID returned. maxPayload is the NATS server's
// max_payload.
func commandReply(id, cmdID string, ans *control.Answer, err error, keyed bool, maxPayload int64) (int, any) {
	switch {
	case errors.Is(err, control.ErrStored):
		// Stored, verdict unknown: "it will still be applied" was false
		// (the governor may reject it), and "not stored" (an error after
		// the publish was acked) had the client send it again as a second
		// command.
		learn := fmt.Sprintf("to learn its verdict, send the request again with the same Idempotency-Key within 108 s (the command is stored once, and the retry is answered with its verdict), or read the task (GET /api/v1/tasks/%s) or TASKS (flyball.task.accepted.%s and flyball.task.rejected.%s, commandId %s)", id, id, id, cmdID)
		if !keyed {
			learn += "; this request had no Idempotency-Key, so sending it again is a second command"
		}
		return http.StatusAccepted, CommandResult{CommandID: cmdID, Status: "pending", Detail: err.Error() + "; " + learn}
	case jsutil.TooLarge(err):
		// A body under MaxBodyBytes can still make a command over the
		// server's max_payload; a 503 would have the client retry it.
		return errorReply(http.StatusRequestEntityTooLarge, "", fmt.Sprintf("command not stored: it is over the NATS server's max_payload (%d bytes): %v", maxPayload, err))
	case errors.Is(err, control.ErrMaybeStored):
		// The publish's ack was lost and publishing it again failed too:
		// TASKS may hold the command, and "not stored" had the client send
		// it again as a second one. The same Idempotency-Key stores it
		// once; without one, a retry is a new command.
		retry := "send it again with the same Idempotency-Key: it is stored once"
		if !keyed {
			retry = "look at the task (or TASKS) before sending it again: without an Idempotency-Key a retry is a new command"
		}
		return http.StatusServiceUnavailable, apiError{
			Error: http.StatusText(http.StatusServiceUnavailable), CommandID: cmdID, Status: "unknown",
			Detail: err.Error() + "; if it was, it is applied; " + retry,
		}
	case err != nil:
		return errorReply(http.StatusServiceUnavailable, "", "command not stored: "+err.Error())
	case ans.Rejected != nil:
		rej := ans.Rejected
		ve := &events.ValidationError{Errors: rej.Reasons}
		body := apiError{
			Error: http.StatusText(http.StatusUnprocessableEntity), Detail: ve.Error(), Errors: rej.Reasons,
			CommandID: cmdID, Status: "rejected", Rejected: rej,
		}
		if len(rej.Reasons) > 0 {
			body.Field = rej.Reasons[0].Field
		}
		if rej.Stale() {
			// A conditional update (If-Match) of a spec that changed since.
			// A governor older than ifRevision refuses it as an unknown
			// field: that is a 422, not a stale revision.
			body.Error = http.StatusText(http.StatusPreconditionFailed)
			return http.StatusPreconditionFailed, body
		}
		return http.StatusUnprocessableEntity, body
	default:
		return http.StatusAccepted, CommandResult{CommandID: cmdID, Status: "accepted", Accepted: ans.Accepted}
	}
}

// MaxIdempotencyKey bounds the Idempotency-Key header.
const MaxIdempotencyKey = 200

// rawBodyKey holds, in a request's context, a *[]byte that readBody fills
// with the body it read: idempotentID hashes it.
type rawBodyKey struct{}

// idempotentID returns the command id of a request with an
// Idempotency-Key header, "" without one, or answers 400 to a key that is
// empty, too long, not visible ASCII, or given twice.
func idempotentID(w http.ResponseWriter, r *http.Request, verb events.Verb, id string) (string, bool) {
	keys := r.Header.Values("Idempotency-Key")
	if len(keys) == 0 {
		return "", true
	}
	key := keys[0]
	rule := ""
	switch {
	case len(keys) > 1:
		rule = fmt.Sprintf("given %d times: send one", len(keys))
	case key == "" || len(key) > MaxIdempotencyKey:
		rule = fmt.Sprintf("must be 1-%d characters, got %d", MaxIdempotencyKey, len(key))
	case strings.IndexFunc(key, func(c rune) bool { return c < 0x21 || c > 0x7e }) >= 0:
		rule = "must be visible ASCII characters (no spaces)"
	}
	if rule != "" {
		writeError(w, http.StatusBadRequest, "Idempotency-Key", rule)
		return "", false
	}
	var body []byte
	if b, ok := r.Context().Value(rawBodyKey{}).(*[]byte); ok {
		body = *b
	}
	h := sha256.New()
	// The path too: a dead letter's retry names its entry there, not in
	// id (the task's), and two entries' retries under one key were one
	// command, the second answered with the first's verdict.
	parts := [][]byte{[]byte(verb.Type()), []byte(id), []byte(r.URL.Path), []byte(r.URL.RawQuery), []byte(key), body}
	if im := r.Header.Values("If-Match"); len(im) > 0 {
		// A conditional update names the revision it applies to: the same
		// key and body with another If-Match is another command, not a
		// retry answered with the first one's verdict. Left out when
		// absent, so the ids of other requests are as before.
		parts = append(parts, []byte("If-Match"), []byte(strings.Join(im, ",")))
	}
	for _, part := range parts {
		_ = binary.Write(h, binary.BigEndian, uint64(len(part)))
		h.Write(part)
	}
	return "api-idem:" + hex.EncodeToString(h.Sum(nil)), true
}

// existing answers 404 and returns false unless task id exists, or the
// request's command (verb) was sent before: see sentOr. Commands on a
// missing task would be rejected by the governor too; checking first
// gives the caller the right status code. A task whose stored spec does
// not decode exists: an update or a delete is the way to repair it.
func (s *Service) existing(w http.ResponseWriter, r *http.Request, verb events.Verb, id string) bool {
	_, err := s.q.Task(r.Context(), id)
	switch {
	case errors.Is(err, query.ErrNotFound):
		return s.sentOr(w, r, verb, id, http.StatusNotFound, "id", fmt.Sprintf("no task %q", id))
	case err != nil:
		s.unavailable(w, r, err, "")
		return false
	}
	return true
}

// sentOr reports whether TASKS holds, within its duplicate window, the
// command of a request with an Idempotency-Key: the request is a retry,
// to be answered with the first one's verdict by sending it again (send
// stores it once), not refused by a check of the task the first one may
// have changed (a retried DELETE found its own delete applied and
// answered 404), or of a time that has come since (a retried pause whose
// until had passed answered 400). Otherwise it answers the refusal
// (status, field, detail) the check found, or 400 (a bad key) or 503, and
// returns false.
func (s *Service) sentOr(w http.ResponseWriter, r *http.Request, verb events.Verb, id string, status int, field, detail string) bool {
	cmdID, ok := idempotentID(w, r, verb, id)
	if !ok {
		return false
	}
	if cmdID != "" {
		sent, err := s.ctl.Stored(r.Context(), verb, id, cmdID)
		if err != nil {
			s.unavailable(w, r, err, "")
			return false
		}
		if sent {
			return true
		}
	}
	writeError(w, status, field, detail)
	return false
}

func (s *Service) createTask(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	spec, err := control.DecodeSpec(body)
	if err == nil {
		err = s.cfg.Guard.CheckTarget(&spec)
	}
	if err != nil {
		writeInvalid(w, err)
		return
	}
	s.send(w, r, events.VerbCreated, spec.ID, spec)
}

func (s *Service) updateTask(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	var spec events.TaskSpec
	if !s.decodeBody(w, r, &spec, false) {
		return
	}
	// Every problem at once: a mismatched id named only id.
	var problems []events.FieldError
	spec.ID = cmp.Or(spec.ID, id)
	if spec.ID != id {
		problems = append(problems, events.FieldError{Field: "id", Rule: fmt.Sprintf("must equal the task id in the path %q, got %q", id, spec.ID)})
	}
	err := spec.Validate()
	if err == nil {
		err = s.cfg.Guard.CheckTarget(&spec)
	}
	if problems = append(problems, events.Reasons(err)...); len(problems) > 0 {
		writeInvalid(w, &events.ValidationError{Errors: problems})
		return
	}
	ifRevision, ok := ifMatch(w, r)
	if !ok {
		return
	}
	if s.existing(w, r, events.VerbUpdated, id) {
		s.send(w, r, events.VerbUpdated, id, events.TaskUpdate{TaskSpec: spec, IfRevision: ifRevision})
	}
}

// ifMatch reads the If-Match header of a PUT or a DELETE: the ETag of a
// GET, "<the spec's revision>", which the update or delete carries as
// ifRevision for the governor to compare with the stored spec's (412 when
// they differ); "*" or no header, zero (any revision). Anything else (a
// weak or list of ETags, a header given twice) is a 400 naming If-Match.
func ifMatch(w http.ResponseWriter, r *http.Request) (uint64, bool) {
	vals := r.Header.Values("If-Match")
	if len(vals) == 0 {
		return 0, true
	}
	v := strings.TrimSpace(vals[0])
	if len(vals) == 1 && v == "*" {
		return 0, true
	}
	unq, quoted := strings.CutPrefix(v, `"`)
	unq, closed := strings.CutSuffix(unq, `"`)
	n, err := strconv.ParseUint(unq, 10, 64)
	if len(vals) > 1 || !quoted || !closed || err != nil || n == 0 {
		writeError(w, http.StatusBadRequest, "If-Match", fmt.Sprintf("must be one ETag of GET /api/v1/tasks/{id} (a quoted revision, \"42\") or *, got %q", strings.Join(vals, ", ")))
		return 0, false
	}
	return n, true
}

func (s *Service) deleteTask(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	// The reason is a query parameter: a body (`{"reason": …}`, as pause
	// and resume take it) was dropped without a word.
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	if len(bytes.TrimSpace(body)) > 0 {
		writeError(w, http.StatusBadRequest, "body", "DELETE takes no body: give the reason as ?reason=…")
		return
	}
	reason := r.URL.Query().Get("reason")
	if err := control.ValidateReason(reason); err != nil {
		writeInvalid(w, err)
		return
	}
	ifRevision, ok := ifMatch(w, r)
	if !ok {
		return
	}
	if s.existing(w, r, events.VerbDeleted, id) {
		s.send(w, r, events.VerbDeleted, id, events.TaskDelete{TaskRef: events.TaskRef{ID: id, Reason: reason}, IfRevision: ifRevision})
	}
}

// PauseRequest is the body of POST /api/v1/tasks/{id}/pause. Without until
// or for, the pause lasts until a resume.
type PauseRequest struct {
	Until  *time.Time       `json:"until,omitempty"`
	For    *events.Duration `json:"for,omitempty"`
	Reason string           `json:"reason,omitempty"`
}

func (s *Service) pauseTask(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	var req PauseRequest
	if !s.decodeBody(w, r, &req, true) {
		return
	}
	now := s.cfg.Now().UTC()
	// Every problem is answered at once, as a validation failure's are:
	// {"for": "-1h"} with an oversized reason named only for.
	var problems []events.FieldError
	p := events.TaskPause{ID: id, Until: req.Until, Reason: req.Reason}
	// A "for" that is given must be positive: "0s" read as unset made a
	// pause meant to last no time last until a resume.
	switch {
	case req.Until != nil && req.For != nil:
		problems = append(problems, events.FieldError{Field: "for", Rule: "give until or for, not both"})
	case req.For != nil && *req.For <= 0:
		problems = append(problems, events.FieldError{Field: "for", Rule: fmt.Sprintf("must be positive, got %s", req.For)})
	case req.For != nil:
		t := now.Add(req.For.D())
		p.Until = &t
	}
	problems = append(problems, events.Reasons(control.ValidatePause(&p))...)
	// The one check that depends on when the request comes: a keyed
	// retry of a pause sent while its until was ahead gets that pause's
	// verdict (sentOr), not a 400 for a pause that was applied. (A "for"
	// is counted from now, but the command id hashes the body as sent,
	// so its retry is the same command.)
	var past string
	if req.Until != nil && !req.Until.After(now) {
		past = fmt.Sprintf("must be in the future, got %s", req.Until.Format(time.RFC3339))
	}
	switch {
	case len(problems) > 0:
		if past != "" {
			problems = append(problems, events.FieldError{Field: "until", Rule: past})
		}
		writeInvalid(w, &events.ValidationError{Errors: problems})
		return
	case past != "" && !s.sentOr(w, r, events.VerbPaused, id, http.StatusBadRequest, "until", past):
		return
	}
	if s.existing(w, r, events.VerbPaused, id) {
		s.send(w, r, events.VerbPaused, id, p)
	}
}

// ReasonRequest is the optional body of resume and dead-letter retry.
type ReasonRequest struct {
	Reason string `json:"reason,omitempty"`
}

func (s *Service) resumeTask(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	var req ReasonRequest
	if !s.decodeBody(w, r, &req, true) {
		return
	}
	if err := control.ValidateReason(req.Reason); err != nil {
		writeInvalid(w, err)
		return
	}
	if s.existing(w, r, events.VerbResumed, id) {
		s.send(w, r, events.VerbResumed, id, events.TaskRef{ID: id, Reason: req.Reason})
	}
}

// HintRequest is the body of POST /api/v1/tasks/{id}/hint.
type HintRequest struct {
	Interval events.Duration `json:"interval,omitempty"`
	At       *time.Time      `json:"at,omitempty"`
	TTL      events.Duration `json:"ttl,omitempty"`
	Reason   string          `json:"reason,omitempty"`
}

func (s *Service) hintTask(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	var req HintRequest
	if !s.decodeBody(w, r, &req, false) {
		return
	}
	h := events.TaskHint{ID: id, Interval: req.Interval, At: req.At, TTL: req.TTL, Reason: req.Reason}
	if err := control.ValidateHint(&h); err != nil {
		writeInvalid(w, err)
		return
	}
	if s.existing(w, r, events.VerbHinted, id) {
		s.send(w, r, events.VerbHinted, id, h)
	}
}

// RunNowRequest is the optional body of POST /api/v1/tasks/{id}/run-now.
type RunNowRequest struct {
	TTL    events.Duration `json:"ttl,omitempty"`
	Reason string          `json:"reason,omitempty"`
}

func (s *Service) runNow(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	var req RunNowRequest
	if !s.decodeBody(w, r, &req, true) {
		return
	}
	h := control.RunNow(id, req.TTL.D(), req.Reason)
	if err := control.ValidateHint(&h); err != nil {
		writeInvalid(w, err)
		return
	}
	if s.existing(w, r, events.VerbHinted, id) {
		s.send(w, r, events.VerbHinted, id, h)
	}
}

func (s *Service) getTask(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	v, err := s.q.Task(r.Context(), id)
	switch {
	case errors.Is(err, query.ErrNotFound):
		writeError(w, http.StatusNotFound, "id", fmt.Sprintf("no task %q", id))
	case err != nil:
		s.unavailable(w, r, err, "")
	default:
		// The spec's revision: a PUT's If-Match (a conditional update).
		w.Header().Set("ETag", fmt.Sprintf("%q", strconv.FormatUint(v.SpecRevision, 10)))
		writeJSON(w, http.StatusOK, v)
	}
}

func (s *Service) listTasks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	labels, err := query.ParseLabels(q["label"])
	if err != nil {
		writeInvalid(w, err)
		return
	}
	limit, ok := intParam(w, r, "limit", defaultTaskLimit, 1, maxLimit)
	if !ok {
		return
	}
	after := q.Get("after")
	if q.Has("after") && !events.ValidToken(after) { // "?after=" too: not the first page
		writeError(w, http.StatusBadRequest, "after", fmt.Sprintf("must be a task id (1-%d characters of [A-Za-z0-9_-], the \"next\" of the page before), got %q", events.MaxIDLength, after))
		return
	}
	job := q.Get("job")
	if q.Has("job") && job == "" { // "?job=": not every task
		writeError(w, http.StatusBadRequest, "job", "must be a job name, got \"\": leave the parameter out to list every job's tasks")
		return
	}
	filter := query.TaskFilter{Job: job, Labels: labels}
	tasks, next, err := s.q.TaskPage(r.Context(), filter, after, limit)
	if err != nil {
		hint := "ask for fewer tasks (limit)"
		if filter.Job != "" || len(filter.Labels) > 0 {
			hint = "a job or label filter reads the specs of the tasks after the cursor one by one until the page is full, so one that few tasks match reads most of them: " +
				"ask for a smaller limit, or list every match in one pass with flyball task list and the same --job and --label, without --limit"
		}
		s.unavailable(w, r, err, hint)
		return
	}
	body := map[string]any{"tasks": tasks}
	if next != "" {
		body["next"] = next
	}
	writeJSON(w, http.StatusOK, body)
}
