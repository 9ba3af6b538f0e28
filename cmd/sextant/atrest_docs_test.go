package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/seal"
)

// atRestSteps check what docs/security.md's "Encryption at rest" says its
// commands do, run as written (TestDocsEncryptionAtRest).
var atRestSteps = map[string]func(r *docRun, cmd string){
	"(umask 077; head -c 32 /dev/urandom | base64 > sextant-key-1)": func(r *docRun, cmd string) {
		r.ok(cmd)
		r.keyID("sextant-key-1")
	},
	"bin/sextant server --data ./data --http 127.0.0.1:7400 --xds 127.0.0.1:7402 --encryption-key-file sextant-key-1": func(r *docRun, cmd string) {
		r.start("server sealing with key 1", cmd)
		r.ready("server sealing with key 1", "http://"+r.addr["7400"]+"/readyz", 30*time.Second)
		cert, key := testCert(r.t, r.dir, "shop", time.Now().Add(24*time.Hour), "shop.example.com")
		r.ok("bin/sextant secret create tls shop-cert --cert " + cert + " --key " + key)
		r.ok("bin/sextant identity bundle") // creates the authority
		r.stop("server sealing with key 1", syscall.SIGINT)
		if err := filepath.WalkDir(filepath.Join(r.dir, "data"), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			if b, err := os.ReadFile(p); err != nil || bytes.Contains(b, []byte("PRIVATE KEY")) {
				r.t.Errorf("%s holds a plain private key (%v)", p, err)
			}
			return nil
		}); err != nil {
			r.t.Fatal(err)
		}
	},
	"(umask 077; head -c 32 /dev/urandom | base64 > sextant-key-2)": func(r *docRun, cmd string) {
		r.ok(cmd)
		r.keyID("sextant-key-2")
	},
	"bin/sextant server --data ./data --http 127.0.0.1:7400 --xds 127.0.0.1:7402 --encryption-key-file sextant-key-2 --decryption-key-file sextant-key-1": func(r *docRun, cmd string) {
		p := r.start("server sealing with key 2, opening key 1", cmd)
		r.ready("server sealing with key 2, opening key 1", "http://"+r.addr["7400"]+"/readyz", 30*time.Second)
		r.eventually(10*time.Second, "the start reseals the secret and the authority", func() (bool, string) {
			s := p.errs.String()
			return strings.Contains(s, "key="+r.vars["sextant-key-2"]) && strings.Contains(s, "resealed_secrets=1 resealed_ca=true"), s
		})
		r.stop("server sealing with key 2, opening key 1", syscall.SIGINT)
	},
	"bin/sextant server --data ./data --http 127.0.0.1:7400 --xds 127.0.0.1:7402 --encryption-key-file sextant-key-2": func(r *docRun, cmd string) {
		r.start("server with key 2", cmd)
		r.ready("server with key 2", "http://"+r.addr["7400"]+"/readyz", 30*time.Second)
		if out := r.ok("bin/sextant secret get shop-cert"); !strings.Contains(out, "shop.example.com") {
			r.t.Errorf("secret get under key 2: %s", out)
		}
		r.ok("bin/sextant identity cert --namespace orders --service-account api --dir ./id/orders")
		r.stop("server with key 2", syscall.SIGINT)
		// Key 1 is retired: a server given it alone refuses to start.
		old := strings.Replace(cmd, "sextant-key-2", "sextant-key-1", 1)
		if res := r.sh(old); res.code != 1 || !strings.Contains(res.errs, "key "+r.vars["sextant-key-2"]) {
			r.t.Errorf("a server with the retired key: exit %d\n%s", res.code, res.errs)
		}
	},
}

func init() {
	for l, f := range atRestSteps {
		docSteps[l] = f
	}
}

// keyID checks that the key file name is mode 0600 and a key, and keeps
// its id as r.vars[name].
func (r *docRun) keyID(name string) {
	r.t.Helper()
	p := filepath.Join(r.dir, name)
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		r.t.Fatalf("%s: %v, mode %v", name, err, fi.Mode())
	}
	k, err := seal.ReadKeyFile(p)
	if err != nil {
		r.t.Fatal(err)
	}
	r.vars[name] = seal.KeyID(k)
}

// TestDocsEncryptionAtRest follows docs/security.md's "Encryption at
// rest" (its rotation included) as written.
func TestDocsEncryptionAtRest(t *testing.T) {
	r := newDocRun(t)
	r.followSection("../../docs/security.md", "## Encryption at rest")
}
