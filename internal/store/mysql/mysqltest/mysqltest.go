// Package mysqltest gives tests a fresh database on the real MariaDB (or
// MySQL) of the machine, never a mock: it starts the local MariaDB if it is
// down, creates a database per test and drops it when the test ends. When
// the server cannot be reached the test fails under CI=true and is skipped
// (loudly) elsewhere.
package mysqltest

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
)

// Addr is the server tests use: SEXTANT_TEST_MYSQL_ADDR, default
// 127.0.0.1:3306 as root without a password (the machine's MariaDB).
func Addr() string {
	if a := os.Getenv("SEXTANT_TEST_MYSQL_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:3306"
}

var reach = sync.OnceValue(func() error {
	if err := ping(Addr()); err == nil {
		return nil
	}
	// Down: start the machine's MariaDB the way the machine does, once.
	if _, err := os.Stat("/usr/sbin/mariadbd"); err == nil {
		exec.Command("start-stop-daemon", "--start", "--oknodo", "--background", "--exec", "/usr/sbin/mariadbd").Run()
	}
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if err = ping(Addr()); err == nil {
			return nil
		}
	}
	return err
})

func config(addr, db string) *mysqldrv.Config {
	c := mysqldrv.NewConfig()
	c.User, c.Net, c.Addr, c.DBName = "root", "tcp", addr, db
	c.Timeout = 2 * time.Second
	return c
}

func ping(addr string) error {
	conn, err := mysqldrv.NewConnector(config(addr, ""))
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	return db.Ping()
}

// Require fails (CI=true) or skips the test when the database server
// cannot be reached.
func Require(t testing.TB) {
	t.Helper()
	if err := reach(); err != nil {
		msg := fmt.Sprintf("MariaDB/MySQL at %s is not reachable (%v): start it with 'start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd'", Addr(), err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip("SKIPPING the real-database test: " + msg)
	}
}

// Database creates a fresh database for t, dropped when t ends, and
// returns its name.
func Database(t testing.TB) string {
	t.Helper()
	Require(t)
	var b [6]byte
	rand.Read(b[:])
	name := "sxtest_" + hex.EncodeToString(b[:])
	conn, err := mysqldrv.NewConnector(config(Addr(), ""))
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	if _, err := db.Exec("CREATE DATABASE `" + name + "`"); err != nil {
		db.Close()
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		defer db.Close()
		if _, err := db.Exec("DROP DATABASE IF EXISTS `" + name + "`"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	return name
}

// URL creates a fresh database for t (see Database) and returns the
// store URL of it on addr ("" for Addr()).
func URL(t testing.TB, addr string) string {
	t.Helper()
	name := Database(t)
	if addr == "" {
		addr = Addr()
	}
	return fmt.Sprintf("mysql://root@tcp(%s)/%s", addr, name)
}
