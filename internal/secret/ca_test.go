package secret

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestCASecret: a CA-only secret is checked at create (PEM certificates,
// each valid now, no key or certificate beside them), shows its first
// certificate's metadata, and survives its stored form past its expiry.
func TestCASecret(t *testing.T) {
	now := time.Now()
	ca, key := pair(t, now.Add(time.Hour), "ca.test")
	old, _ := pair(t, now.Add(-time.Hour), "old.test")
	for name, tc := range map[string]struct {
		ca         []byte
		field, msg string
	}{
		"a key":   {key, "ca", `PEM block 1 is a "EC PRIVATE KEY", want CERTIFICATE`},
		"empty":   {nil, "ca", "no PEM CERTIFICATE block"},
		"expired": {append(append([]byte{}, ca...), old...), "ca", "certificate 2 (CN=old.test) expired at"},
	} {
		_, err := NewCA("default", "x", tc.ca, now)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(fe.Msg, tc.msg) {
			t.Errorf("%s: %v, want field %s saying %q", name, err, tc.field, tc.msg)
		}
	}
	s, err := NewCA("default", "backend-ca", ca, now)
	if err != nil {
		t.Fatal(err)
	}
	if i := s.Info(); i.Type != TypeCA || i.CA != 1 || i.Subject != "CN=ca.test" || i.Fingerprint == "" || i.KeyType != "" {
		t.Fatalf("info %+v", i)
	}
	back, err := Decode(s.Encode(), 7)
	if err != nil || back.Type != TypeCA || string(back.CA) != string(ca) || back.Info().Revision != 7 || back.Info().Subject != "CN=ca.test" {
		t.Fatalf("decode: %v %+v", err, back)
	}
	// Stored, then expired: still loads.
	expired := &Secret{Namespace: "default", Name: "e", Type: TypeCA, CA: old}
	if _, err := Decode(expired.Encode(), 1); err != nil {
		t.Fatalf("an expired stored CA: %v", err)
	}
}

// FuzzNewCA: a CA bundle from users is outside input; NewCA never panics,
// and what it accepts round-trips through the store's encoding.
func FuzzNewCA(f *testing.F) {
	cert, key := pair(f, time.Now().Add(time.Hour), "ca.test")
	f.Add(cert)
	f.Add(append(append([]byte{}, cert...), cert...))
	f.Add(key)
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Fuzz(func(t *testing.T, ca []byte) {
		s, err := NewCA("default", "f", ca, time.Now())
		if err != nil {
			return
		}
		back, err := Decode(s.Encode(), 1)
		if err != nil || back.Info().Fingerprint != s.Info().Fingerprint || back.Type != TypeCA {
			t.Fatalf("accepted CA secret does not round-trip: %v", err)
		}
	})
}
