package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// docSteps holds, for each ```sh line of README.md and examples/README.md,
// the check of what the page says the line does (docRun). Keys are the
// lines exactly as written; a line that appears on both pages shares its
// step. Each step gets the command as run (addresses and placeholders
// filled in).
var docSteps = map[string]func(r *docRun, cmd string){
	// README.md, "Quick start": the server, and the suite.
	"make run    # builds bin/sextant and starts the server on the embedded store in ./data: HTTP API on 127.0.0.1:7400, xDS on 127.0.0.1:7402": func(r *docRun, cmd string) {
		r.makeRun()
	},
	"make test   # every test, with the race detector (what CI runs)": func(r *docRun, cmd string) {
		// Not run: it is the suite this test is part of. The target must exist.
		if !regexp.MustCompile(`(?m)^test:.*\n(\t.*\n)*\t(\S+=\S+ )*\$\(GO\) test -race `).Match(readRepoFile(r.t, "Makefile")) {
			r.t.Fatal("Makefile: no test target running go test -race")
		}
	},

	// The registry through the CLI.
	"bin/sextant instances register --service orders --host 10.0.0.1 --port 8080 --meta zone=z1 --meta env=prod --ttl 10": func(r *docRun, cmd string) {
		m := regexp.MustCompile(`(?m)^([0-9a-f]{32})\s+\d+\s*$`).FindStringSubmatch(r.ok(cmd))
		if m == nil {
			r.t.Fatal("register printed no id and revision")
		}
		r.vars["<id>"] = m[1]
		in, err := r.api.Get(r.ctx, m[1])
		if err != nil || in.Service != "orders" || in.Host != "10.0.0.1" || in.Port != 8080 || in.TTLSeconds != 10 ||
			in.Metadata["zone"] != "z1" || in.Metadata["env"] != "prod" || !in.Healthy {
			r.t.Fatalf("registered %+v, %v", in, err)
		}
	},
	"bin/sextant instances list --service orders --selector 'zone in (z1,z2),env!=dev'": func(r *docRun, cmd string) {
		out := r.ok(cmd)
		if !strings.Contains(out, r.vars["<id>"]) || !strings.Contains(out, "10.0.0.1:8080") {
			r.t.Fatalf("the selector did not find the instance:\n%s", out)
		}
	},
	"bin/sextant services list": func(r *docRun, cmd string) {
		if out := r.ok(cmd); !regexp.MustCompile(`(?m)^default\s+orders\s+1\s+1\s`).MatchString(out) {
			r.t.Fatalf("want default/orders with 1 instance, 1 healthy:\n%s", out)
		}
	},
	"bin/sextant watch default/orders          # in a terminal of its own: prints each change as it happens, until Ctrl-C": func(r *docRun, cmd string) {
		p := r.start("watch", cmd)
		r.eventually(10*time.Second, "watch prints the current state", func() (bool, string) {
			s := p.out.String()
			return strings.Contains(s, "+ "+r.vars["<id>"]), s
		})
	},
	"bin/sextant instances deregister <id>     # <id>: the ID the register printed": func(r *docRun, cmd string) {
		if out := r.ok(cmd); !strings.Contains(out, "deregistered") {
			r.t.Fatalf("deregister printed %q", out)
		}
		if _, err := r.api.Get(r.ctx, r.vars["<id>"]); err == nil {
			r.t.Fatal("the instance is still registered")
		}
		p := r.bg["watch"]
		r.eventually(10*time.Second, "watch prints the deregistration", func() (bool, string) {
			s := p.out.String()
			return strings.Contains(s, "- "+r.vars["<id>"]), s
		})
		r.stop("watch", syscall.SIGINT) // Ctrl-C ends it (stop fails the test if it does not)
	},

	// The registry over HTTP.
	`curl -s -XPOST localhost:7400/v1/instances -d '{"service":"orders","host":"10.0.0.2","port":8080,"metadata":{"zone":"z2"}}'`: func(r *docRun, cmd string) {
		var res struct {
			Revision int64    `json:"revision"`
			IDs      []string `json:"ids"`
		}
		r.decode(r.ok(cmd), &res)
		if res.Revision == 0 || len(res.IDs) != 1 {
			r.t.Fatalf("register answered %+v", res)
		}
	},
	`curl -s 'localhost:7400/v1/namespaces/default/services/orders/instances?selector=zone%3Dz2&healthy_only=true'`: func(r *docRun, cmd string) {
		var res client.QueryResult
		r.decode(r.ok(cmd), &res)
		if len(res.Instances) != 1 || res.Instances[0].Host != "10.0.0.2" || res.Revision == 0 {
			r.t.Fatalf("query answered %+v", res)
		}
		r.vars["<revision>"] = strconv.FormatUint(res.Revision, 10)
	},
	`curl -s 'localhost:7400/v1/namespaces/default/services/orders/instances?index=<revision>&wait=30s'   # <revision>: the answer's above; blocks until orders changes`: func(r *docRun, cmd string) {
		p := r.start("blocking query", cmd)
		// It must still be waiting a while later (an answer at once is the
		// bug this guards against: index=2 in an older README).
		select {
		case <-p.done:
			r.t.Fatalf("the blocking query answered at once: %s", p.out.String())
		case <-time.After(time.Second):
		}
		// "From another terminal": a change to orders.
		res, err := r.api.Register(r.ctx, client.Instance{Service: "orders", Host: "10.0.0.3", Port: 8080})
		if err != nil {
			r.t.Fatal(err)
		}
		select {
		case <-p.done:
			p.over = true
		case <-time.After(15 * time.Second):
			r.t.Fatal("the blocking query did not answer within 15s of a change")
		}
		var q client.QueryResult
		r.decode(p.out.String(), &q)
		if want, _ := strconv.ParseUint(r.vars["<revision>"], 10, 64); q.Revision <= want || len(q.Instances) != 2 {
			r.t.Fatalf("blocking query answered revision %d with %d instances; want > %d and 2", q.Revision, len(q.Instances), want)
		}
		if _, err := r.api.DeregisterOne(r.ctx, res.IDs[0]); err != nil {
			r.t.Fatal(err)
		}
	},
	`curl -s 'localhost:7400/v1/changes?since=0'`: func(r *docRun, cmd string) {
		var res client.ChangesResult
		r.decode(r.ok(cmd), &res)
		var ops []string
		for _, c := range res.Changes {
			if c.Instance != nil {
				ops = append(ops, c.Op+" "+c.Instance.Host)
			} else {
				ops = append(ops, c.Op+" "+c.ID)
			}
		}
		id := r.vars["<id>"]
		if !slices.Contains(ops, "delete "+id) || !slices.Contains(ops, "upsert 10.0.0.2") || res.More {
			r.t.Fatalf("changes since 0: %v (more %v); want the delete of %s and the upsert of 10.0.0.2", ops, res.More, id)
		}
	},

	// Routing through a gateway.
	"bin/sextant config apply -f examples/routing.yaml --dry-run   # what would change, nothing written": func(r *docRun, cmd string) {
		out := r.ok(cmd)
		for _, want := range []string{"destinationrule default/orders created (dry run)", "virtualservice default/orders created (dry run)",
			"xDS resources that would change:", "Cluster default/orders/v1", "RouteConfiguration default/orders"} {
			if !strings.Contains(out, want) {
				r.t.Fatalf("dry run printed no %q:\n%s", want, out)
			}
		}
		if l, err := r.api.ListConfig(r.ctx, "", ""); err != nil || len(l.Items) != 0 {
			r.t.Fatalf("after the dry run: %d objects stored, %v", len(l.Items), err)
		}
	},
	"bin/sextant config apply -f examples/routing.yaml": func(r *docRun, cmd string) {
		out := r.ok(cmd)
		if !strings.Contains(out, "destinationrule default/orders created") || !strings.Contains(out, "virtualservice default/orders created") {
			r.t.Fatalf("apply printed:\n%s", out)
		}
		if l, err := r.api.ListConfig(r.ctx, "", ""); err != nil || len(l.Items) != 2 {
			r.t.Fatalf("after the apply: %d objects stored, %v", len(l.Items), err)
		}
	},
	"bin/sextant gateway --xds 127.0.0.1:7402 --listen 127.0.0.1:8080 --admin 127.0.0.1:7403 --registry http://127.0.0.1:7400 &": func(r *docRun, cmd string) {
		r.start("gateway", cmd)
		r.ready("gateway", "http://"+r.addr["7403"]+"/readyz", 30*time.Second) // ready once a config is applied
		// The console finds gateways this way (docs/console.md).
		r.eventually(15*time.Second, "the gateway registered with its admin address", func() (bool, string) {
			l, err := r.api.List(r.ctx, client.ListOptions{Selector: "sextant.role=gateway"})
			if err != nil {
				return false, err.Error()
			}
			for _, in := range l.Instances {
				if in.Metadata["sextant.admin"] == r.addr["7403"] && in.Healthy {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%+v", l.Instances)
		})
		r.eventually(15*time.Second, "./gateway-data holds the call log", func() (bool, string) {
			_, err := os.Stat(filepath.Join(r.dir, "gateway-data", "calls"))
			return err == nil, fmt.Sprint(err)
		})
	},
	"go run ./examples/keepalive --service orders --port 9001 &": func(r *docRun, cmd string) {
		r.start("keepalive 9001", cmd)
		in := r.waitInstance("orders", "9001", 2*time.Minute) // go run compiles first
		if in.Metadata["version"] != "v1" || in.TTLSeconds != 10 {
			r.t.Fatalf("keepalive registered %+v; want version=v1, TTL 10", in)
		}
	},
	"curl -s -H 'Host: orders' localhost:8080/                     # default/orders v1 at 127.0.0.1:9001 (...)": func(r *docRun, cmd string) {
		r.answers(cmd, "default/orders v1 at "+r.addr["9001"]+" (")
	},
	"bin/sextant calls stats --service default/orders": func(r *docRun, cmd string) {
		// The call above is visible to queries within 1 s (docs/gateway.md).
		// Its row has the call's latency too (every figure printed 0.00
		// once: issue 28).
		r.eventually(15*time.Second, "calls stats counts the call, with its latency", func() (bool, string) {
			out := r.ok(cmd)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			head := strings.Fields(lines[0])
			col := slices.Index(head, "COUNT")
			if col < 0 {
				r.t.Fatalf("no COUNT column:\n%s", out)
			}
			for _, l := range lines[1:] {
				f := strings.Fields(l)
				if len(f) != len(head)+1 || f[0] == "total" { // the STEP is two fields: date and time
					continue
				}
				if n, _ := strconv.Atoi(f[col+1]); n == 0 {
					continue
				}
				for _, name := range []string{"AVG_MS", "P50_MS", "P90_MS", "P99_MS"} {
					i := slices.Index(head, name)
					if v, err := strconv.ParseFloat(f[i+1], 64); i < 0 || err != nil || v <= 0 {
						r.t.Fatalf("calls stats: the row with the call has %s %q:\n%s", name, f[min(i+1, len(f)-1)], out)
					}
				}
				return true, ""
			}
			return false, out
		})
	},
	"bin/sextant push status": func(r *docRun, cmd string) {
		out := r.ok(cmd)
		if !regexp.MustCompile(`(?m)^sextant-gateway~\S+\s+127\.0\.0\.1:\d+\s+sotw\s.*SYNCED`).MatchString(out) {
			r.t.Fatalf("push status does not show the gateway synced:\n%s", out)
		}
	},

	// examples/README.md: a second instance, in subset v2.
	"go run ./examples/keepalive --service orders --port 9002 --version v2 &": func(r *docRun, cmd string) {
		r.start("keepalive 9002", cmd)
		if in := r.waitInstance("orders", "9002", 2*time.Minute); in.Metadata["version"] != "v2" {
			r.t.Fatalf("keepalive registered %+v; want version=v2", in)
		}
	},
	"curl -s -H 'Host: orders' -H 'x-canary: yes' localhost:8080/   # default/orders v2 at 127.0.0.1:9002 (...)": func(r *docRun, cmd string) {
		r.answers(cmd, "default/orders v2 at "+r.addr["9002"]+" (")
	},

	// Placement.
	"bin/sextant nodes apply -f examples/nodes.yaml": func(r *docRun, cmd string) {
		out := r.ok(cmd)
		for _, n := range exampleNodes {
			if !strings.Contains(out, "node/"+n+" created") {
				r.t.Fatalf("nodes apply printed:\n%s", out)
			}
		}
		if l, err := r.api.ListNodes(r.ctx, client.NodeListOptions{}); err != nil || len(l.Items) != len(exampleNodes) {
			r.t.Fatalf("%d nodes stored, %v", len(l.Items), err)
		}
	},
	"bin/sextant place -f examples/pods.yaml --dry-run    # where each pod would go; nothing reserved": func(r *docRun, cmd string) {
		r.checkPlaced(r.ok(cmd), " would be placed on ")
		if l, err := r.api.ListPlacements(r.ctx, client.PlacementListOptions{}); err != nil || len(l.Items) != 0 {
			r.t.Fatalf("after the dry run: %d placements, %v", len(l.Items), err)
		}
	},
	"bin/sextant place -f examples/pods.yaml": func(r *docRun, cmd string) {
		r.checkPlaced(r.ok(cmd), " placed on ")
		if l, err := r.api.ListPlacements(r.ctx, client.PlacementListOptions{}); err != nil || len(l.Items) != len(examplePods) {
			r.t.Fatalf("%d placements, %v", len(l.Items), err)
		}
	},
	"bin/sextant placements list": func(r *docRun, cmd string) {
		out := r.ok(cmd)
		for pod, node := range r.placed {
			ns, name, _ := strings.Cut(pod, "/")
			if !regexp.MustCompile(`(?m)^` + ns + `\s+` + name + `\s+` + node + `\s`).MatchString(out) {
				r.t.Fatalf("placements list has no %s on %s:\n%s", pod, node, out)
			}
		}
	},
	"bin/sextant nodes list                               # CPU and MEMORY: reserved/allocatable": func(r *docRun, cmd string) {
		out := r.ok(cmd)
		// web-0..2 ask 500m and 512Mi each, the trainer 4 CPUs and 16Gi.
		for _, want := range []string{`node-gpu\s+4/16\s+16Gi/64Gi\s+1/110\s+dedicated=gpu:NoSchedule`, `node-old\s+0/8\s+0/16Gi\s+0/110\s+-\s+unschedulable`} {
			if !regexp.MustCompile(`(?m)^` + want).MatchString(out) {
				r.t.Fatalf("nodes list has no line matching %q:\n%s", want, out)
			}
		}
	},
}

// The objects of examples/nodes.yaml and examples/pods.yaml.
var (
	exampleNodes = []string{"node-a", "node-b", "node-gpu", "node-old"}
	examplePods  = []string{"default/web-0", "default/web-1", "default/web-2", "ml/trainer"}
)

// makeRun starts the server with the recipe of the Makefile's run target,
// as "make run" would after building bin/sextant.
func (r *docRun) makeRun() {
	r.t.Helper()
	mk := string(readRepoFile(r.t, "Makefile"))
	m := regexp.MustCompile(`(?m)^run: build\n\t(\S.*)\n(?:\n|$)`).FindStringSubmatch(mk)
	if m == nil || !strings.Contains(mk, "\nBIN := bin/sextant\n") {
		r.t.Fatal("Makefile: no one-line run target after BIN := bin/sextant")
	}
	cmd := r.repl.Replace(strings.ReplaceAll(m[1], "$(BIN)", "bin/sextant"))
	r.t.Logf("make run: %s", cmd)
	r.start("server", cmd)
	r.ready("server", "http://"+r.addr["7400"]+"/readyz", 30*time.Second)
	if _, err := os.Stat(filepath.Join(r.dir, "data")); err != nil {
		r.t.Fatalf("the server's store is not in ./data: %v", err)
	}
	c, err := net.Dial("tcp", r.addr["7402"])
	if err != nil {
		r.t.Fatalf("xDS is not served on %s: %v", r.addr["7402"], err)
	}
	c.Close() // open, gRPC's server would wait for its preface at shutdown

}

// answers runs cmd (a curl through the gateway) until its answer starts
// with want: routes and endpoints reach the gateway over xDS a moment after
// they are written.
func (r *docRun) answers(cmd, want string) {
	r.t.Helper()
	r.eventually(30*time.Second, "the gateway routes to "+want, func() (bool, string) {
		out := r.ok(cmd)
		return strings.HasPrefix(out, want), out
	})
}

// checkPlaced checks place's output (verb: " placed on " or " would be
// placed on ") against what examples/pods.yaml says: every pod placed, the
// trainer on the GPU node, web spread over both zones, nothing on the
// cordoned node.
func (r *docRun) checkPlaced(out, verb string) {
	r.t.Helper()
	placed := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^pod/(\S+)`+verb+`(\S+)$`).FindAllStringSubmatch(out, -1) {
		placed[m[1]] = m[2]
	}
	zones := map[string]int{}
	for _, pod := range examplePods {
		node := placed[pod]
		switch {
		case pod == "ml/trainer" && node != "node-gpu":
			r.t.Fatalf("trainer on %q, want node-gpu:\n%s", node, out)
		case strings.HasPrefix(pod, "default/web-") && node != "node-a" && node != "node-b":
			r.t.Fatalf("%s on %q, want node-a or node-b:\n%s", pod, node, out)
		}
		zones[node]++
	}
	if len(placed) != len(examplePods) || zones["node-a"] == 0 || zones["node-b"] == 0 {
		r.t.Fatalf("placed %v; want %v, web on both zones:\n%s", placed, examplePods, out)
	}
	r.placed = placed
}

func (r *docRun) decode(s string, v any) {
	r.t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		r.t.Fatalf("%v: %s", err, s)
	}
}

func readRepoFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../..", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDocSteps: every step is for a line one of the pages still has.
func TestDocSteps(t *testing.T) {
	var lines []string
	for _, page := range docPages {
		lines = append(lines, shLines(t, filepath.Join("../..", page))...)
	}
	for l := range docSteps {
		if !slices.Contains(lines, l) {
			t.Errorf("docSteps has a step for a line no page has (edited or removed? update or drop it): %s", l)
		}
	}
}

// docPages are the pages whose commands docSteps follows.
var docPages = []string{"README.md", "examples/README.md", "docs/security.md"}
