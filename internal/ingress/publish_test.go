package ingress_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/ingress"
	"github.com/sextant-mesh/sextant/internal/secret"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// TestWaitPublished: the publisher's WaitPublished returns once the
// Gateways of a revision are in the cache (config apply answers then), and
// not while the publisher has not published it.
func TestWaitPublished(t *testing.T) {
	cat := catalog.New(catalog.Options{})
	cfg, secrets := config.NewTable(), secret.NewTable()
	cat.Register(store.Config, cfg)
	cat.Register(store.Secrets, secrets)
	cfg.Attach(cat)
	cache := xds.NewCache()
	p := ingress.New(cat, cfg, secrets, cache, nil)

	objs, err := config.Decode([]byte(`
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 18080, name: http, protocol: HTTP}
    hosts: [shop.example.com]
`))
	if err != nil {
		t.Fatal(err)
	}
	apply := func(rev int64) {
		t.Helper()
		var ops []store.Op
		for _, o := range objs {
			ops = append(ops, store.Op{Kind: store.Config, Key: o.Key.String(), Value: o.Encode()})
		}
		if err := cat.Apply([]store.Change{{Revision: rev, Ops: ops, Time: time.Now().UnixNano()}}); err != nil {
			t.Fatal(err)
		}
	}
	apply(1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	err = p.WaitPublished(short, 1)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitPublished before the publisher runs: %v, want a deadline error", err)
	}
	done := make(chan error, 1)
	runCtx, stop := context.WithCancel(ctx)
	go func() { done <- p.Run(runCtx) }()
	defer func() { stop(); <-done }()
	if err := p.WaitPublished(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := cache.Get(xds.TypeListener, ingress.ListenerName(18080)); !ok {
		t.Fatal("the Gateway's listener is not published when WaitPublished returns")
	}
	// A change while running: port 18081 instead.
	objs[0].Gateway.Servers[0].Port.Number = 18081
	apply(2)
	if err := p.WaitPublished(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := cache.Get(xds.TypeListener, ingress.ListenerName(18081)); !ok {
		t.Fatal("the changed Gateway's listener is not published when WaitPublished returns")
	}
}
