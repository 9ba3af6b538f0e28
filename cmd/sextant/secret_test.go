package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/secret/secrettest"

	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// testCert writes a self-signed certificate and its key for names into
// dir and returns their paths.
func testCert(t *testing.T, dir, base string, notAfter time.Time, names ...string) (certFile, keyFile string) {
	t.Helper()
	c, k := secrettest.Pair(t, notAfter, names...)
	certFile, keyFile = filepath.Join(dir, base+".crt"), filepath.Join(dir, base+".key")
	if err := os.WriteFile(certFile, c, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, k, 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestSecretCommands: secret create tls checks the PEM (a key that does not
// match, an expired certificate: refused naming the field), stores it,
// refuses a second create without --replace, rotates with --replace, and
// list/get show metadata only, never the key or the PEM.
func TestSecretCommands(t *testing.T) {
	url := apitest.Start(t).URL
	dir := t.TempDir()
	cert, key := testCert(t, dir, "shop", time.Now().Add(24*time.Hour), "shop.example.com", "*.shop.example.com")
	_, otherKey := testCert(t, dir, "other", time.Now().Add(24*time.Hour), "other.example.com")
	old, oldKey := testCert(t, dir, "old", time.Now().Add(-time.Hour), "shop.example.com")

	out, err := runOn(t, url, "", "secret", "create", "tls", "shop-cert", "--cert", cert, "--key", otherKey)
	if err == nil || !strings.Contains(out+err.Error(), "key") || !strings.Contains(out+err.Error(), "does not match") {
		t.Errorf("mismatched key: %v\n%s", err, out)
	}
	out, err = runOn(t, url, "", "secret", "create", "tls", "shop-cert", "--cert", old, "--key", oldKey)
	if err == nil || !strings.Contains(out+err.Error(), "expired") {
		t.Errorf("expired certificate: %v\n%s", err, out)
	}
	if out, err = runOn(t, url, "", "secret", "create", "tls", "shop-cert", "--cert", cert, "--key", key, "--ca", cert); err != nil ||
		!strings.Contains(out, "secret default/shop-cert created") || !strings.Contains(out, "shop.example.com,*.shop.example.com") {
		t.Fatalf("create: %v\n%s", err, out)
	}
	if out, err = runOn(t, url, "", "secret", "create", "tls", "shop-cert", "--cert", cert, "--key", key); err == nil {
		t.Errorf("a second create without --replace: %s", out)
	}
	cert2, key2 := testCert(t, dir, "shop2", time.Now().Add(48*time.Hour), "shop.example.com")
	if out, err = runOn(t, url, "", "secret", "create", "tls", "shop-cert", "--cert", cert2, "--key", key2, "--replace"); err != nil || !strings.Contains(out, "replaced") {
		t.Fatalf("replace: %v\n%s", err, out)
	}
	js, err := runOn(t, url, "", "secret", "get", "shop-cert", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, _ := os.ReadFile(key2)
	certPEM, _ := os.ReadFile(cert2)
	for _, leak := range []string{"PRIVATE KEY", "BEGIN CERTIFICATE", string(keyPEM[40:80]), string(certPEM[40:80])} {
		if strings.Contains(js, leak) {
			t.Errorf("secret get shows %q:\n%s", leak, js)
		}
	}
	var info struct {
		DNSNames    []string  `json:"dns_names"`
		NotAfter    time.Time `json:"not_after"`
		Fingerprint string    `json:"fingerprint_sha256"`
		CA          int       `json:"ca_certificates"`
	}
	if err := json.Unmarshal([]byte(js), &info); err != nil || len(info.DNSNames) != 1 || len(info.Fingerprint) != 64 || info.CA != 0 ||
		info.NotAfter.Before(time.Now().Add(47*time.Hour)) {
		t.Errorf("get: %v %+v", err, info)
	}
	if out, err = runOn(t, url, "", "secret", "list"); err != nil || !strings.Contains(out, "shop-cert") || strings.Contains(out, "PRIVATE") {
		t.Errorf("list: %v\n%s", err, out)
	}
	if out, err = runOn(t, url, "", "secret", "delete", "shop-cert"); err != nil {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	if out, err = runOn(t, url, "", "secret", "get", "shop-cert"); err == nil || !strings.Contains(out+err.Error(), "no secret") {
		t.Errorf("get after delete: %v\n%s", err, out)
	}
}
