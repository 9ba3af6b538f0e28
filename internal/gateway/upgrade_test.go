package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/gorilla/websocket"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// wsListener is rdsListener with the HCM's upgrade_configs.
func wsListener(name, routeName string, upgrades ...*hcm.HttpConnectionManager_UpgradeConfig) *listener.Listener {
	l := rdsListener(name, routeName)
	m := new(hcm.HttpConnectionManager)
	if err := l.FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(m); err != nil {
		panic(err)
	}
	m.UpgradeConfigs = upgrades
	a, _ := anypb.New(m)
	l.FilterChains[0].Filters[0].ConfigType = &listener.Filter_TypedConfig{TypedConfig: a}
	return l
}

// echoWS is a WebSocket endpoint (gorilla/websocket, a real
// implementation) that answers each message with name and the message.
func echoWS(name string) http.HandlerFunc {
	up := websocket.Upgrader{}
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			io.WriteString(w, "plain "+name)
			return
		}
		if r.URL.Path == "/refuse" {
			http.Error(w, "no websocket here", http.StatusBadRequest)
			return
		}
		c, err := up.Upgrade(w, r, http.Header{"X-Upstream": {name}})
		if err != nil {
			return
		}
		defer c.Close()
		for {
			typ, msg, err := c.ReadMessage()
			if err != nil {
				return
			}
			if err := c.WriteMessage(typ, append([]byte(name+":"), msg...)); err != nil {
				return
			}
		}
	}
}

// TestWebSocketThroughTheGateway: a WebSocket client (gorilla/websocket)
// talks to a WebSocket endpoint through the gateway, as Envoy proxies it:
// the upgrade is allowed by the listener's upgrade_configs unless the
// route disables it (403 upgrade_failed), a type the listener does not
// list is refused, an endpoint that refuses the upgrade is answered as it
// answered, and messages of any size pass both ways until the client
// closes.
func TestWebSocketThroughTheGateway(t *testing.T) {
	u := startUpstream(t, "ws1", echoWS("ws1"))
	cp := startControlPlane(t, "")
	off := prefixRoute("/off", "ws")
	off.GetRoute().UpgradeConfigs = []*route.RouteAction_UpgradeConfig{{UpgradeType: "websocket", Enabled: wrapperspb.Bool(false)}}
	cp.set(wsListener("gw", "routes", &hcm.HttpConnectionManager_UpgradeConfig{UpgradeType: "websocket"}),
		routeConfig("routes", vhost("all", []string{"*"}, off, prefixRoute("/", "ws"))),
		edsCluster("ws"), assignment("ws", ep{u: u}))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/x", "plain ws1")
	wsURL := "ws" + strings.TrimPrefix(g.url, "http")
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}

	c, resp, err := d.Dial(wsURL+"/chat", nil)
	if err != nil {
		t.Fatalf("dial through the gateway: %v (%v)", err, status(resp))
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("X-Upstream") != "ws1" {
		t.Fatalf("handshake answer %d %v, want the endpoint's 101", resp.StatusCode, resp.Header)
	}
	big := bytes.Repeat([]byte("x"), 1<<20)
	for i, msg := range [][]byte{[]byte("hello"), big, []byte("bye")} {
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if err := c.WriteMessage(websocket.BinaryMessage, msg); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		_, got, err := c.ReadMessage()
		if err != nil || !bytes.Equal(got, append([]byte("ws1:"), msg...)) {
			t.Fatalf("message %d: echo of %d bytes, err %v", i, len(got), err)
		}
	}
	c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	c.Close()

	// The route disables the upgrade: 403, named.
	if _, resp, err := d.Dial(wsURL+"/off", nil); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden ||
		resp.Header.Get("X-Sextant-Error") != "upgrade_failed" {
		t.Fatalf("upgrade on a route that disables it: %v %v, want 403 upgrade_failed", err, status(resp))
	}
	// The endpoint refuses: its answer is the answer.
	if _, resp, err := d.Dial(wsURL+"/refuse", nil); err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("upgrade the endpoint refuses: %v %v, want its 400", err, status(resp))
	} else if b, _ := io.ReadAll(resp.Body); !strings.Contains(string(b), "no websocket here") {
		t.Fatalf("refusal body %q, want the endpoint's", b)
	}
	// A plain request on the same route is proxied as ever.
	if code, body, _ := g.get(t, "/chat"); code != 200 || body != "plain ws1" {
		t.Fatalf("plain request: %d %q", code, body)
	}
	waitFor(t, "upgrades counted", func() bool {
		resp, err := g.client.Get(g.admin + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		m, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(m), `sextant_gateway_upgrades_total{cluster="ws"} 3`)
	})

	// A listener that lists no upgrade: every upgrade is refused.
	cp.set(rdsListener("gw", "routes"),
		routeConfig("routes", vhost("all", []string{"*"}, prefixRoute("/", "ws"))),
		edsCluster("ws"), assignment("ws", ep{u: u}))
	waitFor(t, "the listener without upgrades", func() bool {
		_, resp, err := d.Dial(wsURL+"/chat", nil)
		return err != nil && resp != nil && resp.StatusCode == http.StatusForbidden
	})
}

