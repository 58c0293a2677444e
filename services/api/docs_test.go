package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/flyballhq/flyball/services/internal/docexamples"
)

// docRequest is one HTTP API call shown in the docs.
type docRequest struct {
	where  string
	method string
	path   string // with the query
	header http.Header
	body   string
}

// docFiles maps the files the docs' requests send with -d @file to their
// content: docs/operations.md updates the task its create example made.
var docFiles = map[string]string{
	"orders-health.json": `{"id":"orders-health","job":"orders","target":{"http":{"url":"https://orders.example/healthz","timeout":"10s"}},"schedule":{"interval":"30s"}}`,
}

// TestDocsAPIRequestsWork sends every curl call of the README and
// docs/operations.md to a running stack, in the docs' order (deletes last),
// and fails on any answer that says the example itself is wrong: 400 (a bad
// body or parameter, naming the field), 401 (the auth header), 405, a
// 404, or 422 (the governor rejected it). A 404 for a
// dead letter this stack does not have (sequence 42) is fine; a task the
// docs call must exist.
func TestDocsAPIRequestsWork(t *testing.T) {
	t.Parallel()
	b := setup(t, http.StatusOK)
	root := docexamples.Root(t)
	vars := strings.NewReplacer("$FLYBALL_API", b.base, "$TOKEN", token, "http://127.0.0.1:8080", b.base)
	var reqs []docRequest
	for _, f := range []string{"README.md", "docs/operations.md"} {
		blocks, err := docexamples.Blocks(root, f)
		if err != nil {
			t.Fatal(err)
		}
		for i := range blocks {
			blocks[i].Body = vars.Replace(blocks[i].Body)
		}
		cmds, err := docexamples.Commands(blocks, "curl", "api")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cmds {
			r, ok, err := parseCurl(c, b.base)
			if err != nil {
				t.Fatalf("%s: %v", c.Block.Where(), err)
			}
			if ok {
				reqs = append(reqs, r)
			}
		}
	}
	// Deletes last, so every other call finds its task.
	reqs = docexamples.MoveLast(reqs, func(r docRequest) bool { return r.method == http.MethodDelete })
	if len(reqs) < 15 {
		t.Fatalf("found %d API calls in the docs, want at least 15: is the parser still finding them?", len(reqs))
	}
	for _, r := range reqs {
		got := b.sendAsCurl(t, r)
		switch {
		case got.status == http.StatusNotFound && got.str("field") == "seq" && strings.HasPrefix(r.path, "/api/v1/deadletter/"):
			// a dead letter this stack does not have; every task the
			// docs call exists (they create it first)
		case got.status >= 400:
			t.Errorf("%s: %s %s: status %d: %s", r.where, r.method, r.path, got.status, got.raw)
		}
	}
}

// parseCurl reads a curl command (or the docs' api() shorthand, which adds
// the bearer token) aimed at base. ok is false for calls elsewhere (the
// demo target, metrics).
func parseCurl(c docexamples.Command, base string) (docRequest, bool, error) {
	r := docRequest{where: c.Block.Where(), header: http.Header{}}
	if c.Words[0] == "api" {
		if len(c.Words) > 1 && c.Words[1] == "()" {
			return r, false, nil // the shorthand's definition
		}
		r.header.Set("Authorization", "Bearer "+token)
	}
	words := c.Words[1:]
	for i := 0; i < len(words); i++ {
		w := words[i]
		value := func() (string, error) {
			if i+1 == len(words) {
				return "", &curlError{w + " without a value"}
			}
			i++
			return words[i], nil
		}
		switch {
		case w == "-s" || w == "-sS" || w == "-S":
		case w == "-X":
			v, err := value()
			if err != nil {
				return r, false, err
			}
			r.method = v
		case w == "-H":
			v, err := value()
			if err != nil {
				return r, false, err
			}
			name, val, ok := strings.Cut(v, ":")
			if !ok {
				return r, false, &curlError{"header " + v + " is not Name: value"}
			}
			r.header.Set(name, strings.TrimSpace(val))
		case w == "-d":
			v, err := value()
			if err != nil {
				return r, false, err
			}
			if name, ok := strings.CutPrefix(v, "@"); ok {
				if v, ok = docFiles[name]; !ok {
					return r, false, &curlError{"-d @" + name + ": add the file to docFiles"}
				}
			}
			r.body = v
		case strings.HasPrefix(w, "-"):
			return r, false, &curlError{"curl option " + w + " is not understood by this check"}
		case strings.HasPrefix(w, "http://") || strings.HasPrefix(w, "https://"):
			if !strings.HasPrefix(w, base+"/") {
				return r, false, nil
			}
			r.path = strings.TrimPrefix(w, base)
		default:
			return r, false, &curlError{"unexpected argument " + w}
		}
	}
	if r.path == "" {
		return r, false, &curlError{"no URL"}
	}
	if r.method == "" {
		r.method = http.MethodGet
		if r.body != "" {
			r.method = http.MethodPost
		}
	}
	return r, true, nil
}

type curlError struct{ msg string }

func (e *curlError) Error() string { return e.msg }

// sendAsCurl makes the call as curl would: -d sends its body as
// application/x-www-form-urlencoded unless a header says otherwise.
func (b *bundle) sendAsCurl(t *testing.T, r docRequest) *reply {
	t.Helper()
	if r.body != "" && r.header.Get("Content-Type") == "" {
		r.header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	return b.send(t, r.method, r.path, r.header, r.body)
}
