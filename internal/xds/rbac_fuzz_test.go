package xds

import (
	"net/netip"
	"os"
	"testing"

	security "istio.io/api/security/v1beta1"

	"github.com/sextant-mesh/sextant/internal/config"
)

// FuzzServerListener: every policy the decoder accepts translates into a
// server listener that encodes, whatever the mode.
func FuzzServerListener(f *testing.F) {
	if b, err := os.ReadFile("../config/testdata/security.yaml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p}\nspec:\n  action: DENY\n  rules: [{from: [{source: {notIpBlocks: ['::1/128'], principals: ['*']}}], when: [{key: destination.port, values: ['1']}]}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := config.Decode(data)
		if err != nil {
			return
		}
		addr := netip.MustParseAddrPort("[::1]:50051")
		for _, mode := range []security.PeerAuthentication_MutualTLS_Mode{security.PeerAuthentication_MutualTLS_STRICT, security.PeerAuthentication_MutualTLS_PERMISSIVE} {
			if _, err := Encode(ServerListener("n", addr, mode, objs)); err != nil {
				t.Fatalf("encode: %v", err)
			}
			chains, err := InboundChains(mode, objs)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ServerListenerBytes("n", addr, chains); err != nil {
				t.Fatal(err)
			}
		}
	})
}
