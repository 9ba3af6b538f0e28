package ingress_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/ingress"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/secret"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// TestPublishAutoPassthroughFollowsPorts: with an AUTO_PASSTHROUGH server,
// the publisher follows the registry: an instance on a new port adds that
// port's server name to the listener; an instance change that leaves the
// service's ports alone leaves the listener as it was.
func TestPublishAutoPassthroughFollowsPorts(t *testing.T) {
	cat := catalog.New(catalog.Options{})
	cat.Register(store.Instances, catalog.NewGroups(catalog.Codec[*instance.Instance]{
		Decode: func(rec store.Record) (*instance.Instance, error) { return instance.Decode(rec.Value, rec.Revision) },
		Adopt: func(obj any, rev int64) (*instance.Instance, error) {
			in := obj.(*instance.Instance)
			in.Revision = rev
			return in, nil
		},
	}))
	cfg, secrets := config.NewTable(), secret.NewTable()
	cat.Register(store.Config, cfg)
	cat.Register(store.Secrets, secrets)
	cfg.Attach(cat)
	cache := xds.NewCache()
	p := ingress.New(cat, cfg, secrets, cache, nil)
	objs, err := config.Decode([]byte(`apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: eastwest}
spec:
  servers:
  - port: {number: 15443, name: tls, protocol: TLS}
    tls: {mode: AUTO_PASSTHROUGH}
    hosts: ["*.local"]
`))
	if err != nil {
		t.Fatal(err)
	}
	apply := func(rev int64, op store.Op) {
		t.Helper()
		if err := cat.Apply([]store.Change{{Revision: rev, Ops: []store.Op{op}, Time: time.Now().UnixNano()}}); err != nil {
			t.Fatal(err)
		}
	}
	inst := func(id string, port, weight int) store.Op {
		in := &instance.Instance{ID: id, Namespace: "default", Service: "vault", Host: "10.0.0.1", Port: port, Weight: weight, Healthy: true}
		return store.Op{Kind: store.Instances, Key: id, Value: in.AppendBinary(nil)}
	}
	apply(1, store.Op{Kind: store.Config, Key: objs[0].Key.String(), Value: objs[0].Encode()})
	apply(2, inst("a", 8200, 100))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	runCtx, stop := context.WithCancel(ctx)
	go func() { done <- p.Run(runCtx) }()
	defer func() { stop(); <-done }()
	listener := func(rev int64) (string, string) {
		t.Helper()
		if err := p.WaitPublished(ctx, rev); err != nil {
			t.Fatal(err)
		}
		b, v, _ := cache.Get(xds.TypeListener, ingress.ListenerName(15443))
		return string(b), v
	}
	b, v := listener(2)
	if !strings.Contains(b, ingress.SNIName(8200, "", "vault.default.svc.cluster.local")) {
		t.Fatalf("no chain for port 8200: %q", b)
	}
	// Another instance on a new port: its server name is published.
	apply(3, inst("b", 8201, 100))
	if b, v2 := listener(3); !strings.Contains(b, ingress.SNIName(8201, "", "vault.default.svc.cluster.local")) || v2 == v {
		t.Fatalf("no chain for port 8201 (version %s, was %s)", v2, v)
	} else {
		v = v2
	}
	// A weight change: the same ports, the same listener.
	apply(4, inst("b", 8201, 50))
	if _, v2 := listener(4); v2 != v {
		t.Errorf("listener version %s after a change of no port; want %s", v2, v)
	}
}
