package api_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/api"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/stack"
)

// TestTwoAuthorizationHeadersAreABadRequest: Authorization takes one
// value. A request with two was judged by the first alone, so a second
// header (from a proxy, or a client's mistake) was ignored whatever it
// said; then it was a 401 as if no token had been sent, which tells a
// client to send one. RFC 6750 section 3.1 calls it a malformed request:
// 400 with error="invalid_request", naming Authorization. So is one
// header holding two credentials, as a proxy joins two headers. A token
// with a blank that is configured is still accepted.
func TestTwoAuthorizationHeadersAreABadRequest(t *testing.T) {
	t.Parallel()
	b, a := apiService(t)
	const blank = "token with a blank 0123456789"
	if err := a.SetTokens([]string{token, blank}); err != nil {
		t.Fatal(err)
	}
	for _, second := range []string{"Bearer wrong-token-0123456789", "Bearer " + token, ""} {
		h := http.Header{}
		h.Add("Authorization", "Bearer "+token)
		h.Add("Authorization", second)
		r := b.send(t, http.MethodGet, "/api/v1/runtime", h, "")
		expectInvalidRequest(t, "two Authorization headers ("+second+")", r)
	}
	for _, joined := range []string{
		"Bearer " + token + ", Bearer wrong-token-0123456789",
		"Bearer wrong-token-0123456789, Bearer " + token,
		"Bearer " + token + ",Bearer " + token,
	} {
		r := b.do(t, http.MethodGet, "/api/v1/runtime", joined, "")
		expectInvalidRequest(t, "two credentials in one header ("+joined+")", r)
	}
	if r := b.do(t, http.MethodGet, "/api/v1/runtime", "Bearer "+blank, ""); r.status != http.StatusOK {
		t.Errorf("a configured token with a blank: status %d, want 200: %s", r.status, r.raw)
	}
}

// expectInvalidRequest fails unless r is a 400 naming the Authorization
// field with error="invalid_request" in its one challenge, and quotes no
// token.
func expectInvalidRequest(t *testing.T, what string, r *reply) {
	t.Helper()
	expect(t, what, r, http.StatusBadRequest, "Authorization")
	if got := r.header.Values("WWW-Authenticate"); len(got) != 1 || got[0] != invalidRequestChallenge {
		t.Errorf("%s: WWW-Authenticate %q, want %q", what, got, invalidRequestChallenge)
	}
	if strings.Contains(string(r.raw), token) || strings.Contains(string(r.raw), "wrong-token") {
		t.Errorf("%s: the answer quotes a token: %s", what, r.raw)
	}
}

// apiService starts NATS and the API alone, and returns the service too.
func apiService(t *testing.T) (*bundle, *api.Service) {
	t.Helper()
	b, _, a := startAPIOnly(t)
	return b, a
}

// startAPIOnly starts NATS and only the API service, and returns a
// client of it, the JetStream it uses and the service.
func startAPIOnly(t *testing.T) (*bundle, jetstream.JetStream, *api.Service) {
	t.Helper()
	return startAPIOnlyLogging(t, nil)
}

