package api

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/docexamples"
)

// idempotentIDDoc is how docs/events.md's Nats-Msg-Id table says an
// Idempotency-Key's command id is made; TestDocsSayWhatAKeyedCommandIDHashes
// makes one so and compares it with idempotentID's.
const idempotentIDDoc = "`api-idem:` and the hex SHA-256 of, in this order, the command type " +
	"(`io.flyball.task.paused`), the task id, the URL path, the raw query string, the key and the raw body, " +
	"then, only when the request has `If-Match`, the text `If-Match` and its values joined by `,`; " +
	"each part preceded by its length as an 8-byte big-endian integer"

// TestDocsSayWhatAKeyedCommandIDHashes: docs/events.md said the id hashed
// "the command type, task, query, key and body", but it hashes the URL
// path (a dead letter's retry names its entry only there) and any
// If-Match too. The table now says what is hashed, in what order and how,
// and the id made that way is idempotentID's.
func TestDocsSayWhatAKeyedCommandIDHashes(t *testing.T) {
	t.Parallel()
	rows, err := docexamples.Table(docexamples.Root(t), "docs/events.md", "| producer | event | Nats-Msg-Id / id |")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range rows {
		if len(r) == 3 && strings.Contains(r[0], "HTTP API") && strings.Contains(r[1], "task.*") {
			found = true
			if !strings.Contains(r[2], idempotentIDDoc) {
				t.Errorf("docs/events.md, the HTTP API's task.* row: %q\ndoes not say %q", r[2], idempotentIDDoc)
			}
		}
	}
	if !found {
		t.Fatal("docs/events.md: no Nats-Msg-Id row for the HTTP API's task.* commands")
	}

	documented := func(verb events.Verb, id, path, query, key, body string, ifMatch []string) string {
		parts := []string{verb.Type(), id, path, query, key, body}
		if len(ifMatch) > 0 {
			parts = append(parts, "If-Match", strings.Join(ifMatch, ","))
		}
		h := sha256.New()
		for _, p := range parts {
			var n [8]byte
			binary.BigEndian.PutUint64(n[:], uint64(len(p)))
			h.Write(n[:])
			h.Write([]byte(p))
		}
		return "api-idem:" + hex.EncodeToString(h.Sum(nil))
	}
	for _, c := range []struct {
		method, target, body string
		verb                 events.Verb
		id                   string
		ifMatch              []string
	}{
		{http.MethodPost, "/api/v1/tasks/web/pause", `{"for":"1h"}`, events.VerbPaused, "web", nil},
		{http.MethodDelete, "/api/v1/tasks/web?reason=done", "", events.VerbDeleted, "web", []string{`"3"`}},
		{http.MethodPut, "/api/v1/tasks/web", `{"schedule":{"interval":"1m"}}`, events.VerbUpdated, "web", []string{`"3"`, `"4"`}},
		{http.MethodPost, "/api/v1/deadletter/7/retry?force=true", "", events.VerbRequeued, "web", nil},
	} {
		r := httptest.NewRequest(c.method, c.target, strings.NewReader(c.body))
		body := []byte(c.body) // as readBody keeps it
		r = r.WithContext(context.WithValue(r.Context(), rawBodyKey{}, &body))
		r.Header.Set("Idempotency-Key", "k-1")
		for _, v := range c.ifMatch {
			r.Header.Add("If-Match", v)
		}
		got, ok := idempotentID(httptest.NewRecorder(), r, c.verb, c.id)
		want := documented(c.verb, c.id, r.URL.Path, r.URL.RawQuery, "k-1", c.body, c.ifMatch)
		if !ok || got != want {
			t.Errorf("%s %s: idempotentID %q, the documented id %q", c.method, c.target, got, want)
		}
	}
}
