package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sextant-mesh/sextant/internal/seal"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
	"github.com/sextant-mesh/sextant/internal/store/mysql/mysqltest"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// writeKeyFile writes a new random key-encryption key, base64, mode 0600,
// and returns its path and id.
func writeKeyFile(t *testing.T, dir, name string) (path, id string) {
	t.Helper()
	k := make([]byte, seal.KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(k)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, seal.KeyID(k)
}

// sdsKey asks the xDS server at addr over ADS (real gRPC, as a gateway
// does) for SDS secret name and returns the private key it serves.
func sdsKey(ctx context.Context, addr, name string) ([]byte, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: xds.TypeSecret.URL(), ResourceNames: []string{name},
		Node: &corev3.Node{Id: "atrest-test"}}); err != nil {
		return nil, err
	}
	for {
		r, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		for _, res := range r.Resources {
			var s tlsv3.Secret
			if err := res.UnmarshalTo(&s); err != nil {
				return nil, err
			}
			if s.Name == name {
				return s.GetTlsCertificate().GetPrivateKey().GetInlineBytes(), nil
			}
		}
	}
}

// waitServed waits until srv's xDS serves SDS secret default/NAME with key.
func waitServed(t *testing.T, srv *clusterServer, name string, key []byte) {
	t.Helper()
	var got []byte
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got, err = sdsKey(context.Background(), srv.xdsAddr, "default/"+name); err == nil && bytes.Equal(got, key) {
			return
		}
	}
	t.Fatalf("%s: SDS default/%s: %v, key served %q", srv.id, name, err, got)
}

// startFails runs a server that must refuse to start and returns what it
// said.
func startFails(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append([]string{"server", "--http", freeAddr(t), "--xds", "", "--log-level", "warn"}, args...)...).CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("the server started (or ran until killed): %v\n%s", err, out)
	}
	return string(out)
}

// gatewayFor applies a Gateway (and its VirtualService) named after
// secret name, on ports port and port+1, naming the secret, so that the
// server publishes it over SDS.
func gatewayFor(t *testing.T, srv *clusterServer, name string, port int) {
	t.Helper()
	gw := strings.NewReplacer("shop-cert", name, "shop-gw", name+"-gw", "name: shop}", "name: "+name+"}").
		Replace(fmt.Sprintf(istioGateway, port, port+1))
	if out, err := runOn(t, srv.base(), gw, "config", "apply", "-f", "-"); err != nil {
		t.Fatalf("config apply: %v\n%s", err, out)
	}
}

// pemBody is a line from the middle of a PEM private key: what must not
// appear in the store.
func pemBody(key []byte) string {
	lines := strings.Split(string(key), "\n")
	return lines[len(lines)/2]
}

