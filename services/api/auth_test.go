package api_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/api"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/stack"
)

// TestTwoAuthorizationHeadersAreRefused: Authorization takes one value. A
// request with two was judged by the first alone, so a second header (from
// a proxy, or a client's mistake) was ignored whatever it said.
func TestTwoAuthorizationHeadersAreRefused(t *testing.T) {
	t.Parallel()
	b, _ := apiOnly(t)
	for _, second := range []string{"Bearer wrong-token-0123456789", "Bearer " + token} {
		h := http.Header{}
		h.Add("Authorization", "Bearer "+token)
		h.Add("Authorization", second)
		r := b.send(t, http.MethodGet, "/api/v1/runtime", h, "")
		expect(t, "two Authorization headers ("+second+")", r, http.StatusUnauthorized, "Authorization")
		if strings.Contains(string(r.raw), token) {
			t.Fatalf("the answer quotes the token: %s", r.raw)
		}
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
	srv := natstest.StartWithStreams(t)
	_, js := srv.Connect(t)
	st, err := stack.Start(context.Background(), stack.Config{
		JS: js, Services: []string{"api"}, APIAddr: "127.0.0.1:0", APITokens: []string{token},
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
	if got := status(added); got != http.StatusForbidden {
		t.Fatalf("a token not yet added: status %d, want 403", got)
	}
	if err := a.SetTokens([]string{added}); err != nil {
		t.Fatal(err)
	}
	if got := status(added); got != http.StatusOK {
		t.Errorf("the added token: status %d, want 200", got)
	}
	if got := status(token); got != http.StatusForbidden {
		t.Errorf("the removed token: status %d, want 403", got)
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
