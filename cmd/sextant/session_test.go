package main

import (
	"fmt"
	"sync"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"

	"github.com/sextant-mesh/sextant/internal/store/mysql/mysqltest"
)

// TestConsulSessionsRestart: a session and the lock it holds outlive a
// restart of a real "sextant server --consul-api" on its data directory;
// destroying it afterwards releases the key.
func TestConsulSessionsRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a real server")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	addr, consulAddr := freeAddr(t), freeAddr(t)
	srv := startServer(t, bin, dir, addr, "--consul-api", consulAddr)
	c := consulClient(t, consulAddr, "")
	id, _, err := c.Session().Create(&capi.SessionEntry{Name: "leader", TTL: "600s", Behavior: "release"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := c.KV().Acquire(&capi.KVPair{Key: "leader", Value: []byte("me"), Session: id}, nil); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	stopServer(t, srv)

	srv = startServer(t, bin, dir, addr, "--consul-api", consulAddr)
	defer stopServer(t, srv)
	e, _, err := c.Session().Info(id, nil)
	if err != nil || e == nil || e.Name != "leader" || e.TTL != "600s" {
		t.Fatalf("the session after the restart: %+v %v", e, err)
	}
	if p, _, err := c.KV().Get("leader", nil); err != nil || p == nil || p.Session != id || p.LockIndex != 1 {
		t.Fatalf("the held key after the restart: %+v %v", p, err)
	}
	if _, err := c.Session().Destroy(id, nil); err != nil {
		t.Fatal(err)
	}
	if p, _, err := c.KV().Get("leader", nil); err != nil || p == nil || p.Session != "" {
		t.Fatalf("the key after its session was destroyed: %+v %v; want released", p, err)
	}
}

// TestConsulLockMariaDB: two servers of a cluster over the machine's real
// MariaDB. Sessions made through both race to acquire one key at once:
// exactly one wins. Then hashicorp's api.Lock holds it through server 1
// while a contender waits through server 2, and gets it once the first
// unlocks, never while the first holds it.
func TestConsulLockMariaDB(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs real servers")
	}
	mysqltest.Require(t)
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("mysql://root@tcp(%s)/%s", mysqltest.Addr(), mysqltest.Database(t))
	var clients []*capi.Client
	for i := range 2 {
		consulAddr := freeAddr(t)
		s := &clusterServer{t: t, bin: bin, id: fmt.Sprintf("s%d", i+1), addr: freeAddr(t), url: url,
			args: []string{"--consul-api", consulAddr}}
		s.start()
		t.Cleanup(s.stop)
		clients = append(clients, consulClient(t, consulAddr, ""))
	}

	// Eight sessions, four made through each server, acquire one key at
	// once through their own server.
	const racers = 8
	ids := make([]string, racers)
	for i := range ids {
		id, _, err := clients[i%2].Session().CreateNoChecks(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	// A session made through server 1 is seen by server 2 once it has
	// followed the store.
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, _, err := clients[1].Session().List(nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == racers {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server 2 lists %d sessions, want %d", len(list), racers)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var wg sync.WaitGroup
	won := make([]bool, racers)
	errs := make([]error, racers)
	start := make(chan struct{})
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			won[i], _, errs[i] = clients[i%2].KV().Acquire(&capi.KVPair{Key: "race", Value: []byte(ids[i]), Session: ids[i]}, nil)
		}()
	}
	close(start)
	wg.Wait()
	winners := 0
	winner := ""
	for i := range ids {
		if errs[i] != nil {
			t.Fatalf("racer %d: %v", i, errs[i])
		}
		if won[i] {
			winners++
			winner = ids[i]
		}
	}
	if winners != 1 {
		t.Fatalf("%d racers acquired the key, want exactly 1", winners)
	}
	p, _, err := clients[0].KV().Get("race", &capi.QueryOptions{RequireConsistent: true})
	if err != nil || p == nil || p.Session != winner || string(p.Value) != winner || p.LockIndex != 1 {
		t.Fatalf("the raced key: %+v %v; want held by the winner %s, LockIndex 1", p, err, winner)
	}

	l1, err := clients[0].LockKey("service/leader")
	if err != nil {
		t.Fatal(err)
	}
	l2, err := clients[1].LockKey("service/leader")
	if err != nil {
		t.Fatal(err)
	}
	lost1, err := l1.Lock(nil)
	if err != nil {
		t.Fatal(err)
	}
	got2 := make(chan error, 1)
	go func() { _, err := l2.Lock(nil); got2 <- err }()
	select {
	case err := <-got2:
		t.Fatalf("server 2's contender locked while server 1's held: %v", err)
	case <-lost1:
		t.Fatal("server 1's holder lost its lock")
	case <-time.After(2 * time.Second):
	}
	if err := l1.Unlock(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got2:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("server 2's contender never locked after server 1's unlocked")
	}
	if err := l2.Unlock(); err != nil {
		t.Fatal(err)
	}
}
