package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// RoundTripperOptions configure a RoundTripper; the zero value is usable.
type RoundTripperOptions struct {
	// Base sends each attempt to the picked instance (default: a transport
	// from NewTransport).
	Base http.RoundTripper
	// Pick are the pick options of every request; a request's context can
	// carry others (WithPickOptions).
	Pick PickOptions
	// MaxRetries bounds the retries of an idempotent request on another
	// instance (default 2; negative: none). See RoundTripper.
	MaxRetries int
	// Recorder, if set, receives one CallRecord per attempt (e.g. a
	// CallLog).
	Recorder CallRecorder
	// OnRecordError hears recorder failures (nil: ignored); the request
	// itself is not failed by them.
	OnRecordError func(error)
}

// RoundTripper is an http.RoundTripper for URLs whose host is the name of a
// service in the View's namespace: http://orders/path. A host with a port
// is refused (it is an address, not a service).
//
// For each request it picks an instance from the View (adding the service
// on first use, waiting at most for the request's context), sends the
// request to the instance's host:port with the Host header left as the
// service name, and reports the outcome to the policy: an answer below 500
// is a success, 429 and 503 a rejection, other 5xx a failure, a transport
// error a failure or a timeout. Idempotent requests (GET, HEAD, OPTIONS,
// TRACE, PUT, DELETE, or any request with an Idempotency-Key header) whose
// body can be sent again are retried on another instance after a transport
// error, 429, 502, 503 or 504, at most MaxRetries times. Latency is measured
// to the answer's headers.
type RoundTripper struct {
	v    *View
	opts RoundTripperOptions
}

// NewRoundTripper returns a RoundTripper that resolves hosts through v.
func NewRoundTripper(v *View, opts RoundTripperOptions) *RoundTripper {
	if opts.Base == nil {
		opts.Base = NewTransport()
	}
	if opts.MaxRetries == 0 {
		opts.MaxRetries = 2
	}
	if opts.MaxRetries < 0 {
		opts.MaxRetries = 0
	}
	return &RoundTripper{v: v, opts: opts}
}

// CloseIdleConnections closes the idle connections of the base transport,
// if it can (http.Client.CloseIdleConnections calls it).
func (rt *RoundTripper) CloseIdleConnections() {
	if c, ok := rt.opts.Base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

type pickOptionsKey struct{}

// WithPickOptions returns a context whose requests through a RoundTripper
// pick with opts instead of the RoundTripper's options.
func WithPickOptions(ctx context.Context, opts PickOptions) context.Context {
	return context.WithValue(ctx, pickOptionsKey{}, opts)
}

// maxRepick bounds the picks spent looking for an instance not tried yet.
const maxRepick = 8

// RoundTrip implements http.RoundTripper. It may be called from many
// goroutines at once.
func (rt *RoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	service := req.URL.Hostname()
	if req.URL.Port() != "" {
		closeBody(req)
		return nil, fmt.Errorf("client: round trip %s: %w: the host must be a service name, without a port", req.URL.Redacted(), ErrInvalidPick)
	}
	opts := rt.opts.Pick
	if o, ok := ctx.Value(pickOptionsKey{}).(PickOptions); ok {
		opts = o
	}
	if _, err := rt.v.State(service); errors.Is(err, ErrUnknownService) {
		if err := rt.v.Add(ctx, service); err != nil {
			closeBody(req)
			return nil, fmt.Errorf("client: round trip %s: %w", req.URL.Redacted(), err)
		}
	}
	retries := 0
	if retryable := idempotent(req) && (req.Body == nil || req.Body == http.NoBody || req.GetBody != nil); retryable {
		retries = rt.opts.MaxRetries
	}
	var tried []string
	serviceName := rt.v.ns + "/" + service
	for attempt := 0; ; attempt++ {
		p, err := rt.pickUntried(service, opts, tried)
		if err != nil {
			if attempt == 0 {
				closeBody(req) // later, the first attempt's Base closed it
			}
			return nil, fmt.Errorf("client: round trip %s: %w", req.URL.Redacted(), err)
		}
		tried = append(tried, p.Instance.ID)
		out, err := rt.attemptRequest(req, p.Addr(), attempt)
		if err != nil {
			return nil, err // only for a retry: the first attempt's Base closed req.Body
		}
		start := time.Now()
		resp, err := rt.opts.Base.RoundTrip(out)
		latency := time.Since(start)
		outcome, retry := classify(resp, err)
		p.Report(latency, outcome)
		rt.record(CallRecord{Start: start, Latency: latency, Status: status(resp), Outcome: outcome,
			Attempt: attempt, Service: serviceName, Endpoint: p.Addr()})
		if !retry || attempt >= retries || ctx.Err() != nil {
			return resp, err
		}
		if resp != nil {
			// Drain a little so the connection can be reused, then retry.
			io.CopyN(io.Discard, resp.Body, 4<<10)
			resp.Body.Close()
		}
	}
}

// closeBody closes req's body on an error before any attempt sent it: a
// RoundTripper closes the body on every path, errors included.
func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// pickUntried picks an instance not tried yet for this request, or, when
// every pickable instance was tried, any.
func (rt *RoundTripper) pickUntried(service string, opts PickOptions, tried []string) (Picked, error) {
	var p Picked
	var err error
	for range maxRepick {
		p, err = rt.v.Pick(service, opts)
		if err != nil || !contains(tried, p.Instance.ID) {
			return p, err
		}
		p.Report(0, OutcomeCanceled)
	}
	return rt.v.Pick(service, opts)
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// attemptRequest is req sent to addr: a shallow clone with a new URL host,
// the Host header kept as the service, and a fresh body for retries.
func (rt *RoundTripper) attemptRequest(req *http.Request, addr string, attempt int) (*http.Request, error) {
	out := req.Clone(req.Context())
	if out.Host == "" {
		out.Host = req.URL.Host
	}
	out.URL.Host = addr
	propagateTrace(out) // out's header is its own (Clone)
	if attempt > 0 && req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("client: round trip %s: body for a retry: %w", req.URL.Redacted(), err)
		}
		out.Body = body
	}
	return out, nil
}

// idempotent: RFC 9110's idempotent methods, or a request that says it
// may be repeated (as net/http's own retry rule).
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	_, k1 := req.Header["Idempotency-Key"]
	_, k2 := req.Header["X-Idempotency-Key"]
	return k1 || k2
}

// classify maps an attempt's result to an outcome and whether another
// instance may do better.
func classify(resp *http.Response, err error) (Outcome, bool) {
	if err != nil {
		o := OutcomeOf(err)
		return o, o != OutcomeCanceled
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return OutcomeRejected, true
	case http.StatusBadGateway, http.StatusGatewayTimeout:
		return OutcomeFailed, true
	}
	if resp.StatusCode >= 500 {
		return OutcomeFailed, false
	}
	return OutcomeSuccess, false
}

func status(resp *http.Response) int {
	if resp == nil {
		return 0
	}
	return resp.StatusCode
}

func (rt *RoundTripper) record(r CallRecord) {
	if rt.opts.Recorder == nil {
		return
	}
	if err := rt.opts.Recorder.RecordCall(r); err != nil && rt.opts.OnRecordError != nil {
		rt.opts.OnRecordError(err)
	}
}
