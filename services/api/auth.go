package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// auth requires a bearer token: 401 when none is sent (or not as a bearer
// token, or in more than one Authorization header), 403 when it is not one
// of the configured tokens.
func (s *Service) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Authorization takes one value: with two, the first alone was
		// judged and the second ignored, whatever it said.
		if n := len(r.Header.Values("Authorization")); n > 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="flyball"`)
			writeError(w, http.StatusUnauthorized, "Authorization", fmt.Sprintf("%d Authorization headers: send one, 'Authorization: Bearer <token>'", n))
			return
		}
		h := r.Header.Get("Authorization")
		scheme, tok, _ := strings.Cut(h, " ")
		if h == "" || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="flyball"`)
			writeError(w, http.StatusUnauthorized, "Authorization", "missing bearer token: send 'Authorization: Bearer <token>'")
			return
		}
		if !s.validToken(strings.TrimSpace(tok)) {
			writeError(w, http.StatusForbidden, "Authorization", "token not accepted")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// validToken compares digests in constant time, so neither the content nor
// the length of a configured token leaks through timing.
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
