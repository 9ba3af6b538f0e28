package config_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/config"
)

func gatewayDoc(ns, name string, port int, proto, host string) string {
	tls := ""
	if proto == "HTTPS" {
		tls = "\n    tls: {mode: SIMPLE, credentialName: cert}"
	}
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: %s, namespace: %s}
spec:
  servers:
  - port: {number: %d, name: p, protocol: %s}
    hosts: [%q]%s
`, name, ns, port, proto, host, tls)
}

func mustDecode(t *testing.T, doc string) []*config.Object {
	t.Helper()
	objs, err := config.Decode([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestGatewayClaimRefusedAtApply: a Gateway claiming a port and host
// another namespace's Gateway already serves, or its port with the other
// kind of protocol, is refused (ErrClaimed, naming the holder, the port and
// the host), by a dry run too; the holder may still change; once it is
// deleted the host is free.
func TestGatewayClaimRefusedAtApply(t *testing.T) {
	eng, tbl, closeAll := openEngine(t, t.TempDir())
	defer closeAll()
	ctx := context.Background()
	apply := func(doc string, dry bool) error {
		w := &config.ApplyWrite{Objects: mustDecode(t, doc), Table: tbl, DryRun: dry}
		if dry {
			_, err := eng.DryRun(w)
			return err
		}
		_, err := eng.Submit(ctx, w)
		return err
	}
	if err := apply(gatewayDoc("team-b", "shop", 8443, "HTTPS", "shop.example.com"), false); err != nil {
		t.Fatal(err)
	}
	for _, dry := range []bool{true, false} {
		err := apply(gatewayDoc("team-a", "shop", 8443, "HTTPS", "team-a/shop.example.com"), dry)
		var ce *config.ClaimError
		if !errors.Is(err, config.ErrClaimed) || !errors.As(err, &ce) || ce.Path != "spec.servers[0].hosts[0]" ||
			!strings.Contains(err.Error(), `port 8443 host "shop.example.com" is already served by Gateway team-b/shop`) {
			t.Fatalf("dry %v: a second claim of shop.example.com:8443: %v", dry, err)
		}
		err = apply(gatewayDoc("team-a", "plain", 8443, "HTTP", "other.example.com"), dry)
		if !errors.Is(err, config.ErrClaimed) || !strings.Contains(err.Error(), "port 8443 is TLS in Gateway team-b/shop") {
			t.Fatalf("dry %v: plaintext on team-b's TLS port: %v", dry, err)
		}
	}
	if tbl.Get(config.Key{Kind: config.KindGateway, Namespace: "team-a", Name: "shop"}) != nil {
		t.Fatal("the refused Gateway was stored")
	}
	// Another host on the port, and the holder's own change, are fine.
	if err := apply(gatewayDoc("team-a", "shop", 8443, "HTTPS", "a.example.com"), false); err != nil {
		t.Fatal(err)
	}
	if err := apply(gatewayDoc("team-b", "shop", 8443, "HTTPS", "shop.example.com")+"---\n"+
		gatewayDoc("team-b", "more", 8080, "HTTP", "shop.example.com"), false); err != nil {
		t.Fatal(err)
	}
	// Two documents of one apply claiming one host: the second is refused.
	err := apply(gatewayDoc("team-c", "gw-x", 9000, "HTTP", "*")+"---\n"+gatewayDoc("team-c", "gw-y", 9000, "HTTP", "*"), false)
	var ce *config.ClaimError
	if !errors.As(err, &ce) || ce.Path != "documents[1].spec.servers[0].hosts[0]" {
		t.Fatalf("two documents claiming 9000 *: %v", err)
	}
	if _, err := eng.Submit(ctx, &config.DeleteWrite{Key: config.Key{Kind: config.KindGateway, Namespace: "team-b", Name: "shop"}}); err != nil {
		t.Fatal(err)
	}
	if err := apply(gatewayDoc("team-a", "shop", 8443, "HTTPS", "shop.example.com"), false); err != nil {
		t.Fatalf("after the holder's delete: %v", err)
	}
}

// blocker holds the write engine's committer in Plan until release is
// closed, so that the writes submitted meanwhile are planned as one batch.
type blocker struct{ planning, release chan struct{} }

func (b blocker) Plan(tx *commit.Tx) error {
	close(b.planning)
	<-b.release
	tx.Answer(tx.Revision())
	return nil
}

// TestGatewayClaimConcurrent: applies racing for one port and host,
// planned in one batch of the write engine (each sees the others' writes
// of the batch, not only the table), store exactly one Gateway per host.
func TestGatewayClaimConcurrent(t *testing.T) {
	eng, tbl, closeAll := openEngine(t, t.TempDir())
	defer closeAll()
	const rounds, racers = 5, 8
	for r := range rounds {
		host := fmt.Sprintf("h%d.example.com", r)
		b := blocker{planning: make(chan struct{}), release: make(chan struct{})}
		held := make(chan error, 1)
		go func() { _, err := eng.Submit(context.Background(), b); held <- err }()
		<-b.planning
		var wg sync.WaitGroup
		errs := make([]error, racers)
		var queued sync.WaitGroup
		for i := range racers {
			wg.Add(1)
			queued.Add(1)
			go func() {
				defer wg.Done()
				doc := gatewayDoc(fmt.Sprintf("team-%d", i), fmt.Sprintf("gw-%d", r), 8443, "HTTPS", host)
				w := &config.ApplyWrite{Objects: mustDecode(t, doc), Table: tbl}
				queued.Done()
				_, errs[i] = eng.Submit(context.Background(), w)
			}()
		}
		queued.Wait()
		// The racers are about to queue; a write queued after the
		// release only makes a smaller batch, never a wrong answer.
		time.Sleep(50 * time.Millisecond)
		close(b.release)
		if err := <-held; err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, config.ErrClaimed):
				t.Fatal(err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d applies won %s", r, won, host)
		}
	}
	if gws, _ := tbl.List(config.KindGateway, ""); len(gws) != rounds {
		t.Fatalf("%d Gateways stored, want %d", len(gws), rounds)
	}
}
