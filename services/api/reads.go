package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/control"
	"github.com/flyballhq/flyball/services/internal/query"
)

// List limits of the read routes. GET /api/v1/tasks answers its maximum
// by default: it listed every task in one response, which at a million
// tasks is hundreds of MB for the client and the API alike, and scripts
// that read the whole list now follow next.
const (
	defaultLimit     = 50
	defaultTaskLimit = maxLimit
	maxLimit         = 1000
)

func (s *Service) listRuns(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	limit, ok := intParam(w, r, "limit", defaultLimit, 1, maxLimit)
	if !ok {
		return
	}
	before, ok := seqParam(w, r, "before")
	if !ok {
		return
	}
	runs, next, err := s.q.RunPage(r.Context(), id, query.Page{Limit: limit, Before: before})
	if err != nil {
		s.unavailable(w, r, err, "ask for fewer runs (limit)")
		return
	}
	body := map[string]any{"taskId": id, "runs": runs}
	if next > 0 {
		body["next"] = next
	}
	writeJSON(w, http.StatusOK, body)
}

func (s *Service) listDeadLetters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	task := q.Get("task")
	if q.Has("task") && !events.ValidToken(task) { // "?task=" too: not every task's entries
		writeError(w, http.StatusBadRequest, "task", fmt.Sprintf("must be a task id (1-%d characters of [A-Za-z0-9_-]), got %q", events.MaxIDLength, task))
		return
	}
	limit, ok := intParam(w, r, "limit", defaultLimit, 1, maxLimit)
	if !ok {
		return
	}
	before, ok := seqParam(w, r, "before")
	if !ok {
		return
	}
	list, next, err := s.q.DeadLetterPage(r.Context(), task, query.Page{Limit: limit, Before: before})
	if err != nil {
		s.unavailable(w, r, err, "ask for fewer entries (limit), or for one task's (task)")
		return
	}
	body := map[string]any{"deadLetters": list}
	if next > 0 {
		body["next"] = next
	}
	writeJSON(w, http.StatusOK, body)
}

// deadLetter loads the {seq} entry, answering 400 or 404 itself.
func (s *Service) deadLetter(w http.ResponseWriter, r *http.Request) (*query.DeadLetterRecord, bool) {
	raw := r.PathValue("seq")
	seq, err := strconv.ParseUint(raw, 10, 64)
	if err != nil || seq == 0 {
		writeError(w, http.StatusBadRequest, "seq", fmt.Sprintf("must be a DEADLETTER stream sequence (a positive integer), got %q", raw))
		return nil, false
	}
	rec, err := s.q.DeadLetter(r.Context(), seq)
	switch {
	case errors.Is(err, query.ErrNotFound):
		writeError(w, http.StatusNotFound, "seq", fmt.Sprintf("no dead letter at sequence %d", seq))
		return nil, false
	case err != nil:
		s.unavailable(w, r, err, "")
		return nil, false
	}
	return rec, true
}

func (s *Service) getDeadLetter(w http.ResponseWriter, r *http.Request) {
	if rec, ok := s.deadLetter(w, r); ok {
		writeJSON(w, http.StatusOK, rec)
	}
}

func (s *Service) retryDeadLetter(w http.ResponseWriter, r *http.Request) {
	var req ReasonRequest
	if !s.decodeBody(w, r, &req, true) {
		return
	}
	// Every problem at once: an oversized reason named only reason.
	problems := events.Reasons(control.ValidateReason(req.Reason))
	force := false
	if q := r.URL.Query(); q.Has("force") { // "?force=" too: neither true nor false
		v := q.Get("force")
		var err error
		if force, err = strconv.ParseBool(v); err != nil {
			problems = append(problems, events.FieldError{Field: "force", Rule: fmt.Sprintf("want true or false, got %q", v)})
		}
	}
	if len(problems) > 0 {
		writeInvalid(w, &events.ValidationError{Errors: problems})
		return
	}
	rec, ok := s.deadLetter(w, r)
	if !ok {
		return
	}
	id := rec.Entry.TaskID
	if !events.ValidToken(id) {
		writeError(w, http.StatusUnprocessableEntity, "seq", fmt.Sprintf("dead letter %d names no valid task (%s)", rec.Seq, rec.Error))
		return
	}
	// A task deleted since is "no such task" (404), as for every task
	// route, rather than the governor's rejection of the requeue (422);
	// a keyed retry of a requeue sent before gets that one's verdict.
	task, err := s.q.Task(r.Context(), id)
	switch {
	case errors.Is(err, query.ErrNotFound):
		if s.sentOr(w, r, events.VerbRequeued, id, http.StatusNotFound, "seq", fmt.Sprintf("dead letter %d is of task %q, which no longer exists", rec.Seq, id)) {
			s.send(w, r, events.VerbRequeued, id, rec.Requeue(req.Reason, force))
		}
		return
	case err != nil:
		s.unavailable(w, r, err, "")
		return
	}
	// The entry of a task deleted and created again under the same ID is
	// not the new task's: its requeue ran the new task once. It is a 409
	// unless ?force=true asks for that run. The requeue names the entry's
	// task (taskCreatedAt), so the governor rejects it if the task is
	// deleted and created again between this check and the requeue.
	// A keyed retry of a requeue sent before the task was created again
	// gets that requeue's verdict.
	if why := rec.Recreated(task); why != "" && !force &&
		!s.sentOr(w, r, events.VerbRequeued, id, http.StatusConflict, "seq", why+"; add ?force=true to run it anyway") {
		return
	}
	s.send(w, r, events.VerbRequeued, id, rec.Requeue(req.Reason, force))
}

func (s *Service) runtime(w http.ResponseWriter, r *http.Request) {
	list, err := s.q.Runtime(r.Context())
	if err != nil {
		s.unavailable(w, r, err, "")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"instances": list})
}

// health answers the summary with the staleness (by default, and at most,
// query.MaxStaleness) stalest tasks. 0 is allowed: a probe that wants the
// queue, the services and stalenessCount need not carry any entry.
func (s *Service) health(w http.ResponseWriter, r *http.Request) {
	n, ok := intParam(w, r, "staleness", query.MaxStaleness, 0, query.MaxStaleness)
	if !ok {
		return
	}
	h, err := s.q.Health(r.Context(), n)
	if err != nil {
		s.unavailable(w, r, err, "")
		return
	}
	writeJSON(w, http.StatusOK, h)
}