// startWSGateway starts a gateway whose listener allows upgradeType and
// whose every path goes to an echoWS endpoint named ws1.
func startWSGateway(t *testing.T, upgradeType string) *gw {
	t.Helper()
	u := startUpstream(t, "ws1", echoWS("ws1"))
	cp := startControlPlane(t, "")
	cp.set(wsListener("gw", "routes", &hcm.HttpConnectionManager_UpgradeConfig{UpgradeType: upgradeType}),
		routeConfig("routes", vhost("all", []string{"*"}, prefixRoute("/", "ws"))),
		edsCluster("ws"), assignment("ws", ep{u: u}))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/x", "plain ws1")
	return g
}

// TestWebSocketTunnelsEndAtShutdown: an open tunnel does not hold the
// gateway's shutdown, and its client sees the connection end.
func TestWebSocketTunnelsEndAtShutdown(t *testing.T) {
	g := startWSGateway(t, "WebSocket")
	c, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(g.url, "http")+"/chat", nil)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, status(resp))
	}
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- g.g.Shutdown(sctx)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("shutdown with a tunnel open: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("shutdown waited for an open WebSocket")
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := c.ReadMessage(); err == nil {
		t.Fatal("the tunnel still answers after the shutdown")
	}
}

func status(resp *http.Response) string {
	if resp == nil {
		return "no answer"
	}
	return resp.Status
}

// TestWebSocketEndpointClosing: when the endpoint ends the connection, the
// client's ends too (the tunnel does not keep it open).
func TestWebSocketEndpointClosing(t *testing.T) {
	up := websocket.Upgrader{}
	u := startUpstream(t, "ws1", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			io.WriteString(w, "plain ws1")
			return
		}
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		c.WriteMessage(websocket.TextMessage, []byte("only this"))
		c.Close() // no close handshake: the connection just ends
	})
	cp := startControlPlane(t, "")
	cp.set(wsListener("gw", "routes", &hcm.HttpConnectionManager_UpgradeConfig{UpgradeType: "websocket"}),
		routeConfig("routes", vhost("all", []string{"*"}, prefixRoute("/", "ws"))),
		edsCluster("ws"), assignment("ws", ep{u: u}))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/x", "plain ws1")
	c, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(g.url, "http")+"/once", nil)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, status(resp))
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, msg, err := c.ReadMessage(); err != nil || string(msg) != "only this" {
		t.Fatalf("first message %q %v", msg, err)
	}
	_, _, err = c.ReadMessage()
	var ne interface{ Timeout() bool }
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("after the endpoint closed: %v, want the connection's end, not a timeout", err)
	}
}
