package consulapi_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"

	"github.com/sextant-mesh/sextant/internal/acl"
)

// BenchmarkKVPut: one Consul KV put of a 100-byte value through the
// handler, each to a new key: a durable write of the KV kind (compare
// BenchmarkRegister, an instance write, in the same run).
func BenchmarkKVPut(b *testing.B) {
	s := newKVStack(b, acl.Options{}, "default")
	value := strings.Repeat("v", 100)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		req := httptest.NewRequest("PUT", "/v1/kv/app/config/key-"+strconv.Itoa(i), strings.NewReader(value))
		w := httptest.NewRecorder()
		s.api.ServeHTTP(w, req)
		if w.Code != http.StatusOK || w.Body.String() != "true" {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
	}
}

// BenchmarkKVGet: one Consul KV get of a 100-byte value among 10,000 keys
// through the handler (compare BenchmarkCatalogService in the same run).
func BenchmarkKVGet(b *testing.B) {
	s := newKVStack(b, acl.Options{}, "default")
	value := strings.Repeat("v", 100)
	for i := range 10000 {
		req := httptest.NewRequest("PUT", "/v1/kv/app/config/key-"+strconv.Itoa(i), strings.NewReader(value))
		w := httptest.NewRecorder()
		s.api.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		req := httptest.NewRequest("GET", "/v1/kv/app/config/key-"+strconv.Itoa(i%10000), nil)
		w := httptest.NewRecorder()
		s.api.ServeHTTP(w, req)
		if w.Code != http.StatusOK || w.Body.Len() < 100 {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
	}
}

// BenchmarkKVWatchWake: a consul-template-style blocking Get of one key
// among 1,000, through hashicorp's client over HTTP; each iteration waits
// until the query is held, puts the key through the client, and measures
// from the put's answer to the watcher's (as the compat row of the
// instance watch in docs/benchmarks.md), and from the put's start (its
// commit and fsync included). Reports p50 and p99 in microseconds; the
// watcher may answer before the writer, then counted as 0.
func BenchmarkKVWatchWake(b *testing.B) {
	s := newKVStack(b, acl.Options{}, "default")
	cfg := capi.DefaultConfig()
	cfg.Address = strings.TrimPrefix(s.consul.URL, "http://")
	c, err := capi.NewClient(cfg)
	if err != nil {
		b.Fatal(err)
	}
	k := c.KV()
	for i := range 1000 {
		if _, err := k.Put(&capi.KVPair{Key: "cfg/key-" + strconv.Itoa(i), Value: []byte("v0")}, nil); err != nil {
			b.Fatal(err)
		}
	}
	cat := s.Registry.Catalog()
	var wakes, fromStart []time.Duration
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		key := "cfg/key-" + strconv.Itoa(i%1000)
		p, _, err := k.Get(key, nil)
		if err != nil {
			b.Fatal(err)
		}
		woke := make(chan time.Time, 1)
		go func(idx uint64) {
			k.Get(key, &capi.QueryOptions{WaitIndex: idx, WaitTime: time.Minute})
			woke <- time.Now()
		}(p.ModifyIndex)
		for deadline := time.Now().Add(30 * time.Second); cat.Waiters() < 1; time.Sleep(50 * time.Microsecond) {
			if time.Now().After(deadline) {
				b.Fatal("the watch did not wait within 30s")
			}
		}
		start := time.Now()
		if _, err := k.Put(&capi.KVPair{Key: key, Value: []byte("v" + strconv.Itoa(i))}, nil); err != nil {
			b.Fatal(err)
		}
		put := time.Now()
		at := <-woke
		wakes = append(wakes, max(at.Sub(put), 0))
		fromStart = append(fromStart, at.Sub(start))
	}
	for _, d := range [][]time.Duration{wakes, fromStart} {
		slices.Sort(d)
	}
	b.ReportMetric(float64(wakes[len(wakes)/2].Microseconds()), "p50-us")
	b.ReportMetric(float64(wakes[(len(wakes)-1)*99/100].Microseconds()), "p99-us")
	b.ReportMetric(float64(fromStart[(len(fromStart)-1)*99/100].Microseconds()), "p99-from-start-us")
}