// startAPIOnlyLogging is startAPIOnly with the API logging to log (nil:
// slog.Default()).
func startAPIOnlyLogging(t *testing.T, log *slog.Logger) (*bundle, jetstream.JetStream, *api.Service) {
	t.Helper()
	srv := natstest.StartWithStreams(t)
	_, js := srv.Connect(t)
	st, err := stack.Start(context.Background(), stack.Config{
		JS: js, Services: []string{"api"}, APIAddr: "127.0.0.1:0", APITokens: []string{token}, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	return &bundle{base: "http://" + st.API.Addr()}, js, st.API
}

// TestSetTokensTakesEffectForTheNextRequest: the tokens were read once at
// start, so rotating one needed a restart, which drops requests in
// flight. SetTokens replaces the set for the next request; an empty set
// or a short token is refused and the current set stays.
func TestSetTokensTakesEffectForTheNextRequest(t *testing.T) {
	t.Parallel()
	b, a := apiService(t)
	const added = "added-token-0123456789"
	status := func(tok string) int { return b.do(t, http.MethodGet, "/api/v1/openapi.json", "Bearer "+tok, "").status }
	if got := status(added); got != http.StatusUnauthorized {
		t.Fatalf("a token not yet added: status %d, want 401", got)
	}
	if err := a.SetTokens([]string{added}); err != nil {
		t.Fatal(err)
	}
	if got := status(added); got != http.StatusOK {
		t.Errorf("the added token: status %d, want 200", got)
	}
	if got := status(token); got != http.StatusUnauthorized {
		t.Errorf("the removed token: status %d, want 401", got)
	}
	for _, bad := range [][]string{nil, {added, "short"}} {
		if err := a.SetTokens(bad); err == nil {
			t.Errorf("SetTokens(%d tokens, one short or none) accepted", len(bad))
		}
		if got := status(added); got != http.StatusOK {
			t.Errorf("after a refused SetTokens the current token: status %d, want 200", got)
		}
	}
}

// TestSetTokensDuringRequests: requests checked while the set is
// replaced see one set whole (run with -race): a token in every set is
// always accepted.
func TestSetTokensDuringRequests(t *testing.T) {
	t.Parallel()
	b, a := apiService(t)
	const other = "other-token-0123456789"
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			set := []string{token}
			if i%2 == 0 {
				set = append(set, other)
			}
			if err := a.SetTokens(set); err != nil {
				t.Error(err)
				return
			}
		}
	})
	var requests sync.WaitGroup
	for range 4 {
		requests.Go(func() {
			for range 25 {
				req, _ := http.NewRequest(http.MethodGet, b.base+"/api/v1/openapi.json", http.NoBody)
				req.Header.Set("Authorization", "Bearer "+token)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("a token in every set: status %d during SetTokens, want 200", resp.StatusCode)
					return
				}
			}
		})
	}
	requests.Wait()
	close(done)
	wg.Wait()
}

// The WWW-Authenticate challenges of RFC 6750 section 3: a request without
// a bearer token gets the realm alone, a malformed one error="invalid_request"
// too, one whose token is not accepted error="invalid_token".
const (
	noTokenChallenge        = `Bearer realm="flyball"`
	invalidRequestChallenge = `Bearer realm="flyball", error="invalid_request"`
	invalidTokenChallenge   = `Bearer realm="flyball", error="invalid_token"`
)

// expectChallenge fails unless r is a 401 naming the Authorization field
// with the one WWW-Authenticate challenge want.
func expectChallenge(t *testing.T, what string, r *reply, want string) {
	t.Helper()
	expect(t, what, r, http.StatusUnauthorized, "Authorization")
	if got := r.header.Values("WWW-Authenticate"); len(got) != 1 || got[0] != want {
		t.Errorf("%s: WWW-Authenticate %q, want %q", what, got, want)
	}
}

// TestAWrongTokenIsUnauthorized: a token that is not accepted was a 403,
// which RFC 6750 keeps for a valid token without the permission; a client
// that retries 401s with a fresh token (and stops on 403) stopped. It is
// a 401 with error="invalid_token". The answer is the same for a token
// that is nearly right (one character off, a prefix) and for any other,
// whatever the number of accepted tokens, and never quotes the token.
func TestAWrongTokenIsUnauthorized(t *testing.T) {
	t.Parallel()
	b, a := apiService(t)
	wrong := []string{
		token[:len(token)-1] + "X", // one character off
		token[:api.MinTokenLength], // a prefix
		token + "0",                // one character more
		"unrelated-token-0123456789",
	}
	var first []byte
	for _, set := range [][]string{{token}, {token, "second-token-0123456789", "third-token-0123456789"}} {
		if err := a.SetTokens(set); err != nil {
			t.Fatal(err)
		}
		for i, tok := range wrong {
			what := fmt.Sprintf("wrong token %d with %d tokens accepted", i, len(set))
			r := b.do(t, http.MethodGet, "/api/v1/runtime", "Bearer "+tok, "")
			expectChallenge(t, what, r, invalidTokenChallenge)
			if first == nil {
				first = r.raw
			}
			if !bytes.Equal(r.raw, first) {
				t.Errorf("%s: body %s, want the same as every wrong token's, %s", what, r.raw, first)
			}
			if bytes.Contains(r.raw, []byte(tok)) || bytes.Contains(r.raw, []byte(token)) {
				t.Errorf("%s: the answer quotes a token: %s", what, r.raw)
			}
		}
	}
}
