package identity

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/seal"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

// tryStart is start returning Start's error.
func tryStart(dir string, opts Options) (*Service, func(), error) {
	st, err := embedded.Open(dir)
	if err != nil {
		return nil, nil, err
	}
	s, err := New(opts)
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	eng, err := commit.Open(st, commit.Options{Tables: map[store.Kind]catalog.Table{}, Trackers: []commit.Tracker{s}})
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	stop := func() { eng.Close(); st.Close() }
	if err := s.Start(context.Background(), eng); err != nil {
		stop()
		return nil, nil, err
	}
	return s, stop, nil
}

// rawCA is the stored value of the authority's record in dir.
func rawCA(t *testing.T, dir string) string {
	t.Helper()
	st, err := embedded.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var out string
	if _, err := st.Load([]store.Kind{store.System}, func(r store.Record) error {
		if r.Key == Key {
			out = string(r.Value)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func ring(t *testing.T, sealWith []byte, open ...[]byte) *seal.Keyring {
	t.Helper()
	k, err := seal.New(sealWith, open...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestTheAuthoritysKeyIsSealedAtRest: the authority created with a key
// given is stored without its PEM key; a server without that key fails
// to start naming the record and the key id; a plain record is sealed by
// Reseal, and a rotation of the key (k1, then k2 sealing with k1 opening,
// then k2 alone) keeps the same root throughout.
func TestTheAuthoritysKeyIsSealedAtRest(t *testing.T) {
	ctx := context.Background()
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	id1, id2 := seal.KeyID(k1), seal.KeyID(k2)

	// Created plain (no key), then sealed by Reseal once k1 is given.
	dir := t.TempDir()
	s, stop := start(t, dir, Options{CA: td})
	root := mustAuthority(t, s).Roots()[0]
	stop()
	if raw := rawCA(t, dir); !strings.Contains(raw, "PRIVATE KEY") {
		t.Fatalf("plain record: %s", raw)
	}
	s, stop = start(t, dir, Options{CA: td, Keys: ring(t, k1)})
	if ok, err := s.Reseal(ctx); !ok || err != nil {
		t.Fatalf("reseal: %v %v", ok, err)
	}
	if ok, err := s.Reseal(ctx); ok || err != nil {
		t.Fatalf("second reseal: %v %v", ok, err)
	}
	stop()
	if raw := rawCA(t, dir); strings.Contains(raw, "PRIVATE KEY") || !strings.Contains(raw, `"keySealed":"sx1:`+id1) ||
		!strings.Contains(raw, "BEGIN CERTIFICATE") {
		t.Fatalf("sealed record: %s", raw)
	}

	for name, keys := range map[string]*seal.Keyring{"no key": nil, "k2 alone": ring(t, k2)} {
		_, _, err := tryStart(dir, Options{CA: td, Keys: keys})
		if !errors.Is(err, seal.ErrUnknownKey) || !strings.Contains(err.Error(), "system/ca") || !strings.Contains(err.Error(), id1) {
			t.Errorf("%s: %v", name, err)
		}
	}

	// k2 seals, k1 opens: the same root, resealed under k2.
	s, stop = start(t, dir, Options{CA: td, Keys: ring(t, k2, k1)})
	if got := mustAuthority(t, s).Roots()[0]; !got.Equal(root) {
		t.Fatal("another root under k2 and k1")
	}
	if ok, err := s.Reseal(ctx); !ok || err != nil {
		t.Fatalf("reseal to k2: %v %v", ok, err)
	}
	stop()
	if raw := rawCA(t, dir); !strings.Contains(raw, `"keySealed":"sx1:`+id2) {
		t.Fatalf("after the reseal: %s", raw)
	}
	s, stop = start(t, dir, Options{CA: td, Keys: ring(t, k2)})
	defer stop()
	if got := mustAuthority(t, s).Roots()[0]; !got.Equal(root) {
		t.Fatal("another root under k2 alone")
	}
	if _, err := s.Sign(ctx, csr(t), api, 0); err != nil {
		t.Fatal(err)
	}
}

// TestACreatedAuthorityIsSealedAsWritten: with a key given from the
// first start, the plain key is never stored, a rotation included.
func TestACreatedAuthorityIsSealedAsWritten(t *testing.T) {
	dir := t.TempDir()
	keys := ring(t, bytes.Repeat([]byte{3}, 32))
	s, stop := start(t, dir, Options{CA: td, Keys: keys})
	mustAuthority(t, s)
	if _, err := s.Rotate(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	stop()
	if raw := rawCA(t, dir); strings.Contains(raw, "PRIVATE KEY") || !strings.Contains(raw, `"keySealed":"sx1:`+keys.ID()) {
		t.Fatalf("stored: %s", raw)
	}
	s, stop = start(t, dir, Options{CA: td, Keys: keys})
	defer stop()
	if len(mustAuthority(t, s).Roots()) != 2 {
		t.Error("the rotated authority did not load back")
	}
}
