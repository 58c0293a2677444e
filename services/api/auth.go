package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// The WWW-Authenticate challenges of RFC 6750 section 3: the realm alone
// when no bearer token was sent (no error code: the client may not know
// it needs one), error="invalid_request" when the request is malformed
// (section 3.1: answered 400), error="invalid_token" when the token is
// not accepted.
const (
	challengeNoToken        = `Bearer realm="flyball"`
	challengeInvalidRequest = `Bearer realm="flyball", error="invalid_request"`
	challengeInvalidToken   = `Bearer realm="flyball", error="invalid_token"`
)

// auth requires a bearer token: 401 when none is sent (or not as a bearer
// token), 400 with error="invalid_request" when the request is malformed
// (more than one Authorization header, or one holding two credentials,
// "Bearer a, Bearer b"), and 401 with error="invalid_token" when the
// token is not one of the configured tokens. 403
// is RFC 6750's answer to a valid token without the permission, which the
// API does not have: every accepted token may do everything. The answer
// never quotes the token, nor says how many are accepted or which one
// was nearly sent, and the token is not logged.
func (s *Service) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Authorization takes one value: with two, the first alone was
		// judged and the second ignored, whatever it said.
		if n := len(r.Header.Values("Authorization")); n > 1 {
			w.Header().Set("WWW-Authenticate", challengeInvalidRequest)
			writeError(w, http.StatusBadRequest, "Authorization", fmt.Sprintf("%d Authorization headers: send one, 'Authorization: Bearer <token>'", n))
			return
		}
		h := r.Header.Get("Authorization")
		scheme, tok, _ := strings.Cut(h, " ")
		if h == "" || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
			w.Header().Set("WWW-Authenticate", challengeNoToken)
			writeError(w, http.StatusUnauthorized, "Authorization", "missing bearer token: send 'Authorization: Bearer <token>'")
			return
		}
		tok = strings.TrimSpace(tok)
		if s.validToken(tok) {
			next.ServeHTTP(w, r)
			return
		}
		// A bearer token (RFC 6750's b64token) holds no blank: one that
		// does is two credentials in one header, as a proxy joins two
		// headers ("Bearer a, Bearer b"). It is checked after the
		// accepted tokens, so a configured token with a blank still works.
		if strings.ContainsAny(tok, " \t") {
			w.Header().Set("WWW-Authenticate", challengeInvalidRequest)
			writeError(w, http.StatusBadRequest, "Authorization", "more than one credential in Authorization: send one, 'Authorization: Bearer <token>'")
			return
		}
		w.Header().Set("WWW-Authenticate", challengeInvalidToken)
		writeError(w, http.StatusUnauthorized, "Authorization", "token not accepted")
	})
}

// validToken compares digests in constant time, and with every accepted
// token whatever matched, so neither the content nor the length of a
// configured token, nor which one nearly matched, leaks through timing.
func (s *Service) validToken(tok string) bool {
	sum := sha256.Sum256([]byte(tok))
	ok := 0
	for _, t := range *s.tokens.Load() {
		ok |= subtle.ConstantTimeCompare(sum[:], t[:])
	}
	return ok == 1
}

// SetTokens replaces the accepted bearer tokens: the next request is
// checked against the new set, and a request being checked sees either
// set whole. An empty set, or a token shorter than MinTokenLength, is
// refused and the current tokens stay.
func (s *Service) SetTokens(tokens []string) error {
	if len(tokens) == 0 {
		return errors.New("at least one bearer token is required")
	}
	set := make([][sha256.Size]byte, 0, len(tokens))
	for i, t := range tokens {
		if len(t) < MinTokenLength {
			return fmt.Errorf("token %d: must be at least %d characters", i, MinTokenLength)
		}
		set = append(set, sha256.Sum256([]byte(t)))
	}
	s.tokens.Store(&set)
	return nil
}
