package ingress

import (
	"slices"
	"strings"
	"testing"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/secret"
	"github.com/sextant-mesh/sextant/internal/secret/secrettest"
)

// TestUpstreamSecrets: the SDS secrets DestinationRules' tls SIMPLE and
// MUTUAL credentialNames need, with the CA from the secret itself or from
// its NAME-cacert secret, and warnings for what is missing.
func TestUpstreamSecrets(t *testing.T) {
	objs, err := config.Decode([]byte(`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders, namespace: shop}
spec:
  host: orders
  trafficPolicy: {tls: {mode: SIMPLE, credentialName: orders-ca}}
  subsets:
  - {name: v2, labels: {version: v2}, trafficPolicy: {tls: {mode: MUTUAL, credentialName: client}}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: billing, namespace: shop}
spec:
  host: billing
  trafficPolicy: {tls: {mode: MUTUAL, credentialName: bare}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: legacy, namespace: shop}
spec:
  host: legacy
  trafficPolicy: {tls: {mode: SIMPLE, credentialName: nothing}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: lax, namespace: shop}
spec:
  host: lax
  trafficPolicy: {tls: {mode: SIMPLE, insecureSkipVerify: true}}
`))
	if err != nil {
		t.Fatal(err)
	}
	var drs []*config.Entry
	for _, o := range objs {
		drs = append(drs, &config.Entry{Object: o})
	}
	c, k := secrettest.Pair(t, time.Now().Add(time.Hour), "a.example.com")
	caOnly, err := secret.NewCA("shop", "orders-ca", c, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	client := testSecret(t, "shop", "client", true)
	bare, _ := secret.New("shop", "bare", c, k, nil, time.Now())
	bareCA, _ := secret.NewCA("shop", "bare-cacert", c, time.Now())
	store := map[string]*secret.Secret{"shop/orders-ca": caOnly, "shop/client": client, "shop/bare": bare, "shop/bare-cacert": bareCA}
	out := map[string]proto.Message{}
	warns := UpstreamSecrets(drs, func(ns, name string) *secret.Secret { return store[ns+"/"+name] }, out)

	var names []string
	for n := range out {
		names = append(names, n)
	}
	slices.Sort(names)
	want := []string{"shop/bare", "shop/bare-cacert", "shop/client", "shop/client-cacert", "shop/orders-ca-cacert"}
	if !slices.Equal(names, want) {
		t.Fatalf("secrets %v, want %v", names, want)
	}
	if out["shop/client"].(*tlsv3.Secret).GetTlsCertificate() == nil || out["shop/bare-cacert"].(*tlsv3.Secret).GetValidationContext() == nil {
		t.Fatal("secret shapes")
	}
	if len(warns) != 1 || !strings.Contains(warns[0], `DestinationRule/shop/legacy spec.trafficPolicy.tls: credentialName "nothing": no CA`) {
		t.Fatalf("warnings %q", warns)
	}
}
