package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"

	"github.com/sextant-mesh/sextant/internal/identity"
	"github.com/sextant-mesh/sextant/internal/seal"
	"github.com/sextant-mesh/sextant/internal/secret"
)

// The environment variables that may give the keys instead of files: a
// container's secret store often hands them so.
const (
	envEncryptionKey  = "SEXTANT_ENCRYPTION_KEY"
	envDecryptionKeys = "SEXTANT_DECRYPTION_KEYS"
)

// atRestFlags configure encryption at rest of private keys
// (docs/security.md, "Encryption at rest").
type atRestFlags struct {
	keyFile      string   // seals, and opens
	decryptFiles []string // only open
}

func (f *atRestFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.keyFile, "encryption-key-file", "", "file of the key that seals TLS secrets' private keys and the CA's key in the store (32 bytes, base64; mode 0600); env "+envEncryptionKey+" gives the key itself; empty: stored plain (docs/security.md, \"Encryption at rest\")")
	fl.StringArrayVar(&f.decryptFiles, "decryption-key-file", nil, "file of a key that only opens what it sealed (repeatable): the previous key during a rotation, or the next one before it seals on every server; env "+envDecryptionKeys+" gives keys, comma-separated")
}

// keyring reads the keys from the files, or from the environment
// (getenv) when no file gives them. nil: no key.
func (f atRestFlags) keyring(getenv func(string) string) (*seal.Keyring, error) {
	var sealWith []byte
	switch env := getenv(envEncryptionKey); {
	case f.keyFile != "" && env != "":
		return nil, fmt.Errorf("--encryption-key-file and %s both give the encryption key: give one", envEncryptionKey)
	case f.keyFile != "":
		k, err := seal.ReadKeyFile(f.keyFile)
		if err != nil {
			return nil, fmt.Errorf("--encryption-key-file: %w", err)
		}
		sealWith = k
	case env != "":
		k, err := seal.ParseKey([]byte(env))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", envEncryptionKey, err)
		}
		sealWith = k
	}
	var open [][]byte
	for _, p := range f.decryptFiles {
		k, err := seal.ReadKeyFile(p)
		if err != nil {
			return nil, fmt.Errorf("--decryption-key-file: %w", err)
		}
		open = append(open, k)
	}
	if env := getenv(envDecryptionKeys); env != "" {
		for i, s := range strings.Split(env, ",") {
			k, err := seal.ParseKey([]byte(s))
			if err != nil {
				return nil, fmt.Errorf("%s, key %d: %w", envDecryptionKeys, i+1, err)
			}
			open = append(open, k)
		}
	}
	return seal.New(sealWith, open...)
}

// resealAtStart stores again, under the sealing key, the secrets and the
// authority stored plain or under another key: after a key is first
// given, or made the sealing key in a rotation. Written through the write
// engine, so it is what every store and every server of a cluster holds.
// A failure stops the start: the operator asked for keys sealed, and
// would otherwise retire a key something still needs.
func resealAtStart(ctx context.Context, eng secret.Submitter, secrets *secret.Table, ident *identity.Service, keys *seal.Keyring, log *slog.Logger) error {
	if keys == nil {
		return nil
	}
	if keys.ID() == "" {
		log.Warn("encryption at rest: keys given only to open; TLS secrets and the CA's key are written plain (give --encryption-key-file to seal them)", "open_keys", strings.Join(keys.IDs(), ","))
		return nil
	}
	n, err := secret.Reseal(ctx, eng, secrets)
	if err != nil {
		return fmt.Errorf("encryption at rest: %w", err)
	}
	ca, err := ident.Reseal(ctx)
	if err != nil {
		return fmt.Errorf("encryption at rest: %w", err)
	}
	log.Info("encryption at rest: private keys sealed", "key", keys.ID(), "keys", strings.Join(keys.IDs(), ","), "resealed_secrets", n, "resealed_ca", ca)
	return nil
}

// atRestHint adds to a start's error what to do when a stored private key
// is sealed with a key this server was not given.
func atRestHint(err error) error {
	if errors.Is(err, seal.ErrUnknownKey) {
		return fmt.Errorf("%w: give the server that key with --encryption-key-file or --decryption-key-file (docs/security.md, \"Encryption at rest\")", err)
	}
	return err
}