// TestEncryptionAtRestEmbedded: with --encryption-key-file, a TLS secret's
// private key and the generated CA's key are in no file of the data
// directory nor in any record of the store; a restart serves the secret
// intact over SDS and signs with the same root; a rotation (the new key
// sealing with the old one opening, then the new one alone) serves it
// throughout; a server without the key, or with another one, refuses to
// start naming the record and the key id; a world-readable key file is
// refused.
func TestEncryptionAtRestEmbedded(t *testing.T) {
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	data, keysDir, certs := t.TempDir(), t.TempDir(), t.TempDir()
	k1, id1 := writeKeyFile(t, keysDir, "k1")
	k2, id2 := writeKeyFile(t, keysDir, "k2")
	cert, keyFile := testCert(t, certs, "shop", time.Now().Add(24*time.Hour), "shop.example.com")
	key, _ := os.ReadFile(keyFile)

	srv := &clusterServer{t: t, bin: bin, id: "embedded", addr: freeAddr(t), xdsAddr: freeAddr(t),
		args: []string{"--data", data, "--encryption-key-file", k1}}
	srv.start()
	t.Cleanup(srv.stop)
	if out, err := runOn(t, srv.base(), "", "secret", "create", "tls", "shop-cert", "--cert", cert, "--key", keyFile); err != nil {
		t.Fatalf("secret create: %v\n%s", err, out)
	}
	gatewayFor(t, srv, "shop-cert", 18443)
	waitServed(t, srv, "shop-cert", key)
	ctx := context.Background()
	bundle, err := identityCLI(ctx, "identity", "bundle", "--server", srv.base()) // creates the authority
	if err != nil || !strings.Contains(bundle, "BEGIN CERTIFICATE") {
		t.Fatalf("identity bundle: %v\n%s", err, bundle)
	}
	srv.stop()

	// Not in any file of the data directory, nor in any stored record.
	if err := filepath.WalkDir(data, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte("PRIVATE KEY")) || bytes.Contains(b, []byte(pemBody(key))) {
			return fmt.Errorf("%s holds a plain private key", p)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	st, err := embedded.Open(data)
	if err != nil {
		t.Fatal(err)
	}
	sealed := map[string]string{}
	_, err = st.Load(store.Kinds(), func(r store.Record) error {
		if bytes.Contains(r.Value, []byte("PRIVATE KEY")) {
			return fmt.Errorf("record %v %s holds a plain private key: %s", r.Kind, r.Key, r.Value)
		}
		if r.Kind == store.Secrets || (r.Kind == store.System && r.Key == "ca") {
			sealed[r.Kind.String()+"/"+r.Key] = string(r.Value)
		}
		return nil
	})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"secrets/default/shop-cert", "system/ca"} {
		if !strings.Contains(sealed[k], "sx1:"+id1+":") {
			t.Errorf("%s is not sealed with %s: %s", k, id1, sealed[k])
		}
	}

	// Restarted with the key: the secret and the authority, intact.
	srv.start()
	waitServed(t, srv, "shop-cert", key)
	if got, err := identityCLI(ctx, "identity", "bundle", "--server", srv.base()); err != nil || got != bundle {
		t.Fatalf("the bundle after a restart: %v\n%s", err, got)
	}
	srv.stop()

	// Refused: no key, the wrong key, a key file others can read.
	for name, args := range map[string][]string{
		"no key":    {"--data", data},
		"wrong key": {"--data", data, "--encryption-key-file", k2},
	} {
		out := startFails(t, bin, args...)
		if !strings.Contains(out, id1) || !strings.Contains(out, "default/shop-cert") {
			t.Errorf("%s: the refusal names neither the key %s nor the record:\n%s", name, id1, out)
		}
	}
	open := filepath.Join(keysDir, "open")
	b, _ := os.ReadFile(k1)
	os.WriteFile(open, b, 0o644)
	os.Chmod(open, 0o644)
	if out := startFails(t, bin, "--data", data, "--encryption-key-file", open); !strings.Contains(out, "mode 0644") {
		t.Errorf("a world-readable key file:\n%s", out)
	}

	// Rotation: k2 seals and k1 opens; the start reseals both records.
	srv.args = []string{"--data", data, "--encryption-key-file", k2, "--decryption-key-file", k1}
	srv.start()
	waitServed(t, srv, "shop-cert", key)
	srv.stop()
	// k1 retired.
	srv.args = []string{"--data", data, "--encryption-key-file", k2}
	srv.start()
	waitServed(t, srv, "shop-cert", key)
	if got, err := identityCLI(ctx, "identity", "bundle", "--server", srv.base()); err != nil || got != bundle {
		t.Fatalf("the bundle under k2: %v\n%s", err, got)
	}
	if out, err := identityCLI(ctx, "identity", "cert", "--namespace", "orders", "--service-account", "api", "--dir", t.TempDir(), "--server", srv.base()); err != nil {
		t.Fatalf("signing under k2: %v\n%s", err, out)
	}
	srv.stop()
	if out := startFails(t, bin, "--data", data, "--encryption-key-file", k1); !strings.Contains(out, id2) {
		t.Errorf("k1 after the rotation: the refusal does not name %s:\n%s", id2, out)
	}
}

// sealedRows reads every sx_record row of the secrets and the authority
// and every sx_change value, failing on a plain private key; it returns
// the record values by kind/key.
func sealedRows(t *testing.T, db *sql.DB) map[string]string {
	t.Helper()
	out := map[string]string{}
	rows, err := db.Query("SELECT kind, rkey, value FROM sx_record")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind, key string
		var value []byte
		if err := rows.Scan(&kind, &key, &value); err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(value, []byte("PRIVATE KEY")) {
			t.Fatalf("sx_record %s %s holds a plain private key: %s", kind, key, value)
		}
		out[store.Kind(kind[0]).String()+"/"+key] = string(value)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM sx_change WHERE value LIKE '%PRIVATE KEY%'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("sx_change: %d values hold a plain private key (%v)", n, err)
	}
	return out
}

