package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The steps of docs/security.md's walkthrough (docSteps): identities kept
// by agents, bootstraps, examples/security.yaml, examples/grpcmtls as a
// grpc-go xDS server and clients: the allowed identity gets SERVING over
// mutual TLS, another PermissionDenied from grpc-go's RBAC, and SERVING once
// the policy is deleted.
var securitySteps = map[string]func(r *docRun, cmd string){
	"bin/sextant identity agent --namespace default --service-account inventory --dir ./id/inventory &": func(r *docRun, cmd string) {
		r.agentStep("agent-inventory", cmd, "id/inventory")
	},
	"bin/sextant identity agent --namespace web --service-account frontend --dir ./id/frontend &": func(r *docRun, cmd string) {
		r.agentStep("agent-frontend", cmd, "id/frontend")
	},
	"bin/sextant identity cert --namespace web --service-account intruder --dir ./id/intruder": func(r *docRun, cmd string) {
		if out := r.ok(cmd); !strings.Contains(out, "spiffe://cluster.local/ns/web/sa/intruder") {
			r.t.Fatalf("identity cert printed:\n%s", out)
		}
	},
	"bin/sextant identity bootstrap --xds 127.0.0.1:7402 --namespace default --dir ./id/inventory > inventory.json": func(r *docRun, cmd string) {
		r.bootstrapStep(cmd, "inventory.json", "default", "id/inventory")
	},
	"bin/sextant identity bootstrap --xds 127.0.0.1:7402 --namespace web --dir ./id/frontend > frontend.json": func(r *docRun, cmd string) {
		r.bootstrapStep(cmd, "frontend.json", "web", "id/frontend")
	},
	"bin/sextant identity bootstrap --xds 127.0.0.1:7402 --namespace web --dir ./id/intruder > intruder.json": func(r *docRun, cmd string) {
		r.bootstrapStep(cmd, "intruder.json", "web", "id/intruder")
	},
	"bin/sextant config apply -f examples/security.yaml": func(r *docRun, cmd string) {
		out := r.ok(cmd)
		for _, want := range []string{"destinationrule default/inventory", "peerauthentication default/default", "authorizationpolicy default/inventory"} {
			if !strings.Contains(out, want) {
				r.t.Fatalf("config apply printed no %q:\n%s", want, out)
			}
		}
	},
	"bin/sextant instances register --service inventory --host 127.0.0.1 --port 50051 --meta app=inventory": func(r *docRun, cmd string) {
		r.ok(cmd)
		r.waitInstance("inventory", "50051", 10*time.Second)
	},
	`GRPC_XDS_BOOTSTRAP=inventory.json go run ./examples/grpcmtls --serve 127.0.0.1:50051 &   # prints "serving on 127.0.0.1:50051" once its listener arrived`: func(r *docRun, cmd string) {
		p := r.start("inventory", cmd)
		r.eventually(2*time.Minute, "the grpc-go server is serving", func() (bool, string) {
			s := p.out.String()
			return strings.Contains(s, "serving on "+r.addr["50051"]) && !strings.Contains(s, "not serving"), s + p.errs.String()
		})
	},
	"GRPC_XDS_BOOTSTRAP=frontend.json go run ./examples/grpcmtls --call xds:///inventory.default    # SERVING: over mutual TLS, allowed": func(r *docRun, cmd string) {
		// Eventually: the server may have been given its listener a moment
		// before the engine took in the policies (docs/security.md).
		r.eventually(30*time.Second, "frontend's call answers SERVING", func() (bool, string) {
			res := r.sh(cmd)
			return res.code == 0 && strings.TrimSpace(res.out) == "SERVING", res.out + res.errs
		})
	},
	"GRPC_XDS_BOOTSTRAP=intruder.json go run ./examples/grpcmtls --call xds:///inventory.default    # PermissionDenied: incoming RPC did not match an allow policy (grpc-go's RBAC)": func(r *docRun, cmd string) {
		if res := r.sh(cmd); res.code != 1 || !strings.Contains(res.errs, "PermissionDenied: incoming RPC did not match an allow policy") {
			r.t.Fatalf("intruder's call: exit %d\n%s%s", res.code, res.out, res.errs)
		}
	},
	"bin/sextant config delete authorizationpolicy/default/inventory": func(r *docRun, cmd string) {
		r.ok(cmd)
	},
	"GRPC_XDS_BOOTSTRAP=intruder.json go run ./examples/grpcmtls --call xds:///inventory.default    # SERVING": func(r *docRun, cmd string) {
		r.eventually(30*time.Second, "the intruder is allowed once the policy is gone", func() (bool, string) {
			res := r.sh(cmd)
			return res.code == 0 && strings.TrimSpace(res.out) == "SERVING", res.out + res.errs
		})
	},
}

