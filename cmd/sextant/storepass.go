package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/sextant-mesh/sextant/internal/store/mysql"
)

// storePasswordEnv names the environment variable that may hold the
// database password of --store: a password written in --store shows in
// ps and in the shell's history.
const storePasswordEnv = "SEXTANT_STORE_PASSWORD"

// maxPasswordFile bounds --store-password-file.
const maxPasswordFile = 4 << 10

// storePassword returns the database password given beside --store: the
// content of --store-password-file (one trailing newline dropped), else
// $SEXTANT_STORE_PASSWORD; "" when neither is set. A password also written
// in --store is refused: one of the two would be ignored.
func storePassword(f serverFlags, log *slog.Logger) (string, error) {
	if f.store == "" {
		if f.storePasswordFile != "" {
			return "", fmt.Errorf("--store-password-file needs --store (the embedded store has no password)")
		}
		return "", nil
	}
	var pw, from string
	switch {
	case f.storePasswordFile != "":
		b, err := readPasswordFile(f.storePasswordFile, log)
		if err != nil {
			return "", err
		}
		pw, from = b, "--store-password-file"
	case os.Getenv(storePasswordEnv) != "":
		pw, from = os.Getenv(storePasswordEnv), storePasswordEnv
	default:
		return "", nil
	}
	if mysql.HasPassword(f.store) {
		return "", fmt.Errorf("--store %q has a password and %s gives another: give it once (preferably not in --store, which ps shows)", storeName(f.store), from)
	}
	return pw, nil
}

func readPasswordFile(path string, log *slog.Logger) (string, error) {
	file, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("--store-password-file: %w", err)
	}
	defer file.Close()
	b, err := io.ReadAll(io.LimitReader(file, maxPasswordFile+1))
	if err != nil {
		return "", fmt.Errorf("--store-password-file %s: %w", path, err)
	}
	if len(b) > maxPasswordFile {
		return "", fmt.Errorf("--store-password-file %s: longer than %d bytes; want the password alone", path, maxPasswordFile)
	}
	pw := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	switch {
	case pw == "":
		return "", fmt.Errorf("--store-password-file %s is empty; want the password (one line)", path)
	case strings.ContainsAny(pw, "\r\n"):
		return "", fmt.Errorf("--store-password-file %s has more than one line; want the password alone", path)
	}
	if st, err := file.Stat(); err == nil && st.Mode().Perm()&0o077 != 0 {
		log.Warn("the database password file is readable by other users: chmod 600 it", "file", path, "mode", fmt.Sprintf("%#o", st.Mode().Perm()))
	}
	return pw, nil
}