// TestEncryptionAtRestCluster: two servers over one MariaDB database with
// the same key store a secret and the authority sealed in sx_record (and
// in sx_change); the key is rotated without downtime, one server
// restarted at a time (the new key added to open, then made the sealing
// key, then the old one dropped), the other server serving the secret
// over SDS at every step; a secret written by a server still sealing with
// the old key mid-rotation is resealed when that server restarts; a
// server with only the old key then refuses to start, naming the record
// and the new key.
func TestEncryptionAtRestCluster(t *testing.T) {
	keysDir, certs := t.TempDir(), t.TempDir()
	k1, id1 := writeKeyFile(t, keysDir, "k1")
	k2, id2 := writeKeyFile(t, keysDir, "k2")
	// Fails, never skips, when MariaDB cannot be reached (mysqltest
	// starts it if it is down).
	t.Setenv("CI", "true")
	// No server yet: startCluster of none is the database and its URL.
	_, db := startCluster(t, 0, "")
	var name string
	if err := db.QueryRow("SELECT DATABASE()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("mysql://root@tcp(%s)/%s", mysqltest.Addr(), name)
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	mk := func(id string, args ...string) *clusterServer {
		s := &clusterServer{t: t, bin: bin, id: id, addr: freeAddr(t), xdsAddr: freeAddr(t), url: url, args: args}
		s.start()
		t.Cleanup(s.stop)
		return s
	}
	a := mk("a", "--encryption-key-file", k1)
	b := mk("b", "--encryption-key-file", k1)
	cert, keyFile := testCert(t, certs, "shop", time.Now().Add(24*time.Hour), "shop.example.com")
	key, _ := os.ReadFile(keyFile)
	if out, err := runOn(t, a.base(), "", "secret", "create", "tls", "shop-cert", "--cert", cert, "--key", keyFile); err != nil {
		t.Fatalf("secret create: %v\n%s", err, out)
	}
	gatewayFor(t, a, "shop-cert", 18443)
	ctx := context.Background()
	bundle, err := identityCLI(ctx, "identity", "bundle", "--server", b.base())
	if err != nil {
		t.Fatalf("identity bundle: %v\n%s", err, bundle)
	}
	waitServed(t, a, "shop-cert", key)
	waitServed(t, b, "shop-cert", key)
	rows := sealedRows(t, db)
	for _, k := range []string{"secrets/default/shop-cert", "system/ca"} {
		if !strings.Contains(rows[k], "sx1:"+id1+":") {
			t.Fatalf("%s is not sealed with %s: %s", k, id1, rows[k])
		}
	}

	// restart stops s, starts it with args, and checks the other server
	// served the secret meanwhile and s serves it again.
	restart := func(s, other *clusterServer, args ...string) {
		t.Helper()
		s.stop()
		waitServed(t, other, "shop-cert", key)
		s.args = args
		s.start()
		waitServed(t, s, "shop-cert", key)
		waitServed(t, other, "shop-cert", key)
	}
	// 1. k2 added to open, on every server.
	restart(a, b, "--encryption-key-file", k1, "--decryption-key-file", k2)
	restart(b, a, "--encryption-key-file", k1, "--decryption-key-file", k2)
	// 2. k2 made the sealing key, one server at a time: a reseals at its
	// start; b, still sealing with k1, writes a secret meanwhile.
	restart(a, b, "--encryption-key-file", k2, "--decryption-key-file", k1)
	if rows := sealedRows(t, db); !strings.Contains(rows["secrets/default/shop-cert"], "sx1:"+id2+":") || !strings.Contains(rows["system/ca"], "sx1:"+id2+":") {
		t.Fatalf("not resealed with %s at a's start:\n%s\n%s", id2, rows["secrets/default/shop-cert"], rows["system/ca"])
	}
	cert2, key2File := testCert(t, certs, "late", time.Now().Add(24*time.Hour), "late.example.com")
	key2, _ := os.ReadFile(key2File)
	if out, err := runOn(t, b.base(), "", "secret", "create", "tls", "late-cert", "--cert", cert2, "--key", key2File); err != nil {
		t.Fatalf("secret create on b: %v\n%s", err, out)
	}
	gatewayFor(t, b, "late-cert", 19443)
	waitServed(t, a, "late-cert", key2)
	if rows := sealedRows(t, db); !strings.Contains(rows["secrets/default/late-cert"], "sx1:"+id1+":") {
		t.Fatalf("b seals with %s until it restarts: %s", id1, rows["secrets/default/late-cert"])
	}
	restart(b, a, "--encryption-key-file", k2, "--decryption-key-file", k1)
	rows = sealedRows(t, db)
	for k, v := range rows {
		if strings.Contains(v, "sx1:"+id1+":") {
			t.Fatalf("%s still sealed with %s after every server sealed with %s", k, id1, id2)
		}
	}
	// 3. k1 dropped.
	restart(a, b, "--encryption-key-file", k2)
	restart(b, a, "--encryption-key-file", k2)
	waitServed(t, a, "late-cert", key2)
	if got, err := identityCLI(ctx, "identity", "bundle", "--server", a.base()); err != nil || got != bundle {
		t.Fatalf("the bundle after the rotation: %v\n%s", err, got)
	}
	if out := startFails(t, bin, "--store", url, "--encryption-key-file", k1); !strings.Contains(out, id2) || !strings.Contains(out, "default/") {
		t.Errorf("a server with the retired key alone: the refusal does not name %s and the record:\n%s", id2, out)
	}
}