func init() {
	for l, f := range securitySteps {
		docSteps[l] = f
	}
	exampleCases = append(exampleCases,
		exampleCase{"security.yaml", func(r *docRun) { r.followSection("../../docs/security.md", "### Walkthrough") }},
		// Run by the walkthrough (security.yaml's case); here: it is the
		// program the walkthrough runs.
		exampleCase{"grpcmtls/main.go", func(r *docRun) {
			if !strings.Contains(string(readRepoFile(r.t, "docs/security.md")), "go run ./examples/grpcmtls --serve") {
				r.t.Error("docs/security.md's walkthrough does not run examples/grpcmtls")
			}
		}},
	)
}

// agentStep starts an identity agent and waits for its first files.
func (r *docRun) agentStep(name, cmd, dir string) {
	r.t.Helper()
	p := r.start(name, cmd)
	r.eventually(30*time.Second, name+" writes its files", func() (bool, string) {
		_, err := os.Stat(filepath.Join(r.dir, dir, "ca.pem"))
		return err == nil, p.errs.String()
	})
}

// bootstrapStep checks a bootstrap names this run's xDS address, the
// namespace, the agent's files and the server listener template.
func (r *docRun) bootstrapStep(cmd, file, ns, dir string) {
	r.t.Helper()
	r.ok(cmd)
	b, err := os.ReadFile(filepath.Join(r.dir, file))
	if err != nil {
		r.t.Fatal(err)
	}
	var bs struct {
		Servers []struct {
			URI string `json:"server_uri"`
		} `json:"xds_servers"`
		Node struct {
			Metadata map[string]string `json:"metadata"`
		} `json:"node"`
		Providers map[string]struct {
			Plugin string            `json:"plugin_name"`
			Config map[string]string `json:"config"`
		} `json:"certificate_providers"`
		Template string `json:"server_listener_resource_name_template"`
	}
	if err := json.Unmarshal(b, &bs); err != nil {
		r.t.Fatalf("%s: %v\n%s", file, err, b)
	}
	p := bs.Providers["sextant"]
	if len(bs.Servers) != 1 || bs.Servers[0].URI != r.addr["7402"] || bs.Node.Metadata["NAMESPACE"] != ns || p.Plugin != "file_watcher" ||
		!strings.HasSuffix(p.Config["certificate_file"], dir+"/cert.pem") || bs.Template != "grpc/server?xds.resource.listening_address=%s" {
		r.t.Fatalf("%s:\n%s", file, b)
	}
}

// followSection follows the ```sh lines of one section of a page: from
// the line starting with heading to the next heading of its level or
// above.
func (r *docRun) followSection(path, heading string) {
	r.t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		r.t.Fatal(err)
	}
	level := strings.SplitN(heading, " ", 2)[0]
	var out []string
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "#") {
			h := strings.SplitN(l, " ", 2)[0]
			if in && len(h) <= len(level) {
				break
			}
			if strings.HasPrefix(l, heading) {
				in = true
			}
		}
		if in {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		r.t.Fatalf("%s: no section %q", path, heading)
	}
	section := filepath.Join(r.t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(section, []byte(strings.Join(out, "\n")), 0o600); err != nil {
		r.t.Fatal(err)
	}
	r.follow(section)
}
