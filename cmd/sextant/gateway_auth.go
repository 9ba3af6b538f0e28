package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/gateway"
)

// serverAuthorizer authorizes the gateway's admin requests against the
// server that issued the caller's token, so that tokens, policies and
// revocations live in one place: reading a namespace's calls needs what
// listing its services needs (instances:read), reading the gateway's own
// state needs what push status needs (push:read on every namespace).
// Answers are cached for ttl per token and access, so a revocation takes
// effect within ttl.
type serverAuthorizer struct {
	c   *client.Client
	ttl time.Duration

	mu    sync.Mutex
	cache map[authKey]authAnswer
}

type authKey struct {
	token string
	a     gateway.AdminAccess
}

type authAnswer struct {
	status int
	err    error
	until  time.Time
}

func newServerAuthorizer(c *client.Client, ttl time.Duration) *serverAuthorizer {
	return &serverAuthorizer{c: c, ttl: ttl, cache: map[authKey]authAnswer{}}
}

func (s *serverAuthorizer) authorize(r *http.Request, a gateway.AdminAccess) (int, error) {
	token, ok := acl.ParseBearer(r.Header.Get("Authorization")) // as the server reads it
	if !ok {
		return http.StatusUnauthorized, errors.New("a token is required: Authorization: Bearer <token>")
	}
	k := authKey{token, a}
	now := time.Now()
	s.mu.Lock()
	ans, hit := s.cache[k]
	s.mu.Unlock()
	if hit && now.Before(ans.until) {
		return ans.status, ans.err
	}
	path := "/v1/push/status?node=-"
	if a.Calls && a.Namespace != "*" {
		path = "/v1/namespaces/" + a.Namespace + "/services"
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	err := s.c.WithBearer(token).Do(ctx, "GET", path, nil, nil)
	ans = authAnswer{status: http.StatusOK, until: now.Add(s.ttl)}
	var ce *client.Error
	switch {
	case err == nil:
	case errors.As(err, &ce) && (ce.Status == http.StatusUnauthorized || ce.Status == http.StatusForbidden):
		ans.status, ans.err = ce.Status, fmt.Errorf("the server refused this token: %s", ce.Message)
	default:
		// The server is unreachable: refuse, and do not cache it.
		return http.StatusServiceUnavailable, fmt.Errorf("cannot check the token with the server: %v", err)
	}
	s.mu.Lock()
	if len(s.cache) > 10000 {
		clear(s.cache)
	}
	s.cache[k] = ans
	s.mu.Unlock()
	return ans.status, ans.err
}
