package seal

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"os"
)

// MakeKey is the command docs and errors give to make a key file.
const MakeKey = "(umask 077; head -c 32 /dev/urandom | base64 > FILE)"

// ParseKey reads a key as given in a file or the environment: KeySize
// bytes in standard base64, surrounding white space ignored.
func ParseKey(text []byte) ([]byte, error) {
	text = bytes.TrimSpace(text)
	if len(text) == 0 {
		return nil, fmt.Errorf("seal: the key is empty; make one with %s", MakeKey)
	}
	k, err := base64.StdEncoding.Strict().DecodeString(string(text))
	if err != nil {
		return nil, fmt.Errorf("seal: the key is not base64 (%d characters); make one with %s", len(text), MakeKey)
	}
	if len(k) != KeySize {
		return nil, fmt.Errorf("seal: the key is %d bytes once decoded, want %d (AES-256); make one with %s", len(k), KeySize, MakeKey)
	}
	return k, nil
}

// ReadKeyFile reads a key file (see ParseKey). It must be a regular file
// other users cannot read or write, nor its group write: a key readable by
// all protects nothing.
func ReadKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("seal: key file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("seal: key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("seal: key file %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o027 != 0 {
		return nil, fmt.Errorf("seal: key file %s has mode %04o: other users may read or change it; chmod 600 %s", path, perm, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 4<<10))
	if err != nil {
		return nil, fmt.Errorf("seal: key file %s: %w", path, err)
	}
	k, err := ParseKey(b)
	if err != nil {
		return nil, fmt.Errorf("%w (key file %s)", err, path)
	}
	return k, nil
}
