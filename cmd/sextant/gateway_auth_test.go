package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/gateway"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// The gateway's admin reads the Authorization header as the server does:
// the scheme is case-insensitive (RFC 9110) and spaces around the token
// do not matter, so a token the server accepts is accepted here too.
func TestServerAuthorizerBearerScheme(t *testing.T) {
	srv := apitest.StartWith(t, apitest.Options{ACL: acl.Options{Enabled: true}})
	resp, err := http.Post(srv.URL+"/v1/acl/bootstrap", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	var tok struct {
		Secret string `json:"secret"`
	}
	json.NewDecoder(resp.Body).Decode(&tok)
	resp.Body.Close()
	if tok.Secret == "" {
		t.Fatalf("bootstrap: %d", resp.StatusCode)
	}
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	a := newServerAuthorizer(c, time.Second)
	for _, tc := range []struct {
		header string
		status int
	}{
		{"Bearer " + tok.Secret, http.StatusOK},
		{"bearer " + tok.Secret, http.StatusOK},
		{"BEARER  " + tok.Secret + " ", http.StatusOK},
		{"Bearer sxt_0123456789abcdef01234567_00", http.StatusUnauthorized},
		{"Basic " + tok.Secret, http.StatusUnauthorized},
		{"", http.StatusUnauthorized},
	} {
		r := httptest.NewRequest("GET", "/v1/calls?service=default/orders", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		status, err := a.authorize(r, gateway.AdminAccess{Calls: true, Namespace: "default"})
		if status != tc.status || (err == nil) != (tc.status == http.StatusOK) {
			t.Errorf("Authorization %q: %d %v, want %d", tc.header, status, err, tc.status)
		}
	}
}
