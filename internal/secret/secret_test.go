package secret

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/secret/secrettest"
)

func pair(t testing.TB, notAfter time.Time, names ...string) (certPEM, keyPEM []byte) {
	return secrettest.Pair(t, notAfter, names...)
}

func TestNewValidates(t *testing.T) {
	now := time.Now()
	cert, key := pair(t, now.Add(time.Hour), "a.test", "b.test")
	other, otherKey := pair(t, now.Add(time.Hour), "c.test")
	old, oldKey := pair(t, now.Add(-time.Hour), "a.test")
	for name, tc := range map[string]struct {
		ns, name          string
		cert, key, ca     []byte
		field, msgContain string
	}{
		"mismatched key": {"default", "a", cert, otherKey, nil, "key", "does not match"},
		"expired":        {"default", "a", old, oldKey, nil, "cert", "expired at"},
		"not PEM":        {"default", "a", []byte("hello"), key, nil, "cert", "not PEM"},
		"key not PEM":    {"default", "a", cert, []byte("hello"), nil, "key", "not PEM"},
		"key is a cert":  {"default", "a", cert, other, nil, "key", "want a PRIVATE KEY"},
		"bad CA":         {"default", "a", cert, key, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), "ca", "certificate 1"},
		"bad name":       {"default", "A_b", cert, key, nil, "name", "not a valid name"},
		"bad namespace":  {"", "a", cert, key, nil, "namespace", "not a valid name"},
	} {
		_, err := New(tc.ns, tc.name, tc.cert, tc.key, tc.ca, now)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(fe.Msg, tc.msgContain) || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want field %s saying %q", name, err, tc.field, tc.msgContain)
		}
	}
	s, err := New("default", "a", cert, key, other, now)
	if err != nil {
		t.Fatal(err)
	}
	i := s.Info()
	if i.Fingerprint == "" || len(i.DNSNames) != 2 || i.CA != 1 || i.KeyType != "ECDSA" || !i.NotAfter.Equal(now.Add(time.Hour).Truncate(time.Second).UTC()) {
		t.Errorf("info: %+v", i)
	}
	back, err := Decode(s.Encode(), 9)
	if err != nil || back.ID() != "default/a" || back.Info().Fingerprint != i.Fingerprint || back.Info().Revision != 9 || string(back.Key) != string(key) {
		t.Fatalf("round trip: %v %+v", err, back)
	}
	// A stored secret that expired since still loads (its expiry shows).
	exp, _ := New("default", "old", old, oldKey, nil, now.Add(-2*time.Hour))
	if _, err := Decode(exp.Encode(), 1); err != nil {
		t.Errorf("an expired stored secret does not load: %v", err)
	}
}

// FuzzNew: PEM from users is outside input; New never panics, and what it
// accepts round-trips through the store's encoding.
func FuzzNew(f *testing.F) {
	cert, key := pair(f, time.Now().Add(time.Hour), "a.test")
	f.Add(cert, key, []byte(nil))
	f.Add(cert, key, cert)
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), key, []byte(nil))
	f.Fuzz(func(t *testing.T, c, k, ca []byte) {
		s, err := New("default", "f", c, k, ca, time.Now())
		if err != nil {
			return
		}
		back, err := Decode(s.Encode(), 1)
		if err != nil || back.Info().Fingerprint != s.Info().Fingerprint {
			t.Fatalf("accepted secret does not round-trip: %v", err)
		}
	})
}
