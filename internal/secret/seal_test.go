package secret

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/seal"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

func keyring(t *testing.T, sealWith []byte, open ...[]byte) *seal.Keyring {
	t.Helper()
	k, err := seal.New(sealWith, open...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// openSecrets opens the embedded store in dir and a write engine over a
// secret table with keys, as the server wires them.
func openSecrets(dir string, keys *seal.Keyring) (*Table, *commit.Engine, func(), error) {
	st, err := embedded.Open(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	t := NewSealedTable(keys)
	eng, err := commit.Open(st, commit.Options{Tables: map[store.Kind]catalog.Table{store.Secrets: t}})
	if err != nil {
		st.Close()
		return nil, nil, nil, err
	}
	return t, eng, func() { eng.Close(); st.Close() }, nil
}

// rawSecret reads the stored bytes of secret id from the store in dir.
func rawSecret(t *testing.T, dir, id string) []byte {
	t.Helper()
	st, err := embedded.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var out []byte
	if _, err := st.Load([]store.Kind{store.Secrets}, func(r store.Record) error {
		if r.Key == id {
			out = bytes.Clone(r.Value)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSealedSecretsAtRest: a secret written with a sealing key is stored
// without its PEM key and reads back intact; without the key, or with
// another, the load fails naming the record and the key; Reseal moves
// plain records, then records of a retired key, to the sealing key.
func TestSealedSecretsAtRest(t *testing.T) {
	ctx := context.Background()
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	dir := t.TempDir()
	cert, key := pair(t, time.Now().Add(time.Hour), "a.test")
	pemBody := string(key[40:80])

	// Written plain before any key was given.
	tbl, eng, stop, err := openSecrets(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New("default", "web", cert, key, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Submit(ctx, &PutWrite{Secret: s, Create: true, Keys: tbl.Keys()}); err != nil {
		t.Fatal(err)
	}
	stop()
	if raw := rawSecret(t, dir, "default/web"); !strings.Contains(string(raw), pemBody) {
		t.Fatalf("plain record: %s", raw)
	}

	// A key given: the plain record still loads, and Reseal seals it.
	tbl, eng, stop, err = openSecrets(dir, keyring(t, k1))
	if err != nil {
		t.Fatalf("a plain record with a key given: %v", err)
	}
	if n, err := Reseal(ctx, eng, tbl); n != 1 || err != nil {
		t.Fatalf("reseal: %d %v", n, err)
	}
	if n, err := Reseal(ctx, eng, tbl); n != 0 || err != nil {
		t.Fatalf("second reseal: %d %v", n, err)
	}
	// A new secret written now is sealed as it is written.
	s2, _ := New("default", "api", cert, key, nil, time.Now())
	if _, err := eng.Submit(ctx, &PutWrite{Secret: s2, Create: true, Keys: tbl.Keys()}); err != nil {
		t.Fatal(err)
	}
	stop()
	id1 := seal.KeyID(k1)
	for _, id := range []string{"default/web", "default/api"} {
		raw := rawSecret(t, dir, id)
		if strings.Contains(string(raw), pemBody) || strings.Contains(string(raw), "PRIVATE KEY") || !strings.Contains(string(raw), "sx1:"+id1) {
			t.Fatalf("%s sealed: %s", id, raw)
		}
		if !strings.Contains(string(raw), "BEGIN CERTIFICATE") {
			t.Errorf("%s: the certificate should stay readable: %s", id, raw)
		}
	}

	// Without the key, or with another one only: the load fails naming
	// the record and the key it needs.
	for name, keys := range map[string]*seal.Keyring{"no key": nil, "another key": keyring(t, k2)} {
		_, _, _, err := openSecrets(dir, keys)
		if !errors.Is(err, seal.ErrUnknownKey) || !strings.Contains(err.Error(), "default/") || !strings.Contains(err.Error(), id1) {
			t.Errorf("%s: %v", name, err)
		}
	}

	// Rotation: k2 seals, k1 still opens; Reseal moves both to k2.
	tbl, eng, stop, err = openSecrets(dir, keyring(t, k2, k1))
	if err != nil {
		t.Fatal(err)
	}
	if got := tbl.Get("default", "web"); got == nil || !bytes.Equal(got.Key, key) || got.SealedWith() != id1 {
		t.Fatalf("under k1: %+v", got)
	}
	if n, err := Reseal(ctx, eng, tbl); n != 2 || err != nil {
		t.Fatalf("reseal to k2: %d %v", n, err)
	}
	if got := tbl.Get("default", "web"); got == nil || !bytes.Equal(got.Key, key) || got.SealedWith() != seal.KeyID(k2) {
		t.Fatalf("after the reseal: %+v", got)
	}
	stop()
	// k1 retired.
	tbl, _, stop, err = openSecrets(dir, keyring(t, k2))
	if err != nil {
		t.Fatalf("k2 alone after the reseal: %v", err)
	}
	defer stop()
	for _, name := range []string{"web", "api"} {
		if got := tbl.Get("default", name); got == nil || !bytes.Equal(got.Key, key) || !bytes.Equal(got.Cert, cert) {
			t.Errorf("%s under k2 alone: %+v", name, got)
		}
	}
}

// TestSealedKeyBoundToItsRecord: a sealed key copied into another
// secret's record does not open there.
func TestSealedKeyBoundToItsRecord(t *testing.T) {
	cert, key := pair(t, time.Now().Add(time.Hour), "a.test")
	keys := keyring(t, bytes.Repeat([]byte{1}, 32))
	s, _ := New("default", "web", cert, key, nil, time.Now())
	b, _ := s.encodeSealed(keys)
	moved := bytes.Replace(b, []byte(`"name":"web"`), []byte(`"name":"evil"`), 1)
	if _, err := decode(moved, 1, keys); !errors.Is(err, seal.ErrOpen) {
		t.Errorf("moved: %v", err)
	}
	if got, err := decode(b, 1, keys); err != nil || !bytes.Equal(got.Key, key) {
		t.Errorf("in place: %v", err)
	}
}
