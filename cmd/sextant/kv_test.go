package main

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"

	"github.com/sextant-mesh/sextant/internal/kv"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/store/mysql/mysqltest"
)

// TestConsulKVRestart: hashicorp's client writes Consul KV entries to a
// real "sextant server --consul-api" on the embedded store; after a
// restart on the same data directory every entry is there with its
// value, flags and indexes, and a deleted one stays deleted.
func TestConsulKVRestart(t *testing.T) {
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
	k := consulClient(t, consulAddr, "").KV()
	big := bytes.Repeat([]byte{0xfe}, 512*1024)
	for _, p := range []*capi.KVPair{
		{Key: "vault/core/keyring", Value: big, Flags: 1},
		{Key: "config/app", Value: []byte(`{"a":1}`), Flags: 42},
		{Key: "config/app", Value: []byte(`{"a":2}`), Flags: 43},
		{Key: "doomed", Value: []byte("x")},
	} {
		if _, err := k.Put(p, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := k.Delete("doomed", nil); err != nil {
		t.Fatal(err)
	}
	before, _, err := k.List("", nil)
	if err != nil || len(before) != 2 {
		t.Fatalf("before the restart: %v %v", keysOfPairs(before), err)
	}
	stopServer(t, srv)

	srv = startServer(t, bin, dir, addr, "--consul-api", consulAddr)
	defer stopServer(t, srv)
	after, meta, err := k.List("", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Fatalf("after the restart: %v, before %v", keysOfPairs(after), keysOfPairs(before))
	}
	for i := range after {
		a, b := after[i], before[i]
		if a.Key != b.Key || !bytes.Equal(a.Value, b.Value) || a.Flags != b.Flags || a.CreateIndex != b.CreateIndex || a.ModifyIndex != b.ModifyIndex {
			t.Errorf("after the restart %s: flags %d indexes %d/%d, %d bytes; before: flags %d indexes %d/%d, %d bytes",
				a.Key, a.Flags, a.CreateIndex, a.ModifyIndex, len(a.Value), b.Flags, b.CreateIndex, b.ModifyIndex, len(b.Value))
		}
	}
	if meta.LastIndex < after[1].ModifyIndex {
		t.Errorf("index %d after the restart, below an entry's %d", meta.LastIndex, after[1].ModifyIndex)
	}
	// Writes go on from the store's revision.
	if _, err := k.Put(&capi.KVPair{Key: "config/app", Value: []byte("3")}, nil); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := k.Get("config/app", nil); p.ModifyIndex <= meta.LastIndex || p.CreateIndex != before[0].CreateIndex {
		t.Errorf("a write after the restart: %+v (index before %d)", p, meta.LastIndex)
	}
}

var longNamespace = strings.Repeat("n", naming.MaxNameLen)

func keysOfPairs(ps capi.KVPairs) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Key)
	}
	return out
}

// TestConsulKVMariaDB: two servers of a cluster over the machine's real
// MariaDB, each serving the Consul API: a blocking Get on one wakes on a
// Put through the other; CAS increments through both servers at once lose
// none (each store commit checks the revision the write read); the
// entries outlive both servers.
func TestConsulKVMariaDB(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs real servers")
	}
	mysqltest.Require(t)
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("mysql://root@tcp(%s)/%s", mysqltest.Addr(), mysqltest.Database(t))
	var servers []*clusterServer
	var clients []*capi.KV
	for i := range 2 {
		consulAddr := freeAddr(t)
		// The longest namespace: namespace/key of the longest key fills
		// the store's 512-byte key column.
		s := &clusterServer{t: t, bin: bin, id: fmt.Sprintf("s%d", i+1), addr: freeAddr(t), url: url,
			args: []string{"--consul-api", consulAddr, "--consul-namespace", longNamespace}}
		s.start()
		t.Cleanup(s.stop)
		servers = append(servers, s)
		clients = append(clients, consulClient(t, consulAddr, "").KV())
	}
	a, b := clients[0], clients[1]

	// The limits fit MariaDB's columns: the longest key in the longest
	// namespace, the largest value.
	longKey := strings.Repeat("k", kv.MaxKeyLen)
	big := bytes.Repeat([]byte{0xab}, kv.MaxValueSize)
	if _, err := a.Put(&capi.KVPair{Key: longKey, Value: big}, nil); err != nil {
		t.Fatalf("put of the longest key with the largest value: %v", err)
	}
	if p, _, err := a.Get(longKey, nil); err != nil || p == nil || !bytes.Equal(p.Value, big) {
		t.Fatalf("get of the longest key: %v", err)
	}
	if _, err := a.Put(&capi.KVPair{Key: longKey + "k", Value: []byte("x")}, nil); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("put of a key one byte over: %v; want 400", err)
	}

	if _, err := a.Put(&capi.KVPair{Key: "n", Value: []byte("0")}, nil); err != nil {
		t.Fatal(err)
	}
	// b sees a's write once it has followed the store: wait for it with a
	// blocking query from index 1.
	var idx uint64
	for deadline := time.Now().Add(30 * time.Second); ; {
		p, meta, err := b.Get("n", &capi.QueryOptions{WaitIndex: idx, WaitTime: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		idx = meta.LastIndex
		if p != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("server 2 did not see server 1's put within 30s")
		}
	}
	type got struct {
		p   *capi.KVPair
		err error
	}
	woke := make(chan got, 1)
	go func(idx uint64) {
		for {
			// Woken by another change (an absent key's index is the
			// table's): block again from there.
			p, meta, err := b.Get("watched", &capi.QueryOptions{WaitIndex: idx, WaitTime: time.Minute})
			if err != nil || p != nil {
				woke <- got{p, err}
				return
			}
			idx = meta.LastIndex
		}
	}(idx)
	if _, err := a.Put(&capi.KVPair{Key: "watched", Value: []byte("hello")}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-woke:
		if g.err != nil || string(g.p.Value) != "hello" {
			t.Fatalf("blocking get on server 2: %+v %v", g.p, g.err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("a blocking get on server 2 did not wake on a put through server 1 within 60s")
	}

	const perServer = 15
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		k := clients[w%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done, tries := 0, 0; done < perServer/2+1 && tries < 2000; tries++ {
				p, _, err := k.Get("n", &capi.QueryOptions{RequireConsistent: true})
				if err != nil {
					errs <- err
					return
				}
				n, _ := strconv.Atoi(string(p.Value))
				ok, _, err := k.CAS(&capi.KVPair{Key: "n", Value: []byte(strconv.Itoa(n + 1)), ModifyIndex: p.ModifyIndex}, nil)
				if err != nil {
					errs <- err
					return
				}
				if ok {
					done++
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := 4 * (perServer/2 + 1)
	// Both servers converge on the one count.
	for i, k := range clients {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			p, _, err := k.Get("n", nil)
			if err == nil && string(p.Value) == strconv.Itoa(want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("server %d: counter %q (%v), want %d: an increment was lost or doubled", i+1, p.Value, err, want)
			}
		}
	}

	for _, s := range servers {
		s.stop()
	}
	servers[1].start()
	p, _, err := b.Get("watched", nil)
	if err != nil || p == nil || string(p.Value) != "hello" {
		t.Fatalf("after both servers stopped and one restarted: %+v %v", p, err)
	}
}
