package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
)

// WithToken sends token as "Authorization: Bearer <token>" with every
// request, for servers with ACLs on (docs/security.md). The token is
// never part of an error.
func WithToken(token string) Option {
	return func(c *Client) {
		c.auth = ""
		if token != "" {
			c.auth = "Bearer " + token
		}
	}
}

// WithTLSConfig sets the TLS configuration of the default transport (a
// CA pool, a client certificate for mutual TLS). Not with WithHTTPClient.
func WithTLSConfig(cfg *tls.Config) Option {
	return func(c *Client) { c.tls = cfg }
}

// WithCAFile trusts the PEM certificates in path (besides the system's
// roots) for an https server URL; New reads the file. Not with
// WithHTTPClient.
func WithCAFile(path string) Option {
	return func(c *Client) { c.caFile = path }
}

// caConfig returns base (or a new config) trusting the certificates in file.
func caConfig(base *tls.Config, file string) (*tls.Config, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("client: CA file: %w", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if base != nil {
		cfg = base.Clone()
	}
	pool := cfg.RootCAs
	if pool == nil {
		if pool, err = x509.SystemCertPool(); err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("client: CA file %s holds no PEM certificate", file)
	}
	cfg.RootCAs = pool
	return cfg, nil
}

// Call sends one request to an endpoint this package has no method for
// yet (the /v1/acl routes, newer APIs): in, if not nil, is sent as JSON;
// a 2xx answer is decoded into out (nil: discarded); any other answer is
// an *Error.
func (c *Client) Call(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("client: %s %s: encoding request: %w", method, path, err)
		}
	} else if method == http.MethodPost || method == http.MethodPut {
		body = []byte{}
	}
	return c.do(ctx, method, path, body, out)
}

// WithBearer returns a client sharing c's connections that sends token
// instead of c's (for a service acting with its callers' tokens).
func (c *Client) WithBearer(token string) *Client {
	cp := &Client{base: c.base, http: c.http, userAgent: c.userAgent, tls: c.tls, caFile: c.caFile}
	if token != "" {
		cp.auth = "Bearer " + token
	}
	return cp
}
