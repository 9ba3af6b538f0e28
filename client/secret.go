package client

import (
	"context"
	"encoding/json"
	"net/url"
	"time"
)

// SecretInfo is what the server shows of a TLS secret: never its key.
type SecretInfo struct {
	Namespace   string    `json:"namespace"`
	Name        string    `json:"name"`
	Type        string    `json:"type"`
	Subject     string    `json:"subject"`
	Issuer      string    `json:"issuer"`
	DNSNames    []string  `json:"dns_names"`
	IPAddresses []string  `json:"ip_addresses,omitempty"`
	NotBefore   time.Time `json:"not_before"`
	NotAfter    time.Time `json:"not_after"`
	Fingerprint string    `json:"fingerprint_sha256"`
	KeyType     string    `json:"key_type"`
	Chain       int       `json:"chain_certificates"`
	CA          int       `json:"ca_certificates"`
	Revision    int64     `json:"revision"`
}

// TLSSecret is a secret to create: PEM certificate chain, key and the
// optional CA (ca.crt) that verifies client certificates; or, with Type
// "ca", CA certificates only (CA).
type TLSSecret struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Type      string `json:"type"`
	Cert      string `json:"cert"`
	Key       string `json:"key"`
	CA        string `json:"ca,omitempty"`
}

// SecretResult answers a secret write.
type SecretResult struct {
	Revision int64      `json:"revision"`
	Action   string     `json:"action"` // created, replaced, unchanged
	Secret   SecretInfo `json:"secret"`
}

// PutSecret creates s, or replaces it when replace is set.
func (c *Client) PutSecret(ctx context.Context, s TLSSecret, replace bool) (*SecretResult, error) {
	if s.Type == "" {
		s.Type = "tls"
	}
	body, _ := json.Marshal(s)
	path := "/v1/secrets"
	if replace {
		path += "?replace=true"
	}
	var res SecretResult
	if err := c.do(ctx, "POST", path, body, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// ListSecrets lists the secrets of namespace ("" for every readable one).
func (c *Client) ListSecrets(ctx context.Context, namespace string) ([]SecretInfo, error) {
	var res struct {
		Items []SecretInfo `json:"items"`
	}
	path := "/v1/secrets"
	if namespace != "" {
		path += "?namespace=" + url.QueryEscape(namespace)
	}
	err := c.do(ctx, "GET", path, nil, &res)
	return res.Items, err
}

// GetSecret returns one secret's metadata.
func (c *Client) GetSecret(ctx context.Context, namespace, name string) (*SecretInfo, error) {
	var res SecretInfo
	if err := c.do(ctx, "GET", "/v1/secrets/"+url.PathEscape(namespace)+"/"+url.PathEscape(name), nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// DeleteSecret deletes one secret and returns the revision.
func (c *Client) DeleteSecret(ctx context.Context, namespace, name string) (int64, error) {
	var res struct {
		Revision int64 `json:"revision"`
	}
	err := c.do(ctx, "DELETE", "/v1/secrets/"+url.PathEscape(namespace)+"/"+url.PathEscape(name), nil, &res)
	return res.Revision, err
}
