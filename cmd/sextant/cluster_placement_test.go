package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestClusterPlacementsNeverOvercommit: three servers over one database
// place pods onto the same few small nodes at once, each deciding on its
// own catalog. No node may end with more requested than it has: each
// placement is conditional on the node's version it was decided on, and a
// server that lost the race decides again on the winner's state.
func TestClusterPlacementsNeverOvercommit(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three real servers over MariaDB")
	}
	servers, _ := startCluster(t, 3, "")
	const nodes, cpuPerNode = 3, 4 // 12 pods of 1 cpu fit
	var items []string
	for i := range nodes {
		items = append(items, fmt.Sprintf(`{"apiVersion":"v1","kind":"Node","metadata":{"name":"n%d"},"status":{"allocatable":{"cpu":"%d","memory":"16Gi","pods":"110"}}}`, i, cpuPerNode))
	}
	a, err := callAuth("POST", servers[0].base()+"/v1/nodes", "", "application/json", `{"apiVersion":"v1","kind":"List","items":[`+strings.Join(items, ",")+`]}`)
	if err != nil || a.status != 200 {
		t.Fatalf("nodes: %v %d %s", err, a.status, a.body)
	}
	for _, s := range servers { // every server knows the nodes before placing
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			a, err := call("GET", s.base()+"/v1/nodes", nil)
			if err == nil && a.status == 200 && strings.Count(string(a.body), `"name":"n`) == nodes {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("server %s does not list the %d nodes in 10 s", s.id, nodes)
			}
		}
	}

	const perServer, rounds = 3, 4 // 36 pods asked for, 12 fit
	var (
		mu     sync.Mutex
		placed = map[string]string{} // pod -> node, as answered
		wg     sync.WaitGroup
	)
	for si, s := range servers {
		for w := range perServer {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range rounds {
					name := fmt.Sprintf("s%d-w%d-%d", si, w, i)
					body := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q},"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"1"}}}]}}`, name)
					a, err := callAuth("POST", s.base()+"/v1/placements", "", "application/json", body)
					if err != nil || a.status != 200 {
						t.Errorf("place %s on %s: %v %d %s", name, s.id, err, a.status, a.body)
						return
					}
					var ans struct {
						Results []struct{ Node, Unschedulable string } `json:"results"`
					}
					if err := json.Unmarshal(a.body, &ans); err != nil || len(ans.Results) != 1 {
						t.Errorf("place %s: %v %s", name, err, a.body)
						return
					}
					if n := ans.Results[0].Node; n != "" {
						mu.Lock()
						placed[name] = n
						mu.Unlock()
					}
				}
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	perNode := map[string]int{}
	for _, n := range placed {
		perNode[n]++
	}
	for n, c := range perNode {
		if c > cpuPerNode {
			t.Errorf("node %s: %d pods of 1 cpu acknowledged on %d cpu", n, c, cpuPerNode)
		}
	}
	if len(placed) != nodes*cpuPerNode {
		t.Errorf("%d pods placed, want %d (every cpu used, none twice): %v", len(placed), nodes*cpuPerNode, perNode)
	}
	// What is stored agrees: every server lists the same placements, none
	// over a node's capacity.
	for _, s := range servers {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			a, err := call("GET", s.base()+"/v1/placements?limit=1000", nil)
			if err != nil || a.status != 200 {
				t.Fatalf("list placements on %s: %v %d", s.id, err, a.status)
			}
			var page struct {
				Items []struct{ Name, Node string } `json:"items"`
			}
			if err := json.Unmarshal(a.body, &page); err != nil {
				t.Fatal(err)
			}
			stored := map[string]int{}
			for _, it := range page.Items {
				stored[it.Node]++
			}
			if len(page.Items) == len(placed) {
				for n, c := range stored {
					if c > cpuPerNode {
						t.Fatalf("server %s stores %d pods of 1 cpu on node %s of %d cpu", s.id, c, n, cpuPerNode)
					}
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("server %s lists %d placements, %d were acknowledged", s.id, len(page.Items), len(placed))
			}
		}
	}
}
