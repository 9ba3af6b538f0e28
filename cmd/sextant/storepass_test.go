package main

import (
	"bytes"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/sextant-mesh/sextant/internal/store/mysql/mysqltest"
)

// TestStorePasswordOutsideTheCommandLine runs the real server over the
// machine's MariaDB as a user with a password given by
// $SEXTANT_STORE_PASSWORD, then by --store-password-file: it serves
// registrations, and the password is in neither its arguments nor its
// logs. A wrong password fails the start without printing it; a password
// in --store as well as beside it is refused, redacted.
func TestStorePasswordOutsideTheCommandLine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real server over MariaDB")
	}
	t.Setenv("CI", "true") // an unreachable MariaDB fails this test, never skips it
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	dbName := mysqltest.Database(t)
	var b [4]byte
	rand.Read(b[:])
	user, password := "sxpw_"+hex.EncodeToString(b[:]), "p@ss:w/rd("+hex.EncodeToString(b[:])+")#"
	root := mysqldrv.NewConfig()
	root.User, root.Net, root.Addr = "root", "tcp", mysqltest.Addr()
	conn, err := mysqldrv.NewConnector(root)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	for _, q := range []string{
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", user, password),
		fmt.Sprintf("CREATE USER '%s'@'localhost' IDENTIFIED BY '%s'", user, password),
		fmt.Sprintf("GRANT ALL ON `%s`.* TO '%s'@'%%'", dbName, user),
		fmt.Sprintf("GRANT ALL ON `%s`.* TO '%s'@'localhost'", dbName, user),
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		db.Exec(fmt.Sprintf("DROP USER IF EXISTS '%s'@'%%'", user))
		db.Exec(fmt.Sprintf("DROP USER IF EXISTS '%s'@'localhost'", user))
	})
	store := fmt.Sprintf("mysql://%s@tcp(%s)/%s", user, mysqltest.Addr(), dbName)
	pwFile := filepath.Join(t.TempDir(), "db-password")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(pw string) []string {
		var out []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, storePasswordEnv+"=") {
				out = append(out, kv)
			}
		}
		if pw != "" {
			out = append(out, storePasswordEnv+"="+pw)
		}
		return out
	}
	start := func(environ []string, args ...string) (*exec.Cmd, *syncWriter, string) {
		addr := freeAddr(t)
		cmd := exec.Command(bin, append([]string{"server", "--http", addr, "--xds", "", "--log-level", "info"}, args...)...)
		cmd.Env = environ
		stderr := &syncWriter{}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, stderr, addr
	}
	serves := func(name string, environ []string, args ...string) {
		t.Helper()
		cmd, stderr, addr := start(environ, args...)
		defer func() {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
			if strings.Contains(stderr.String(), password) {
				t.Errorf("%s: the server's log shows the password:\n%s", name, stderr.String())
			}
		}()
		ready := false
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && !ready; time.Sleep(50 * time.Millisecond) {
			if resp, err := http.Get("http://" + addr + "/readyz"); err == nil {
				resp.Body.Close()
				ready = resp.StatusCode == http.StatusOK
			}
		}
		if !ready {
			t.Fatalf("%s: server not ready in 60s:\n%s", name, stderr.String())
		}
		cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/cmdline")
		if err != nil || bytes.Contains(cmdline, []byte(password)) || !bytes.Contains(cmdline, []byte(user)) {
			t.Errorf("%s: process arguments (%v): %q", name, err, cmdline)
		}
		resp, err := http.Post("http://"+addr+"/v1/instances", "application/json",
			strings.NewReader(`{"service":"orders","host":"10.0.0.1","port":8080}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: register: %d", name, resp.StatusCode)
		}
	}
	serves("environment", env(password), "--store", store)
	serves("file", env(""), "--store", store, "--store-password-file", pwFile)

	fails := func(name string, environ []string, want string, args ...string) {
		t.Helper()
		cmd, stderr, _ := start(environ, args...)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s: the server started", name)
			}
		case <-time.After(90 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatalf("%s: the server neither served nor stopped in 90s:\n%s", name, stderr.String())
		}
		s := stderr.String()
		if !strings.Contains(s, want) || strings.Contains(s, password) || strings.Contains(s, "wrong-"+password) {
			t.Errorf("%s: want an error with %q and no password:\n%s", name, want, s)
		}
	}
	fails("no password", env(""), "Access denied", "--store", store)
	fails("wrong password", env("wrong-"+password), "Access denied", "--store", store)
	withPW := fmt.Sprintf("mysql://%s:%s@tcp(%s)/%s", user, password, mysqltest.Addr(), dbName)
	fails("two passwords", env(""), "give it once", "--store", withPW, "--store-password-file", pwFile)
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, nil, 0o600)
	fails("empty file", env(""), "is empty", "--store", store, "--store-password-file", empty)
}
