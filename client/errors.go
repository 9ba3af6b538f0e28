package client

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Error is a non-2xx answer of the server. Code is the API's error code
// ("not_found", "invalid_argument", ...); Field, when set, is the JSON path of
// the offending request field, e.g. "instances[3].port".
//
// Branch on the kind with errors.Is(err, ErrNotFound) and friends; use
// errors.As to read Field and Message.
type Error struct {
	Status  int
	Code    string
	Message string
	Field   string
}

func (e *Error) Error() string {
	var sb strings.Builder
	sb.WriteString("client: ")
	if e.Code != "" {
		sb.WriteString(e.Code)
	} else {
		sb.WriteString("http ")
		sb.WriteString(strconv.Itoa(e.Status))
	}
	if e.Message != "" {
		sb.WriteString(": ")
		sb.WriteString(e.Message)
	}
	if e.Field != "" {
		sb.WriteString(" (field ")
		sb.WriteString(e.Field)
		sb.WriteString(")")
	}
	return sb.String()
}

// Is reports whether target is the sentinel of e's code, or of its HTTP
// status when the server sent no known code.
func (e *Error) Is(target error) bool {
	if s, ok := codeSentinel[e.Code]; ok {
		return s == target
	}
	return statusSentinel[e.Status] == target && target != nil
}

// Sentinels for the API's error codes, to use with errors.Is.
var (
	ErrInvalidArgument   = errors.New("client: invalid argument")
	ErrUnauthenticated   = errors.New("client: unauthenticated")
	ErrPermissionDenied  = errors.New("client: permission denied")
	ErrNotFound          = errors.New("client: not found")
	ErrConflict          = errors.New("client: conflict")
	ErrCompacted         = errors.New("client: revision compacted")
	ErrPayloadTooLarge   = errors.New("client: payload too large")
	ErrResourceExhausted = errors.New("client: resource exhausted")
	ErrInternal          = errors.New("client: internal server error")
	ErrUnavailable       = errors.New("client: unavailable")
	// ErrInsufficientStorage: a write refused because the server's disk is
	// nearly full; nothing was written, and writes resume once space is
	// freed (docs/robustness.md).
	ErrInsufficientStorage = errors.New("client: insufficient storage")
)

var codeSentinel = map[string]error{
	"invalid_argument":     ErrInvalidArgument,
	"unauthenticated":      ErrUnauthenticated,
	"permission_denied":    ErrPermissionDenied,
	"not_found":            ErrNotFound,
	"conflict":             ErrConflict,
	"compacted":            ErrCompacted,
	"payload_too_large":    ErrPayloadTooLarge,
	"resource_exhausted":   ErrResourceExhausted,
	"internal":             ErrInternal,
	"unavailable":          ErrUnavailable,
	"insufficient_storage": ErrInsufficientStorage,
}

var statusSentinel = map[int]error{
	http.StatusBadRequest:            ErrInvalidArgument,
	http.StatusUnauthorized:          ErrUnauthenticated,
	http.StatusForbidden:             ErrPermissionDenied,
	http.StatusNotFound:              ErrNotFound,
	http.StatusConflict:              ErrConflict,
	http.StatusGone:                  ErrCompacted,
	http.StatusRequestEntityTooLarge: ErrPayloadTooLarge,
	http.StatusTooManyRequests:       ErrResourceExhausted,
	http.StatusInternalServerError:   ErrInternal,
	http.StatusBadGateway:            ErrUnavailable,
	http.StatusServiceUnavailable:    ErrUnavailable,
	http.StatusGatewayTimeout:        ErrUnavailable,
	http.StatusInsufficientStorage:   ErrInsufficientStorage,
}

// parseError turns a non-2xx answer into an *Error. A body that is not the
// API's error shape (a proxy's HTML page, say) becomes the message, cut short.
func parseError(status int, body []byte) *Error {
	var eb struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Field   string `json:"field"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &eb) == nil && (eb.Error.Code != "" || eb.Error.Message != "") {
		return &Error{Status: status, Code: eb.Error.Code, Message: eb.Error.Message, Field: eb.Error.Field}
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 200 {
		cut := 200
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "..."
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &Error{Status: status, Message: msg}
}

// retryable reports whether err may pass if the same request is sent again
// later: transport failures and overload or unavailability answers.
func retryable(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return true
	}
	return errors.Is(e, ErrUnavailable) || errors.Is(e, ErrResourceExhausted) || errors.Is(e, ErrInternal)
}
