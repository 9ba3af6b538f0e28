package main

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/seal"
)

// TestAtRestKeysFromTheEnvironment: the keys given by environment
// variables make the same keyring as files; both for one key, or a bad
// key, is refused naming the variable.
func TestAtRestKeysFromTheEnvironment(t *testing.T) {
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	b64 := base64.StdEncoding.EncodeToString
	file, _ := writeKeyFile(t, t.TempDir(), "k")
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

	kr, err := atRestFlags{}.keyring(env(map[string]string{envEncryptionKey: b64(k1), envDecryptionKeys: b64(k2) + "," + b64(k1)}))
	if err != nil || kr.ID() != seal.KeyID(k1) || len(kr.IDs()) != 2 {
		t.Fatalf("env keys: %v %q %v", err, kr.ID(), kr.IDs())
	}
	if kr, err := (atRestFlags{}).keyring(env(nil)); kr != nil || err != nil {
		t.Errorf("no key: %v %v", kr, err)
	}
	if kr, err := (atRestFlags{}).keyring(env(map[string]string{envDecryptionKeys: b64(k2)})); err != nil || kr.ID() != "" || len(kr.IDs()) != 1 {
		t.Errorf("open only: %v %v", kr, err)
	}
	for _, tc := range []struct {
		f    atRestFlags
		env  map[string]string
		want string
	}{
		{atRestFlags{keyFile: file}, map[string]string{envEncryptionKey: b64(k1)}, "both give the encryption key"},
		{atRestFlags{}, map[string]string{envEncryptionKey: b64(k1[:16])}, envEncryptionKey + ": seal: the key is 16 bytes"},
		{atRestFlags{}, map[string]string{envDecryptionKeys: b64(k1) + ",no!"}, envDecryptionKeys + ", key 2: seal: the key is not base64"},
		{atRestFlags{decryptFiles: []string{file + ".missing"}}, nil, "--decryption-key-file: seal: key file"},
	} {
		if _, err := tc.f.keyring(env(tc.env)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v %v: %v, want %q", tc.f, tc.env, err, tc.want)
		}
	}
}
