package acl

import (
	"errors"
	"net/http"
	"time"
)

// Sentinels that Error wraps, for errors.Is.
var (
	ErrUnauthenticated  = errors.New("acl: unauthenticated")
	ErrPermissionDenied = errors.New("acl: permission denied")
	ErrRateLimited      = errors.New("acl: rate limited")
	ErrNotFound         = errors.New("acl: not found")
	ErrExists           = errors.New("acl: already exists")
	ErrBootstrapped     = errors.New("acl: already bootstrapped")
	ErrNotWrapped       = errors.New("acl: request did not pass through the guard")
)

// Error is a refusal with the API code it answers (docs/api.md): the
// HTTP and gRPC layers map Code to their status. Messages name what was
// missing and never include a secret.
type Error struct {
	Code       string // unauthenticated, permission_denied, resource_exhausted, not_found, conflict, internal
	Msg        string
	RetryAfter time.Duration // resource_exhausted only
	err        error
}

func (e *Error) Error() string { return "acl: " + e.Msg }
func (e *Error) Unwrap() error { return e.err }

// Status is the HTTP status of the error's code.
func (e *Error) Status() int {
	switch e.Code {
	case "unauthenticated":
		return http.StatusUnauthorized
	case "permission_denied":
		return http.StatusForbidden
	case "resource_exhausted":
		return http.StatusTooManyRequests
	case "not_found":
		return http.StatusNotFound
	case "conflict":
		return http.StatusConflict
	case "invalid_argument":
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

func unauthenticated(msg string) *Error {
	return &Error{Code: "unauthenticated", Msg: msg, err: ErrUnauthenticated}
}

func denied(msg string) *Error {
	return &Error{Code: "permission_denied", Msg: msg, err: ErrPermissionDenied}
}

var errNotWrapped = &Error{Code: "internal", Msg: "this route does not pass through the ACL guard; the request is refused", err: ErrNotWrapped}
