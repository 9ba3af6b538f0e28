package seal

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, KeySize) }

func TestSealOpensUnderItsKeyAndRecordOnly(t *testing.T) {
	old, err := New(testKey(1))
	if err != nil {
		t.Fatal(err)
	}
	both, err := New(testKey(2), testKey(1))
	if err != nil {
		t.Fatal(err)
	}
	plain := []byte("-----BEGIN PRIVATE KEY-----\nMIG...\n-----END PRIVATE KEY-----\n")
	env := old.Seal(plain, "secret/default/a")
	if strings.Contains(env, "PRIVATE") || !strings.HasPrefix(env, "sx1:"+old.ID()+":") {
		t.Fatalf("envelope %q", env)
	}
	if env2 := old.Seal(plain, "secret/default/a"); env2 == env {
		t.Error("two seals of one value are equal: the nonce is not random")
	}
	for name, kr := range map[string]*Keyring{"old": old, "old and new": both} {
		got, err := kr.Open(env, "secret/default/a")
		if err != nil || !bytes.Equal(got, plain) {
			t.Errorf("%s: open: %v %q", name, err, got)
		}
	}
	if _, err := old.Open(env, "secret/default/b"); !errors.Is(err, ErrOpen) {
		t.Errorf("moved to another record: %v", err)
	}
	newOnly, _ := New(testKey(2))
	_, err = newOnly.Open(env, "secret/default/a")
	if !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), old.ID()) || !strings.Contains(err.Error(), newOnly.ID()) {
		t.Errorf("unknown key: %v", err)
	}
	var none *Keyring
	if _, err := none.Open(env, "secret/default/a"); !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), "keys given: none") {
		t.Errorf("no keyring: %v", err)
	}
	// One bit flipped in the ciphertext.
	e, _ := Parse(env)
	e.Sealed[0] ^= 1
	if _, err := old.Open(e.String(), "secret/default/a"); !errors.Is(err, ErrOpen) {
		t.Errorf("altered: %v", err)
	}
	if both.ID() != KeyID(testKey(2)) || len(both.IDs()) != 2 {
		t.Errorf("ids %q %v", both.ID(), both.IDs())
	}
	openOnly, err := New(nil, testKey(1))
	if err != nil || openOnly.ID() != "" {
		t.Errorf("open only: %v %q", err, openOnly.ID())
	}
	if kr, err := New(nil); kr != nil || err != nil {
		t.Errorf("no key: %v %v", kr, err)
	}
	if _, err := New(testKey(1)[:16]); err == nil {
		t.Error("a 16-byte key accepted")
	}
}

func TestParseNamesWhatIsWrong(t *testing.T) {
	good, _ := New(testKey(3))
	env := good.Seal([]byte("x"), "c")
	for _, tc := range []struct{ in, want string }{
		{"", "no version"},
		{"-----BEGIN PRIVATE KEY-----", "no version"},
		{"sx2:01234567:AAAA", "version"},
		{"sx1:0123456", "no key id"},
		{"sx1:0123456G:AAAA", "key id"},
		{"sx1:01234567:!!", "not base64"},
		{"sx1:01234567:AAAA", "fewer than a nonce"},
		{strings.Replace(env, "sx1:", "sx1:x", 1), "key id"},
	} {
		if _, err := Parse(tc.in); !errors.Is(err, ErrEnvelope) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q): %v, want %q", tc.in, err, tc.want)
		}
	}
	if _, err := Parse(env); err != nil {
		t.Error(err)
	}
}

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	enc := base64.StdEncoding.EncodeToString(testKey(7))
	k, err := ReadKeyFile(write("good", enc+"\n", 0o600))
	if err != nil || !bytes.Equal(k, testKey(7)) {
		t.Fatalf("good: %v", err)
	}
	if _, err := ReadKeyFile(write("group-read", enc, 0o640)); err != nil {
		t.Errorf("0640: %v", err)
	}
	for _, tc := range []struct {
		path, want string
	}{
		{write("world", enc, 0o644), "mode 0644"},
		{write("group-write", enc, 0o660), "mode 0660"},
		{write("short", base64.StdEncoding.EncodeToString(testKey(7)[:16]), 0o600), "16 bytes once decoded, want 32"},
		{write("raw", string(testKey(7)), 0o600), "not base64"},
		{write("empty", "\n", 0o600), "empty"},
		{filepath.Join(dir, "missing"), "no such file"},
		{dir, "not a regular file"},
	} {
		if _, err := ReadKeyFile(tc.path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.path, err, tc.want)
		}
	}
}
